package config

// warnTTFTLimit warns when analyzer.gates.ttft_p99_max exceeds a
// deployment's censoring limit, its rollout timeout (SPEC §9 rev. 3): a
// first token later than the timeout is a timeout, never measured, so
// ttft_p99 judges that deployment against the timeout instead, and a gray
// whose p99 lies between the two fails.
func (d *decoder) warnTTFTLimit(c *Config) {
	max := c.Analyzer.Gates.TTFTP99Max
	for _, name := range c.DeploymentOrder {
		dep := c.Deployments[name]
		if dep == nil || dep.Gray == nil || dep.Rollout.Timeout <= 0 || max <= dep.Rollout.Timeout {
			continue
		}
		d.warnf("analyzer.gates.ttft_p99_max", nil,
			"%s exceeds the rollout timeout of deployments.%s (%s), where first tokens are censored: its ttft_p99 is judged against %s",
			max, name, dep.Rollout.Timeout, dep.Rollout.Timeout)
	}
}
