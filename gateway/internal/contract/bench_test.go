package contract

import (
	"fmt"
	"strings"
	"testing"

	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/schemas/config"
)

// benchBody builds a chat body of about size bytes whose top level starts
// with head (a few members with their trailing comma, or "").
func benchBody(size int, head string) []byte {
	var b strings.Builder
	b.WriteString(`{` + head + `"model":"agent-chat","messages":[{"role":"system","content":"You are a helpful agent. Answer with one JSON action."}`)
	for i := 0; b.Len() < size-40; i++ {
		fmt.Fprintf(&b, `,{"role":"user","content":"Question %d: is it raining in the city today, \"should\" I take an umbrella?"}`, i)
	}
	b.WriteString(`],"max_tokens":256}`)
	return []byte(b.String())
}

// BenchmarkCheck measures the gateway's whole body path: Scan, Check and
// Apply into a reused buffer, as a request handler runs them.
func BenchmarkCheck(b *testing.B) {
	spec := &config.SamplingContract{Conflict: config.ConflictReject, Params: map[string]config.ParamRule{
		"temperature": pin(0.7),
		"top_p":       band(0.8, 1),
		"top_k":       bandDefault(1, 100, 40),
	}}
	bandsOnly := &config.SamplingContract{Conflict: config.ConflictReject, Params: map[string]config.ParamRule{
		"top_p": band(0.8, 1),
		"top_k": band(1, 100),
	}}
	governed := `"temperature":0.7,"top_p":"0.95","top_k":null,`
	cases := []struct {
		name string
		cfg  *config.SamplingContract
		body []byte
	}{
		// No contract: the cost of Scan and Apply alone, for comparison.
		{"1KiB/no-contract", nil, benchBody(1<<10, "")},
		{"4MiB/no-contract", nil, benchBody(4<<20, governed)},
		{"1KiB/no-governed-keys/nothing-to-inject", bandsOnly, benchBody(1<<10, "")},
		{"1KiB/no-governed-keys/two-injections", spec, benchBody(1<<10, "")},
		{"1KiB/three-governed-keys/one-injection", spec, benchBody(1<<10, governed)},
		{"64KiB/three-governed-keys/one-injection", spec, benchBody(64<<10, governed)},
		{"4MiB/three-governed-keys/one-injection", spec, benchBody(4<<20, governed)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ct := New(c.cfg)
			var (
				req   scan.Request
				edits scan.Edits
				out   Outcome
				dst   = make([]byte, 0, len(c.body)+128)
			)
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := scan.Scan(c.body, &req); err != nil {
					b.Fatal(err)
				}
				edits.Reset()
				ct.Check(c.body, &req, &edits, &out)
				if out.Rejected() {
					b.Fatalf("rejected: %s", out.First().Message())
				}
				dst = edits.Apply(dst[:0], c.body)
			}
		})
	}
}

// BenchmarkRead measures the number reader alone on typical values.
func BenchmarkRead(b *testing.B) {
	cases := []struct {
		p    scan.Param
		kind scan.Kind
		raw  string
	}{
		{scan.Temperature, scan.KindNumber, `0.7`},
		{scan.TopK, scan.KindNumber, `40`},
		{scan.TopP, scan.KindString, `"0.95"`},
		{scan.TopP, scan.KindString, `" 1_0.5e-1 "`},
		{scan.N, scan.KindString, `" 1_000.0 "`},
	}
	for _, c := range cases {
		b.Run(c.p.String()+"/"+c.raw, func(b *testing.B) {
			raw := []byte(c.raw)
			b.ReportAllocs()
			for b.Loop() {
				Read(c.p, c.kind, raw)
			}
		})
	}
}

// BenchmarkCheckOnly measures Check by itself on an already scanned body:
// its cost depends on the governed keys, not on the body's size.
func BenchmarkCheckOnly(b *testing.B) {
	ct := New(&config.SamplingContract{Conflict: config.ConflictReject, Params: map[string]config.ParamRule{
		"temperature": pin(0.7),
		"top_p":       band(0.8, 1),
		"top_k":       bandDefault(1, 100, 40),
		"n":           pin(1),
	}})
	body := benchBody(4<<20, `"temperature":0.7,"top_p":"0.95","top_k":null,`)
	var (
		req   scan.Request
		edits scan.Edits
		out   Outcome
	)
	if err := scan.Scan(body, &req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		edits.Reset()
		ct.Check(body, &req, &edits, &out)
	}
}
