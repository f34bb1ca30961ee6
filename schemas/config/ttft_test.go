package config

import (
	"strings"
	"testing"
)

// TestTTFTLimitWarning: ttft_p99_max above a gray deployment's rollout
// timeout (its censoring limit) is warned about at its key path, once per
// such deployment; at or below it, or without a gray, it is not.
func TestTTFTLimitWarning(t *testing.T) {
	doc := func(max, timeout string, gray bool) string {
		g := ""
		if gray {
			g = "    gray: {url: https://gray.internal/v1, model: m2}\n    rollout: {timeout: " + timeout + "}\n"
		}
		return "deployments:\n  d:\n    primary: {url: https://primary.internal/v1, model: m}\n" + g +
			"analyzer:\n  gates: {ttft_p99_max: " + max + "}\n"
	}
	for _, tt := range []struct {
		name string
		doc  string
		want bool
	}{
		{"max above the timeout", doc("3s", "2500ms", true), true},
		{"max equal to the timeout", doc("3s", "3s", true), false},
		{"max below the timeout", doc("2s", "5s", true), false},
		{"no gray", doc("3s", "", false), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, warns := parseDoc(t, tt.doc, nil)
			var got bool
			for _, w := range warns {
				if w.Path == "analyzer.gates.ttft_p99_max" && strings.Contains(w.Message, "deployments.d") {
					got = true
				}
			}
			if got != tt.want {
				t.Errorf("ttft_p99_max warning = %v; want %v (warnings: %v)", got, tt.want, warns)
			}
		})
	}
}
