package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestPassthroughCopiesStatusTypeAndBody(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		contentType string
		answer      string
	}{
		{name: "ok json", status: 200, contentType: "application/json", answer: `{"id":"x","choices":[]}`},
		{name: "upstream error", status: 429, contentType: "text/plain; charset=utf-8", answer: "slow down"},
		{name: "empty answer", status: 204, contentType: "application/json", answer: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotBody, gotType, gotMethod, gotPath string
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				gotBody, gotType, gotMethod, gotPath = string(b), r.Header.Get("Content-Type"), r.Method, r.URL.Path
				w.Header().Set("Content-Type", tt.contentType)
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.answer)
			}))
			defer up.Close()
			addr := strings.TrimPrefix(up.URL, "http://")
			app := newApp(newClient(addr, 4), addr)

			req := httptest.NewRequest(http.MethodPost, chatPath, strings.NewReader(`{"model":"m"}`))
			req.Header.Set("Content-Type", "application/json")
			resp, err := app.Test(req, -1)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d; want %d", resp.StatusCode, tt.status)
			}
			if ct := resp.Header.Get("Content-Type"); ct != tt.contentType {
				t.Errorf("Content-Type = %q; want %q", ct, tt.contentType)
			}
			if string(body) != tt.answer {
				t.Errorf("body = %q; want %q", body, tt.answer)
			}
			if gotMethod != http.MethodPost || gotPath != chatPath || gotBody != `{"model":"m"}` || gotType != "application/json" {
				t.Errorf("upstream saw %s %s %q (%s); want POST %s {\"model\":\"m\"} (application/json)", gotMethod, gotPath, gotBody, gotType, chatPath)
			}
		})
	}
}

func TestPassthroughUpstreamDownIs502(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	app := newApp(newClient(addr, 4), addr)
	resp, err := app.Test(httptest.NewRequest(http.MethodPost, chatPath, strings.NewReader("{}")), -1)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status = %d; want 502", resp.StatusCode)
	}
}

func TestPprofFlagServesProfiles(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // run listens there
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:1", "--pprof", addr})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run() = %v after cancel; want nil", err)
		}
	}()

	url := "http://" + addr + "/debug/pprof/"
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "profile") {
				t.Fatalf("GET %s = %d %.200q; want 200 and the pprof index", url, resp.StatusCode, body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v after 5s", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPprofFlagRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:6060", "nonsense"} {
		t.Run(addr, func(t *testing.T) {
			err := run(context.Background(), []string{"--upstream", "127.0.0.1:1", "--pprof", addr})
			if err == nil || !strings.Contains(err.Error(), "--pprof") {
				t.Errorf("run(--pprof %s) = %v; want an error naming --pprof", addr, err)
			}
		})
	}
}
