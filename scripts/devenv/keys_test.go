package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/graygate/graygate/schemas/config"
)

// TestDevConfigIsSigned: the keys devenv makes are what graygate.yaml of
// this directory lists; with them every service loads it, signing with
// a listed key; a second call keeps the same keys.
func TestDevConfigIsSigned(t *testing.T) {
	l := newLayout(t.TempDir())
	vars, err := signingKeys(l)
	if err != nil {
		t.Fatal(err)
	}
	again, err := signingKeys(l)
	if err != nil || len(again) != len(vars) || again[0] != vars[0] || again[2] != vars[2] {
		t.Errorf("second signingKeys = %v, %v; want the same keys %v", again, err, vars)
	}
	for _, v := range vars {
		t.Setenv(v[0], v[1])
		if fi, err := os.Stat(v[1]); err == nil && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v; want 0600", v[1], fi.Mode().Perm())
		}
	}
	t.Setenv("NATS_TLS_CA", "/dev/ca.pem")
	t.Setenv("NATS_URL", "") // task test's own server would override graygate.yaml's
	for _, svc := range []config.Service{config.ForGateway, config.ForAnalyzer, config.ForCollector} {
		// The identity devenv start gives the service (natsIdentityEnv).
		t.Setenv("GRAYGATE_NATS_USER", svc.String())
		t.Setenv("GRAYGATE_NATS_PASSWORD", "p"+svc.String())
		cfg, _, err := config.Load("graygate.yaml", svc)
		if err != nil {
			t.Fatalf("%s: %v", svc, err)
		}
		// The shipped NATS layout (infra/nats): the service's identity,
		// the development CA, the JetStream API under its prefix.
		if n := cfg.NATS; n.User != svc.String() || n.Password.Reveal() != "p"+svc.String() || n.TLS.CAFile != "/dev/ca.pem" ||
			n.APIPrefix != natsAPIPrefix || !strings.HasPrefix(n.URL, "tls://") {
			t.Errorf("%s: nats = user %q, ca %q, api_prefix %q, url %q", svc, n.User, n.TLS.CAFile, n.APIPrefix, n.URL)
		}
		s := cfg.NATS.RolloutSigners
		if len(s.Analyzer) != 1 || len(s.Admin) != 1 || s.Admin[0] != os.Getenv("GRAYGATE_DEV_GATEWAY_NKEY") {
			t.Errorf("%s: rollout_signers = %+v", svc, s)
		}
		if svc == config.ForGateway && cfg.Gateway.RolloutSigningSeed == "" || svc == config.ForAnalyzer && cfg.Analyzer.SigningSeed == "" {
			t.Errorf("%s: no signing seed read", svc)
		}
	}
}

// TestServiceEnvHoldsOnlyItsSecrets: devenv puts every identity's NATS
// password and DATABASE_URL in .data/env; a service started from it gets
// only its own password (natsIdentityEnv) and, for the collector alone,
// the database (SPEC §2: a service holds only the secrets it uses).
func TestServiceEnvHoldsOnlyItsSecrets(t *testing.T) {
	environ := []string{"PATH=/bin", "NATS_URL=tls://127.0.0.1:4222", "DATABASE_URL=postgres://x",
		"NATS_GATEWAY_PASSWORD=pg", "NATS_ANALYZER_PASSWORD=pa", "NATS_COLLECTOR_PASSWORD=pc"}
	env := &envFile{values: map[string]string{}}
	env.set("NATS_GATEWAY_PASSWORD", "pg")
	env.set("NATS_ANALYZER_PASSWORD", "pa")
	env.set("NATS_COLLECTOR_PASSWORD", "pc")
	want := map[string][]string{
		"gateway":      {"PATH=/bin", "NATS_URL=tls://127.0.0.1:4222", "GRAYGATE_NATS_USER=gateway", "GRAYGATE_NATS_PASSWORD=pg"},
		"analyzer":     {"PATH=/bin", "NATS_URL=tls://127.0.0.1:4222", "GRAYGATE_NATS_USER=analyzer", "GRAYGATE_NATS_PASSWORD=pa"},
		"collector":    {"PATH=/bin", "NATS_URL=tls://127.0.0.1:4222", "DATABASE_URL=postgres://x", "GRAYGATE_NATS_USER=collector", "GRAYGATE_NATS_PASSWORD=pc"},
		"mock-primary": {"PATH=/bin", "NATS_URL=tls://127.0.0.1:4222"},
	}
	seen := 0
	for _, s := range services() {
		w, ok := want[s.name]
		if !ok {
			continue
		}
		seen++
		got := serviceEnv(environ, s)
		if s.natsUser != "" {
			var err error
			if got, err = natsIdentityEnv(got, env, s.natsUser); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(got, w) {
			t.Errorf("%s's environment = %q; want %q", s.name, got, w)
		}
	}
	if seen != len(want) {
		t.Errorf("checked %d services; want %d", seen, len(want))
	}
}
