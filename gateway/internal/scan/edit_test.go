package scan

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

func TestApplyReplacingLeavesEditsAsRecorded(t *testing.T) {
	body := []byte(`{"model":"a","top_p":null}`)
	var r Request
	if err := Scan(body, &r); err != nil {
		t.Fatal(err)
	}
	var e Edits
	e.InsertMember(&r, "n", 1)
	e.ReplaceNumber(r.Params[TopP].Value.Start, r.Params[TopP].Value.End, 0.5)
	m := r.Model.Value
	for _, c := range []struct{ model, want string }{
		{`"gray"`, `{"model":"gray","top_p":0.5,"n":1}`},
		{`"primary"`, `{"model":"primary","top_p":0.5,"n":1}`},
	} {
		if got := string(e.ApplyReplacing(nil, body, m.Start, m.End, c.model)); got != c.want {
			t.Errorf("ApplyReplacing(%s) = %s; want %s", c.model, got, c.want)
		}
	}
	if e.Len() != 2 {
		t.Errorf("Len = %d after ApplyReplacing; want 2", e.Len())
	}
}

// TestMapWith: a span of the body maps onto the same bytes of the body
// ApplyWith writes, whatever the edits before, inside and after it — the
// messages value as the arm's engine sees it (SPEC §6.7 prefix).
func TestMapWith(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"top_p":0.5}`)
	open := bytes.Index(body, []byte(`[{"role"`))
	end := bytes.Index(body, []byte(`],"top_p"`)) + 1
	sys := bytes.Index(body, []byte(`"be brief"`))
	topP := bytes.Index(body, []byte(`0.5}`))
	cases := []struct {
		name   string
		client func(e *Edits)
		arm    func(e *Edits)
		skip   uint16
		want   string
	}{
		{"no edits", func(*Edits) {}, func(*Edits) {}, 0,
			`[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`},
		{"model before, param after", func(e *Edits) {
			e.Replace(topP, topP+3, "0.95")
			e.MarkParam(TopP)
		}, func(e *Edits) { e.Replace(9, 12, `"qwen2.5-32b-instruct"`) }, 0,
			`[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`},
		{"the arm's prompt inside", func(*Edits) {}, func(e *Edits) {
			e.Replace(sys, sys+len(`"be brief"`), `"You are agent v1.3."`)
			e.Replace(9, 12, `"x"`)
		}, 0, `[{"role":"system","content":"You are agent v1.3."},{"role":"user","content":"hi"}]`},
		{"an insertion at the open bracket", func(*Edits) {}, func(e *Edits) {
			e.Replace(open+1, open+1, `{"role":"system","content":"p"},`)
		}, 0, `[{"role":"system","content":"p"},{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`},
		{"an insertion right after the value", func(e *Edits) {
			e.Replace(end, end, `,"top_k":20`)
		}, func(*Edits) {}, 0, `[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`},
		{"a skipped client edit before", func(e *Edits) {
			e.Replace(9, 12, `"a-much-longer-model"`)
			e.MarkParam(Temperature)
		}, func(*Edits) {}, 1 << Temperature, `[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var client, arm Edits
			c.client(&client)
			c.arm(&arm)
			out := client.ApplyWith(nil, body, &arm, c.skip)
			s, e := client.MapWith(&arm, c.skip, open, false), client.MapWith(&arm, c.skip, end, true)
			if s < 0 || e > len(out) || s > e || string(out[s:e]) != c.want {
				t.Errorf("mapped [%d:%d] of %s; want %s", s, e, out, c.want)
			}
		})
	}
}

// TestAppendNumberShortest: an injected number is written in the shortest
// form that reads back to the same value (SPEC §4): no exponent sign or
// leading zero strconv would add (1e-7, not 1e-07), whole numbers without
// a fraction.
func TestAppendNumberShortest(t *testing.T) {
	for v, want := range map[float64]string{
		0.0000001: "1e-7", -0.00001: "-1e-5", 1e21: "1e21", -1.5e300: "-1.5e300", 5e-324: "5e-324", 0.001: "1e-3", 0.01: "0.01",
		0.7: "0.7", 40: "40", -3: "-3", 1e15: "1e15", 1.25e-10: "1.25e-10", 123456789012345680000: "123456789012345680000",
		0.0001234: "1.234e-4", 1.5e16: "1.5e16", 0.01234: "0.01234",
	} {
		got := string(AppendNumber([]byte("x"), v))
		if got != "x"+want {
			t.Errorf("AppendNumber(%v) = %s; want %s", v, got[1:], want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		v := math.Float64frombits(rng.Uint64())
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		b := AppendNumber(nil, v)
		back, err := strconv.ParseFloat(string(b), 64)
		if err != nil || back != v || bytes.Contains(b, []byte("e+")) || bytes.Contains(b, []byte("e0")) || bytes.Contains(b, []byte("e-0")) {
			t.Fatalf("AppendNumber(%v) = %s (reads back %v, %v)", v, b, back, err)
		}
		for _, form := range []byte{'g', 'e', 'f'} {
			if g := strconv.FormatFloat(v, form, -1, 64); len(b) > len(g) {
				t.Fatalf("AppendNumber(%v) = %s, longer than %s", v, b, g)
			}
		}
	}
}
