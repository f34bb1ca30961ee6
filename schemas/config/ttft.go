package config

import (
	"fmt"
	"time"
)

// StreamCensorLimit is where the analyzer censors d's streamed attempts
// (SPEC §9 rev. 3): the rollout timeout, or, for stream_validation
// observe (whose streams are waited for until the end), the gray's
// max_duration. Non-streamed attempts are censored at the rollout
// timeout.
func (d *Deployment) StreamCensorLimit() time.Duration {
	if d.Gray != nil && d.Rollout.StreamValidation == StreamObserve {
		return d.Gray.MaxDuration
	}
	return d.Rollout.Timeout
}

// warnTTFTLimit warns about the first-token numbers that a gray
// deployment's censoring limit makes unreachable (a first token later
// than the limit is never measured):
//
//   - analyzer.gates.ttft_p99_max above the limit: ttft_p99 judges that
//     deployment against the limit instead, and a gray whose p99 lies
//     between the two fails;
//   - ttft_p99_max above half the limit, with ttft_p99_ratio on (said in
//     the same warning when the first holds): a fleet
//     whose TTFT p99 ttft_p99 accepts may still sit too close to the limit
//     for ttft_p99_ratio to pass — the ratio's upper bound needs gray's
//     p99 measured, and twice primary's p99 leaves room for a gray 1.5×
//     slower (the case: a p99 of 2.3 s under a 2.5 s timeout was
//     never promoted). The analyzer's needs_gray and why say the same from
//     the data; this says it before the first request.
func (d *decoder) warnTTFTLimit(c *Config) {
	g := c.Analyzer.Gates
	for _, name := range c.DeploymentOrder {
		dep := c.Deployments[name]
		if dep == nil || dep.Gray == nil {
			continue
		}
		limit := dep.StreamCensorLimit()
		if limit <= 0 {
			continue
		}
		what, key := censorSetting(name, dep)
		ratio := g.TTFTP99RatioMax > 0 && 2*g.TTFTP99Max > limit
		fix := fmt.Sprintf("set %s to at least twice primary's TTFT p99 (%s covers ttft_p99_max)", key, 2*g.TTFTP99Max)
		switch {
		case g.TTFTP99Max > limit && ratio:
			d.warnf("analyzer.gates.ttft_p99_max", nil,
				"%s exceeds the %s of deployments.%s (%s), where first tokens are censored: its ttft_p99 is judged against %s, "+
					"and where primary's TTFT p99 is above %s ttft_p99_ratio passes a gray as fast as primary slowly or never; %s",
				g.TTFTP99Max, what, name, limit, limit, limit/2, fix)
		case g.TTFTP99Max > limit:
			d.warnf("analyzer.gates.ttft_p99_max", nil,
				"%s exceeds the %s of deployments.%s (%s), where first tokens are censored: its ttft_p99 is judged against %s",
				g.TTFTP99Max, what, name, limit, limit)
		case ratio:
			d.warnf("analyzer.gates.ttft_p99_ratio_max", nil,
				"deployments.%s censors first tokens at its %s (%s), and ttft_p99_max (%s) accepts a TTFT p99 above half of it: "+
					"where primary's TTFT p99 is above %s, ttft_p99_ratio passes a gray as fast as primary slowly or never, "+
					"and the rollout is not promoted; %s",
				name, what, limit, g.TTFTP99Max, limit/2, fix)
		}
	}
}

// censorSetting says what deployment name's stream censoring limit is,
// in words and as the key that sets it.
func censorSetting(name string, dep *Deployment) (what, key string) {
	if dep.Rollout.StreamValidation == StreamObserve {
		return "gray's max_duration", "deployments." + name + ".gray.max_duration"
	}
	return "rollout timeout", "deployments." + name + ".rollout.timeout"
}
