package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// seedFile writes a new user nkey's seed to a file and returns the file
// and the public key.
func seedFile(t *testing.T) (string, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	file := filepath.Join(t.TempDir(), "seed.nk")
	if err := os.WriteFile(file, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, pub
}

// TestAdminTokens: gateway.admin_tokens_env is name=token,… with names
// [a-z0-9_.-]{1,32}, each once; messages name the variable and the
// operator, never a token; a token shorter than 32 bytes is a warning.
func TestAdminTokens(t *testing.T) {
	long := strings.Repeat("x", 32)
	cfg, warnings := parseDoc(t, "gateway: {}\n", map[string]string{"GRAYGATE_ADMIN_TOKENS": " alice=" + long + ", bob.ops=short-secret ,"})
	if got := cfg.Gateway.AdminTokens; len(got) != 2 || got[0].Name != "alice" || got[0].Token.Reveal() != long || got[1].Name != "bob.ops" {
		t.Errorf("AdminTokens = %+v", got)
	}
	text := warningLines(warnings)
	if !strings.Contains(text, "gateway.admin_tokens_env: the token of operator bob.ops (GRAYGATE_ADMIN_TOKENS) is shorter than 32 bytes") ||
		strings.Contains(text, "alice") || strings.Contains(text, "short-secret") {
		t.Errorf("warnings:\n%s", text)
	}
	for _, tt := range []struct{ value, want string }{
		{"alice", "entry 0 is not name=token"},
		{"alice=", "entry 0 is not name=token"},
		{"Alice=secret-value", `entry 0: operator name "Alice" is not [a-z0-9_.-]{1,32}`},
		{strings.Repeat("a", 33) + "=secret-value", "is not [a-z0-9_.-]{1,32}"},
		{"alice=secret-value,alice=other-secret", "operator alice is listed twice"},
		// One token, two operators: the record would name the wrong one.
		{"alice=secret-value,bob=secret-value", "operators alice and bob have the same token"},
	} {
		lines := parseErrors(t, "gateway: {}\n", map[string]string{"GRAYGATE_ADMIN_TOKENS": tt.value})
		got := strings.Join(lines, "\n")
		if !strings.Contains(got, "gateway.admin_tokens_env: variable GRAYGATE_ADMIN_TOKENS") || !strings.Contains(got, tt.want) || strings.Contains(got, "secret-value") {
			t.Errorf("GRAYGATE_ADMIN_TOKENS=%q: %s; want %q and no token", tt.value, got, tt.want)
		}
	}
	// The shared admin token is the operator "" (SPEC §3 rev. 4): an
	// operator holding it would be named for the shared token's changes.
	lines := parseErrors(t, "gateway: {admin_token: secret-value}\n", map[string]string{"GRAYGATE_ADMIN_TOKENS": "alice=secret-value"})
	if got := strings.Join(lines, "\n"); !strings.Contains(got, "operator alice's token is the shared admin token") || strings.Contains(got, "secret-value") {
		t.Errorf("an operator with the shared token: %s", got)
	}
	_, warnings = parseDoc(t, "gateway: {admin_token: short}\ncollector: {api_token: also-short}\n", nil)
	if text := warningLines(warnings); !strings.Contains(text, "gateway.admin_token: the admin token") || !strings.Contains(text, "collector.api_token: the API token") || strings.Contains(text, "short}") {
		t.Errorf("short shared tokens: warnings:\n%s", text)
	}
	// gateway validate warns about a short GRAYGATE_API_TOKEN too (SPEC
	// §3 rev. 4), though the gateway never uses it.
	_, ws, err := Parse([]byte("collector: {api_token: \"${GRAYGATE_API_TOKEN}\"}\n"), t.TempDir(), lookup(map[string]string{"GRAYGATE_API_TOKEN": "short"}), ForGateway)
	if text := warningLines(ws); err != nil || !strings.Contains(text, "collector.api_token: the API token (or GRAYGATE_API_TOKEN) is shorter") || strings.Contains(text, "short ") {
		t.Errorf("GRAYGATE_API_TOKEN=short, gateway: %v, warnings:\n%s", err, text)
	}
	if _, ws, _ := Parse([]byte("gateway: {}\n"), t.TempDir(), lookup(map[string]string{"GRAYGATE_API_TOKEN": long}), ForGateway); strings.Contains(warningLines(ws), "API token") {
		t.Errorf("a long GRAYGATE_API_TOKEN warned: %s", warningLines(ws))
	}
}

// TestRolloutSigners: every key of nats.rollout_signers is a public user
// nkey under a known actor; with signers, the gateway and the analyzer
// need a seed file whose public key is listed for what they sign; the
// collector signs nothing.
func TestRolloutSigners(t *testing.T) {
	gwFile, gwPub := seedFile(t)
	anFile, anPub := seedFile(t)
	signers := "nats:\n  rollout_signers: {analyzer: [" + anPub + "], admin: [" + gwPub + "], config: [" + gwPub + "]}\n"
	keys := "gateway: {rollout_signing_key_file: " + gwFile + "}\nanalyzer: {signing_key_file: " + anFile + "}\n"

	cfg, _ := parseDoc(t, signers+keys, nil)
	if cfg.Gateway.RolloutSigningSeed == "" || cfg.Analyzer.SigningSeed == "" || cfg.NATS.RolloutSigners.Empty() {
		t.Errorf("seeds not read: %+v", cfg.NATS.RolloutSigners)
	}
	if strings.Contains(cfg.Gateway.RolloutSigningSeed.String(), "SU") {
		t.Error("the seed prints")
	}
	for _, tt := range []struct {
		name, doc, want string
		svc             Service
	}{
		{"not a key", "nats:\n  rollout_signers: {admin: [nope]}\n", `nats.rollout_signers.admin[0]: "nope" is not a public user nkey`, ForCollector},
		{"a truncated key", "nats:\n  rollout_signers: {admin: [" + gwPub[:10] + "]}\n", "is not a public user nkey", ForCollector},
		{"an unknown actor", "nats:\n  rollout_signers: {operator: [" + gwPub + "]}\n", "nats.rollout_signers.operator: unknown key", ForCollector},
		{"no gateway key", signers + "analyzer: {signing_key_file: " + anFile + "}\n", "gateway.rollout_signing_key_file: must name an nkey seed file when nats.rollout_signers is set", ForGateway},
		{"no analyzer key", signers + "gateway: {rollout_signing_key_file: " + gwFile + "}\n", "analyzer.signing_key_file: must name an nkey seed file", ForAnalyzer},
		{"the gateway's key unlisted", signers + "gateway: {rollout_signing_key_file: " + anFile + "}\n", "is not listed in nats.rollout_signers.admin", ForGateway},
		{"the analyzer's key unlisted", signers + "analyzer: {signing_key_file: " + gwFile + "}\n", "is not listed in nats.rollout_signers.analyzer", ForAnalyzer},
		{"a missing file", signers + "gateway: {rollout_signing_key_file: /no/such/seed}\n", "gateway.rollout_signing_key_file: read the nkey seed", ForGateway},
		{"not a seed", signers + "gateway: {rollout_signing_key_file: testdata/full.good.yaml}\n", "does not hold an nkey seed", ForGateway},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tt.doc), "testdata", nil, tt.svc)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse = %v; want %q", err, tt.want)
			}
		})
	}
	// The collector reads no key; the gateway no analyzer key.
	if _, _, err := Parse([]byte(signers), "testdata", nil, ForCollector); err != nil {
		t.Errorf("the collector with signers and no keys: %v", err)
	}
	if _, _, err := Parse([]byte(signers+"gateway: {rollout_signing_key_file: "+gwFile+"}\n"), "testdata", nil, ForGateway); err != nil {
		t.Errorf("the gateway with its key only: %v", err)
	}
	// `analyzer status` reads the analyzer's section for its listen
	// address, never its key (an operator need not be able to read it).
	cfg, _, err := Parse([]byte(signers+"analyzer: {listen: 127.0.0.1:7070, signing_key_file: /no/such/seed}\n"), "testdata", nil, ForAnalyzerTools)
	if err != nil || cfg.Analyzer.Listen != "127.0.0.1:7070" || cfg.Analyzer.SigningSeed != "" {
		t.Errorf("analyzer status with an unreadable key: %v", err)
	}
}
