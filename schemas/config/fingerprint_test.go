package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// fingerprintDoc is a deployment with a gray; edits change one thing.
const fingerprintDoc = `
sampling_contract:
  params:
    temperature: {min: 0, max: 1}
    top_k: {min: 1, max: 100}
routing:
  routes:
    - model: chat
      candidates:
        - deployment: main
deployments:
  main:
    primary: {url: http://127.0.0.1:9001/v1, model: qwen-7b}
    gray: {url: http://127.0.0.1:9002/v1, model: qwen-8b, params: {temperature: 0.2, top_k: 40}}
`

// TestFingerprint: two gateways with the same arm configuration compute
// the same fingerprint; a changed gray model, URL or parameter gives a new
// one, and only gray's changes; credentials in the URL never count.
func TestFingerprint(t *testing.T) {
	base, _ := parseDoc(t, fingerprintDoc, nil)
	primary, gray := base.Deployments["main"].Primary.Fingerprint, base.Deployments["main"].Gray.Fingerprint
	if len(gray) != 16 || strings.Trim(gray, "0123456789abcdef") != "" || gray == primary {
		t.Fatalf("gray fingerprint %q, primary %q; want two different 16-hex-digit values", gray, primary)
	}
	tests := []struct {
		name, old, new string
		same           bool
	}{
		{"same configuration", "", "", true},
		{"params in another order, 40 as 40.0", "{temperature: 0.2, top_k: 40}", "{top_k: 40.0, temperature: 0.20}", true},
		{"credentials in the url", "url: http://127.0.0.1:9002/v1", "url: http://user:secret@127.0.0.1:9002/v1", true},
		{"gray model", "model: qwen-8b", "model: qwen-9b", false},
		{"gray url", "127.0.0.1:9002/v1", "127.0.0.1:9003/v1", false},
		{"gray parameter", "temperature: 0.2", "temperature: 0.3", false},
		{"gray parameter dropped", ", top_k: 40}", "}", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(fingerprintDoc, tt.old) {
				t.Fatalf("document has no %q", tt.old)
			}
			cfg, _ := parseDoc(t, strings.Replace(fingerprintDoc, tt.old, tt.new, 1), nil)
			dep := cfg.Deployments["main"]
			if got := dep.Primary.Fingerprint; got != primary {
				t.Errorf("primary fingerprint %s; want %s (primary did not change)", got, primary)
			}
			if got := dep.Gray.Fingerprint; (got == gray) != tt.same {
				t.Errorf("gray fingerprint %s, before %s; want the same: %v", got, gray, tt.same)
			}
		})
	}
}

// TestFingerprintEncoding pins the documented encoding, the prompt's
// part in it, and a gray without url fingerprinting primary's upstream.
func TestFingerprintEncoding(t *testing.T) {
	// sha256(`{"model":"m","params":{"top_k":40},"prompt_hash":"","url":"http://h/v1"}`)[:8]
	want := Fingerprint("m", "http://h/v1", "", ArmParams{"top_k": {Value: 40, Int: 40}})
	if got := Fingerprint("m", "http://u:p@h/v1", "", ArmParams{"top_k": {Value: 40, Int: 40}}); got != want {
		t.Errorf("with credentials %s; want %s", got, want)
	}
	if got := fingerprintOf(t, `{"model":"m","params":{"top_k":40},"prompt_hash":"","url":"http://h/v1"}`); got != want {
		t.Errorf("Fingerprint = %s; want %s, the documented encoding", want, got)
	}
	hash := strings.Repeat("ab", 32)
	if Fingerprint("m", "http://h/v1", hash, nil) == Fingerprint("m", "http://h/v1", "", nil) {
		t.Error("a prompt does not change the fingerprint")
	}
	if Fingerprint("m", "http://h/v1", strings.Repeat("cd", 32), nil) == Fingerprint("m", "http://h/v1", hash, nil) {
		t.Error("a changed prompt does not change the fingerprint")
	}
	// Fields cannot run into each other: a model ending in the URL's start
	// is another identity.
	if Fingerprint("m", "http://h/v1", "", nil) == Fingerprint(`m","url":"http://h/v1`, "", "", nil) {
		t.Error("the encoding is ambiguous")
	}
	doc := strings.Replace(fingerprintDoc, "{url: http://127.0.0.1:9002/v1, model: qwen-8b, ", "{", 1)
	cfg, _ := parseDoc(t, doc, nil)
	dep := cfg.Deployments["main"]
	if want := Fingerprint("qwen-7b", "http://127.0.0.1:9001/v1", "", dep.Gray.Params); dep.Gray.Fingerprint != want {
		t.Errorf("gray without url: fingerprint %s; want primary's upstream's %s", dep.Gray.Fingerprint, want)
	}
}

func fingerprintOf(t *testing.T, canonical string) string {
	t.Helper()
	sum := sha256Sum([]byte(canonical))
	return sum[:16]
}

func sha256Sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
