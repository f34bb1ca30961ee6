package config

import (
	"strings"
	"testing"
)

// serviceDoc names a secret or file of every service through variables.
const serviceDoc = `
nats:
  url: nats://nats:4222
  user: ${NATS_USER}
  password_env: NATS_PASSWORD
postgres:
  url: ${DATABASE_URL_FROM_FILE}
gateway:
  listen: 127.0.0.1:8080
  admin_token: ${ADMIN}
deployments:
  d:
    primary: {url: "${PRIMARY_URL}", model: m, api_key_env: PRIMARY_KEY}
    gray: {url: https://gray:9000, model: m2, api_key_env: GRAY_KEY,
           prompt: {version: v1, system_file: does/not/exist.txt}, tls: {ca_file: does/not/exist.pem}}
    rollout: {percentage: 5, response_schema: does/not/exist.json}
routing:
  routes: [{model: m, candidates: [{deployment: d}]}]
collector:
  api_token: ${API}
analyzer:
  interval: ${ANALYZER_INTERVAL}
`

func TestEachServiceResolvesOnlyItsOwn(t *testing.T) {
	common := map[string]string{"NATS_USER": "svc", "NATS_PASSWORD": "pw"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range common {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		name    string
		svc     Service
		env     map[string]string
		wantErr []string // substrings; none: loads
	}{
		{"collector needs no upstream key, schema file or gateway token", ForCollector,
			with("DATABASE_URL_FROM_FILE", "postgres://db/x", "API", "t"), nil},
		{"collector still needs its own", ForCollector, with("API", "t"), []string{"DATABASE_URL_FROM_FILE"}},
		{"analyzer needs none of the others' secrets", ForAnalyzer, with("ANALYZER_INTERVAL", "5s"), nil},
		{"analyzer still expands its own keys", ForAnalyzer, with(), []string{"ANALYZER_INTERVAL"}},
		{"gateway never needs DATABASE_URL", ForGateway,
			with("ADMIN", "a", "PRIMARY_URL", "http://p:1", "PRIMARY_KEY", "k", "GRAY_KEY", "g"),
			[]string{"response_schema", "gray.prompt.system_file", "gray.tls.ca_file"}},
		{"gateway needs its upstream keys", ForGateway, with("ADMIN", "a", "PRIMARY_URL", "http://p:1"),
			[]string{"PRIMARY_KEY", "GRAY_KEY"}},
		{"every service needs its NATS password", ForAnalyzer, map[string]string{"NATS_USER": "svc", "ANALYZER_INTERVAL": "5s"},
			[]string{"nats.password_env: variable NATS_PASSWORD is unset"}},
		{"the analyzer's tools need no secret", ForAnalyzerTools, map[string]string{"ANALYZER_INTERVAL": "5s"}, nil},
		{"and expand the analyzer's own keys", ForAnalyzerTools, map[string]string{}, []string{"ANALYZER_INTERVAL"}},
		{"the collector's Postgres commands need the database URL alone", ForPostgres,
			map[string]string{"DATABASE_URL_FROM_FILE": "postgres://db/x"}, nil},
		{"and they need it", ForPostgres, map[string]string{}, []string{"DATABASE_URL_FROM_FILE"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, _, err := Parse([]byte(serviceDoc), t.TempDir(), lookup(c.env), c.svc)
			if len(c.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Parse(%s) = %v; want no error", c.svc, err)
				}
				if c.svc == ForAnalyzerTools || c.svc == ForPostgres {
					if cfg.NATS.Password.Reveal() != "" || cfg.Collector.APIToken.Reveal() != "${API}" {
						t.Errorf("%s resolved the NATS password or the API token", c.svc)
					}
					if c.svc == ForPostgres && cfg.Postgres.URL.Reveal() != "postgres://db/x" {
						t.Errorf("postgres.url = %q; want the variable's", cfg.Postgres.URL.Reveal())
					}
					return
				}
				if cfg.NATS.Password.Reveal() != "pw" || cfg.NATS.User != "svc" {
					t.Errorf("NATS identity = %q/%q; want svc/pw", cfg.NATS.User, cfg.NATS.Password.Reveal())
				}
				if c.svc != ForGateway && cfg.Deployments["d"].Primary.APIKey != "" {
					t.Errorf("%s resolved an upstream key", c.svc)
				}
				if c.svc == ForAnalyzer && cfg.Postgres.URL.Reveal() == "postgres://db/x" {
					t.Errorf("analyzer resolved the database URL")
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse(%s) loaded; want errors naming %q", c.svc, c.wantErr)
			}
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse(%s) = %v; want it to name %q", c.svc, err, w)
				}
			}
		})
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.9.9.9:1": true, "localhost:80": true, "[::1]:8080": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.1:8080": false, "gateway:8080": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v; want %v", addr, got, want)
		}
	}
}

func TestSecureByDefault(t *testing.T) {
	doc := func(listen, extra string) []byte {
		return []byte("gateway:\n  listen: " + listen + "\n" + extra)
	}
	cases := []struct {
		name     string
		doc      []byte
		env      map[string]string
		err      string
		warnings string
	}{
		{"loopback without tokens serves", doc("127.0.0.1:8080", ""), nil, "", ""},
		{"all interfaces without tokens refuses", doc("0.0.0.0:8080", ""), nil, "allow_unauthenticated", ""},
		{"empty host without tokens refuses", doc(":8080", ""), nil, "allow_unauthenticated", ""},
		{"client tokens serve anywhere", doc("0.0.0.0:8080", ""), map[string]string{"GRAYGATE_CLIENT_TOKENS": "a,b"}, "", ""},
		{"force tokens alone do not close /v1/*", doc("0.0.0.0:8080", ""), map[string]string{"GRAYGATE_FORCE_TOKENS": "f"}, "allow_unauthenticated", ""},
		{"allow_unauthenticated serves and warns", doc(`"[::]:8080"`, "  allow_unauthenticated: true\n"), nil, "", "allow_unauthenticated"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, svc := range []Service{ForGateway, ForAll} {
				_, warns, err := Parse(c.doc, t.TempDir(), lookup(c.env), svc)
				switch {
				case c.err == "" && err != nil:
					t.Errorf("%s: %v; want no error", svc, err)
				case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
					t.Errorf("%s: %v; want an error naming %s", svc, err, c.err)
				}
				var ws []string
				for _, w := range warns {
					ws = append(ws, w.Path+": "+w.Message)
				}
				if got := strings.Join(ws, "\n"); (c.warnings == "") != (got == "") || !strings.Contains(got, c.warnings) {
					t.Errorf("%s: warnings %q; want %q", svc, got, c.warnings)
				}
			}
			// The collector and the analyzer serve no /v1/* of the gateway.
			if _, _, err := Parse(c.doc, t.TempDir(), lookup(c.env), ForCollector); err != nil {
				t.Errorf("collector: %v", err)
			}
		})
	}
}

// TestNATSFilesRead: CheckFiles reads the NATS identity and TLS files as
// the first connection will, each error under its own key (a missing
// creds file was reported as nats.tls).
func TestNATSFilesRead(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		n   NATS
		key string
	}{
		{NATS{CredsFile: dir + "/none.creds"}, "nats.creds_file: "},
		{NATS{NKeySeedFile: dir + "/none.nk"}, "nats.nkey_seed_file: "},
		{NATS{TLS: NATSTLS{CAFile: dir + "/none-ca.pem"}}, "nats.tls.ca_file: "},
		{NATS{TLS: NATSTLS{CertFile: dir + "/c.pem", KeyFile: dir + "/k.pem"}}, "nats.tls.cert_file: "},
	} {
		if err := c.n.CheckFiles(); err == nil || !strings.HasPrefix(err.Error(), c.key) {
			t.Errorf("CheckFiles(%+v) = %v; want an error under %q", c.n, err, c.key)
		}
	}
	if err := (&NATS{}).CheckFiles(); err != nil {
		t.Errorf("CheckFiles without files = %v", err)
	}
}

func TestNATSIdentity(t *testing.T) {
	cases := []struct {
		name, nats string
		env        map[string]string
		err        string
	}{
		{"user and password", "user: gw\n  password_env: PW", map[string]string{"PW": "x"}, ""},
		{"user without password", "user: gw", nil, "password_env"},
		{"two kinds", "user: gw\n  password_env: PW\n  nkey_seed_file: /s.nk", map[string]string{"PW": "x"}, "at most one NATS identity"},
		{"NATS_CREDS overrides an nkey seed", "nkey_seed_file: /s.nk", map[string]string{"NATS_CREDS": "/c.creds"}, ""},
		{"NATS_CREDS overrides a user", "user: gw\n  password_env: PW", map[string]string{"NATS_CREDS": "/c.creds"}, ""},
		{"cert without key", "tls: {cert_file: /c.pem}", nil, "cert_file and key_file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Parse([]byte("nats:\n  "+c.nats+"\n"), t.TempDir(), lookup(c.env), ForAnalyzer)
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("Parse = %v; want %q", err, c.err)
			}
		})
	}
	cfg, _, err := Parse([]byte("nats: {creds_file: /file.creds}\n"), t.TempDir(), lookup(map[string]string{"NATS_CREDS": "/env.creds"}), ForCollector)
	if err != nil || cfg.NATS.CredsFile != "/env.creds" {
		t.Errorf("NATS_CREDS: creds_file = %v, %v; want /env.creds", cfg, err)
	}
	cfg, _, err = Parse([]byte("nats: {user: gw, password_env: PW}\n"), t.TempDir(), lookup(map[string]string{"NATS_CREDS": "/env.creds"}), ForCollector)
	if err != nil || cfg.NATS.CredsFile != "/env.creds" || cfg.NATS.User != "" || cfg.NATS.Password.Reveal() != "" {
		t.Errorf("NATS_CREDS over a user: %+v, %v; want the creds alone", cfg.NATS, err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://user:secret@host:9000/v1": "http://redacted@host:9000/v1",
		"http://token@host/v1":            "http://redacted@host/v1",
		"http://host:9000/v1":             "http://host:9000/v1",
		"not a url user:pw@x":             "<redacted>",
		"postgres://127.0.0.1:1/x?user=u&password=s3cret&sslmode=disable": "postgres://127.0.0.1:1/x?password=redacted&sslmode=disable&user=u",
		"postgres://u:pw@h/x?sslpassword=s3cret":                          "postgres://redacted@h/x?sslpassword=redacted",
		"host=h user=u password=s3cret dbname=x":                          "host=h user=u password=redacted dbname=x",
		"host=h password='s3 \\'cret' dbname=x":                           "host=h password=redacted dbname=x",
		"host=h PASSWORD = s3cret":                                        "host=h PASSWORD = redacted",
		"host=h user=u dbname=x":                                          "host=h user=u dbname=x",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q; want %q", in, got, want)
		}
	}
	msg := `dial "http://u:p4ss@h:1/v1": refused`
	if got := RedactURLs(msg); strings.Contains(got, "p4ss") {
		t.Errorf("RedactURLs(%q) = %q; the password remains", msg, got)
	}
}

func TestConnectOptions(t *testing.T) {
	n := NATS{User: "gateway", Password: "pw", TLS: NATSTLS{CAFile: "/ca.pem", CertFile: "/c.pem", KeyFile: "/k.pem"}}
	opts, err := n.ConnectOptions()
	// The identity, the CA, the certificate, and the two ping options
	// every client has (SPEC §11 rev. 4, TestServicesLeaveAHungServer).
	if err != nil || len(opts) != 5 {
		t.Errorf("user + CA + client cert: %d options, %v; want 5", len(opts), err)
	}
	if opts, err := (&NATS{}).ConnectOptions(); err != nil || len(opts) != 2 {
		t.Errorf("no identity: %d options, %v; want the pings only", len(opts), err)
	}
	if _, err := (&NATS{NKeySeedFile: "/no/such/seed.nk"}).ConnectOptions(); err == nil {
		t.Error("a missing nkey seed file loaded")
	}
	n = NATS{URL: "nats://user:s3cret@nats:4222"}
	if got := n.RedactedURL(); strings.Contains(got, "s3cret") {
		t.Errorf("RedactedURL = %q", got)
	}
}
