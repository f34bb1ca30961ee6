package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestQuoteRoundTrip(t *testing.T) {
	for _, v := range []string{"", "nats://127.0.0.1:4222", "postgres://u:p@h:5432/db?sslmode=disable&x=1", "it's", "a b"} {
		if got := unquote(quote(v)); got != v {
			t.Errorf("unquote(quote(%q)) = %q", v, got)
		}
	}
}

func TestEnvFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "env")
	e, err := readEnv(path)
	if err != nil {
		t.Fatalf("readEnv of a missing file: %v", err)
	}
	e.set("NATS_URL", "nats://127.0.0.1:4222")
	e.set("DATABASE_URL", "postgres://postgres@127.0.0.1:55432/graygate?sslmode=disable")
	e.set("NATS_URL", "nats://127.0.0.1:4333") // replaces, keeps the order
	if err := e.write(path); err != nil {
		t.Fatal(err)
	}
	got, err := readEnv(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != e.String() {
		t.Errorf("read back:\n%s\nwant:\n%s", got, e)
	}
	want := "export NATS_URL='nats://127.0.0.1:4333'\nexport DATABASE_URL='postgres://postgres@127.0.0.1:55432/graygate?sslmode=disable'\n"
	if e.String() != want {
		t.Errorf("String() = %q; want %q", e.String(), want)
	}
}

func TestRequiredVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "go.mod")
	mod := "module x\n\ngo 1.26\n\nrequire (\n\tgithub.com/nats-io/nats-server/v2 v2.15.3 // indirect\n)\n\nrequire github.com/a/b v1.0.0\n"
	if err := os.WriteFile(path, []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ module, want string }{
		{natsModule, "v2.15.3"},
		{"github.com/a/b", "v1.0.0"},
	}
	for _, tt := range tests {
		if got, err := requiredVersion(path, tt.module); err != nil || got != tt.want {
			t.Errorf("requiredVersion(%q) = %q, %v; want %q", tt.module, got, err, tt.want)
		}
	}
	if _, err := requiredVersion(path, "github.com/missing/mod"); err == nil {
		t.Error("requiredVersion of a module go.mod lacks: nil error; want one")
	}
}

func TestPIDRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "self.pid")
	if err := writePID(path, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	r, ok := running(path)
	if !ok || r.PID != os.Getpid() {
		t.Fatalf("running() = %+v, %v; want this process", r, ok)
	}
	// The same pid with another start time is a recycled pid, not ours.
	recycled := pidRecord{PID: r.PID, Start: r.Start + 1}
	if recycled.alive() {
		t.Error("a record with the wrong start time counts as alive")
	}
	if err := os.WriteFile(path, []byte("999999999 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := running(path); ok {
		t.Error("running() of a dead pid = true")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("stale pid file not removed: %v", err)
	}
}
