package contract

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/schemas/config"
)

func pin(v float64) config.ParamRule { return config.ParamRule{Pinned: true, Value: v} }

func band(lo, hi float64) config.ParamRule { return config.ParamRule{Min: lo, Max: hi} }

func bandDefault(lo, hi, d float64) config.ParamRule {
	return config.ParamRule{Min: lo, Max: hi, HasDefault: true, Default: d}
}

// run scans body, checks it against a contract of params under policy and
// returns the forwarded body and the outcome.
func run(t testing.TB, policy string, params map[string]config.ParamRule, body string) (string, *Outcome) {
	t.Helper()
	c := New(&config.SamplingContract{Conflict: policy, Params: params})
	var req scan.Request
	if err := scan.Scan([]byte(body), &req); err != nil {
		t.Fatalf("Scan(%s) = %v", body, err)
	}
	var edits scan.Edits
	out := new(Outcome)
	c.Check([]byte(body), &req, &edits, out)
	return string(edits.Apply(nil, []byte(body))), out
}

// violated lists the violated parameters in body order.
func violated(o *Outcome) string {
	names := make([]string, 0, o.N)
	for _, v := range o.List() {
		names = append(names, v.Param.String())
	}
	return strings.Join(names, ",")
}

// TestCheck runs every case under both policies. Under reject the request
// has the listed violations (in body order) and, when it has none, is
// forwarded as want; under allow it never has violations and is always
// forwarded as want: client values untouched, absent and null keys
// injected.
func TestCheck(t *testing.T) {
	spec := map[string]config.ParamRule{ // the example of SPEC §2
		"temperature": pin(0.7),
		"top_p":       band(0.8, 1.0),
		"top_k":       bandDefault(1, 100, 40),
	}
	floats := map[string]config.ParamRule{
		"temperature":       pin(1),
		"min_p":             bandDefault(0, 0.2, 0.05),
		"frequency_penalty": band(-2, 2),
	}
	bigInts := map[string]config.ParamRule{
		"top_k": pin(9007199254740992), // 2^53; 2^53+1 reads equal as a float64
		"n":     band(1, 1e19),         // past int64: every int64 ≥ 1 is inside
	}
	cases := []struct {
		name     string
		params   map[string]config.ParamRule
		body     string
		violated string // under reject, in body order
		want     string // forwarded body
	}{
		{"absent keys injected in parameter order", spec,
			`{"model":"m"}`, "",
			`{"model":"m","temperature":0.7,"top_k":40}`},
		{"empty object", spec,
			`{}`, "",
			`{"temperature":0.7,"top_k":40}`},
		{"null replaced in place", spec,
			`{"temperature":null,"model":"m","top_k" : null }`, "",
			`{"temperature":0.7,"model":"m","top_k" : 40 }`},
		{"band without default stays absent", map[string]config.ParamRule{"top_p": band(0.8, 1)},
			`{"model":"m","top_p":null}`, "",
			`{"model":"m","top_p":null}`},
		{"values inside the contract forwarded as written", spec,
			`{"top_k":4.0E1,"temperature":7E-1,"top_p":1.0}`, "",
			`{"top_k":4.0E1,"temperature":7E-1,"top_p":1.0}`},
		{"band edges are inclusive", spec,
			`{"top_p":0.8,"top_k":100,"temperature":0.7}`, "",
			`{"top_p":0.8,"top_k":100,"temperature":0.7}`},
		{"pinned value differs", spec,
			`{"temperature":0.5}`, "temperature",
			`{"temperature":0.5,"top_k":40}`},
		{"outside band", spec,
			`{"top_p":0.5,"top_k":101}`, "top_p,top_k",
			`{"top_p":0.5,"top_k":101,"temperature":0.7}`},
		{"NaN string never matches", spec,
			`{"top_p":"NaN","temperature":"nan"}`, "top_p,temperature",
			`{"top_p":"NaN","temperature":"nan","top_k":40}`},
		{"infinities", floats,
			`{"frequency_penalty":"-inf","temperature":1e999}`, "frequency_penalty,temperature",
			`{"frequency_penalty":"-inf","temperature":1e999,"min_p":0.05}`},
		{"booleans are 1 and 0", floats,
			`{"temperature":true,"min_p":false,"frequency_penalty":true}`, "",
			`{"temperature":true,"min_p":false,"frequency_penalty":true}`},
		{"boolean outside", spec,
			`{"top_p":false,"top_k":true}`, "top_p",
			`{"top_p":false,"top_k":true,"temperature":0.7}`},
		{"numeric strings as the engine reads them", spec,
			`{"temperature":" 0.7\n","top_p":"9_5e-0_2","top_k":" 4_0 "}`, "",
			`{"temperature":" 0.7\n","top_p":"9_5e-0_2","top_k":" 4_0 "}`},
		{"numeric strings the engine refuses", spec,
			`{"temperature":"0x1p-1","top_p":"1_","top_k":"1e1"}`, "temperature,top_p,top_k",
			`{"temperature":"0x1p-1","top_p":"1_","top_k":"1e1"}`},
		{"arrays and objects", spec,
			`{"temperature":[0.7],"top_k":{"value":40}}`, "temperature,top_k",
			`{"temperature":[0.7],"top_k":{"value":40}}`},
		{"last duplicate wins, violating", spec,
			`{"temperature":0.7,"top_p":0.9,"temperature":0.2}`, "temperature",
			`{"temperature":0.7,"top_p":0.9,"temperature":0.2,"top_k":40}`},
		{"last duplicate wins, valid", spec,
			`{"temperature":0.2,"top_k":0,"temperature":0.7,"top_k":null}`, "",
			`{"temperature":0.2,"top_k":0,"temperature":0.7,"top_k":40}`},
		{"several violations in body order", spec,
			`{"top_k":0,"model":"m","top_p":2,"temperature":"warm"}`, "top_k,top_p,temperature",
			`{"top_k":0,"model":"m","top_p":2,"temperature":"warm"}`},
		{"nested governed names are not governed", spec,
			`{"metadata":{"temperature":9,"top_k":null},"messages":[{"top_p":0}]}`, "",
			`{"metadata":{"temperature":9,"top_k":null},"messages":[{"top_p":0}],"temperature":0.7,"top_k":40}`},
		{"escaped key spelling is governed", spec,
			`{"\u0074emperature":0.5,"top\u005fk":null}`, "temperature",
			`{"\u0074emperature":0.5,"top\u005fk":40}`},
		{"int pin compared exactly, equal", bigInts,
			`{"top_k":9007199254740992,"n":9223372036854775807}`, "",
			`{"top_k":9007199254740992,"n":9223372036854775807}`},
		{"int pin compared exactly, one more", bigInts,
			`{"top_k":9007199254740993,"n":"9_223_372_036_854_775_807"}`, "top_k",
			`{"top_k":9007199254740993,"n":"9_223_372_036_854_775_807"}`},
		{"int past int64", bigInts,
			`{"n":9223372036854775808,"top_k":"9007199254740992.00"}`, "n",
			`{"n":9223372036854775808,"top_k":"9007199254740992.00"}`},
		{"int with fraction", spec,
			`{"top_k":40.5,"temperature":0.7}`, "top_k",
			`{"top_k":40.5,"temperature":0.7}`},
		{"governed key not in the contract is ignored", map[string]config.ParamRule{"n": pin(1)},
			`{"temperature":"x","n":1.0}`, "",
			`{"temperature":"x","n":1.0}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, out := run(t, config.ConflictReject, c.params, c.body)
			if v := violated(out); v != c.violated {
				t.Errorf("reject: violations of %s = %q; want %q", c.body, v, c.violated)
			}
			if out.Rejected() != (c.violated != "") {
				t.Errorf("reject: Rejected() = %v; want %v", out.Rejected(), c.violated != "")
			}
			if !out.Rejected() && got != c.want {
				t.Errorf("reject: forwarded %s\ngot  %s\nwant %s", c.body, got, c.want)
			}
			got, out = run(t, config.ConflictAllow, c.params, c.body)
			if out.Rejected() {
				t.Errorf("allow: violations of %s = %q; want none", c.body, violated(out))
			}
			if got != c.want {
				t.Errorf("allow: forwarded %s\ngot  %s\nwant %s", c.body, got, c.want)
			}
		})
	}
}

func TestViolationMessage(t *testing.T) {
	spec := map[string]config.ParamRule{
		"temperature": pin(0.7),
		"top_p":       band(0.8, 1.0),
		"top_k":       bandDefault(-1, 100, 40),
		"n":           pin(1),
	}
	long := `"` + strings.Repeat("é", 30) + `"`
	cases := []struct {
		name string
		body string
		want string
	}{
		{"pinned", `{"temperature":0.5}`,
			`temperature violates this deployment's sampling contract: got 0.5, expected 0.7 (or omit the field)`},
		{"band", `{"top_p":0.5}`,
			`top_p violates this deployment's sampling contract: got 0.5, expected a value in [0.8, 1] (or omit the field)`},
		{"as written", `{"top_p":5E-1}`,
			`top_p violates this deployment's sampling contract: got 5E-1, expected a value in [0.8, 1] (or omit the field)`},
		{"string keeps quotes", `{"top_k":"forty"}`,
			`top_k violates this deployment's sampling contract: got "forty", expected a value in [-1, 100] (or omit the field)`},
		{"int pin", `{"n":2}`,
			`n violates this deployment's sampling contract: got 2, expected 1 (or omit the field)`},
		{"boolean", `{"n":false}`,
			`n violates this deployment's sampling contract: got false, expected 1 (or omit the field)`},
		{"long value cut at a character", `{"top_p":` + long + `}`,
			`top_p violates this deployment's sampling contract: got "` + strings.Repeat("é", 18) + `…, expected a value in [0.8, 1] (or omit the field)`},
		{"long array cut", `{"top_p":[0.8000000000, 0.9000000000, 1.0000000000, 1]}`,
			`top_p violates this deployment's sampling contract: got [0.8000000000, 0.9000000000, 1.000000…, expected a value in [0.8, 1] (or omit the field)`},
		{"exactly 40 bytes kept whole", `{"top_p":"0.000000000000000000000000000000000005"}`,
			`top_p violates this deployment's sampling contract: got "0.000000000000000000000000000000000005", expected a value in [0.8, 1] (or omit the field)`},
		{"first in body order", `{"model":"m","n":3,"temperature":2}`,
			`n violates this deployment's sampling contract: got 3, expected 1 (or omit the field)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, out := run(t, config.ConflictReject, spec, c.body)
			v := out.First()
			if v == nil {
				t.Fatalf("First() = nil for %s; want a violation", c.body)
			}
			if got := v.Message(); got != c.want {
				t.Errorf("Message() =\n%s\nwant\n%s", got, c.want)
			}
			if len(v.Got()) > maxGot {
				t.Errorf("Got() = %q, %d bytes; want at most %d", v.Got(), len(v.Got()), maxGot)
			}
		})
	}
}

func TestNilContract(t *testing.T) {
	var c *Contract
	if c != New(nil) {
		t.Fatalf("New(nil) = %p; want nil", New(nil))
	}
	body := []byte(`{"temperature":"x"}`)
	var req scan.Request
	if err := scan.Scan(body, &req); err != nil {
		t.Fatal(err)
	}
	var edits scan.Edits
	out := Outcome{N: 3}
	c.Check(body, &req, &edits, &out)
	if out.N != 0 || edits.Len() != 0 || c.Reject() {
		t.Errorf("nil contract: N %d, edits %d, Reject %v; want 0, 0, false", out.N, edits.Len(), c.Reject())
	}
}

func TestCountRejections(t *testing.T) {
	set := metrics.NewSet()
	text := func() string {
		var b bytes.Buffer
		set.WritePrometheus(&b)
		return b.String()
	}
	series := func(p string) string {
		return fmt.Sprintf(`graygate_sampling_contract_rejections_total{param=%q}`, p)
	}
	if strings.Contains(text(), "graygate_sampling_contract_rejections_total") {
		t.Fatalf("a rejection series exists before any rejection:\n%s", text())
	}
	spec := map[string]config.ParamRule{"temperature": pin(0.7), "top_p": band(0.8, 1), "n": pin(1)}
	_, out := run(t, config.ConflictReject, spec, `{"top_p":0,"temperature":1,"n":1}`)
	out.Count(set)
	_, out = run(t, config.ConflictReject, spec, `{"top_p":0}`)
	out.Count(set)
	got := text()
	for _, want := range []string{series("top_p") + " 2", series("temperature") + " 1"} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, series("n")) {
		t.Errorf("metrics have a series for n, which was never violated:\n%s", got)
	}
}

// TestCheckDoesNotAllocate covers the common request: no governed key,
// with and without something to inject, buffers reused across requests.
func TestCheckDoesNotAllocate(t *testing.T) {
	cases := []struct {
		name   string
		params map[string]config.ParamRule
		body   string
	}{
		{"nothing to inject", map[string]config.ParamRule{"top_p": band(0.8, 1)},
			`{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"injections", map[string]config.ParamRule{"temperature": pin(0.7), "top_k": bandDefault(1, 100, 40)},
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"top_k":null}`},
		{"governed keys inside the contract", map[string]config.ParamRule{"temperature": pin(0.7), "top_k": bandDefault(1, 100, 40)},
			`{"model":"m","temperature":"0.7","top_k":40.0}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ct := New(&config.SamplingContract{Conflict: config.ConflictReject, Params: c.params})
			body := []byte(c.body)
			var (
				req   scan.Request
				edits scan.Edits
				out   Outcome
				dst   []byte
			)
			once := func() {
				if err := scan.Scan(body, &req); err != nil {
					t.Fatal(err)
				}
				edits.Reset()
				ct.Check(body, &req, &edits, &out)
				dst = edits.Apply(dst[:0], body)
			}
			once()
			if n := testing.AllocsPerRun(100, once); n != 0 {
				t.Errorf("Scan+Check+Apply allocates %v times; want 0", n)
			}
		})
	}
}
