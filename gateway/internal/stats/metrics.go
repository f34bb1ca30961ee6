package stats

import (
	"github.com/VictoriaMetrics/metrics"

	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/schemas/events"
)

// describe gives m the # HELP text of this package's families.
func describe(m *telemetry.Metrics) {
	m.Describe("graygate_attempts_total", "Upstream attempts by deployment, arm (primary, gray, shadow) and outcome (SPEC §7).")
	m.Describe("graygate_tokens_total", "Prompt and completion tokens of the attempts that returned an answer, by deployment, arm and kind.")
}

// metricsSet holds a deployment's counters, created up front in the
// gateway's set so that Record does no lookup. Every label value is a configured deployment name
// or a member of a closed set.
type metricsSet struct {
	attempts [numArms][numOutcomes]*metrics.Counter // by events.AllOutcomes index
	tokens   [numArms][2]*metrics.Counter
}

func newMetrics(set *metrics.Set, deployment string) metricsSet {
	var m metricsSet
	for i, arm := range armOrder {
		for j, o := range events.AllOutcomes {
			m.attempts[i][j] = set.GetOrCreateCounter(`graygate_attempts_total{deployment="` + deployment +
				`",arm="` + string(arm) + `",outcome="` + string(o) + `"}`)
		}
		for j, kind := range [2]string{"prompt", "completion"} {
			m.tokens[i][j] = set.GetOrCreateCounter(`graygate_tokens_total{deployment="` + deployment +
				`",arm="` + string(arm) + `",kind="` + kind + `"}`)
		}
	}
	return m
}
