package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
)

// TestUnderscoreCredentialsNeverReachTheUpstream: end to end, from a raw
// request to a real upstream, the headers of TestForwardedHeaders that
// must not reach it do not.
func TestUnderscoreCredentialsNeverReachTheUpstream(t *testing.T) {
	mock := testenv.StartMock(t)
	g := startGateway(t, testConfig(mock.URL))
	body := chatBody
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"aPi_KeY: k1\r\nX_API_KEY: k2\r\nProxy_Authorization: Basic cDpw\r\nX_Forwarded_For: 10.0.0.1\r\n" +
		"x-REAL-ip: 10.0.0.2\r\nTrue_Client_IP: 10.0.0.3\r\nforwarded: for=10.0.0.4\r\nContent_Length: 99999\r\n" +
		"Connection: keep-alive, X-Hop\r\nx_hop: h1\r\nX-Custom: kept\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body
	c, br := rawRequest(t, g.url, head)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	testenv.Must(t, err)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d; want 200", resp.StatusCode)
	}
	reqs := mock.Requests(t)
	if len(reqs) != 1 {
		t.Fatalf("upstream saw %d requests; want 1", len(reqs))
	}
	for k, v := range reqs[0].Headers {
		switch strings.ReplaceAll(strings.ToLower(k), "_", "-") {
		case "api-key", "x-api-key", "proxy-authorization", "x-forwarded-for", "x-real-ip", "true-client-ip", "forwarded", "x-hop":
			t.Errorf("upstream got %s: %q", k, v)
		case "content-length":
			if k != "Content-Length" || len(v) != 1 || v[0] != fmt.Sprint(len(reqs[0].Body)) {
				t.Errorf("upstream got %s: %q; want only its own Content-Length", k, v)
			}
		}
	}
	if h := http.Header(reqs[0].Headers); h.Get("X-Custom") != "kept" || h.Get("Authorization") != "Bearer upstream-key" {
		t.Errorf("upstream headers %v; want X-Custom kept and its own Authorization", h)
	}
}
