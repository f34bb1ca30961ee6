package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/graygate/graygate/schemas/events"
)

// checkAppendJSON fails t unless r.AppendJSON, appending to a non-empty
// buffer, writes exactly json.Marshal(r), or fails when json.Marshal does
// and leaves the buffer as it was.
func checkAppendJSON(t *testing.T, r *events.RequestCompleted) {
	t.Helper()
	want, wantErr := json.Marshal(r)
	prefix := []byte("prefix")
	got, err := r.AppendJSON(prefix[:len(prefix):len(prefix)])
	switch {
	case wantErr != nil && err == nil:
		t.Fatalf("AppendJSON(%#v) = %s, nil; want an error like json.Marshal's %v", r, got, wantErr)
	case wantErr == nil && err != nil:
		t.Fatalf("AppendJSON(%#v) error = %v; want %s", r, err, want)
	case err != nil:
		if !errors.Is(err, events.ErrInvalidData) {
			t.Errorf("AppendJSON(%#v) error = %v; want it to wrap ErrInvalidData", r, err)
		}
		if string(got) != "prefix" {
			t.Errorf("AppendJSON(%#v) failed and returned %q; want the buffer unchanged (%q)", r, got, "prefix")
		}
	case !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], want):
		t.Fatalf("AppendJSON(%#v) =\n%s\nwant (prefix + json.Marshal)\nprefix%s", r, got, want)
	}
}

func yes() *bool { v := true; return &v }
func no() *bool  { v := false; return &v }

// completed is a valid fallback event, the base of the edge cases.
func completed() *events.RequestCompleted {
	return &events.RequestCompleted{
		RequestID: "req-1", Route: "agent-chat", Deployment: "qwen-32k", Arm: events.ArmFallback,
		UpstreamModel: "qwen2.5-32b-v1", Status: 200, ErrorType: events.ErrorNone, Stream: true,
		EstimatedTokens: 1234, MatchedContext: []string{"short_context", "tools"}, PromptTokens: 1200,
		CompletionTokens: 87, UsageEstimated: true, TTFTMillis: 80.125, LatencyMillis: 812.5, ToolCalls: 1,
		ToolSteps: 2, RepeatedToolCall: true, SchemaValid: yes(), FallbackReason: events.ReasonTimeout,
		Gray: &events.GrayAttempt{Status: 504, ErrorType: events.ErrorUpstreamTimeout, Reason: events.ReasonTimeout,
			TTFTMillis: 0, LatencyMillis: 30000, PromptTokens: 5, CompletionTokens: 6, SchemaValid: no(),
			ArmPromptVersion: "v2", ArmPromptHash: strings.Repeat("ab", 32), Replica: "10.0.0.12:8000"},
		ArmPromptVersion: "v1", ArmPromptHash: strings.Repeat("0f", 32),
		Replica: "[fd00::11]:8000", CachedTokens: ptr(int64(1024)),
	}
}

// edgeStrings are strings on every branch of encoding/json's escaping.
var edgeStrings = []string{
	"", "a", "plain ascii 0123456789", `quote " and backslash \`, "<script>&amp;</script>",
	"\x00\x01\x07\x08\x09\x0a\x0b\x0c\x0d\x1b\x1f\x20\x7f", "\u2028\u2029", "x\u2028y\u2029z", "\u2027\u202a",
	"héllo wörld", "日本語", "emoji 😀🎉", "\xff", "a\xffb", "\xc3", "\xc3\x28", "\xe2\x80", "\xed\xa0\x80",
	"\xf4\x90\x80\x80", "\xef\xbf\xbd", "\ufeff", "\U0010ffff", strings.Repeat("long ", 200),
}

// edgeFloats are finite values on both sides of encoding/json's switch
// between 'f' and 'e' form, and values that round-trip only with many digits.
var edgeFloats = []float64{
	0, math.Copysign(0, -1), 1, -1, 0.1, 0.2, 0.3, 1.0 / 3, 123456789.125, 80.125, 1e-6, 9.999999999999999e-7,
	1e-7, 1.5e-7, 1e-10, 1e-100, 5e-324, math.SmallestNonzeroFloat64, 1e20, 999999999999999900000, 1e21,
	1.5e21, 1e22, 1e100, math.MaxFloat64, -1e-7, -1e21, -123.456, 2.5e-8, 1.2345678901234567e-7, 100,
	1e15, 1e16, 12345678901234567890, 0.000001, 0.0000012,
}

func TestAppendJSONEdgeCases(t *testing.T) {
	type edit func(r *events.RequestCompleted)
	tests := []struct {
		name string
		edit edit
	}{
		{"valid fallback", func(*events.RequestCompleted) {}},
		{"zero value", func(r *events.RequestCompleted) { *r = events.RequestCompleted{} }},
		{"no gray (omitted)", func(r *events.RequestCompleted) { r.Arm, r.Gray, r.FallbackReason = events.ArmPrimary, nil, "" }},
		{"zero gray", func(r *events.RequestCompleted) { r.Gray = &events.GrayAttempt{} }},
		{"nil matched_context", func(r *events.RequestCompleted) { r.MatchedContext = nil }},
		{"empty matched_context", func(r *events.RequestCompleted) { r.MatchedContext = []string{} }},
		{"one band", func(r *events.RequestCompleted) { r.MatchedContext = []string{"short_context"} }},
		{"empty band", func(r *events.RequestCompleted) { r.MatchedContext = []string{"", ""} }},
		{"schema_valid nil", func(r *events.RequestCompleted) { r.SchemaValid, r.Gray.SchemaValid = nil, nil }},
		{"schema_valid false/true", func(r *events.RequestCompleted) { r.SchemaValid, r.Gray.SchemaValid = no(), yes() }},
		{"cached_tokens nil", func(r *events.RequestCompleted) { r.CachedTokens = nil }},
		{"cached_tokens 0", func(r *events.RequestCompleted) { r.CachedTokens = ptr(int64(0)) }},
		{"cached_tokens extremes", func(r *events.RequestCompleted) { r.CachedTokens = ptr(int64(math.MinInt64)) }},
		{"no replica", func(r *events.RequestCompleted) { r.Replica, r.Gray.Replica = "", "" }},
		{"negative ints", func(r *events.RequestCompleted) {
			r.Status, r.EstimatedTokens, r.PromptTokens, r.CompletionTokens, r.ToolCalls, r.ToolSteps = -1, -2, math.MinInt64, -4, math.MinInt, -6
			r.Gray.Status, r.Gray.PromptTokens, r.Gray.CompletionTokens = -7, math.MinInt64, -9
		}},
		{"largest ints", func(r *events.RequestCompleted) {
			r.Status, r.EstimatedTokens, r.ToolCalls, r.ToolSteps = math.MaxInt, math.MaxInt64, math.MaxInt, math.MaxInt
			r.Gray.PromptTokens, r.Gray.CompletionTokens = math.MaxInt64, math.MaxInt64
		}},
		{"unknown set values", func(r *events.RequestCompleted) {
			r.Arm, r.ErrorType, r.FallbackReason = "<arm>", "err\n", "\u2028"
			r.Gray.ErrorType, r.Gray.Reason = "é", "\xff"
		}},
	}
	for i, s := range edgeStrings {
		tests = append(tests, struct {
			name string
			edit edit
		}{fmt.Sprintf("string %d %+q", i, s), func(r *events.RequestCompleted) {
			r.RequestID, r.Route, r.Deployment, r.UpstreamModel = s, s+"r", "d"+s, s+s
			r.MatchedContext = []string{s, "b", s}
			r.ArmPromptVersion, r.ArmPromptHash = s, s
			r.Arm, r.ErrorType, r.FallbackReason = events.Arm(s), events.ErrorType(s), events.SampleReason(s)
			r.Gray.ErrorType, r.Gray.Reason, r.Gray.ArmPromptVersion, r.Gray.ArmPromptHash = events.ErrorType(s), events.SampleReason(s), s, s
			r.Replica, r.Gray.Replica = s, s+":1"
		}})
	}
	for _, f := range edgeFloats {
		for _, g := range []float64{f, -f} {
			tests = append(tests, struct {
				name string
				edit edit
			}{"float " + strconv.FormatFloat(g, 'g', -1, 64), func(r *events.RequestCompleted) {
				r.TTFTMillis, r.LatencyMillis, r.Gray.TTFTMillis, r.Gray.LatencyMillis = g, g/3, g*7, g
			}})
		}
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		for field := range 4 {
			tests = append(tests, struct {
				name string
				edit edit
			}{fmt.Sprintf("%v in float %d", bad, field), func(r *events.RequestCompleted) {
				*[]*float64{&r.TTFTMillis, &r.LatencyMillis, &r.Gray.TTFTMillis, &r.Gray.LatencyMillis}[field] = bad
			}})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := completed()
			tt.edit(r)
			checkAppendJSON(t, r)
		})
	}
	t.Run("nil pointer", func(t *testing.T) { checkAppendJSON(t, nil) })
}

// TestAppendJSONRandom compares AppendJSON with json.Marshal on values
// drawn from a seeded generator, so a failure can be replayed.
func TestAppendJSONRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for range n {
		r := randomCompleted(rng)
		checkAppendJSON(t, r)
		if t.Failed() {
			return
		}
	}
}

func randomCompleted(rng *rand.Rand) *events.RequestCompleted {
	r := &events.RequestCompleted{
		RequestID: randomString(rng), Route: randomString(rng), Deployment: randomString(rng),
		Arm: events.Arm(randomString(rng)), UpstreamModel: randomString(rng), Status: int(randomInt(rng)),
		ErrorType: events.ErrorType(randomString(rng)), Stream: rng.IntN(2) == 0, EstimatedTokens: randomInt(rng),
		PromptTokens: randomInt(rng), CompletionTokens: randomInt(rng), UsageEstimated: rng.IntN(2) == 0,
		TTFTMillis: randomFloat(rng), LatencyMillis: randomFloat(rng), ToolCalls: int(randomInt(rng)),
		ToolSteps: int(randomInt(rng)), RepeatedToolCall: rng.IntN(2) == 0, SchemaValid: randomBool(rng),
		FallbackReason: events.SampleReason(randomString(rng)), ArmPromptVersion: randomString(rng),
		ArmPromptHash: randomString(rng), Replica: randomString(rng),
	}
	if rng.IntN(2) == 0 {
		r.CachedTokens = ptr(randomInt(rng))
	}
	if k := rng.IntN(5); k > 0 {
		r.MatchedContext = make([]string, k-1)
		for i := range r.MatchedContext {
			r.MatchedContext[i] = randomString(rng)
		}
	}
	if rng.IntN(2) == 0 {
		r.Gray = &events.GrayAttempt{
			Status: int(randomInt(rng)), ErrorType: events.ErrorType(randomString(rng)),
			Reason: events.SampleReason(randomString(rng)), TTFTMillis: randomFloat(rng),
			LatencyMillis: randomFloat(rng), PromptTokens: randomInt(rng), CompletionTokens: randomInt(rng),
			SchemaValid: randomBool(rng), ArmPromptVersion: randomString(rng), ArmPromptHash: randomString(rng),
			Replica: randomString(rng),
		}
	}
	return r
}

// randomString mixes safe ASCII, every byte that needs escaping, valid
// multi-byte runes (U+2028 and U+2029 among them) and invalid UTF-8.
func randomString(rng *rand.Rand) string {
	var b []byte
	for range rng.IntN(12) {
		switch rng.IntN(6) {
		case 0, 1:
			b = append(b, byte(0x20+rng.IntN(0x60)))
		case 2:
			b = append(b, byte(rng.IntN(0x80)))
		case 3:
			b = append(b, "<>&\"\\\u2028\u2029\x7f"[rng.IntN(12)])
		case 4:
			b = utf8.AppendRune(b, rune(rng.IntN(0x110000)))
		case 5:
			b = append(b, byte(0x80+rng.IntN(0x80)))
		}
	}
	return string(b)
}

func randomInt(rng *rand.Rand) int64 {
	switch rng.IntN(3) {
	case 0:
		return int64(rng.IntN(1000))
	case 1:
		return -int64(rng.IntN(1000))
	}
	return int64(rng.Uint64())
}

// randomFloat draws millisecond-like values, powers of ten around the
// format switch, and arbitrary bit patterns (NaN and infinities among them).
func randomFloat(rng *rand.Rand) float64 {
	switch rng.IntN(5) {
	case 0:
		return float64(rng.IntN(100_000_000)) / 1000
	case 1:
		return edgeFloats[rng.IntN(len(edgeFloats))]
	case 2:
		return math.Pow(10, float64(rng.IntN(60)-30)) * (1 + rng.Float64())
	case 3:
		return rng.NormFloat64() * 1e6
	}
	return math.Float64frombits(rng.Uint64())
}

func randomBool(rng *rand.Rand) *bool {
	switch rng.IntN(3) {
	case 0:
		return nil
	case 1:
		return yes()
	}
	return no()
}

// FuzzRequestCompletedJSON checks AppendJSON against json.Marshal on
// arbitrary strings, numbers and flags.
func FuzzRequestCompletedJSON(f *testing.F) {
	f.Add("req-1", "agent-chat", "qwen-32k", "primary", "<m>&\u2028", "short_context,tools", int64(200), int64(1234), 80.125, 812.5, 1e-7, 1e21, uint8(0xff))
	f.Add("", "", "", "", "", "", int64(0), int64(0), 0.0, math.Copysign(0, -1), 0.1, 123456789.125, uint8(0))
	f.Add("\xff\x00\x1f", "\"\\", "é", "\t\n\r\b\f", "\ufeff", ",", int64(-1), int64(math.MaxInt64), math.NaN(), math.Inf(1), 5e-324, math.MaxFloat64, uint8(0x55))
	f.Fuzz(func(t *testing.T, id, route, dep, arm, model, bands string, status, tokens int64, ttft, latency, gttft, glatency float64, flags uint8) {
		r := &events.RequestCompleted{
			RequestID: id, Route: route, Deployment: dep, Arm: events.Arm(arm), UpstreamModel: model,
			Status: int(status), ErrorType: events.ErrorType(model + arm), Stream: flags&1 != 0,
			EstimatedTokens: tokens, PromptTokens: -tokens, CompletionTokens: tokens ^ status,
			UsageEstimated: flags&2 != 0, TTFTMillis: ttft, LatencyMillis: latency, ToolCalls: int(status >> 3),
			ToolSteps: int(tokens >> 7), RepeatedToolCall: flags&4 != 0, FallbackReason: events.SampleReason(route),
			ArmPromptVersion: bands, ArmPromptHash: id + dep, Replica: model + dep,
		}
		if flags&8 != 0 {
			r.SchemaValid = new(flags&16 != 0)
			r.CachedTokens = new(tokens - status)
		}
		if flags&32 != 0 {
			r.MatchedContext = strings.Split(bands, ",")
		} else if flags&64 != 0 {
			r.MatchedContext = []string{}
		}
		if flags&128 != 0 {
			r.Gray = &events.GrayAttempt{
				Status: int(tokens), ErrorType: events.ErrorType(dep), Reason: events.SampleReason(arm),
				TTFTMillis: gttft, LatencyMillis: glatency, PromptTokens: status, CompletionTokens: -status,
				SchemaValid: r.SchemaValid, ArmPromptVersion: model, ArmPromptHash: bands, Replica: route + arm,
			}
		}
		checkAppendJSON(t, r)
	})
}

// TestNewEnvelopeRequestData checks that NewEnvelope's data for a
// request.completed, value or pointer, is json.Marshal's.
func TestNewEnvelopeRequestData(t *testing.T) {
	r := completed()
	want, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []any{r, *r} {
		env, err := events.NewEnvelope(events.TypeRequestCompleted, "gateway/h", d, time.Time{}, "")
		if err != nil {
			t.Fatalf("NewEnvelope(%T) = %v", d, err)
		}
		if !bytes.Equal(env.Data, want) {
			t.Errorf("NewEnvelope(%T).Data =\n%s\nwant (json.Marshal)\n%s", d, env.Data, want)
		}
	}
}

// AppendJSON allocates nothing into a buffer with room, the rev. 4
// fields (replica, cached_tokens, gray's replica) included.
func TestAppendJSONAllocatesNothing(t *testing.T) {
	r := completed()
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := r.AppendJSON(buf[:0]); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("AppendJSON allocates %v times per call; want 0", n)
	}
}
