package config

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestUpstreamPromptAndTLS(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	good := []byte("You are agent v1.3.\n")
	write("good.txt", good)
	write("latin1.txt", []byte("caf\xe9"))
	write("big.txt", []byte(strings.Repeat("x", MaxPromptBytes+1)))
	write("exact.txt", []byte(strings.Repeat("x", MaxPromptBytes)))
	write("notpem.crt", []byte("hello"))

	doc := func(gray string) string {
		return "routing:\n  routes:\n    - model: m\n      candidates: [{deployment: d}]\n" +
			"deployments:\n  d:\n    primary: {url: http://127.0.0.1:9001, model: base}\n    gray: " + gray + "\n"
	}
	sum := sha256.Sum256(good)
	cases := []struct {
		name, gray string
		err        string // a line of the errors; "" when valid
		check      func(t *testing.T, u *Upstream)
	}{
		{"prompt-only gray", "{prompt: {version: v1.3, system_file: good.txt}}", "", func(t *testing.T, u *Upstream) {
			if u.URL != "" || u.Model != "" || u.Prompt.Mode != PromptReplace || string(u.Prompt.Text) != string(good) || u.Prompt.Hash != hex.EncodeToString(sum[:]) {
				t.Errorf("gray = %+v, prompt %+v", u, u.Prompt)
			}
		}},
		{"prepend", "{prompt: {version: v2, system_file: good.txt, mode: prepend}}", "", nil},
		{"exactly the cap", "{prompt: {version: v2, system_file: exact.txt}}", "", nil},
		{"missing file", "{prompt: {version: v2, system_file: nope.txt}}", `deployments.d.gray.prompt.system_file: file "nope.txt" not found`, nil},
		{"not UTF-8", "{prompt: {version: v2, system_file: latin1.txt}}", "deployments.d.gray.prompt.system_file: latin1.txt: not valid UTF-8", nil},
		{"one byte over", "{prompt: {version: v2, system_file: big.txt}}", "deployments.d.gray.prompt.system_file: big.txt: larger than 256KiB", nil},
		{"bad mode", "{prompt: {version: v2, system_file: good.txt, mode: append}}", `deployments.d.gray.prompt.mode: must be replace or prepend, got "append"`, nil},
		{"no version", "{prompt: {system_file: good.txt}}", "deployments.d.gray.prompt.version: a prompt needs a version", nil},
		{"version with a bidirectional override", `{prompt: {version: "v2\u202e", system_file: good.txt}}`,
			"deployments.d.gray.prompt.version: the version holds U+202E", nil},
		{"ca not PEM", "{url: https://x, model: m, tls: {ca_file: notpem.crt}}", "deployments.d.gray.tls.ca_file: notpem.crt: no PEM certificate in the file", nil},
		{"cert without key", "{url: https://x, model: m, tls: {cert_file: notpem.crt}}", "deployments.d.gray.tls.key_file: a client certificate needs both cert_file and key_file", nil},
		{"gray with url needs model", "{url: https://x}", "deployments.d.gray.model: an upstream needs the model name it serves", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, _, err := Parse([]byte(doc(c.gray)), dir, nil)
			if c.err == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if c.check != nil {
					c.check(t, cfg.Deployments["d"].Gray)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Parse error = %v; want a line %q", err, c.err)
			}
		})
	}
}

func TestAtMost64ContextBands(t *testing.T) {
	for _, n := range []int{MaxContextBands, MaxContextBands + 1} {
		var b strings.Builder
		b.WriteString("routing:\n  signals:\n    context:\n")
		for i := range n {
			b.WriteString("      - {name: b" + strconvItoa(i) + ", min_tokens: " + strconvItoa(i*10) + ", max_tokens: " + strconvItoa(i*10+9) + "}\n")
		}
		_, _, err := Parse([]byte(b.String()), "", nil)
		if n <= MaxContextBands && err != nil {
			t.Errorf("%d bands: %v", n, err)
		}
		if n > MaxContextBands && (err == nil || !strings.Contains(err.Error(), "routing.signals.context: at most 64 context bands, got 65")) {
			t.Errorf("%d bands: error %v; want at most 64", n, err)
		}
	}
}

func strconvItoa(i int) string { return strconv.Itoa(i) }

func TestArmParams(t *testing.T) {
	doc := func(contract, gray string) string {
		return contract + "routing:\n  routes:\n    - model: m\n      candidates: [{deployment: d}]\n" +
			"deployments:\n  d:\n    primary: {url: http://127.0.0.1:9001, model: base}\n    gray: " + gray + "\n"
	}
	contract := "sampling_contract:\n  params: {top_k: {min: 1, max: 100, default: 40}, temperature: 0.7}\n"
	cases := []struct {
		name, contract, gray, err string
		want                      ArmParams
	}{
		{"within the band", contract, "{params: {top_k: 20}}", "", ArmParams{"top_k": {Value: 20, Int: 20}}},
		{"pin kept", contract, "{params: {temperature: 0.7, top_k: 100}}", "", ArmParams{"temperature": {Value: 0.7}, "top_k": {Value: 100, Int: 100}}},
		{"no contract, exact", "", "{params: {top_k: 9007199254740993}}", "", ArmParams{"top_k": {Value: 9007199254740992, Int: 9007199254740993}}},
		{"outside the band", contract, "{params: {top_k: 101}}", "deployments.d.gray.params.top_k: 101 violates sampling_contract.params.top_k: expected a value in [1, 100]", nil},
		{"against the pin", contract, "{params: {temperature: 0.2}}", "deployments.d.gray.params.temperature: 0.2 violates sampling_contract.params.temperature: expected 0.7", nil},
		{"outside the domain", "", "{params: {top_p: 0}}", "deployments.d.gray.params.top_p: 0 is outside the domain of top_p", nil},
		{"not whole", "", "{params: {n: 1.5}}", "deployments.d.gray.params.n: 1.5 is not a whole number", nil},
		{"unknown", "", "{params: {seed: 1}}", "deployments.d.gray.params.seed: unknown parameter", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, _, err := Parse([]byte(doc(c.contract, c.gray)), "", nil)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("Parse error = %v; want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := cfg.Deployments["d"].Gray.Params; !reflect.DeepEqual(got, c.want) {
				t.Errorf("params = %+v; want %+v", got, c.want)
			}
		})
	}
}
