package config

import (
	"strings"
	"testing"
)

// TestWarnBufferedStreams: validate warns where a canary gray buffers
// streams under a rollout timeout below BufferedStreamFloor, and nowhere
// else.
func TestWarnBufferedStreams(t *testing.T) {
	const path = "deployments.d.rollout.stream_validation"
	for _, c := range []struct {
		name, rollout string
		warn          bool
	}{
		{"default: buffer under 2.5s", `{}`, true},
		{"buffer under 9.9s", `{timeout: 9900ms}`, true},
		{"buffer under 10s", `{timeout: 10s}`, false},
		{"observe", `{stream_validation: observe}`, false},
		{"shadow: gray never serves", `{mode: shadow}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			yaml := `
nats: {url: ""}
routing:
  routes: [{model: m, candidates: [{deployment: d}]}]
deployments:
  d:
    primary: {url: "http://127.0.0.1:9", model: x}
    gray: {model: y}
    rollout: ` + c.rollout + `
analyzer: {gates: {ttft_p99_max: 1s}}
`
			_, warnings, err := Parse([]byte(yaml), t.TempDir(), lookup(nil))
			if err != nil {
				t.Fatal(err)
			}
			got := false
			for _, w := range warnings {
				if w.Path == path {
					got = true
					if !strings.Contains(w.String(), "stream_validation: observe") {
						t.Errorf("warning %q does not name the remedy", w)
					}
				}
			}
			if got != c.warn {
				t.Errorf("warning at %s = %v; want %v (warnings: %v)", path, got, c.warn, warnings)
			}
		})
	}
}
