package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestSamplingContractRules(t *testing.T) {
	tests := []struct {
		name   string
		params string
		allow  bool
		want   map[string]ParamRule
		errs   []string
	}{
		{name: "pin", params: "{temperature: 0.7}", want: map[string]ParamRule{"temperature": {Pinned: true, Value: 0.7}}},
		{name: "band", params: "{top_p: {min: 0.8, max: 1.0}}", want: map[string]ParamRule{"top_p": {Min: 0.8, Max: 1}}},
		{name: "band with default", params: "{top_k: {min: 1, max: 100, default: 40}}", want: map[string]ParamRule{"top_k": {Min: 1, Max: 100, HasDefault: true, Default: 40, IntMin: 1, IntMax: 100, IntDefault: 40}}},
		{name: "exact band", params: "{n: {min: 1, max: 1}}", want: map[string]ParamRule{"n": {Min: 1, Max: 1, IntMin: 1, IntMax: 1}}},
		{name: "top_k -1", params: "{top_k: -1}", want: map[string]ParamRule{"top_k": {Pinned: true, Value: -1, IntValue: -1}}},
		{name: "whole float", params: "{n: 2.0}", want: map[string]ParamRule{"n": {Pinned: true, Value: 2, IntValue: 2}}},
		{name: "every governed name", params: "{temperature: 0, top_p: 1, top_k: 1, min_p: 0, repetition_penalty: 2, frequency_penalty: -2, presence_penalty: 2, n: 128}",
			want: map[string]ParamRule{
				"temperature": {Pinned: true, Value: 0}, "top_p": {Pinned: true, Value: 1}, "top_k": {Pinned: true, Value: 1, IntValue: 1}, "min_p": {Pinned: true, Value: 0},
				"repetition_penalty": {Pinned: true, Value: 2}, "frequency_penalty": {Pinned: true, Value: -2}, "presence_penalty": {Pinned: true, Value: 2}, "n": {Pinned: true, Value: 128, IntValue: 128},
			}},
		{name: "allow with defaults", allow: true, params: "{top_p: {min: 0.8, max: 1, default: 0.9}, temperature: 0.7}",
			want: map[string]ParamRule{"top_p": {Min: 0.8, Max: 1, HasDefault: true, Default: 0.9}, "temperature": {Pinned: true, Value: 0.7}}},
		{name: "empty params", params: "{}", want: map[string]ParamRule{}},
		{name: "unknown name", params: "{max_tokens: 10}", errs: []string{"sampling_contract.params.max_tokens: unknown parameter; the governed parameters are temperature, top_p, top_k, min_p, repetition_penalty, frequency_penalty, presence_penalty, n"}},
		{name: "temperature domain", params: "{temperature: -0.1}", errs: []string{"sampling_contract.params.temperature: -0.1 is outside the domain of temperature: [0, 2]"}},
		{name: "top_p open bottom", params: "{top_p: 0}", errs: []string{"sampling_contract.params.top_p: 0 is outside the domain of top_p: (0, 1]"}},
		{name: "top_p above", params: "{top_p: 1.01}", errs: []string{"sampling_contract.params.top_p: 1.01 is outside the domain of top_p: (0, 1]"}},
		{name: "top_k zero", params: "{top_k: 0}", errs: []string{"sampling_contract.params.top_k: 0 is outside the domain of top_k: a whole number ≥ 1, or -1"}},
		{name: "top_k -2", params: "{top_k: -2}", errs: []string{"sampling_contract.params.top_k: -2 is outside the domain of top_k: a whole number ≥ 1, or -1"}},
		{name: "top_k fraction", params: "{top_k: 1.5}", errs: []string{"sampling_contract.params.top_k: 1.5 is not a whole number (top_k is an integer parameter)"}},
		{name: "top_k beyond exact integers", params: "{top_k: 1e300}", errs: []string{"sampling_contract.params.top_k: 1e300 is out of range (top_k is a 64-bit integer parameter)"}},
		{name: "top_k past 2^53, exact", params: "{top_k: 9007199254740993}", want: map[string]ParamRule{"top_k": {Pinned: true, Value: 9007199254740992, IntValue: 9007199254740993}}},
		{name: "top_k band past 2^53, exact", params: "{top_k: {min: 9007199254740993, max: 9007199254740995, default: 9007199254740994}}",
			want: map[string]ParamRule{"top_k": {Min: 9007199254740992, Max: 9007199254740996, HasDefault: true, Default: 9007199254740994, IntMin: 9007199254740993, IntMax: 9007199254740995, IntDefault: 9007199254740994}}},
		{name: "top_k past int64", params: "{top_k: 9223372036854775808}", errs: []string{"sampling_contract.params.top_k: 9223372036854775808 is out of range (top_k is a 64-bit integer parameter)"}},
		{name: "top_k band exact order", params: "{top_k: {min: 9007199254740993, max: 9007199254740992}}", errs: []string{"sampling_contract.params.top_k: min 9007199254740993 is greater than max 9007199254740992"}},
		{name: "min_p", params: "{min_p: 1.5}", errs: []string{"sampling_contract.params.min_p: 1.5 is outside the domain of min_p: [0, 1]"}},
		{name: "repetition_penalty zero", params: "{repetition_penalty: 0}", errs: []string{"sampling_contract.params.repetition_penalty: 0 is outside the domain of repetition_penalty: (0, 2]"}},
		{name: "frequency_penalty", params: "{frequency_penalty: {min: -2.5, max: 0}}", errs: []string{"sampling_contract.params.frequency_penalty.min: -2.5 is outside the domain of frequency_penalty: [-2, 2]"}},
		{name: "presence_penalty", params: "{presence_penalty: 2.5}", errs: []string{"sampling_contract.params.presence_penalty: 2.5 is outside the domain of presence_penalty: [-2, 2]"}},
		{name: "n zero", params: "{n: 0}", errs: []string{"sampling_contract.params.n: 0 is outside the domain of n: a whole number in [1, 128]"}},
		{name: "n 129", params: "{n: 129}", errs: []string{"sampling_contract.params.n: 129 is outside the domain of n: a whole number in [1, 128]"}},
		{name: "min above max", params: "{temperature: {min: 1, max: 0.5}}", errs: []string{"sampling_contract.params.temperature: min 1 is greater than max 0.5"}},
		{name: "default outside", params: "{temperature: {min: 0.5, max: 1, default: 0.2}}", errs: []string{"sampling_contract.params.temperature.default: 0.2 is outside the band [0.5, 1]"}},
		{name: "missing max", params: "{temperature: {min: 0.5}}", errs: []string{"sampling_contract.params.temperature: a band needs both min and max (missing max)"}},
		{name: "missing both", params: "{temperature: {default: 0.5}}", errs: []string{"sampling_contract.params.temperature: a band needs both min and max (missing min and max)"}},
		{name: "unknown band key", params: "{temperature: {min: 0, max: 1, step: 0.1}}", errs: []string{"sampling_contract.params.temperature.step: unknown key; a band has min, max and default"}},
		{name: "string", params: "{temperature: '0.7'}", errs: []string{`sampling_contract.params.temperature: expected a number, got the quoted string "0.7"`}},
		{name: "boolean", params: "{temperature: true}", errs: []string{`sampling_contract.params.temperature: expected a number, got "true"`}},
		{name: "nan", params: "{temperature: .nan}", errs: []string{`sampling_contract.params.temperature: ".nan" is not a finite number`}},
		{name: "infinity", params: "{top_k: {min: 1, max: .inf}}", errs: []string{`sampling_contract.params.top_k.max: ".inf" is not a finite number`}},
		{name: "list", params: "{temperature: [0, 1]}", errs: []string{"sampling_contract.params.temperature: expected a number (a pinned value) or a band {min, max, default}, got a list"}},
		{name: "null", params: "{temperature: ~}", errs: []string{"sampling_contract.params.temperature: expected a number (a pinned value) or a band {min, max, default}, got null"}},
		{name: "null bound", params: "{temperature: {min: ~, max: 1}}", errs: []string{"sampling_contract.params.temperature.min: expected a number, got null"}},
		{name: "allow without default", allow: true, params: "{top_p: {min: 0.8, max: 1}}", errs: []string{"sampling_contract.params.top_p: a band without default does nothing under conflict: allow (add a default or pin the value)"}},
		{name: "every problem at once", params: "{temperature: 3, top_p: {min: 0.9, max: 0.1}, foo: 1}", errs: []string{
			"sampling_contract.params.temperature: 3 is outside the domain of temperature: [0, 2]",
			"sampling_contract.params.top_p: min 0.9 is greater than max 0.1",
			"sampling_contract.params.foo: unknown parameter; the governed parameters are temperature, top_p, top_k, min_p, repetition_penalty, frequency_penalty, presence_penalty, n",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conflict := "reject"
			if tt.allow {
				conflict = "allow"
			}
			doc := "sampling_contract:\n  conflict: " + conflict + "\n  params: " + tt.params + "\n"
			cfg, _, err := Parse([]byte(doc), "", nil)
			if tt.errs != nil {
				if err == nil {
					t.Fatalf("params %s: no error; want %q", tt.params, tt.errs)
				}
				if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, tt.errs) {
					t.Errorf("params %s: errors\n%q\nwant\n%q", tt.params, got, tt.errs)
				}
				return
			}
			if err != nil {
				t.Fatalf("params %s: %v", tt.params, err)
			}
			if got := cfg.SamplingContract.Params; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("params %s = %+v; want %+v", tt.params, got, tt.want)
			}
			if got := cfg.SamplingContract.Conflict; got != conflict {
				t.Errorf("conflict = %q; want %q", got, conflict)
			}
		})
	}
}

func TestSamplingConflict(t *testing.T) {
	tests := []struct {
		doc, want string
	}{
		{"sampling_contract: {params: {n: 1}}", "reject"},
		{"sampling_contract: {conflict: allow, params: {n: 1}}", "allow"},
		{"sampling_contract: {conflict: Reject}", `sampling_contract.conflict: must be reject or allow, got "Reject"`},
	}
	for _, tt := range tests {
		cfg, _, err := Parse([]byte(tt.doc), "", nil)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = cfg.SamplingContract.Conflict
		}
		if got != tt.want {
			t.Errorf("%s: got %q; want %q", tt.doc, got, tt.want)
		}
	}
}

func TestGovernedParams(t *testing.T) {
	want := []string{"temperature", "top_p", "top_k", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty", "n"}
	if got := GovernedParams(); !reflect.DeepEqual(got, want) {
		t.Errorf("GovernedParams() = %q; want %q", got, want)
	}
}
