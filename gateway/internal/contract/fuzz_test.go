package contract

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/schemas/config"
)

// kindOf derives the JSON kind of a value from its first byte, as the scan
// would record it.
func kindOf(raw []byte) scan.Kind {
	if len(raw) == 0 {
		return scan.KindAbsent
	}
	switch raw[0] {
	case 'n':
		return scan.KindNull
	case 't':
		return scan.KindTrue
	case 'f':
		return scan.KindFalse
	case '"':
		return scan.KindString
	case '[':
		return scan.KindArray
	case '{':
		return scan.KindObject
	}
	return scan.KindNumber
}

var (
	refJSONNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)
	refExponent   = regexp.MustCompile(`[eE][+-]?0*([0-9]+)$`)
	refRustFloat  = regexp.MustCompile(`^[+-]?(?i:(inf|infinity|nan)|([0-9]+\.?[0-9]*|\.[0-9]+)(e[+-]?[0-9]+)?)$`)
	refIntString  = regexp.MustCompile(`^[+-]?[0-9]+(_[0-9]+)*(\.0+)?$`)
)

// refFloat is the reference reading of a float field: regular expressions
// for the grammar and math/big for the value, nothing shared with Read.
// ok is false when the input is outside what the reference covers.
func refFloat(raw string) (v Value, ok bool) {
	if refJSONNumber.MatchString(raw) {
		return refDecimal(raw, !strings.ContainsAny(raw, ".eE"))
	}
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return Value{}, false
	}
	s := raw[1 : len(raw)-1]
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= utf8.RuneSelf || s[i] == '\\' || s[i] == '"' {
			return Value{}, false // only plain ASCII strings
		}
	}
	t := strings.Trim(s, " \t\n\v\f\r")
	if len(t) > 64 {
		return Value{State: Unusable}, true
	}
	if !refRustFloat.MatchString(t) {
		if strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") || strings.Contains(s, "__") {
			return Value{State: Unusable}, true
		}
		t = strings.ReplaceAll(s, "_", "")
		if !refRustFloat.MatchString(t) {
			return Value{State: Unusable}, true
		}
	}
	word := strings.ToLower(strings.TrimLeft(t, "+-"))
	switch word {
	case "inf", "infinity":
		if t[0] == '-' {
			return Value{State: Number, F: math.Inf(-1)}, true
		}
		return Value{State: Number, F: math.Inf(1)}, true
	case "nan":
		return Value{State: Number, F: math.NaN()}, true
	}
	if strings.HasPrefix(word, ".") {
		t = strings.Replace(t, ".", "0.", 1)
	}
	t = strings.Replace(strings.Replace(t, ".e", ".0e", 1), ".E", ".0E", 1)
	if strings.HasSuffix(t, ".") {
		t += "0"
	}
	return refDecimal(t, false)
}

// refDecimal converts a decimal with an optional exponent to the nearest
// float64 with big.Rat; isInteger marks a JSON integer literal, which is
// Unusable when it does not fit a float64.
func refDecimal(s string, isInteger bool) (Value, bool) {
	if m := refExponent.FindStringSubmatch(s); m != nil && len(m[1]) > 4 {
		return Value{}, false // keep big.Rat away from 10^huge
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimLeft(s, "+-")
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return Value{}, false
	}
	f, _ := r.Float64()
	if math.IsInf(f, 0) && isInteger {
		return Value{State: Unusable}, true
	}
	if neg {
		f = -f
	}
	return Value{State: Number, F: f}, true
}

// refInt is the reference reading of an int field.
func refInt(raw string) (Value, bool) {
	if refJSONNumber.MatchString(raw) {
		if !strings.ContainsAny(raw, ".eE") {
			i, ok := new(big.Int).SetString(raw, 10)
			if !ok || !i.IsInt64() {
				return Value{State: Unusable}, true
			}
			return Value{State: Number, I: i.Int64()}, true
		}
		v, ok := refDecimal(raw, false)
		if !ok {
			return v, false
		}
		bf := big.NewFloat(v.F)
		if math.IsInf(v.F, 0) || !bf.IsInt() {
			return Value{State: Unusable}, true
		}
		i, acc := bf.Int64()
		if acc != big.Exact {
			return Value{State: Unusable}, true
		}
		return Value{State: Number, I: i}, true
	}
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' || strings.ContainsAny(raw[1:len(raw)-1], `\"`) {
		return Value{}, false
	}
	t := strings.Trim(raw[1:len(raw)-1], " \t\n\v\f\r")
	if len(t) > 64 || !refIntString.MatchString(t) {
		return Value{State: Unusable}, true
	}
	if k := strings.IndexByte(t, '.'); k >= 0 {
		t = t[:k]
	}
	i, ok := new(big.Int).SetString(strings.ReplaceAll(strings.TrimPrefix(t, "+"), "_", ""), 10)
	if !ok || !i.IsInt64() {
		return Value{State: Unusable}, true
	}
	return Value{State: Number, I: i.Int64()}, true
}

func sameValue(a, b Value) bool {
	return a.State == b.State && a.I == b.I && (a.F == b.F || math.IsNaN(a.F) && math.IsNaN(b.F))
}

func FuzzRead(f *testing.F) {
	for _, c := range loadConformance(f) {
		f.Add(c.JSON, uint8(scan.Temperature))
		f.Add(c.JSON, uint8(scan.TopK))
	}
	for _, s := range []string{`"1_0e_1_0"`, `" 4_0.00 "`, `"+.5e-3"`, `1e-400`, `-9223372036854775808`, `"\u00a0 1 \u3000"`} {
		f.Add(s, uint8(scan.TopP))
		f.Add(s, uint8(scan.N))
	}
	f.Fuzz(func(t *testing.T, raw string, param uint8) {
		p := scan.Param(param % uint8(scan.NumParams))
		got := Read(p, kindOf([]byte(raw)), []byte(raw))
		if got.State > Unusable {
			t.Fatalf("Read(%s, %q) state %d", p, raw, got.State)
		}
		ref, covered := refFloat, "float"
		if p.IsInt() {
			ref, covered = refInt, "int"
		}
		want, ok := ref(raw)
		if ok && !sameValue(got, want) {
			t.Errorf("Read(%s, %q) = %+v; %s reference %+v", p, raw, got, covered, want)
		}
		checkTrimAgainstUnquote(t, raw)
	})
}

// checkTrimAgainstUnquote compares trimString's one-pass decode and trim of
// a valid JSON string literal with the scan's Unquote followed by a trim.
func checkTrimAgainstUnquote(t *testing.T, raw string) {
	if !json.Valid([]byte(raw)) || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return
	}
	dec, err := scan.Unquote(nil, []byte(raw))
	if err != nil {
		t.Fatalf("Unquote(%s) = %v on valid JSON", raw, err)
	}
	want := bytes.TrimFunc(dec, isWhiteSpace)
	var buf [maxStringBytes + utf8.UTFMax]byte
	got, trimmed, ok := trimString(buf[:0], []byte(raw[1:len(raw)-1]))
	switch {
	case ok && (!bytes.Equal(got, want) || trimmed != (len(want) != len(dec))):
		t.Errorf("trimString(%s) = %q, trimmed %v; Unquote and trim give %q from %q", raw, got, trimmed, want, dec)
	case !ok && len(want) <= maxStringBytes && !bytes.ContainsRune(dec, utf8.RuneError):
		t.Errorf("trimString(%s) refused; Unquote and trim give %q", raw, want)
	}
}

func FuzzCheck(f *testing.F) {
	inputs, _ := filepath.Glob("testdata/inject/*.json")
	for _, in := range inputs {
		if b, err := os.ReadFile(in); err == nil {
			f.Add(b)
		}
	}
	for _, c := range loadConformance(f) {
		f.Add([]byte(`{"top_k":` + c.JSON + `,"temperature":` + c.JSON + `,"n":null}`))
	}
	f.Add([]byte(`{"temperature":0.5,"top_p":[1],"top_k":"x","n":2,"min_p":"nan"}`))
	reject := New(goldenContract)
	allowCfg := *goldenContract
	allowCfg.Conflict = config.ConflictAllow
	allow := New(&allowCfg)
	f.Fuzz(func(t *testing.T, body []byte) {
		var req scan.Request
		if scan.Scan(body, &req) != nil {
			return
		}
		for _, c := range []*Contract{reject, allow} {
			var (
				edits scan.Edits
				out   Outcome
			)
			c.Check(body, &req, &edits, &out)
			if !c.Reject() && out.Rejected() {
				t.Fatalf("allow: violations %q in %s", violated(&out), body)
			}
			for i, v := range out.List() {
				if i > 0 && out.Violations[i-1].Index >= v.Index {
					t.Fatalf("violations out of body order: %q in %s", violated(&out), body)
				}
				if g := v.Got(); len(g) > maxGot || !utf8.ValidString(g) || !strings.HasPrefix(v.Message(), v.Param.String()+" violates") {
					t.Fatalf("violation text got %q message %q", g, v.Message())
				}
			}
			if out.Rejected() {
				continue
			}
			fwd := edits.Apply(nil, body)
			if edits.Len() == 0 && !bytes.Equal(fwd, body) {
				t.Fatalf("no edits, yet forwarded %q differs from %q", fwd, body)
			}
			if !json.Valid(fwd) {
				t.Fatalf("forwarded body is not JSON: %q (from %q)", fwd, body)
			}
			if msg := checkReadBack(c, body, &req, fwd); msg != "" {
				t.Fatalf("%s\nbody %q\nforwarded %q", msg, body, fwd)
			}
		}
	})
}
