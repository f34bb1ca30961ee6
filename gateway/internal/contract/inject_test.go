package contract

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/schemas/config"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/inject")

// goldenContract is the contract of the injection golden tests: every kind
// of rule, with something to inject for four parameters.
var goldenContract = &config.SamplingContract{
	Conflict: config.ConflictReject,
	Params: map[string]config.ParamRule{
		"temperature": pin(0.7),
		"top_p":       band(0.8, 1),
		"top_k":       bandDefault(1, 100, 40),
		"min_p":       bandDefault(0, 0.2, 0.05),
		"n":           pin(1),
	},
}

// TestInjectGolden checks forwarded bodies byte for byte against
// testdata/inject/*.golden: every byte outside the injected values is the
// client's. Run with -update to rewrite the golden files after a change,
// and review the diff.
func TestInjectGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/inject/*.json")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs under testdata/inject (err %v)", err)
	}
	c := New(goldenContract)
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var (
				req   scan.Request
				edits scan.Edits
				out   Outcome
			)
			if err := scan.Scan(body, &req); err != nil {
				t.Fatalf("Scan = %v", err)
			}
			c.Check(body, &req, &edits, &out)
			if out.Rejected() {
				t.Fatalf("violations %q; the golden inputs must pass the contract", violated(&out))
			}
			got := edits.Apply(nil, body)
			golden := strings.TrimSuffix(in, ".json") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("forwarded body differs from %s\ngot  %s\nwant %s", golden, got, want)
			}
			if msg := checkReadBack(c, body, &req, got); msg != "" {
				t.Error(msg)
			}
		})
	}
}

// checkReadBack decodes the forwarded body with encoding/json and checks
// every governed key: a key that was absent or null reads back as the
// injected value (or stays as it was when there is nothing to inject), any
// other key keeps the client's bytes. It returns "" when all is well.
func checkReadBack(c *Contract, body []byte, req *scan.Request, forwarded []byte) string {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(forwarded, &top); err != nil {
		return "forwarded body is not a JSON object: " + err.Error() + "\n" + string(forwarded)
	}
	for p := range scan.NumParams {
		r := c.rules[p]
		m := req.Params[p]
		got, present := top[p.String()]
		orig := string(body[m.Value.Start:m.Value.End])
		switch {
		case r.governed && r.inject && (m.Kind == scan.KindAbsent || m.Kind == scan.KindNull):
			f, err := strconv.ParseFloat(string(got), 64)
			if !present || err != nil || f != r.injectWith {
				return p.String() + " reads back as " + string(got) + "; want " + strconv.FormatFloat(r.injectWith, 'g', -1, 64)
			}
		case m.Kind == scan.KindAbsent:
			if present {
				return p.String() + " appeared as " + string(got) + "; want it absent"
			}
		default:
			if !present || compactJSON(got) != compactJSON([]byte(orig)) {
				return p.String() + " reads back as " + string(got) + "; want the client's " + orig
			}
		}
	}
	return ""
}

// compactJSON drops insignificant whitespace, so that values compare as
// written (number spelling and escapes kept) after a round trip through
// json.RawMessage.
func compactJSON(b []byte) string {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return "invalid: " + string(b)
	}
	return out.String()
}
