package config

import (
	"strings"
	"testing"
)

// An upstream url (or a pool endpoint) that ends in an API path is a
// mistake the gateway would turn into .../chat/completions/chat/completions:
// the error names the base URL to use instead, never the credentials.
func TestUpstreamURLEndpointPath(t *testing.T) {
	doc := func(primary string) string {
		return "routing:\n  routes:\n    - model: m\n      candidates: [{deployment: d}]\n" +
			"deployments:\n  d:\n    primary: " + primary + "\n"
	}
	for _, tc := range []struct {
		name, primary string
		err           string // the error line; "" when valid
	}{
		{"chat", "{model: m, url: http://h:8000/v1/chat/completions}",
			"deployments.d.primary.url: upstream url http://h:8000/v1/chat/completions ends in an endpoint path; use the base URL http://h:8000/v1"},
		{"chat with a trailing slash", "{model: m, url: http://h:8000/v1/chat/completions/}",
			"use the base URL http://h:8000/v1"},
		{"completions", "{model: m, url: https://api.example/v2/completions}",
			"deployments.d.primary.url: upstream url https://api.example/v2/completions ends in an endpoint path; use the base URL https://api.example/v2"},
		{"responses", "{model: m, url: http://h/v1/responses}", "use the base URL http://h/v1"},
		{"embeddings", "{model: m, url: http://h/openai/v1/embeddings/}", "use the base URL http://h/openai/v1"},
		{"any case", "{model: m, url: http://h:8000/V1/Chat/Completions}", "use the base URL http://h:8000/V1"},
		{"no version left", "{model: m, url: http://h:8000/chat/completions}",
			"use the base URL http://h:8000 (a url without a path means /v1)"},
		{"credentials are redacted", "{model: m, url: 'http://user:hunter2@h:8000/v1/chat/completions'}",
			"upstream url http://redacted@h:8000/v1/chat/completions ends in an endpoint path; use the base URL http://redacted@h:8000/v1"},
		{"pool endpoint", "{model: m, endpoints: [http://a:8000/v1, http://b:8000/v1/chat/completions]}",
			"deployments.d.primary.endpoints[1]: upstream url http://b:8000/v1/chat/completions ends in an endpoint path; use the base URL http://b:8000/v1"},
		{"base url", "{model: m, url: http://h:8000/v1}", ""},
		{"base url with a slash", "{model: m, url: http://h:8000/v1/}", ""},
		{"no path", "{model: m, url: http://h:8000}", ""},
		{"a path that only contains a name", "{model: m, url: http://h:8000/completions-proxy/v1}", ""},
		{"a word ending like one", "{model: m, url: http://h:8000/mycompletions}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse([]byte(doc(tc.primary)), t.TempDir(), nil)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("Parse(%s) = %v; want valid", tc.primary, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Parse(%s) = %v; want a line containing %q", tc.primary, err, tc.err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}
