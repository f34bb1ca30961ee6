package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse as a configuration file: it must
// never panic, and it returns either a config or errors, never both.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	files = append(files, exampleConfig)
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(aliasBombSeed))
	env := func(name string) (string, bool) {
		if name == "UNSET" {
			return "", false
		}
		return "8K", true
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, _, err := Parse(data, "testdata", env)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Parse returned config %v and error %v; want exactly one", cfg != nil, err)
		}
		if err != nil && err.Error() == "" {
			t.Fatal("empty error message")
		}
	})
}

const aliasBombSeed = "routing:\n  routes:\n    - &r {model: m, candidates: [&c {deployment: d, context: [&s x, *s, *s]}, *c, *c]}\n    - *r\n    - *r\n"
