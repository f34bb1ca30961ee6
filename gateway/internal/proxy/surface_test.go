package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// answerUpstream is an upstream that answers every request with body,
// after delay, setting the given response headers.
func answerUpstream(t *testing.T, status int, delay time.Duration, contentType, body string, headers ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Add(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

const (
	surfaceAnswer = `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"{\"action\":\"final\",\"answer\":\"ok\"}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`
	streamAnswer  = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\ndata: [DONE]\n\n"
)

// The upstream headers that describe an answer reach the client; hop-by-hop
// ones, framing and any header named in Connection do not.
func TestUpstreamAnswerHeadersPassed(t *testing.T) {
	hdrs := []string{
		"x-ratelimit-remaining-requests", "99", "x-ratelimit-reset-tokens", "6ms",
		"openai-processing-ms", "12", "openai-version", "2020-10-01",
		"x-request-id", "upstream-req-7", "retry-after", "3",
		"x-ratelimit-secret", "hop", "Connection", "x-ratelimit-secret",
		"Keep-Alive", "timeout=5", "x-other", "no", "Set-Cookie", "a=b",
	}
	cases := []struct {
		name, body, ct, answer string
	}{
		{"buffered", chatBody, "application/json", surfaceAnswer},
		{"stream", `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`, "text/event-stream", streamAnswer},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			up := answerUpstream(t, 200, 0, c.ct, c.answer, hdrs...)
			g := startGateway(t, testConfig(up.URL))
			resp, body := post(t, g.url, c.body, "X-Request-Id", "client-1")
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			for h, want := range map[string]string{
				"x-ratelimit-remaining-requests": "99", "x-ratelimit-reset-tokens": "6ms",
				"openai-processing-ms": "12", "openai-version": "2020-10-01",
				"x-upstream-request-id": "upstream-req-7", "x-request-id": "client-1", "retry-after": "3",
				"x-ratelimit-secret": "", "keep-alive": "", "x-other": "", "set-cookie": "",
			} {
				if got := resp.Header.Get(h); got != want {
					t.Errorf("%s = %q; want %q", h, got, want)
				}
			}
			if got := resp.Header.Get("Connection"); strings.Contains(got, "x-ratelimit") {
				t.Errorf("Connection = %q; want the gateway's own", got)
			}
		})
	}
}

// A buffered gray stream that takes longer than a second and fails sends
// no header before its verdict: the client reads x-gateway-arm: fallback.
func TestSlowGrayStreamNamesFallback(t *testing.T) {
	primary := answerUpstream(t, 200, 0, "text/event-stream", streamAnswer, "x-request-id", "from-primary")
	gray := answerUpstream(t, 500, 1300*time.Millisecond, "application/json", `{"error":{"message":"boom"}}`, "x-request-id", "from-gray")
	cfg := grayConfig(t, primary.URL, gray.URL, 100)
	cfg.Deployments["qwen"].Rollout.Timeout = 3 * time.Second
	g, rec := startObserved(t, cfg)
	resp, body := post(t, g.url, `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"hi"`) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("x-gateway-arm"); got != "fallback" {
		t.Errorf("x-gateway-arm = %q; want fallback", got)
	}
	if got := resp.Header.Get("x-gateway-model"); got != "qwen2.5-32b-v1" {
		t.Errorf("x-gateway-model = %q; want primary's qwen2.5-32b-v1", got)
	}
	if got := resp.Header.Get("x-upstream-request-id"); got != "from-primary" {
		t.Errorf("x-upstream-request-id = %q; want from-primary", got)
	}
	recs := rec.waitRecords(t, 1)
	if recs[0].Arm != "fallback" {
		t.Errorf("record arm = %q; want fallback", recs[0].Arm)
	}
}

// tlsUpstream is an https upstream answering surfaceAnswer with a
// certificate of its own, self-signed for 127.0.0.1, and that
// certificate's PEM (its CA).
func tlsUpstream(t *testing.T) (*httptest.Server, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	testenv.Must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "upstream"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	testenv.Must(t, err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, surfaceAnswer)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// An https upstream is served with the configured CA; a certificate the
// CA does not vouch for is refused: 502 on primary, fallback on gray.
func TestTLSUpstreamThroughGateway(t *testing.T) {
	good, goodCA := tlsUpstream(t)
	_, otherCA := tlsUpstream(t)

	cfg := testConfig(good.URL)
	cfg.Deployments["qwen"].Primary.TLS.CAPEM = goodCA
	g := startGateway(t, cfg)
	if resp, body := post(t, g.url, chatBody); resp.StatusCode != 200 {
		t.Errorf("trusted https primary: status %d: %s", resp.StatusCode, body)
	}

	cfg = testConfig(good.URL)
	cfg.Deployments["qwen"].Primary.TLS.CAPEM = otherCA
	g = startGateway(t, cfg)
	if resp, body := post(t, g.url, chatBody); resp.StatusCode != 502 || resp.Header.Get("x-router-error-code") != "upstream_error" {
		t.Errorf("untrusted https primary: status %d: %s; want 502 upstream_error", resp.StatusCode, body)
	}

	plain := answerUpstream(t, 200, 0, "application/json", surfaceAnswer)
	cfg = grayConfig(t, plain.URL, good.URL, 100)
	cfg.Deployments["qwen"].Gray.TLS.CAPEM = otherCA
	g, rec := startObserved(t, cfg)
	resp, body := post(t, g.url, chatBody)
	if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != "fallback" {
		t.Errorf("untrusted https gray: status %d, arm %q: %s; want 200 fallback", resp.StatusCode, resp.Header.Get("x-gateway-arm"), body)
	}
	if recs := rec.waitRecords(t, 1); recs[0].Gray == nil || recs[0].Gray.ErrorType != events.ErrorUpstreamUnreachable {
		t.Errorf("record = %+v; want a gray attempt that could not connect", recs[0])
	}
}
