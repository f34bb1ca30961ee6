// Package contract enforces the fleet-wide sampling contract on request
// bodies (SPEC §4).
//
// A Contract is built once from the configuration and is safe for
// concurrent use. For each request the gateway scans the body, then calls
// Check with the scan's result: Check records the values to inject as
// edits of the forwarded body and, under the reject policy, the violations
// that make the gateway answer 400 sampling_contract_violation before any
// upstream call.
package contract

import (
	"math"

	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/schemas/config"
)

// Contract is the compiled sampling contract of a configuration. A nil
// *Contract is a disabled contract: its methods do nothing.
type Contract struct {
	reject bool
	rules  [scan.NumParams]rule
}

// rule is one governed parameter, with its bounds also as exact integers
// for top_k and n, so that a client's int64 is never rounded to a float64
// to be compared.
type rule struct {
	governed bool
	pinned   bool
	pin      float64
	min, max float64

	intPinOK   bool // the pin is a whole number within int64
	intPin     int64
	intBandOK  bool // the band holds at least one int64
	intMin     int64
	intMax     int64
	inject     bool // inject a value when the key is absent or null
	injectWith float64
	injectInt  int64 // injectWith exactly, for top_k and n
}

// New compiles cfg, which must have passed config validation (known
// parameter names, values within the engine's domains). A nil cfg gives a
// nil *Contract: no sampling contract.
func New(cfg *config.SamplingContract) *Contract {
	if cfg == nil {
		return nil
	}
	c := &Contract{reject: cfg.Conflict != config.ConflictAllow}
	for name, pr := range cfg.Params {
		p, ok := scan.ParamByName(name)
		if !ok {
			continue
		}
		r := rule{governed: true, pinned: pr.Pinned}
		if pr.Pinned {
			r.pin, r.min, r.max = pr.Value, pr.Value, pr.Value
			r.inject, r.injectWith, r.injectInt = true, pr.Value, pr.IntValue
		} else {
			r.min, r.max = pr.Min, pr.Max
			r.inject, r.injectWith, r.injectInt = pr.HasDefault, pr.Default, pr.IntDefault
		}
		r.intPin, r.intPinOK = wholeInt64(r.pin)
		r.intMin, r.intMax, r.intBandOK = intBand(r.min, r.max)
		r.injectInt, _ = wholeInt64(r.injectWith)
		if p.IsInt() {
			// The config reads top_k and n exactly: prefer its integers
			// (a config built in code may set the floats only).
			exact := func(f float64, i int64) bool { return float64(i) == f }
			if pr.Pinned && exact(pr.Value, pr.IntValue) {
				r.intPin, r.injectInt = pr.IntValue, pr.IntValue
			}
			if !pr.Pinned && exact(pr.Min, pr.IntMin) && exact(pr.Max, pr.IntMax) {
				r.intMin, r.intMax, r.intBandOK = pr.IntMin, pr.IntMax, pr.IntMin <= pr.IntMax
			}
			if !pr.Pinned && pr.HasDefault && exact(pr.Default, pr.IntDefault) {
				r.injectInt = pr.IntDefault
			}
		}
		c.rules[p] = r
	}
	return c
}

// intBand returns the int64 numbers in the inclusive band [lo, hi], as
// their own bounds, or false when there are none.
func intBand(lo, hi float64) (int64, int64, bool) {
	lo, hi = math.Ceil(lo), math.Floor(hi)
	if !(lo <= hi) || lo >= 1<<63 || hi < -(1<<63) {
		return 0, 0, false
	}
	a, b := int64(math.MinInt64), int64(math.MaxInt64)
	if lo > -(1 << 63) {
		a = int64(lo)
	}
	if hi < 1<<63 {
		b = int64(hi)
	}
	return a, b, true
}

// Reject reports whether the contract refuses violating requests (policy
// reject) rather than forwarding them unchanged (policy allow).
func (c *Contract) Reject() bool { return c != nil && c.reject }

// Check applies the contract to a scanned body. It resets out, then, for
// each governed parameter in a fixed order:
//
//   - absent or null, with a pinned value or a band default: records in
//     edits the injection of that value (a null is replaced where it
//     stands, a missing key is added before the closing brace), under
//     either policy;
//   - under the reject policy, a value the engine would read as a number
//     outside the pin or band (NaN never matches), or not read as a number
//     at all: records a violation in out.
//
// Under the allow policy no violation is recorded and client values are
// never touched. When out reports violations the request must be refused,
// and edits are then of no use. req must come from a successful scan.Scan
// of body. Check does not allocate beyond the growth of edits.
func (c *Contract) Check(body []byte, req *scan.Request, edits *scan.Edits, out *Outcome) {
	c.CheckOnly(body, req, edits, out, AllParams)
}

// AllParams is the bit set (1<<Param) of every governed parameter.
const AllParams = 1<<scan.NumParams - 1

// CheckOnly is Check for the parameters in the bit set only (1<<Param):
// an endpoint whose API knows some of the governed keys (the Responses
// API: temperature and top_p) is neither checked nor injected with the
// others.
func (c *Contract) CheckOnly(body []byte, req *scan.Request, edits *scan.Edits, out *Outcome, only uint16) {
	out.N = 0
	if c == nil {
		return
	}
	for p := range scan.NumParams {
		r := &c.rules[p]
		if !r.governed || only&(1<<p) == 0 {
			continue
		}
		m := &req.Params[p]
		switch m.Kind {
		case scan.KindAbsent:
			switch {
			case r.inject && p.IsInt():
				edits.InsertInt(req, p.String(), r.injectInt)
				edits.MarkParam(p)
			case r.inject:
				edits.InsertMember(req, p.String(), r.injectWith)
				edits.MarkParam(p)
			}
			continue
		case scan.KindNull:
			switch {
			case r.inject && p.IsInt():
				edits.ReplaceInt(m.Value.Start, m.Value.End, r.injectInt)
				edits.MarkParam(p)
			case r.inject:
				edits.ReplaceNumber(m.Value.Start, m.Value.End, r.injectWith)
				edits.MarkParam(p)
			}
			continue
		}
		if !c.reject {
			continue
		}
		raw := body[m.Value.Start:m.Value.End]
		v := Read(p, m.Kind, raw)
		if r.admits(p, v) {
			continue
		}
		viol := Violation{
			Param:  p,
			State:  v.State,
			Index:  m.Index,
			Pinned: r.pinned,
			Min:    r.min,
			Max:    r.max,
		}
		switch {
		case p.IsInt() && r.pinned && r.intPinOK:
			viol.Exact, viol.IntMin, viol.IntMax = true, r.intPin, r.intPin
		case p.IsInt() && !r.pinned && r.intBandOK:
			viol.Exact, viol.IntMin, viol.IntMax = true, r.intMin, r.intMax
		}
		out.add(viol, raw)
	}
}

// admits reports whether v satisfies the rule. Integer parameters compare
// as exact integers.
func (r *rule) admits(p scan.Param, v Value) bool {
	if v.State != Number {
		return false
	}
	if p.IsInt() {
		if r.pinned {
			return r.intPinOK && v.I == r.intPin
		}
		return r.intBandOK && v.I >= r.intMin && v.I <= r.intMax
	}
	return v.F >= r.min && v.F <= r.max
}
