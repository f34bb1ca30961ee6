package console

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

// highlighted returns the lines of the pretty-printed payload that carry
// an error mark, trimmed.
func highlighted(p Payload) []string {
	var out []string
	for _, l := range p.Lines {
		if len(l.Errs) > 0 {
			s := l.Key
			if s != "" {
				s += ": "
			}
			out = append(out, s+l.Value)
		}
	}
	return out
}

func TestHighlightFields(t *testing.T) {
	chat := `{"id":"x","choices":[{"index":0,"message":{"role":"assistant",` +
		`"content":"{\"action\":\"search\",\"args\":{\"limit\":\"ten\",\"tags\":[\"a\",7]}}"}}]}`
	two := `{"choices":[{"message":{"content":"{\"action\":1}"}},{"message":{"content":"{\"action\":2}"}}]}`
	body := `{"action":"go","args":{"limit":"ten"},"items":[{"name":1}]}`
	for _, tc := range []struct {
		name, payload string
		errs          []events.ValidationError
		want          []string
		found         []bool
	}{
		{"content: nested field", chat, []events.ValidationError{{Field: "args.limit", Description: "Invalid type. Expected: integer, given: string"}},
			[]string{`"limit": "ten"`}, []bool{true}},
		{"content: (root) prefix", chat, []events.ValidationError{{Field: "(root).action", Description: "must be one of"}},
			[]string{`"action": "search"`}, []bool{true}},
		{"content: array index", chat, []events.ValidationError{{Field: "args.tags.1", Description: "Invalid type"}},
			[]string{`7`}, []bool{true}},
		{"content: required marks the object", chat, []events.ValidationError{{Field: "(root)", Description: "reason is required"}},
			[]string{`{`}, []bool{true}},
		{"content: the gateway's content name", chat, []events.ValidationError{{Field: "choices[0].message.content", Description: "content is not valid JSON"}},
			[]string{`"content": `}, []bool{true}},
		{"second content by its description prefix", two, []events.ValidationError{{Field: "action", Description: "choices[1].message.content: Invalid type"}},
			[]string{`"action": 2`}, []bool{true}},
		{"body target", body, []events.ValidationError{{Field: "items.0.name", Description: "Invalid type"}, {Field: "args", Description: "x"}},
			[]string{`"args": {`, `"name": 1`}, []bool{true, true}},
		{"missing path marks the deepest that exists", body, []events.ValidationError{{Field: "args.limit.deep", Description: "x"}},
			[]string{`"limit": "ten"`}, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := preparePayload(tc.payload, tc.errs)
			if p.Lines == nil {
				t.Fatalf("preparePayload: not shown as JSON: %s", p.Note)
			}
			got := highlighted(p)
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("highlighted lines = %q; want %q", got, tc.want)
			}
			for i, f := range tc.found {
				if p.Found[i] != f {
					t.Errorf("Found[%d] = %v; want %v", i, p.Found[i], f)
				}
			}
		})
	}
}

func TestHighlightRequiredNote(t *testing.T) {
	p := preparePayload(`{"args":{}}`, []events.ValidationError{{Field: "(root)", Description: "action is required"}})
	if p.Lines[0].Note != "missing: action" || len(p.Lines[0].Errs) != 1 {
		t.Errorf("root line = %+v; want the error and note %q", p.Lines[0], "missing: action")
	}
}

func TestPayloadNotJSON(t *testing.T) {
	for _, s := range []string{`{"a":`, `not json`, `{"a":1} trailing`, strings.Repeat("[", maxDepth+5)} {
		p := preparePayload(s, []events.ValidationError{{Field: "a", Description: "x"}})
		if p.Lines != nil || p.Text != s {
			t.Errorf("preparePayload(%q) = %d lines; want the text as is", s, len(p.Lines))
		}
	}
	big := `"` + strings.Repeat("x", maxPrettyBytes) + `"`
	if p := preparePayload(big, nil); p.Lines != nil || len(p.Text) != maxPrettyBytes {
		t.Errorf("a payload over the cap: %d lines, %d bytes of text; want text cut to %d", len(p.Lines), len(p.Text), maxPrettyBytes)
	}
}

func TestPrettyKeepsOrderAndValues(t *testing.T) {
	p := preparePayload(`{"z":1,"a":[true,null,"s<&>"],"m":{}}`, nil)
	var b strings.Builder
	for _, l := range p.Lines {
		b.WriteString(l.Indent + l.Key)
		if l.Key != "" {
			b.WriteString(": ")
		}
		b.WriteString(l.Value)
		if l.Comma {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	want := "{\n  \"z\": 1,\n  \"a\": [\n    true,\n    null,\n    \"s<&>\"\n  ],\n  \"m\": {}\n}\n"
	if b.String() != want {
		t.Errorf("pretty =\n%s\nwant\n%s", b.String(), want)
	}
}

func points(n int, start time.Time) []Point {
	out := make([]Point, n)
	for i := range out {
		out[i] = Point{T: start.Add(time.Duration(i) * time.Second), V: float64(i), N: 1}
	}
	return out
}

func TestDownsample(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := Downsample(points(2000, start), 2000); len(got) != 2000 {
		t.Errorf("Downsample(2000 points, 2000) = %d points; want them unchanged", len(got))
	}
	for _, n := range []int{2001, 2500, 4001, 100000} {
		in := points(n, start)
		in[3].Fail = true
		got := Downsample(in, MaxPoints)
		if len(got) > MaxPoints {
			t.Fatalf("Downsample(%d) = %d points; want at most %d", n, len(got), MaxPoints)
		}
		// The newest half is kept as it was.
		for i := 1; i <= MaxPoints/2; i++ {
			if got[len(got)-i] != in[len(in)-i] {
				t.Fatalf("Downsample(%d): newest point %d changed: %+v; want %+v", n, i, got[len(got)-i], in[len(in)-i])
			}
		}
		// Every point counts once, values are weighted means, times increase.
		total, sum := 0, 0.0
		for i, p := range got {
			total += p.N
			sum += p.V * float64(p.N)
			if i > 0 && !p.T.After(got[i-1].T) {
				t.Fatalf("Downsample(%d): time %v after %v", n, p.T, got[i-1].T)
			}
			if p.N > 1 && (p.Lo > p.V || p.Hi < p.V) {
				t.Fatalf("Downsample(%d): merged point %+v has its mean outside [Lo, Hi]", n, p)
			}
		}
		wantSum := float64(n-1) * float64(n) / 2
		if total != n || math.Abs(sum-wantSum) > 1e-6*wantSum {
			t.Errorf("Downsample(%d): N sums to %d, values to %v; want %d and %v", n, total, sum, n, wantSum)
		}
		// The point that holds the failing one (the first at or after it).
		holder := 0
		for got[holder].T.Before(in[3].T) {
			holder++
		}
		if !got[holder].Fail {
			t.Errorf("Downsample(%d): the failing point was merged away", n)
		}
		if !got[len(got)-1].T.Equal(in[n-1].T) {
			t.Errorf("Downsample(%d): last time %v; want %v", n, got[len(got)-1].T, in[n-1].T)
		}
	}
}

func TestChartLayoutCapsPoints(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ch := Chart{From: start, To: start.Add(10000 * time.Second),
		Series: []Series{{Name: "a", Class: "s-est", Points: points(10000, start), Dots: true}, {Name: "b", Class: "s-thr", Points: points(3, start)}}}
	l := ch.layout()
	if l.Points != MaxPoints+3 || len(l.Dots) != MaxPoints {
		t.Errorf("layout: %d points, %d dots; want %d and %d", l.Points, len(l.Dots), MaxPoints+3, MaxPoints)
	}
	for _, d := range l.Dots {
		if d.X < l.X0 || d.X > l.X1 || d.Y < l.Y0 || d.Y > l.Y1 {
			t.Fatalf("dot %+v outside the plot [%v,%v]x[%v,%v]", d, l.X0, l.X1, l.Y0, l.Y1)
		}
	}
}

// A missing property (required) or an extra one (additionalProperties)
// marks the object that holds it, with a note naming the property —
// whether the error's field names that object (gojsonschema) or the
// property itself — never the document's root when the holder is deeper.
func TestHighlightPropertyHolder(t *testing.T) {
	body := `{"action":"go","args":{"limit":"ten","extra":1},"items":[{"name":"a"}]}`
	chat := `{"choices":[{"message":{"content":"{\"action\":\"go\",\"args\":{\"limit\":1,\"extra\":true}}"}}]}`
	for _, tc := range []struct {
		name, payload string
		err           events.ValidationError
		line, note    string // the marked line (key: value) and its note
	}{
		{"required, field names the holder", body, events.ValidationError{Field: "args", Description: "query is required"},
			`"args": {`, "missing: query"},
		{"required, field names the missing property", body, events.ValidationError{Field: "args.query", Description: "query is required"},
			`"args": {`, "missing: query"},
		{"required, (root) prefixed property path", body, events.ValidationError{Field: "(root).args.query", Description: "query is required"},
			`"args": {`, "missing: query"},
		{"required in an array item", body, events.ValidationError{Field: "items.0.id", Description: "id is required"},
			`{`, "missing: id"},
		{"required at the root", body, events.ValidationError{Field: "(root)", Description: "reason is required"},
			`{`, "missing: reason"},
		{"additional, field names the holder", body, events.ValidationError{Field: "args", Description: "Additional property extra is not allowed"},
			`"args": {`, "not allowed: extra"},
		{"additional, field names the extra property", body, events.ValidationError{Field: "args.extra", Description: "Additional property extra is not allowed"},
			`"args": {`, "not allowed: extra"},
		{"content: required, field names the missing property", chat, events.ValidationError{Field: "args.query", Description: "query is required"},
			`"args": {`, "missing: query"},
		{"content: additional in a nested object", chat, events.ValidationError{Field: "args", Description: "Additional property extra is not allowed"},
			`"args": {`, "not allowed: extra"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := preparePayload(tc.payload, []events.ValidationError{tc.err})
			var marked []Line
			for _, l := range p.Lines {
				if len(l.Errs) > 0 {
					marked = append(marked, l)
				}
			}
			if len(marked) != 1 {
				t.Fatalf("%d lines marked (%q); want one", len(marked), highlighted(p))
			}
			got := marked[0].Value
			if marked[0].Key != "" {
				got = marked[0].Key + ": " + got
			}
			if got != tc.line || marked[0].Note != tc.note {
				t.Errorf("marked %q with note %q; want %q with note %q", got, marked[0].Note, tc.line, tc.note)
			}
			if !p.Found[0] {
				t.Errorf("Found[0] = false; want the property's holder found")
			}
		})
	}
}
