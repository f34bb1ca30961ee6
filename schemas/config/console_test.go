package config

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSessionKeyFile reads collector.console.session_key_file: 32 raw
// bytes or 64 hex digits in a file only its owner may read; anything else
// is an error naming the key, never the key's bytes.
func TestSessionKeyFile(t *testing.T) {
	key := bytes.Repeat([]byte{0xa7}, SessionKeyBytes)
	for _, tc := range []struct {
		name string
		data []byte
		mode os.FileMode
		want string // "" : accepted
	}{
		{"raw", key, 0o600, ""},
		{"raw owner read-only", key, 0o400, ""},
		{"hex", []byte(hex.EncodeToString(key)), 0o600, ""},
		{"hex newline", []byte(hex.EncodeToString(key) + "\n"), 0o600, ""},
		{"one byte short", key[:31], 0o600, "must hold exactly 32 bytes"},
		{"one byte more", append(bytes.Clone(key), 'x'), 0o600, "must hold exactly 32 bytes"},
		{"not hex", bytes.Repeat([]byte("zz"), 32), 0o600, "must hold exactly 32 bytes"},
		{"group readable", key, 0o640, "warn: readable or writable by group or others (mode 0640)"},
		{"world readable", key, 0o604, "warn: (mode 0604)"},
		{"empty", nil, 0o600, "holds 0 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "session.key")
			if err := os.WriteFile(file, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(file, tc.mode); err != nil {
				t.Fatal(err)
			}
			doc := "collector:\n  console:\n    session_key_file: session.key\n"
			cfg, warnings, err := Parse([]byte(doc), dir, lookup(nil))
			if warn, ok := strings.CutPrefix(tc.want, "warn: "); tc.want == "" || ok {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if got := cfg.Collector.Console.SessionKey.Reveal(); got != string(key) {
					t.Errorf("SessionKey = %x; want %x", got, key)
				}
				var all []string
				for _, w := range warnings {
					all = append(all, w.String())
				}
				if got := strings.Join(all, "\n"); ok != strings.Contains(got, "collector.console.session_key_file: ") || ok && !strings.Contains(got, warn) {
					t.Errorf("warnings %q; want one naming the key and %q: %v", got, warn, ok)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "collector.console.session_key_file: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v; want collector.console.session_key_file: …%s…", err, tc.want)
			}
			if strings.Contains(err.Error(), hex.EncodeToString(key[:4])) || bytes.Contains([]byte(err.Error()), key[:4]) {
				t.Errorf("the error shows the key: %v", err)
			}
		})
	}
}

// TestConsoleConfig reads admin_url (a base URL without the final slash)
// and trusted_proxies (addresses as one-address prefixes; IPv4-mapped
// addresses as IPv4).
func TestConsoleConfig(t *testing.T) {
	doc := "collector:\n  console:\n    admin_url: https://gw.internal:8081/\n    trusted_proxies: [10.1.2.3, 10.0.0.0/8, \"::ffff:192.0.2.1\", \"2001:db8::/32\"]\n"
	cfg, _, err := Parse([]byte(doc), t.TempDir(), lookup(nil))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Collector.Console
	if c.AdminURL != "https://gw.internal:8081" {
		t.Errorf("AdminURL = %q; want https://gw.internal:8081", c.AdminURL)
	}
	want := []string{"10.1.2.3/32", "10.0.0.0/8", "192.0.2.1/32", "2001:db8::/32"}
	var got []string
	for _, p := range c.Proxies {
		got = append(got, p.String())
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Proxies = %q; want %q", got, want)
	}
	if !c.Proxies[0].Contains(netip.MustParseAddr("10.1.2.3")) {
		t.Error("10.1.2.3 is not in its own prefix")
	}
}

func TestStepAbove(t *testing.T) {
	p := &Promotion{Steps: []float64{1, 2, 5, 10, 25, 50, 100}}
	for _, tc := range []struct {
		pct  float64
		want float64
		ok   bool
	}{{0, 1, true}, {1, 2, true}, {3, 5, true}, {50, 100, true}, {99.99, 100, true}, {100, 0, false}} {
		if got, ok := p.StepAbove(tc.pct); got != tc.want || ok != tc.ok {
			t.Errorf("StepAbove(%v) = %v, %v; want %v, %v", tc.pct, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := (*Promotion)(nil).StepAbove(1); ok {
		t.Error("nil promotion has a step above")
	}
}
