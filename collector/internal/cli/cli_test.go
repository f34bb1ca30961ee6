package cli_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/cli"
	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// run executes the CLI with a config file naming nothing (DATABASE_URL
// names the database).
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "graygate.yaml")
	os.WriteFile(cfg, []byte("collector:\n  batch_size: 100\n"), 0o644)
	var out, errOut bytes.Buffer
	err := cli.Run(context.Background(), append(args, "--config", cfg), &out, &errOut)
	return out.String(), err
}

// seed stores fixed samples: fixed ids and times, so output is stable.
func seed(t *testing.T) {
	t.Helper()
	pool, url := testenv.Pool(t, store.NewPool, store.Migrate)
	t.Setenv("DATABASE_URL", url)
	at := time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC)
	long := testenv.Sample("qwen-32k", 3, events.ReasonSchemaViolation, events.ArmGray, []byte("{\"action\":\"search\",\"note\":\"\x1b[31mred\x1b[0m\"}\n"))
	long.ValidationErrors = []events.ValidationError{{Field: "(root)", Description: "Additional property note is not allowed; and this description is much longer than a table cell"}}
	long.RequestID = "chatcmpl-\u202eevil"
	timeout := testenv.Sample("qwen-128k", 2, events.ReasonTimeout, events.ArmShadow, nil)
	timeout.ValidationErrors = []events.ValidationError{}
	timeout.Status = 0
	binary := testenv.Sample("qwen-32k", 1, events.ReasonInvalidJSON, events.ArmGray, bytes.Repeat([]byte{0xff, 0x00, 0x7f}, 40))
	binary.PayloadTruncated, binary.PayloadBytes = true, 300000
	both := testenv.Sample("qwen-32k", 4, events.ReasonInvalidJSON, events.ArmGray, []byte(`{"choices":[{"message":{"content":"A poem about the sea."}}]}`))
	both.ValidationErrors = []events.ValidationError{{Field: "choices[0].message.content", Description: "content is not valid JSON"}}
	both.Outcome = events.OutcomeSchemaViolationBoth
	both.PrimaryValidationErrors = []events.ValidationError{{Field: "choices[0].message.content", Description: "content is not valid JSON"}}
	both.SetPrimaryPayload([]byte(`{"choices":[{"message":{"content":"The sea, [1ma poem[0m."}}]}`), 48)
	batch := []store.Event{
		testenv.Event[store.Event](t, both, at.Add(-time.Minute), "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c04"),
		testenv.Event[store.Event](t, binary, at, "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c01"),
		testenv.Event[store.Event](t, timeout, at.Add(time.Minute), "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c02"),
		testenv.Event[store.Event](t, long, at.Add(2*time.Minute), "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c03"),
	}
	if _, err := store.NewWriter(pool, store.Options{}).Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
}

func TestSamplesGolden(t *testing.T) {
	seed(t)
	tests := []struct {
		name   string
		args   []string
		golden string
		err    string
	}{
		{"list", []string{"samples", "list"}, "list.txt", ""},
		{"list json", []string{"samples", "list", "--json"}, "list.json", ""},
		{"list filtered", []string{"samples", "list", "--deployment", "qwen-32k", "--reason", "invalid_json"}, "list_filtered.txt", ""},
		{"list limited", []string{"samples", "list", "--limit", "1"}, "list_limited.txt", ""},
		{"list none", []string{"samples", "list", "--since", "1h"}, "list_none.txt", ""},
		{"show text payload", []string{"samples", "show", "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c03"}, "show_text.txt", ""},
		{"show binary payload", []string{"samples", "show", "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c01"}, "show_binary.txt", ""},
		{"show empty payload", []string{"samples", "show", "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c02"}, "show_empty.txt", ""},
		{"show json", []string{"samples", "show", "--json", "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c03"}, "show.json", ""},
		{"show paired with primary", []string{"samples", "show", "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c04"}, "show_both.txt", ""},
		{"show paired json", []string{"samples", "show", "--json", "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c04"}, "show_both.json", ""},
		{"show by request id", []string{"samples", "show", "smp-qwen-128k-2"}, "show_empty.txt", ""},
		{"show unknown", []string{"samples", "show", "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c09"}, "", "no sample has event id"},
		{"show unknown request", []string{"samples", "show", "nope"}, "", `no sample has event id or request id "nope"`},
		{"bad reason", []string{"samples", "list", "--reason", "bad"}, "", "--reason"},
		{"bad since", []string{"samples", "list", "--since", "yesterday"}, "", "--since"},
		{"show without id", []string{"samples", "show"}, "", "needs one ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := run(t, tt.args...)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("error = %v; want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("collector %v: %v", tt.args, err)
			}
			golden(t, tt.golden, []byte(out))
		})
	}
}

func TestMigrateCommand(t *testing.T) {
	t.Setenv("DATABASE_URL", testenv.Database(t))
	// Every embedded migration, whatever their numbers (branches take
	// their own).
	all, err := store.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var versions []string
	for _, m := range all {
		versions = append(versions, strconv.Itoa(m.Version))
	}
	last := versions[len(versions)-1]
	for _, want := range []string{"applied migrations [" + strings.Join(versions, " ") + "]; schema is at version " + last + "\n",
		"schema is up to date (version " + last + ")\n"} {
		out, err := run(t, "migrate")
		if err != nil || out != want {
			t.Errorf("collector migrate = %q, %v; want %q", out, err, want)
		}
	}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args []string
		err  string
	}{
		{[]string{"--help"}, ""},
		{[]string{"samples"}, ""},
		{[]string{"serve", "--help"}, ""},
		{[]string{"nope"}, "unknown command"},
		{[]string{"samples", "delete"}, "unknown command"},
		{[]string{"migrate", "extra"}, "no arguments"},
		{[]string{"serve", "--log-level", "loud"}, "--log-level"},
		{[]string{"migrate", "--config", "/nonexistent/graygate.yaml"}, "/nonexistent/graygate.yaml"},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		err := cli.Run(context.Background(), tt.args, &out, &errOut)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("collector %v = %v; want error containing %q", tt.args, err, tt.err)
		}
		if tt.err == "" && !strings.Contains(out.String()+errOut.String(), "usage: collector") {
			t.Errorf("collector %v printed no usage", tt.args)
		}
	}
}

// TestReadingCommandsSayWhichPostgres: a terminal without DATABASE_URL
// must not read another database silently; every reading command says
// where it reads and why, with the password redacted.
func TestReadingCommandsSayWhichPostgres(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir) // no graygate.yaml here
	for _, c := range []struct {
		env, want string
	}{
		{"postgres://reader:s3cret@127.0.0.1:1/graygate?sslmode=disable&connect_timeout=1", "from DATABASE_URL"},
		{"", "from the default postgres.url"},
	} {
		t.Setenv("DATABASE_URL", c.env)
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = cli.Run(ctx, []string{"samples", "list"}, &out, &errOut)
		cancel()
		line, _, _ := strings.Cut(errOut.String(), "\n")
		if !strings.HasPrefix(line, "collector: reading Postgres at ") || !strings.Contains(line, c.want) || strings.Contains(errOut.String(), "s3cret") {
			t.Errorf("DATABASE_URL=%q: stderr starts %q; want where it reads, %q, and no password", c.env, line, c.want)
		}
	}
}

// TestPostgresCommandsResolvePostgresAlone: the commands that read or
// migrate Postgres directly resolve postgres.url and DATABASE_URL and
// nothing else (SPEC §2): not the NATS password, the API token or the
// console's session key, which an operator running them may not have.
func TestPostgresCommandsResolvePostgresAlone(t *testing.T) {
	seed(t)
	cfg := filepath.Join(t.TempDir(), "graygate.yaml")
	doc := `nats:
  url: nats://127.0.0.1:4222
  user: collector
  password_env: GRAYGATE_TEST_UNSET_NATS_PASSWORD
collector:
  api_token: ${GRAYGATE_TEST_UNSET_API_TOKEN}
  console:
    session_key_file: /no/such/session.key
`
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"migrate"}, {"samples", "list"}, {"rollouts", "history", "qwen-32k"}, {"deadletters", "list"}} {
		var out, errOut bytes.Buffer
		if err := cli.Run(context.Background(), append(args, "--config", cfg), &out, &errOut); err != nil {
			t.Errorf("collector %s with the NATS password, API token and session key unresolvable: %v\n%s", strings.Join(args, " "), err, errOut.String())
		}
	}
}
