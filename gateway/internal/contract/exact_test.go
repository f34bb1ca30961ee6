package contract

import (
	"testing"

	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/schemas/config"
)

// top_k and n are exact integers at any size the config holds (SPEC §4):
// a pin past 2^53 is injected digit for digit, compared exactly, and
// printed exactly in a violation's message.
func TestIntegerParamsExact(t *testing.T) {
	doc := "sampling_contract:\n  params:\n    top_k: 9007199254740993\n    n: {min: 1, max: 4, default: 3}\n"
	cfg, _, err := config.Parse([]byte(doc), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := New(cfg.SamplingContract)
	cases := []struct {
		name, body, forwarded string
		rejected              bool
		message               string // the violation's message, when rejected
	}{
		{"injected", `{"model":"m"}`, `{"model":"m","top_k":9007199254740993,"n":3}`, false, ""},
		{"null replaced", `{"model":"m","top_k":null,"n":null}`, `{"model":"m","top_k":9007199254740993,"n":3}`, false, ""},
		{"exact value admitted", `{"model":"m","top_k":9007199254740993,"n":2}`, `{"model":"m","top_k":9007199254740993,"n":2}`, false, ""},
		{"the float's neighbour refused", `{"model":"m","top_k":9007199254740992}`, "", true,
			"top_k violates this deployment's sampling contract: got 9007199254740992, expected 9007199254740993 (or omit the field)"},
		{"n outside its band", `{"model":"m","n":5}`, "", true,
			"n violates this deployment's sampling contract: got 5, expected a value in [1, 4] (or omit the field)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var req scan.Request
			var edits scan.Edits
			var out Outcome
			body := []byte(tc.body)
			if err := scan.Scan(body, &req); err != nil {
				t.Fatal(err)
			}
			c.Check(body, &req, &edits, &out)
			if out.Rejected() != tc.rejected {
				t.Fatalf("rejected = %v; want %v", out.Rejected(), tc.rejected)
			}
			if tc.rejected {
				if got := out.First().Message(); got != tc.message {
					t.Errorf("message %q; want %q", got, tc.message)
				}
				return
			}
			if got := string(edits.Apply(nil, body)); got != tc.forwarded {
				t.Errorf("forwarded %s; want %s", got, tc.forwarded)
			}
		})
	}
}
