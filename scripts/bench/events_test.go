package main

import (
	"bytes"
	"testing"

	"github.com/graygate/graygate/schemas/config"
)

// On `task up`'s NATS (tls://, the shipped account layout) the benchmark's
// gateways connect as the gateway identity of .data/env; on a plain
// server, such as the benchmark's private one, with none.
func TestGatewayConfigIdentity(t *testing.T) {
	t.Setenv("NATS_GATEWAY_PASSWORD", "pgateway")
	t.Setenv("NATS_TLS_CA", "/dev/ca.pem")
	t.Setenv("NATS_URL", "")
	for _, c := range []struct {
		url      string
		identity bool
	}{{"tls://127.0.0.1:4222", true}, {"nats://127.0.0.1:4222", false}} {
		var b bytes.Buffer
		err := gatewayConfig.Execute(&b, map[string]any{
			"NATS": c.url, "RequestLog": "off", "Listen": "127.0.0.1:1", "Admin": "127.0.0.1:2", "Dir": t.TempDir(),
			"Model": benchModel, "Primary": "127.0.0.1:3", "Gray": "127.0.0.1:4", "Identity": devIdentity(c.url),
		})
		if err != nil {
			t.Fatal(err)
		}
		cfg, _, err := config.Parse(b.Bytes(), t.TempDir(), func(k string) (string, bool) {
			v := map[string]string{"NATS_GATEWAY_PASSWORD": "pgateway"}[k]
			return v, v != ""
		}, config.ForGateway)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.url, err, b.String())
		}
		n := cfg.NATS
		got := n.User == "gateway" && n.Password.Reveal() == "pgateway" && n.TLS.CAFile == "/dev/ca.pem" && n.APIPrefix == "JS.graygate.API"
		if got != c.identity || (!c.identity && (n.User != "" || n.APIPrefix != "")) {
			t.Errorf("%s: nats user %q, ca %q, api_prefix %q; want the gateway identity: %v", c.url, n.User, n.TLS.CAFile, n.APIPrefix, c.identity)
		}
	}
}
