package config

import (
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// paramDomain is the range a governed parameter's engine accepts (SPEC §4).
type paramDomain struct {
	name string
	// lo and hi bound the domain; loOpen/hiOpen exclude the bound itself.
	lo, hi         float64
	loOpen, hiOpen bool
	// whole parameters take integers only.
	whole bool
	// minusOne also admits exactly -1 (top_k's "no limit").
	minusOne bool
	// text describes the domain in messages.
	text string
}

// governedParams are the sampling parameters a contract may name, in the
// order SPEC §4 lists them.
var governedParams = []paramDomain{
	{name: "temperature", lo: 0, hi: 2, text: "[0, 2]"},
	{name: "top_p", lo: 0, hi: 1, loOpen: true, text: "(0, 1]"},
	{name: "top_k", lo: 1, hi: math.Inf(1), hiOpen: true, whole: true, minusOne: true, text: "a whole number ≥ 1, or -1"},
	{name: "min_p", lo: 0, hi: 1, text: "[0, 1]"},
	{name: "repetition_penalty", lo: 0, hi: 2, loOpen: true, text: "(0, 2]"},
	{name: "frequency_penalty", lo: -2, hi: 2, text: "[-2, 2]"},
	{name: "presence_penalty", lo: -2, hi: 2, text: "[-2, 2]"},
	{name: "n", lo: 1, hi: 128, whole: true, text: "a whole number in [1, 128]"},
}

// GovernedParams lists the sampling parameter names a contract may govern.
func GovernedParams() []string {
	names := make([]string, len(governedParams))
	for i, p := range governedParams {
		names[i] = p.name
	}
	return names
}

func domainOf(name string) (paramDomain, bool) {
	for _, p := range governedParams {
		if p.name == name {
			return p, true
		}
	}
	return paramDomain{}, false
}

// maxWhole is the largest integer a float64 holds exactly; whole parameters
// are compared as exact integers, so a bound above it could not be honoured.
const maxWhole = 1 << 53

// wholeNumber reads the decimal text of a whole parameter's number as an
// exact integer; f is the same number as a float64.
func (p paramDomain) wholeNumber(text string, f float64) (int64, string) {
	r, ok := new(big.Rat).SetString(strings.TrimPrefix(text, "+"))
	if !ok || !r.IsInt() {
		return 0, "" // not whole: validateSampling reports it
	}
	if !r.Num().IsInt64() {
		return 0, text + " is out of range (" + p.name + " is a 64-bit integer parameter)"
	}
	return r.Num().Int64(), ""
}

// checkInt returns why the whole number v is not a valid value of the
// parameter, or "".
func (p paramDomain) checkInt(v int64) string {
	if p.minusOne && v == -1 {
		return ""
	}
	f := float64(v)
	if f < p.lo || f > p.hi || (p.loOpen && f == p.lo) || (p.hiOpen && f == p.hi) {
		return strconv.FormatInt(v, 10) + " is outside the domain of " + p.name + ": " + p.text
	}
	return ""
}

// check returns why v is not a valid value of the parameter, or "".
func (p paramDomain) check(v float64) string {
	if p.whole && (v != math.Trunc(v) || math.Abs(v) > maxWhole) {
		return formatNumber(v) + " is not a whole number (" + p.name + " is an integer parameter)"
	}
	if p.minusOne && v == -1 {
		return ""
	}
	if v < p.lo || v > p.hi || (p.loOpen && v == p.lo) || (p.hiOpen && v == p.hi) {
		return formatNumber(v) + " is outside the domain of " + p.name + ": " + p.text
	}
	return ""
}

// checkRule checks a rule's number: exactly (i) for whole parameters.
func (p paramDomain) checkRule(f float64, i int64) string {
	if p.whole && f == math.Trunc(f) {
		return p.checkInt(i)
	}
	return p.check(f)
}

func formatNumber(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// governed returns the pairs of a mapping of governed parameter names, in
// file order, recording each name's key path and order; null is no pairs,
// and another node, or an unknown name, is an error (notShape formats the
// message for a node that is not a mapping).
func (d *decoder) governed(path string, n *yaml.Node, notShape string) []pair {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(path, n, notShape, describe(n))
		return nil
	}
	var out []pair
	for _, p := range d.pairs(path, n) {
		kp := joinPath(path, p.key)
		if _, ok := domainOf(p.key); !ok {
			d.errorf(kp, p.k, "unknown parameter; the governed parameters are %s", strings.Join(GovernedParams(), ", "))
			continue
		}
		d.mark(kp, p.k)
		d.order[path] = append(d.order[path], p.key)
		out = append(out, p)
	}
	return out
}

// params decodes sampling_contract.params: each governed name maps to a
// number (a pin) or to a band {min, max, default?}. Meaning (domains, order of
// the bounds, conflict policy) is checked by validateSampling.
func (d *decoder) params(path string, n *yaml.Node, v reflect.Value) {
	rules := map[string]ParamRule{}
	v.Set(reflect.ValueOf(rules))
	for _, p := range d.governed(path, n, "expected a mapping of parameter names, got %s") {
		kp := joinPath(path, p.key)
		val := deref(p.v)
		switch {
		case val.Kind == yaml.MappingNode:
			if rule, ok := d.band(kp, val); ok {
				rules[p.key] = rule
			}
		case val.Kind == yaml.ScalarNode && !isNull(val):
			if f, text, ok := d.numberText(kp, val); ok {
				rule := ParamRule{Pinned: true, Value: f}
				if d.whole(kp, val, p.key, text, f, &rule.IntValue) {
					rules[p.key] = rule
				}
			}
		default:
			d.errorf(kp, val, "expected a number (a pinned value) or a band {min, max, default}, got %s", describeValue(val))
		}
	}
}

func deref(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode {
		return n.Alias
	}
	return n
}

func describeValue(n *yaml.Node) string {
	if isNull(n) {
		return "null"
	}
	return describe(n)
}

// whole reads an integer parameter's number exactly into dst; it reports
// false (after an error) when the number is not a whole int64. Other
// parameters pass.
func (d *decoder) whole(path string, n *yaml.Node, name, text string, f float64, dst *int64) bool {
	dom, _ := domainOf(name)
	if !dom.whole {
		return true
	}
	i, why := dom.wholeNumber(text, f)
	if why != "" {
		d.errorf(path, n, "%s", why)
		return false
	}
	*dst = i
	return true
}

// band decodes {min, max, default?}.
func (d *decoder) band(path string, n *yaml.Node) (ParamRule, bool) {
	name := path[strings.LastIndexByte(path, '.')+1:]
	var rule ParamRule
	var hasMin, hasMax bool
	ok := true
	for _, p := range d.pairs(path, n) {
		kp := joinPath(path, p.key)
		var dst *float64
		var idst *int64
		switch p.key {
		case "min":
			dst, idst, hasMin = &rule.Min, &rule.IntMin, true
		case "max":
			dst, idst, hasMax = &rule.Max, &rule.IntMax, true
		case "default":
			dst, idst, rule.HasDefault = &rule.Default, &rule.IntDefault, true
		default:
			d.errorf(kp, p.k, "unknown key; a band has min, max and default")
			ok = false
			continue
		}
		d.mark(kp, p.k)
		val := deref(p.v)
		if isNull(val) {
			d.errorf(kp, val, "expected a number, got null")
			ok = false
			continue
		}
		f, text, good := d.numberText(kp, val)
		if !good || !d.whole(kp, val, name, text, f, idst) {
			ok = false
			continue
		}
		*dst = f
	}
	if !hasMin || !hasMax {
		var missing []string
		if !hasMin {
			missing = append(missing, "min")
		}
		if !hasMax {
			missing = append(missing, "max")
		}
		d.errorf(path, n, "a band needs both min and max (missing %s)", strings.Join(missing, " and "))
		ok = false
	}
	return rule, ok
}

// validateSampling checks the contract's policy and every rule against the
// engine's domain.
func (d *decoder) validateSampling(sc *SamplingContract) {
	if sc == nil {
		return
	}
	if sc.Conflict != ConflictReject && sc.Conflict != ConflictAllow {
		d.errorf("sampling_contract.conflict", nil, "must be %s or %s, got %q", ConflictReject, ConflictAllow, sc.Conflict)
	}
	for _, name := range d.order["sampling_contract.params"] {
		rule, ok := sc.Params[name]
		if !ok {
			continue
		}
		dom, _ := domainOf(name)
		p := "sampling_contract.params." + name
		if rule.Pinned {
			if why := dom.checkRule(rule.Value, rule.IntValue); why != "" {
				d.errorf(p, nil, "%s", why)
			}
			continue
		}
		inDomain := true
		for _, b := range []struct {
			key string
			v   float64
			i   int64
			set bool
		}{{"min", rule.Min, rule.IntMin, true}, {"max", rule.Max, rule.IntMax, true}, {"default", rule.Default, rule.IntDefault, rule.HasDefault}} {
			if !b.set {
				continue
			}
			if why := dom.checkRule(b.v, b.i); why != "" {
				d.errorf(p+"."+b.key, nil, "%s", why)
				inDomain = false
			}
		}
		switch {
		case !inDomain:
		case dom.whole && rule.IntMin > rule.IntMax:
			d.errorf(p, nil, "min %d is greater than max %d", rule.IntMin, rule.IntMax)
		case dom.whole && rule.HasDefault && (rule.IntDefault < rule.IntMin || rule.IntDefault > rule.IntMax):
			d.errorf(p+".default", nil, "%d is outside the band [%d, %d]", rule.IntDefault, rule.IntMin, rule.IntMax)
		case dom.whole:
		case rule.Min > rule.Max:
			d.errorf(p, nil, "min %s is greater than max %s", formatNumber(rule.Min), formatNumber(rule.Max))
		case rule.HasDefault && (rule.Default < rule.Min || rule.Default > rule.Max):
			d.errorf(p+".default", nil, "%s is outside the band [%s, %s]",
				formatNumber(rule.Default), formatNumber(rule.Min), formatNumber(rule.Max))
		}
		if sc.Conflict == ConflictAllow && !rule.HasDefault {
			d.errorf(p, nil, "a band without default does nothing under conflict: allow (add a default or pin the value)")
		}
	}
}

// armParams decodes an upstream's params: governed names to numbers
// (SPEC §6.6). Domains and the contract are checked by validateArmParams.
func (d *decoder) armParams(path string, n *yaml.Node, v reflect.Value) {
	params := ArmParams{}
	v.Set(reflect.ValueOf(params))
	for _, p := range d.governed(path, n, "expected a mapping of parameter names to values, got %s") {
		kp := joinPath(path, p.key)
		val := deref(p.v)
		if val.Kind != yaml.ScalarNode || isNull(val) {
			d.errorf(kp, val, "expected a number, got %s", describeValue(val))
			continue
		}
		f, text, ok := d.numberText(kp, val)
		if !ok {
			continue
		}
		ap := ArmParam{Value: f}
		if d.whole(kp, val, p.key, text, f, &ap.Int) {
			params[p.key] = ap
		}
	}
}

// validateArmParams checks an arm's params against the engine's domains
// and the sampling contract: an arm may only send what the contract
// admits (SPEC §6.6).
func (d *decoder) validateArmParams(path string, params ArmParams, sc *SamplingContract) {
	path += ".params"
	for _, name := range d.order[path] {
		ap, ok := params[name]
		if !ok {
			continue
		}
		kp := path + "." + name
		dom, _ := domainOf(name)
		if why := dom.checkRule(ap.Value, ap.Int); why != "" {
			d.errorf(kp, nil, "%s", why)
			continue
		}
		if sc == nil {
			continue
		}
		rule, ok := sc.Params[name]
		if !ok {
			continue
		}
		cp := "sampling_contract.params." + name
		switch {
		case dom.whole && rule.Pinned && ap.Int != rule.IntValue:
			d.errorf(kp, nil, "%d violates %s: expected %d", ap.Int, cp, rule.IntValue)
		case dom.whole && !rule.Pinned && (ap.Int < rule.IntMin || ap.Int > rule.IntMax):
			d.errorf(kp, nil, "%d violates %s: expected a value in [%d, %d]", ap.Int, cp, rule.IntMin, rule.IntMax)
		case dom.whole:
		case rule.Pinned && ap.Value != rule.Value:
			d.errorf(kp, nil, "%s violates %s: expected %s", formatNumber(ap.Value), cp, formatNumber(rule.Value))
		case !rule.Pinned && (ap.Value < rule.Min || ap.Value > rule.Max):
			d.errorf(kp, nil, "%s violates %s: expected a value in [%s, %s]", formatNumber(ap.Value), cp, formatNumber(rule.Min), formatNumber(rule.Max))
		}
	}
}
