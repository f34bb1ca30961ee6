package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"strconv"
	"testing"
	"unicode"

	"github.com/graygate/graygate/gateway/internal/scan"
)

// conformanceCase is one entry of testdata/sampling_numbers.json: a JSON
// value and how the engine reads it for a float and for an int field.
type conformanceCase struct {
	JSON  string   `json:"json"`
	Float expected `json:"float"`
	Int   expected `json:"int"`
	Note  string   `json:"note"`
}

// expected is a state (absent, number, unusable, invalid_body) and, for
// numbers, the value: a JSON number or one of "inf", "-inf", "nan".
type expected struct {
	State string      `json:"state"`
	Value json.Number `json:"value"`
}

// UnmarshalJSON keeps numeric values exact (json.Number) and accepts the
// string spellings of the non-finite floats.
func (e *expected) UnmarshalJSON(b []byte) error {
	var raw struct {
		State string          `json:"state"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	e.State = raw.State
	if len(raw.Value) == 0 {
		return nil
	}
	if raw.Value[0] == '"' {
		var s string
		if err := json.Unmarshal(raw.Value, &s); err != nil {
			return err
		}
		e.Value = json.Number(s)
		return nil
	}
	e.Value = json.Number(raw.Value)
	return nil
}

func loadConformance(t testing.TB) []conformanceCase {
	t.Helper()
	b, err := os.ReadFile("testdata/sampling_numbers.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []conformanceCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatalf("decode conformance table: %v", err)
	}
	if len(file.Cases) == 0 {
		t.Fatal("conformance table has no cases")
	}
	return file.Cases
}

var (
	floatParams = []scan.Param{scan.Temperature, scan.TopP, scan.MinP, scan.RepetitionPenalty, scan.FrequencyPenalty, scan.PresencePenalty}
	intParams   = []scan.Param{scan.TopK, scan.N}
)

// TestReadConformance runs every case of the shared conformance table
// through the real pipeline — Scan of a body holding the value, then Read —
// for every governed parameter.
func TestReadConformance(t *testing.T) {
	for _, c := range loadConformance(t) {
		t.Run(c.JSON, func(t *testing.T) {
			for _, p := range append(append([]scan.Param{}, floatParams...), intParams...) {
				want := c.Float
				if p.IsInt() {
					want = c.Int
				}
				body := []byte(`{"model":"m","` + p.String() + `":` + c.JSON + `}`)
				var req scan.Request
				err := scan.Scan(body, &req)
				if want.State == "invalid_body" {
					if err == nil {
						t.Errorf("Scan(%s) succeeded; want an error (invalid body)", body)
					}
					continue
				}
				if err != nil {
					t.Fatalf("Scan(%s) = %v; want nil", body, err)
				}
				m := req.Params[p]
				got := Read(p, m.Kind, body[m.Value.Start:m.Value.End])
				if msg := compare(got, p.IsInt(), want); msg != "" {
					t.Errorf("%s: Read(%s) = %+v; want %s", p, c.JSON, got, msg)
				}
			}
		})
	}
}

// TestReadConformanceAllInOneBody puts a float and an int reading of every
// case into one body, so that no value (an overflowing one, say) can change
// how another is read.
func TestReadConformanceAllInOneBody(t *testing.T) {
	cases := loadConformance(t)
	for i, c := range cases {
		if c.Float.State == "invalid_body" {
			continue
		}
		for _, d := range cases {
			if d.Int.State == "invalid_body" {
				continue
			}
			body := []byte(`{"temperature":` + c.JSON + `,"messages":[{"role":"user","content":"hi"}],"top_k":` + d.JSON + `}`)
			var req scan.Request
			if err := scan.Scan(body, &req); err != nil {
				t.Fatalf("Scan(%s) = %v", body, err)
			}
			mt, mk := req.Params[scan.Temperature], req.Params[scan.TopK]
			gt := Read(scan.Temperature, mt.Kind, body[mt.Value.Start:mt.Value.End])
			gk := Read(scan.TopK, mk.Kind, body[mk.Value.Start:mk.Value.End])
			if msg := compare(gt, false, c.Float); msg != "" {
				t.Errorf("case %d: %s: temperature = %+v; want %s", i, body, gt, msg)
			}
			if msg := compare(gk, true, d.Int); msg != "" {
				t.Errorf("case %d: %s: top_k = %+v; want %s", i, body, gk, msg)
			}
		}
	}
}

// compare returns "" when got matches want, else a description of want.
func compare(got Value, isInt bool, want expected) string {
	desc := want.State
	if want.Value != "" {
		desc += " " + string(want.Value)
	}
	switch want.State {
	case "absent":
		if got.State != Absent {
			return desc
		}
	case "unusable":
		if got.State != Unusable {
			return desc
		}
	case "number":
		if got.State != Number {
			return desc
		}
		if isInt {
			w, err := strconv.ParseInt(string(want.Value), 10, 64)
			if err != nil || got.I != w || got.F != 0 {
				return desc
			}
			return ""
		}
		if got.I != 0 {
			return desc
		}
		switch want.Value {
		case "inf":
			if !math.IsInf(got.F, 1) {
				return desc
			}
		case "-inf":
			if !math.IsInf(got.F, -1) {
				return desc
			}
		case "nan":
			if !math.IsNaN(got.F) {
				return desc
			}
		default:
			w, err := strconv.ParseFloat(string(want.Value), 64)
			if err != nil || got.F != w {
				return desc
			}
		}
	default:
		return "unknown state " + desc
	}
	return ""
}

// TestConformanceCopyIsCurrent fails when the copy under testdata has
// drifted from the shared table it was taken from, and when the shared
// table is missing: a drift check that skips cannot catch drift.
func TestConformanceCopyIsCurrent(t *testing.T) {
	const shared = "../../../../shared/conformance/sampling_numbers.json"
	want, err := os.ReadFile(shared)
	if errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("shared conformance table %s (../shared/conformance beside the repository) not found: the testdata copy cannot be compared; check the shared folder out beside the repository", shared)
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("testdata/sampling_numbers.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("testdata/sampling_numbers.json differs from %s; copy it again", shared)
	}
}

func TestIsWhiteSpaceIsRustTrimSet(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if got, want := isWhiteSpace(r), unicode.Is(unicode.White_Space, r); got != want {
			t.Errorf("isWhiteSpace(%U) = %v; want %v", r, got, want)
		}
	}
}

func TestRead(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	num := func(f float64) Value { return Value{State: Number, F: f} }
	cases := []struct {
		name string
		p    scan.Param
		kind scan.Kind
		raw  string
		want Value
	}{
		{"absent", scan.Temperature, scan.KindAbsent, ``, Value{}},
		{"null int", scan.N, scan.KindNull, `null`, Value{}},
		{"false", scan.Temperature, scan.KindFalse, `false`, num(0)},
		{"true int", scan.TopK, scan.KindTrue, `true`, Value{State: Number, I: 1}},
		{"integer negative zero", scan.Temperature, scan.KindNumber, `-0`, num(0)},
		{"float negative zero", scan.Temperature, scan.KindNumber, `-0.0`, num(math.Copysign(0, -1))},
		{"string negative zero", scan.Temperature, scan.KindString, `"-0"`, num(math.Copysign(0, -1))},
		{"exponent int", scan.TopK, scan.KindNumber, `4E1`, Value{State: Number, I: 40}},
		{"min int64", scan.TopK, scan.KindNumber, `-9223372036854775808`, Value{State: Number, I: math.MinInt64}},
		{"max int64", scan.N, scan.KindNumber, `9223372036854775807`, Value{State: Number, I: math.MaxInt64}},
		{"past max int64", scan.N, scan.KindNumber, `9223372036854775808`, Value{State: Unusable}},
		{"2^63 as float", scan.N, scan.KindNumber, `9.223372036854775808e18`, Value{State: Unusable}},
		{"-2^63 as float", scan.N, scan.KindNumber, `-9.223372036854775808e18`, Value{State: Number, I: math.MinInt64}},
		{"integer past float range", scan.Temperature, scan.KindNumber, "1" + string(bytes.Repeat([]byte("0"), 400)), Value{State: Unusable}},
		{"fraction past float range", scan.Temperature, scan.KindNumber, "1" + string(bytes.Repeat([]byte("0"), 400)) + ".0", num(inf)},
		{"underflow", scan.Temperature, scan.KindNumber, `1e-400`, num(0)},
		{"not a number", scan.Temperature, scan.KindNumber, `01`, Value{State: Unusable}},
		{"escaped digits", scan.Temperature, scan.KindString, `"\u0030.\u0035"`, num(0.5)},
		{"escaped tab and nbsp", scan.TopP, scan.KindString, `"\t\u00a00.5\r\n"`, num(0.5)},
		{"escaped surrogate pair", scan.TopP, scan.KindString, `"\ud83d\ude000.5"`, Value{State: Unusable}},
		{"lone surrogate", scan.TopP, scan.KindString, `"\ud83d0.5"`, Value{State: Unusable}},
		{"inner space", scan.TopP, scan.KindString, `"0. 5"`, Value{State: Unusable}},
		{"hex float", scan.TopP, scan.KindString, `"0x1p-1"`, Value{State: Unusable}},
		{"go underscore hex", scan.TopP, scan.KindString, `"0x_1"`, Value{State: Unusable}},
		{"exponent only underscore", scan.TopP, scan.KindString, `"1e_5"`, num(1e5)},
		{"sign then dot", scan.TopP, scan.KindString, `"+.5E-0"`, num(0.5)},
		{"infinity sign", scan.TopP, scan.KindString, `"-Infinity"`, num(math.Inf(-1))},
		{"nan word", scan.TopP, scan.KindString, `" nAn "`, num(nan)},
		{"empty string", scan.TopP, scan.KindString, `""`, Value{State: Unusable}},
		{"65 bytes of space then 1", scan.TopP, scan.KindString, `"1` + string(bytes.Repeat([]byte(" "), 64)) + `1"`, Value{State: Unusable}},
		{"long trailing space", scan.TopP, scan.KindString, `"1` + string(bytes.Repeat([]byte(" "), 1000)) + `"`, num(1)},
		{"underscores in long int string", scan.TopK, scan.KindString, `"1_000_000_000_000"`, Value{State: Number, I: 1e12}},
		{"int string plus", scan.TopK, scan.KindString, `" +40.000 "`, Value{State: Number, I: 40}},
		{"int string minus zero", scan.N, scan.KindString, `"-0"`, Value{State: Number}},
		{"int string dot only", scan.TopK, scan.KindString, `"40."`, Value{State: Unusable}},
		{"int string past int64", scan.TopK, scan.KindString, `"9223372036854775808"`, Value{State: Unusable}},
		{"int string underscore before dot", scan.TopK, scan.KindString, `"4_0_.0"`, Value{State: Unusable}},
		{"int string exponent", scan.TopK, scan.KindString, `"1e2"`, Value{State: Unusable}},
		{"unquoted string", scan.TopK, scan.KindString, `"1`, Value{State: Unusable}},
		{"array", scan.TopK, scan.KindArray, `[1]`, Value{State: Unusable}},
		{"object", scan.Temperature, scan.KindObject, `{}`, Value{State: Unusable}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Read(c.p, c.kind, []byte(c.raw))
			same := got.State == c.want.State && got.I == c.want.I &&
				(got.F == c.want.F && math.Signbit(got.F) == math.Signbit(c.want.F) || math.IsNaN(got.F) && math.IsNaN(c.want.F))
			if !same {
				t.Errorf("Read(%s, %v, %s) = %+v; want %+v", c.p, c.kind, c.raw, got, c.want)
			}
		})
	}
}

func TestReadDoesNotAllocate(t *testing.T) {
	cases := []struct {
		p    scan.Param
		kind scan.Kind
		raw  string
	}{
		{scan.Temperature, scan.KindNumber, `0.123456789012345678901234567890123456789`},
		{scan.TopK, scan.KindNumber, `40`},
		{scan.TopK, scan.KindNumber, `40.0`},
		{scan.TopP, scan.KindString, `" \u2003 1_0.5_0e-1 "`},
		{scan.TopP, scan.KindString, `"1_0.5_0e-1"`},
		{scan.N, scan.KindString, `" 1_000.00 "`},
		{scan.TopP, scan.KindString, `"nope"`},
	}
	for _, c := range cases {
		t.Run(c.raw, func(t *testing.T) {
			raw := []byte(c.raw)
			if n := testing.AllocsPerRun(100, func() { Read(c.p, c.kind, raw) }); n != 0 {
				t.Errorf("Read(%s) allocates %v times; want 0", c.raw, n)
			}
		})
	}
}
