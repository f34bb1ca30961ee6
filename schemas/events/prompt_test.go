package events

import (
	"strings"
	"testing"
)

func TestArmPromptFieldsChecked(t *testing.T) {
	good := strings.Repeat("ab", 32)
	cases := []struct {
		name, version, hash, want string
	}{
		{"none", "", "", ""},
		{"set", "v1.3", good, ""},
		{"short hash", "v1.3", good[:16], "arm_prompt_hash"},
		{"upper hex", "v1.3", strings.ToUpper(good), "arm_prompt_hash"},
		{"long version", strings.Repeat("v", 129), good, "arm_prompt_version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := RequestCompleted{RequestID: "r", Route: "m", Deployment: "d", Arm: ArmPrimary, Status: 200,
				ErrorType: ErrorNone, MatchedContext: []string{}, ArmPromptVersion: c.version, ArmPromptHash: c.hash}
			err := r.Check()
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("Check() = %v; want %q", err, c.want)
			}
			s := SampleMalformed{ArmPromptVersion: c.version, ArmPromptHash: c.hash}
			err = s.Check()
			if got := err != nil && strings.Contains(err.Error(), "arm_prompt"); got != (c.want != "") {
				t.Errorf("sample Check() = %v; want an arm_prompt problem: %v", err, c.want != "")
			}
		})
	}
}
