package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

// layeredValues are three distinct values of one option, one per way of
// setting it, and what get() then shows.
type layeredValues struct {
	flag, live, header string // as typed on the command line / in JSON / in a header
	liveJSON           string // the live value as a JSON literal
	wantFlag, wantLive string // get() after flag / after live, formatted with %v
	wantHeader         string
}

// layered lists a case for every option; TestOptionsCovered keeps it complete.
var layered = map[string]layeredValues{
	"latency":           {flag: "10ms", live: "20ms", header: "30ms", liveJSON: `"20ms"`, wantFlag: "10ms", wantLive: "20ms", wantHeader: "30ms"},
	"ttft":              {flag: "1s", live: "2s", header: "3s", liveJSON: `"2s"`, wantFlag: "1s", wantLive: "2s", wantHeader: "3s"},
	"inter-token":       {flag: "1ms", live: "2ms", header: "3ms", liveJSON: `"2ms"`, wantFlag: "1ms", wantLive: "2ms", wantHeader: "3ms"},
	"completion-tokens": {flag: "5", live: "6", header: "7", liveJSON: `6`, wantFlag: "5", wantLive: "6", wantHeader: "7"},
	"answer-bytes":      {flag: "1024", live: "2048", header: "4096", liveJSON: `2048`, wantFlag: "1024", wantLive: "2048", wantHeader: "4096"},
	"usage":             {flag: "false", live: "true", header: "false", liveJSON: `true`, wantFlag: "false", wantLive: "true", wantHeader: "false"},
	"bytes-per-token":   {flag: "3.5", live: "2", header: "4.25", liveJSON: `2`, wantFlag: "3.5", wantLive: "2", wantHeader: "4.25"},
	"content":           {flag: "text", live: "schema-break", header: "echo", liveJSON: `"schema-break"`, wantFlag: "text", wantLive: "schema-break", wantHeader: "echo"},
	"finish-reason":     {flag: "length", live: "stop", header: "length", liveJSON: `"stop"`, wantFlag: "length", wantLive: "stop", wantHeader: "length"},
	"tool-calls":        {flag: "1", live: "2", header: "3", liveJSON: `2`, wantFlag: "1", wantLive: "2", wantHeader: "3"},
	"tool-name":         {flag: "lookup", live: "fetch", header: "run", liveJSON: `"fetch"`, wantFlag: "lookup", wantLive: "fetch", wantHeader: "run"},
	"tool-args":         {flag: `{"a":1}`, live: `{"b":2}`, header: `{"c":3}`, liveJSON: `"{\"b\":2}"`, wantFlag: `{"a":1}`, wantLive: `{"b":2}`, wantHeader: `{"c":3}`},
	"status":            {flag: "500", live: "429", header: "503", liveJSON: `429`, wantFlag: "500", wantLive: "429", wantHeader: "503"},
	"retry-after":       {flag: "1", live: "2", header: "3", liveJSON: `"2"`, wantFlag: "1", wantLive: "2", wantHeader: "3"},
	"hang":              {flag: "true", live: "false", header: "true", liveJSON: `false`, wantFlag: "true", wantLive: "false", wantHeader: "true"},
	"drop-after":        {flag: "1", live: "2", header: "0", liveJSON: `2`, wantFlag: "1", wantLive: "2", wantHeader: "0"},
	"model":             {flag: "m-flag", live: "m-live", header: "m-header", liveJSON: `"m-live"`, wantFlag: "m-flag", wantLive: "m-live", wantHeader: "m-header"},
	"spread":            {flag: "0.5", live: "0.25", header: "1", liveJSON: `0.25`, wantFlag: "0.5", wantLive: "0.25", wantHeader: "1"},
	"inflate-on":        {flag: "v1.3:1.6", live: "LONG:2", header: "x:0.5", liveJSON: `"LONG:2"`, wantFlag: "v1.3:1.6", wantLive: "LONG:2", wantHeader: "x:0.5"},
}

func TestOptionsCovered(t *testing.T) {
	for _, o := range options {
		if _, ok := layered[o.name]; !ok {
			t.Errorf("option %q has no precedence case", o.name)
		}
	}
}

// TestPrecedence sets every option by flag, then live through PUT
// /_mock/config, then by header, and checks the effective value at each
// step: header wins, then live config, then flag; null restores the flag.
func TestPrecedence(t *testing.T) {
	for _, o := range options {
		v := layered[o.name]
		t.Run(o.name, func(t *testing.T) {
			ts := newTestServer(t, "--"+o.name+"="+v.flag)
			get := func(h http.Header) string {
				t.Helper()
				set, err := ts.settingsFor(h)
				if err != nil {
					t.Fatalf("settingsFor(%v) error: %v", h, err)
				}
				return fmt.Sprint(optionsByName[o.name].get(&set))
			}
			header := http.Header{}
			header.Set(headerPrefix+o.name, v.header)

			if got := get(nil); got != v.wantFlag {
				t.Errorf("flag only: %s = %q; want %q", o.name, got, v.wantFlag)
			}
			if got := get(header); got != v.wantHeader {
				t.Errorf("flag and header: %s = %q; want %q", o.name, got, v.wantHeader)
			}
			ts.putConfig(t, `{"`+o.name+`":`+v.liveJSON+`}`)
			if got := get(nil); got != v.wantLive {
				t.Errorf("flag and live: %s = %q; want %q", o.name, got, v.wantLive)
			}
			if got := get(header); got != v.wantHeader {
				t.Errorf("flag, live and header: %s = %q; want %q", o.name, got, v.wantHeader)
			}
			r := ts.do(t, http.MethodGet, "/_mock/config", "", nil)
			var shown map[string]any
			if err := json.Unmarshal(r.body, &shown); err != nil {
				t.Fatalf("GET /_mock/config %s: %v", r.body, err)
			}
			if got := fmt.Sprint(shown[o.name]); got != v.wantLive {
				t.Errorf("GET /_mock/config %s = %q; want %q", o.name, got, v.wantLive)
			}
			ts.putConfig(t, `{"`+o.name+`":null}`)
			if got := get(nil); got != v.wantFlag {
				t.Errorf("after null: %s = %q; want the flag's %q", o.name, got, v.wantFlag)
			}
		})
	}
}

func TestConfigReset(t *testing.T) {
	ts := newTestServer(t, "--completion-tokens=3")
	ts.putConfig(t, `{"completion-tokens": 9, "content": "text"}`)
	r := ts.do(t, http.MethodDelete, "/_mock/config", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("DELETE /_mock/config = %d; want 200", r.status)
	}
	set := *ts.live.Load()
	if set.CompletionTokens != 3 || set.Content != contentJSON {
		t.Errorf("after reset completion-tokens=%d content=%q; want 3 and json", set.CompletionTokens, set.Content)
	}
}

func TestPutConfigErrors(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		wantMsgs []string
	}{
		{"not an object", `[1]`, []string{"JSON object"}},
		{"unknown key", `{"latncy":"1s"}`, []string{"latncy: unknown option"}},
		{"bad duration", `{"latency":"soon"}`, []string{"latency: want a non-negative Go duration"}},
		{"negative duration", `{"ttft":"-1s"}`, []string{"ttft: want a non-negative"}},
		{"bad content", `{"content":"yaml"}`, []string{"content: want json"}},
		{"status out of range", `{"status":99}`, []string{"status: want an integer in [200, 599]"}},
		{"object value", `{"model":{"a":1}}`, []string{"model: want a string, number or boolean"}},
		{"every error listed", `{"usage":"maybe","tool-calls":-1}`, []string{"usage: want true or false", "tool-calls: want an integer"}},
		{"bytes per token zero", `{"bytes-per-token":0}`, []string{"bytes-per-token: want a number in (0, 1e6]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t)
			before := *ts.live.Load()
			r := ts.do(t, http.MethodPut, "/_mock/config", tt.body, nil)
			if r.status != http.StatusBadRequest {
				t.Fatalf("PUT %s = %d; want 400", tt.body, r.status)
			}
			for _, want := range tt.wantMsgs {
				if !strings.Contains(string(r.body), want) {
					t.Errorf("PUT %s body = %s; want it to mention %q", tt.body, r.body, want)
				}
			}
			if after := *ts.live.Load(); after != before {
				t.Errorf("PUT %s changed the config to %+v; want unchanged", tt.body, after)
			}
		})
	}
}

func TestBadHeader(t *testing.T) {
	tests := []struct {
		name, header, value, wantMsg string
	}{
		{"unknown option", "X-Mock-Latncy", "1s", "x-mock-latncy: unknown mock option"},
		{"bad value", "x-mock-completion-tokens", "many", "x-mock-completion-tokens: want an integer"},
		{"bad bool", "x-mock-hang", "sometimes", "x-mock-hang: want true or false"},
	}
	ts := newTestServer(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.chat(t, `{"model":"m"}`, map[string]string{tt.header: tt.value})
			if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), tt.wantMsg) {
				t.Errorf("status %d body %s; want 400 mentioning %q", r.status, r.body, tt.wantMsg)
			}
			if !strings.Contains(string(r.body), `"code":"mock_bad_header"`) {
				t.Errorf("body %s; want code mock_bad_header", r.body)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
		check   func(c cli) string
	}{
		{name: "defaults", check: func(c cli) string {
			if c.listen != "127.0.0.1:9001" || c.record != 1000 || c.settings != defaultSettings() {
				return fmt.Sprintf("listen=%q record=%d settings=%+v", c.listen, c.record, c.settings)
			}
			return ""
		}},
		{name: "bare bool flag", args: []string{"--hang"}, check: func(c cli) string {
			if !c.settings.Hang {
				return "hang not set"
			}
			return ""
		}},
		{name: "usage off", args: []string{"--usage=false", "--record", "0"}, check: func(c cli) string {
			if c.settings.Usage || c.record != 0 {
				return fmt.Sprintf("usage=%v record=%d", c.settings.Usage, c.record)
			}
			return ""
		}},
		{name: "negative record", args: []string{"--record=-1"}, wantErr: "--record must not be negative"},
		{name: "bad option value", args: []string{"--content=xml"}, wantErr: "want json"},
		{name: "stray argument", args: []string{"serve"}, wantErr: "unexpected arguments: serve"},
		{name: "help", args: []string{"--help"}, wantErr: errHelpShown.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlags(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseFlags(%q) error = %v; want one containing %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseFlags(%q) error: %v", tt.args, err)
			}
			if msg := tt.check(c); msg != "" {
				t.Errorf("parseFlags(%q): %s", tt.args, msg)
			}
		})
	}
}

// Spread draws lognormal factors: the median stays the configured value,
// and about 68 % of draws fall within one σ (exp(±σ)) of it.
func TestSpread(t *testing.T) {
	const n, sigma = 4000, 0.5
	var below, inside int
	for range n {
		s := Settings{Latency: time.Second, CompletionTokens: 1000, Spread: sigma}
		s.applySpread()
		if s.Latency < time.Second {
			below++
		}
		f := float64(s.Latency) / float64(time.Second)
		if f > math.Exp(-sigma) && f < math.Exp(sigma) {
			inside++
		}
		if s.CompletionTokens < 1 {
			t.Fatalf("completion tokens %d; want at least 1", s.CompletionTokens)
		}
	}
	if frac := float64(below) / n; math.Abs(frac-0.5) > 0.04 {
		t.Errorf("%.3f of latencies below the configured median; want 0.5 ± 0.04", frac)
	}
	if frac := float64(inside) / n; math.Abs(frac-0.6827) > 0.04 {
		t.Errorf("%.3f of latencies within one σ; want 0.683 ± 0.04", frac)
	}
	same := Settings{Latency: time.Second, CompletionTokens: 7}
	same.applySpread()
	if same.Latency != time.Second || same.CompletionTokens != 7 {
		t.Errorf("spread 0 changed the settings: %+v", same)
	}
}

func TestInflateOn(t *testing.T) {
	for _, bad := range []string{"nocolon", ":2", "m:0", "m:abc", "m:101"} {
		var s Settings
		if err := optionsByName["inflate-on"].set(&s, bad); err == nil {
			t.Errorf("inflate-on %q accepted; want an error", bad)
		}
	}
	cases := []struct {
		inflate, system string
		want            int
	}{
		{"", "You are v1.3", 10},
		{"v1.3:1.6", "You are v1.3", 16},
		{"v1.3:1.6", "You are v1.2", 10},
		{"a:b:2", "has a:b here", 20},
	}
	for _, c := range cases {
		s := Settings{CompletionTokens: 10, InflateOn: c.inflate}
		s.applyInflate(c.system)
		if s.CompletionTokens != c.want {
			t.Errorf("inflate-on %q with system %q: %d tokens; want %d", c.inflate, c.system, s.CompletionTokens, c.want)
		}
	}
}
