package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestRequestBody(t *testing.T) {
	for _, size := range []int{0, 512, 1024, 4096} {
		b := requestBody(size)
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("requestBody(%d) is not JSON: %v", size, err)
		}
		if size > 400 && len(b) != size {
			t.Errorf("len(requestBody(%d)) = %d; want %d", size, len(b), size)
		}
		if v["model"] != benchModel {
			t.Errorf("requestBody(%d) model = %v; want %q", size, v["model"], benchModel)
		}
		// The gateway must inject top_k: an edit on every request.
		if _, ok := v["top_k"]; ok {
			t.Errorf("requestBody(%d) carries top_k; the benchmark relies on its injection", size)
		}
	}
}

func TestWrkScriptEmbedsBody(t *testing.T) {
	body := requestBody(1024)
	s := wrkScript(body)
	for _, want := range []string{`wrk.method = "POST"`, `wrk.path = "/v1/chat/completions"`, string(body), "latency:percentile(99)"} {
		if !strings.Contains(s, want) {
			t.Errorf("wrkScript lacks %q", want)
		}
	}
}

func TestParseWrk(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    wrkResult
		wantErr bool
	}{
		{
			name: "result line among wrk's own output",
			out: "Running 3s test @ http://127.0.0.1:1/v1/chat/completions\n  1 threads and 4 connections\n" +
				"GRAYBENCH requests=30000 duration_us=3000000 bytes=33000000 p50_us=412 p99_us=2469 errors=1 status_errors=2 timeouts=3\n",
			want: wrkResult{Requests: 30000, Duration: 3 * time.Second, Bytes: 33000000,
				P50: 412 * time.Microsecond, P99: 2469 * time.Microsecond, Errors: 1, StatusErrors: 2, Timeouts: 3},
		},
		{name: "no result line", out: "unable to connect to 127.0.0.1:1 Connection refused\n", wantErr: true},
		{name: "garbled number", out: "GRAYBENCH requests=x\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseWrk(tt.out)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseWrk() error = %v; wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("parseWrk() = %+v; want %+v", got, tt.want)
			}
			if !tt.wantErr && got.rps() != 10000 {
				t.Errorf("rps() = %v; want 10000", got.rps())
			}
		})
	}
}

func TestNginxConf(t *testing.T) {
	var b bytes.Buffer
	if err := nginxConf.Execute(&b, map[string]string{"Workers": "1", "Dir": "/tmp/x", "Upstream": "127.0.0.1:9001", "Listen": "127.0.0.1:9100"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"worker_processes 1;", "daemon off;", "pid /tmp/x/nginx.pid;", "keepalive 64;",
		"proxy_http_version 1.1;", `proxy_set_header Connection "";`, "server 127.0.0.1:9001;", "listen 127.0.0.1:9100;"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("nginx config lacks %q:\n%s", want, b.String())
		}
	}
}

func TestCPUTimeOfSelf(t *testing.T) {
	before, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	after, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after < before {
		t.Errorf("cpuTime went backwards: %v then %v", before, after)
	}
	if _, err := cpuTime(-1); err == nil {
		t.Error("cpuTime(-1) = nil error; want one")
	}
}

func TestListenerPID(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got, err := listenerPID(ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatalf("listenerPID: %v", err)
	}
	if got != os.Getpid() {
		t.Errorf("listenerPID = %d; want this process, %d", got, os.Getpid())
	}
}
