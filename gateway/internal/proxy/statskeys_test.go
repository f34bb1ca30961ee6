package proxy

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// cacheUpstream answers every chat request with prompt_tokens 10 and, by
// a word in the request, usage.prompt_tokens_details.cached_tokens: "all"
// 10, "half" 5, "less" 4, "zero" 0, none otherwise. gray's model answers
// 500 when the request says "graybreak", and reports 0 cached tokens when
// it says "graycold". A streamed request is answered
// as a stream whose last chunk carries the usage.
func cacheUpstream(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body := string(b)
		if strings.Contains(body, "qwen2.5-32b-v2") && strings.Contains(body, "graybreak") {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":{"message":"down"}}`)
			return
		}
		details := ""
		for word, n := range map[string]int{"all": 10, "half": 5, "less": 4, "zero": 0} {
			if strings.Contains(body, word+"-cached") {
				details = fmt.Sprintf(`,"prompt_tokens_details":{"cached_tokens":%d}`, n)
			}
		}
		if strings.Contains(body, "qwen2.5-32b-v2") && strings.Contains(body, "graycold") {
			details = `,"prompt_tokens_details":{"cached_tokens":0}`
		}
		usage := `"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12` + details + `}`
		if strings.Contains(body, `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"{}"}}]}`+"\n\n")
			io.WriteString(w, `data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n")
			io.WriteString(w, `data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[],`+usage+`}`+"\n\n")
			io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"{}"},"finish_reason":"stop"}],`+usage+`}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestStatisticsBandAndCached: through the gateway, each statistics entry
// carries the request's first matched context band (in config order) and
// the cache class of its own attempt's answer (SPEC §7 rev. 4): a
// fallback's failed gray attempt and primary's answer share the band and
// each have their own cached flag.
func TestStatisticsBandAndCached(t *testing.T) {
	up := cacheUpstream(t)
	cfg := grayConfig(t, up, up, 0)
	cfg.Deployments["qwen"].Rollout.SchemaJSON = nil
	// A request of up to 1,000 tokens matches short_context and
	// up_to_2k, and counts in short_context; one of 1,001–2,000 matches
	// up_to_2k and long_context, and counts in up_to_2k (the first in
	// config order, not the narrowest); a longer one matches none.
	cfg.Routing.Signals.Context = []config.ContextBand{
		{Name: "short_context", MaxTokens: config.Tokens{Set: true, Value: 1000}},
		{Name: "up_to_2k", MinTokens: config.Tokens{Set: true, Value: 0}, MaxTokens: config.Tokens{Set: true, Value: 2000}},
		{Name: "long_context", MinTokens: config.Tokens{Set: true, Value: 1001}, MaxTokens: config.Tokens{Set: true, Value: 2000}},
	}
	g, agg, sk, rec := statsGateway(t, cfg)
	force := []string{"X-Gray-Rollout", "true", "Authorization", "Bearer " + testerToken}
	chat := func(content string, stream bool) string {
		return fmt.Sprintf(`{"model":"agent-chat","stream":%v,"messages":[{"role":"user","content":"%s"}]}`, stream, content)
	}
	type key struct {
		arm    events.Arm
		stream bool
		band   string
		cached bool
	}
	cases := []struct {
		name    string
		body    string
		headers []string
		want    map[key]int64
	}{
		{"all cached", chat("all-cached", false), nil, map[key]int64{{events.ArmPrimary, false, "short_context", true}: 1}},
		{"half cached", chat("half-cached", false), nil, map[key]int64{{events.ArmPrimary, false, "short_context", true}: 1}},
		{"less than half", chat("less-cached", false), nil, map[key]int64{{events.ArmPrimary, false, "short_context", false}: 1}},
		{"zero cached", chat("zero-cached", false), nil, map[key]int64{{events.ArmPrimary, false, "short_context", false}: 1}},
		{"not reported", chat("hello", false), nil, map[key]int64{{events.ArmPrimary, false, "short_context", false}: 1}},
		{"streamed, cached", chat("all-cached", true), nil, map[key]int64{{events.ArmPrimary, true, "short_context", true}: 1}},
		{"gray answer cached", chat("half-cached", false), force, map[key]int64{{events.ArmGray, false, "short_context", true}: 1}},
		{"fallback: gray not cached, primary cached", chat("all-cached graybreak", false), force, map[key]int64{
			{events.ArmGray, false, "short_context", false}: 1, {events.ArmPrimary, false, "short_context", true}: 1}},
		// 6,000 bytes → about 1,507 tokens.
		{"long request", chat(strings.Repeat("a", 6000)+" all-cached", false), nil, map[key]int64{{events.ArmPrimary, false, "up_to_2k", true}: 1}},
		// 10,000 bytes → about 2,507 tokens: no band.
		{"longer than every band", chat(strings.Repeat("a", 10000)+" all-cached", false), nil, map[key]int64{{events.ArmPrimary, false, "", true}: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec.reset()
			flushArms(t, agg, sk)
			if resp, out := post(t, g.url, c.body, c.headers...); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			rec.waitRecords(t, 1)
			agg.Flush(time.Now().Truncate(time.Second))
			got := map[key]int64{}
			for _, d := range sk.take() {
				for _, a := range d.(*events.StatsInterval).Arms {
					got[key{a.Arm, a.Stream, a.Band, a.Cached}] += a.Requests
				}
			}
			if !maps.Equal(got, c.want) {
				t.Errorf("entries %v; want %v", got, c.want)
			}
		})
	}
}

// TestShadowStatisticsBandAndCached: a shadow copy counts under the
// request's band and its own answer's cache class.
func TestShadowStatisticsBandAndCached(t *testing.T) {
	up := cacheUpstream(t)
	cfg := grayConfig(t, up, up, 100)
	cfg.Deployments["qwen"].Rollout.Mode = config.ModeShadow
	cfg.Deployments["qwen"].Rollout.SchemaJSON = nil
	cfg.Routing.Signals.Context = []config.ContextBand{{Name: "short_context", MaxTokens: config.Tokens{Set: true, Value: 1000}}}
	g, agg, sk, rec := statsGateway(t, cfg)
	post(t, g.url, `{"model":"agent-chat","messages":[{"role":"user","content":"all-cached graycold"}]}`)
	rec.waitRecords(t, 2) // primary's and the shadow copy's
	agg.Flush(time.Now().Truncate(time.Second))
	got := map[string]int64{}
	for _, d := range sk.take() {
		for _, a := range d.(*events.StatsInterval).Arms {
			got[fmt.Sprintf("%s/%s/%v", a.Arm, a.Band, a.Cached)] += a.Requests
		}
	}
	if want := map[string]int64{"primary/short_context/true": 1, "shadow/short_context/false": 1}; !maps.Equal(got, want) {
		t.Errorf("entries %v; want %v", got, want)
	}
}
