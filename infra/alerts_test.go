package infra_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAlertRuleTests runs the alert rules' unit tests with promtool
// (Debian's prometheus package, which .ci/run installs) and checks that
// every alert of alerts.yml has a case where it fires and one where it
// does not.
func TestAlertRuleTests(t *testing.T) {
	dir := filepath.Join(infraDir(t), "prometheus")
	var alerts []string
	for _, doc := range yamlDocs(t, filepath.Join(dir, "alerts.yml")) {
		groups, _ := doc["groups"].([]any)
		for _, g := range groups {
			rules, _ := dig(g, "rules").([]any)
			for _, r := range rules {
				if name, ok := dig(r, "alert").(string); ok {
					alerts = append(alerts, name)
				}
			}
		}
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, doc := range yamlDocs(t, filepath.Join(dir, "alerts_test.yml")) {
		tests, _ := doc["tests"].([]any)
		for _, tc := range tests {
			cases, _ := dig(tc, "alert_rule_test").([]any)
			for _, c := range cases {
				name := fmt.Sprint(dig(c, "alertname"))
				if exp, _ := dig(c, "exp_alerts").([]any); len(exp) > 0 {
					fires[name] = true
				} else {
					quiet[name] = true
				}
			}
		}
	}
	for _, a := range alerts {
		if !fires[a] || !quiet[a] {
			t.Errorf("alert %s: alerts_test.yml has a firing case: %v, a quiet case: %v; want both", a, fires[a], quiet[a])
		}
	}
	if len(alerts) == 0 {
		t.Fatal("no alerts found in alerts.yml")
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		unavailable(t, "promtool not found (Debian: apt-get install prometheus); the alert rules' unit tests did not run")
	}
	cmd := exec.Command(promtool, "test", "rules", "alerts_test.yml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("promtool test rules printed no SUCCESS:\n%s", out)
	}
	t.Logf("%d alerts, each tested firing and quiet: %s", len(alerts), strings.TrimSpace(string(out)))
}
