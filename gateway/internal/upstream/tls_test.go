package upstream

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/config"
)

// testCA is a private certificate authority generated for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	PEM  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "graygate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a certificate and key (PEM) for a server name or a client.
func (ca *testCA) issue(t *testing.T, name string, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{name}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

// TLSUpstream starts an https upstream with a certificate for
// "upstream.test" and 127.0.0.1 from ca; with clientCA it requires a
// client certificate from that CA. Each answer echoes the request path.
func TLSUpstream(t *testing.T, ca *testCA, clientCA *testCA) *httptest.Server {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, "upstream.test", false)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"path":"`+r.URL.Path+`"}`)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	if clientCA != nil {
		pool := x509.NewCertPool()
		pool.AddCert(clientCA.cert)
		srv.TLS.ClientCAs, srv.TLS.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func doOnce(t *testing.T, u config.Upstream) (string, error) {
	t.Helper()
	if u.Timeout == 0 {
		u.Timeout, u.StreamIdleTimeout = 3*time.Second, 3*time.Second
	}
	c, err := New(u)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.CloseIdle()
	resp, err := c.Do(context.Background(), Request{Body: []byte(`{}`)})
	if err != nil {
		return "", err
	}
	defer resp.Close()
	b, err := resp.ReadAll(nil, 1<<20)
	return string(b), err
}

func TestTLSUpstreams(t *testing.T) {
	ca, other, clients := newTestCA(t), newTestCA(t), newTestCA(t)
	plain := TLSUpstream(t, ca, nil)
	mutual := TLSUpstream(t, ca, clients)
	clientCert, clientKey := clients.issue(t, "gateway", true)
	strangerCert, strangerKey := other.issue(t, "gateway", true)

	cases := []struct {
		name    string
		url     string
		tls     config.UpstreamTLS
		want    string // the answer; "" when the request must fail
		wantErr error
	}{
		{"trusted CA", plain.URL, config.UpstreamTLS{CAPEM: ca.PEM}, `{"path":"/v1/chat/completions"}`, nil},
		{"path prefix kept", plain.URL + "/v2", config.UpstreamTLS{CAPEM: ca.PEM}, `{"path":"/v2/chat/completions"}`, nil},
		{"deep prefix", plain.URL + "/openai/v1/", config.UpstreamTLS{CAPEM: ca.PEM}, `{"path":"/openai/v1/chat/completions"}`, nil},
		{"server_name", plain.URL, config.UpstreamTLS{CAPEM: ca.PEM, ServerName: "upstream.test"}, `{"path":"/v1/chat/completions"}`, nil},
		{"wrong server_name", plain.URL, config.UpstreamTLS{CAPEM: ca.PEM, ServerName: "other.test"}, "", ErrUnreachable},
		{"system roots refuse a private CA", plain.URL, config.UpstreamTLS{}, "", ErrUnreachable},
		{"wrong CA", plain.URL, config.UpstreamTLS{CAPEM: other.PEM}, "", ErrUnreachable},
		{"insecure_skip_verify", plain.URL, config.UpstreamTLS{InsecureSkipVerify: true}, `{"path":"/v1/chat/completions"}`, nil},
		{"client certificate required, none given", mutual.URL, config.UpstreamTLS{CAPEM: ca.PEM}, "", ErrUnreachable},
		{"client certificate from another CA", mutual.URL, config.UpstreamTLS{CAPEM: ca.PEM, CertPEM: strangerCert, KeyPEM: strangerKey}, "", ErrUnreachable},
		{"client certificate given", mutual.URL, config.UpstreamTLS{CAPEM: ca.PEM, CertPEM: clientCert, KeyPEM: clientKey}, `{"path":"/v1/chat/completions"}`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := doOnce(t, config.Upstream{URL: c.url, Model: "m", TLS: c.tls})
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Errorf("Do = %q, %v; want %v", got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("Do = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestTLSMinVersion(t *testing.T) {
	tc, err := TLSConfig("h", config.UpstreamTLS{})
	if err != nil || tc.MinVersion != tls.VersionTLS12 || tc.ServerName != "h" {
		t.Errorf("TLSConfig = %+v, %v; want TLS 1.2+ for h", tc, err)
	}
}

// An SDK-style base URL: the path up to the API version is kept; no path
// means /v1.
func TestUpstreamPath(t *testing.T) {
	for url, want := range map[string]string{
		"http://h":              "/v1/chat/completions",
		"http://h/":             "/v1/chat/completions",
		"http://h/v1":           "/v1/chat/completions",
		"http://h/v2":           "/v2/chat/completions",
		"https://h/api/v3/":     "/api/v3/chat/completions",
		"http://h:81/openai/v1": "/openai/v1/chat/completions",
	} {
		c, err := New(config.Upstream{URL: url, Model: "m"})
		if err != nil {
			t.Fatalf("New(%s): %v", url, err)
		}
		if c.path != want {
			t.Errorf("New(%s).path = %q; want %q", url, c.path, want)
		}
	}
}
