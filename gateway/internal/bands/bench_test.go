package bands

import (
	"fmt"
	"strings"
	"testing"

	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/telemetry"
)

// benchBody builds a realistic chat body of about size bytes, as the scan
// benchmarks do.
func benchBody(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"agent-chat","messages":[{"role":"system","content":"You are a helpful agent. Answer with one JSON action."}`)
	for i := 0; b.Len() < size-120; i++ {
		fmt.Fprintf(&b, `,{"role":"user","content":"Question %d: what is the weather like in the city today, and should I bring an umbrella \"please\"?"}`, i)
	}
	b.WriteString(`],"max_tokens":256,"user":"user-42"}`)
	return []byte(b.String())
}

// benchCase is a scanned body and a router with learned ratios.
type benchCase struct {
	name string
	body []byte
	req  scan.Request
}

func benchCases(b *testing.B) ([]benchCase, *Router) {
	r, err := NewRouter(testConfig(), telemetry.New())
	if err != nil {
		b.Fatal(err)
	}
	for range WarmupSamples {
		sample(r.Estimator(), "dense-tokenizer", 8000, 8192, 2)
		sample(r.Estimator(), "sparse-tokenizer", 8000, 8192, 8)
	}
	var cases []benchCase
	for _, size := range []int{1 << 10, 64 << 10} {
		c := benchCase{name: fmt.Sprintf("%dKiB", size>>10), body: benchBody(size)}
		if err := scan.Scan(c.body, &c.req); err != nil {
			b.Fatal(err)
		}
		cases = append(cases, c)
	}
	return cases, r
}

func BenchmarkEstimate(b *testing.B) {
	cases, r := benchCases(b)
	e := r.Estimator()
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e.Estimate("qwen2.5-32b-v1", &c.req, c.body)
			}
		})
	}
}

func BenchmarkMatch(b *testing.B) {
	cases, r := benchCases(b)
	e, m := r.Estimator(), r.Matcher()
	var dst []byte
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s := m.Match(e.Estimate("qwen2.5-32b-v1", &c.req, c.body))
				dst = s.Header(dst[:0])
			}
		})
	}
}

func BenchmarkSelect(b *testing.B) {
	cases, r := benchCases(b)
	for _, route := range []string{"agent-chat", "tokenizers"} {
		rt, _ := r.Route(route)
		for _, c := range cases {
			b.Run(route+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if sel := rt.Select(&c.req, c.body); sel.Code != "" {
						b.Fatal(sel.Detail)
					}
				}
			})
		}
	}
}

// TestHotPathAllocs pins the benchmarks' 0 allocs/op, so a regression fails
// the ordinary test run.
func TestHotPathAllocs(t *testing.T) {
	r, err := NewRouter(testConfig(), telemetry.New())
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := r.Route("tokenizers")
	dst := make([]byte, 0, 64)
	for _, size := range []int{1 << 10, 64 << 10} {
		body := benchBody(size)
		var req scan.Request
		if err := scan.Scan(body, &req); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			fn   func()
		}{
			{"Estimate", func() { r.Estimator().Estimate("qwen2.5-32b-v1", &req, body) }},
			{"Match+Header", func() { dst = r.Matcher().Match(int64(size)).Header(dst[:0]) }},
			{"Route.Select", func() { rt.Select(&req, body) }},
			{"Router.Select", func() { r.Select("agent-chat", &req, body) }},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/%dKiB", tt.name, size>>10), func(t *testing.T) {
				if got := testing.AllocsPerRun(100, tt.fn); got != 0 {
					t.Errorf("allocs per run = %v; want 0", got)
				}
			})
		}
	}
}
