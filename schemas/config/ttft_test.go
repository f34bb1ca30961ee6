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

// TestTTFTRatioCannotPassWarning: where ttft_p99_max accepts a TTFT p99
// above half a gray deployment's stream censoring limit (the rollout
// timeout; the gray's max_duration for observe streams), validate warns
// that ttft_p99_ratio may never pass there, names the setting to raise
// and by how much; with the ratio gate off, the limit at least twice
// ttft_p99_max, or no gray, it does not.
func TestTTFTRatioCannotPassWarning(t *testing.T) {
	doc := func(max, ratio, rollout, grayExtra string, gray bool) string {
		g := ""
		if gray {
			g = "    gray: {url: https://gray.internal/v1, model: m2" + grayExtra + "}\n    rollout: {" + rollout + "}\n"
		}
		return "deployments:\n  d:\n    primary: {url: https://primary.internal/v1, model: m}\n" + g +
			"analyzer:\n  gates: {ttft_p99_max: " + max + ratio + "}\n"
	}
	for _, tt := range []struct {
		name    string
		doc     string
		want    bool
		setting string
	}{
		{"defaults: 3s against 2.5s", doc("3s", "", "timeout: 2500ms", "", true), true, "deployments.d.rollout.timeout"},
		{"just above half", doc("2s", "", "timeout: 3999ms", "", true), true, "deployments.d.rollout.timeout"},
		{"exactly half", doc("2s", "", "timeout: 4s", "", true), false, ""},
		{"well below half", doc("1s", "", "timeout: 10s", "", true), false, ""},
		{"ratio gate off", doc("3s", ", ttft_p99_ratio_max: 0", "timeout: 2500ms", "", true), false, ""},
		{"observe: max_duration is the limit", doc("3s", "", "timeout: 2500ms, stream_validation: observe", ", max_duration: 5s", true), true, "deployments.d.gray.max_duration"},
		{"observe: a long max_duration", doc("3s", "", "timeout: 2500ms, stream_validation: observe", ", max_duration: 10m", true), false, ""},
		{"no gray", doc("3s", "", "", "", false), false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, warns := parseDoc(t, tt.doc, nil)
			var got string
			for _, w := range warns {
				if (w.Path == "analyzer.gates.ttft_p99_ratio_max" || w.Path == "analyzer.gates.ttft_p99_max") &&
					strings.Contains(w.Message, "ttft_p99_ratio passes") {
					got = w.Message
				}
			}
			if (got != "") != tt.want {
				t.Fatalf("ttft_p99_ratio warning = %q; want one: %v (warnings: %v)", got, tt.want, warns)
			}
			if tt.want && !strings.Contains(got, "set "+tt.setting+" to at least twice") {
				t.Errorf("warning %q does not name %s", got, tt.setting)
			}
		})
	}
}
