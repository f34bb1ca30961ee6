package mockllm

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestConfigure(t *testing.T) {
	var got, ctype string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || r.URL.Path != "/_mock/config" {
			http.Error(w, "wrong endpoint", http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		got, ctype = string(b), r.Header.Get("Content-Type")
		if got == "bad" {
			http.Error(w, "bad settings", http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	if err := Configure(ctx, srv.URL, `{"content":null}`); err != nil {
		t.Fatalf("Configure = %v; want nil", err)
	}
	if got != `{"content":null}` || ctype != "application/json" {
		t.Errorf("mock got %q as %q; want the settings as application/json", got, ctype)
	}
	if err := Configure(ctx, srv.URL, "bad"); err == nil {
		t.Error("Configure with a 400 answer = nil; want an error")
	}
	if err := Configure(ctx, "http://127.0.0.1:1", "{}"); err == nil {
		t.Error("Configure with no mock listening = nil; want an error")
	}
}

func TestDrillArgs(t *testing.T) {
	got := strings.Join(DrillArgs("127.0.0.1:9"), " ")
	want := "--listen 127.0.0.1:9 --record 0 --latency 40ms --ttft 40ms --inter-token 2ms"
	if got != want {
		t.Errorf("DrillArgs = %q; want %q", got, want)
	}
}
