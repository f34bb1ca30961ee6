package serve

import (
	"testing"

	"github.com/graygate/graygate/schemas/events"
)

// FuzzUpstreamStatusError: whatever a late 4xx's body holds (an OpenAI
// envelope, vLLM's top-level object, text, bytes), the final error is
// never the gateway's own 502 pair and always says something, and the
// status is the upstream's (SPEC §3 rev. 4).
func FuzzUpstreamStatusError(f *testing.F) {
	for _, s := range []string{
		``, `not json`, `{"error":{"message":"m","type":"t","param":"p","code":"c"}}`,
		`{"error":{"message":"m","type":"server_error","code":"upstream_error"}}`,
		`{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}`,
		`{"object":"error"}`, `{"error":null}`, `{"error":{"code":{"a":1},"param":[1]}}`, "\xff\xfe",
	} {
		f.Add(400, []byte(s))
		f.Add(429, []byte(s))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		status = 400 + (status%100+100)%100
		e := upstreamStatusError(events.ArmPrimary, status, body)
		if e.Status != status {
			t.Errorf("status %d; want the upstream's %d", e.Status, status)
		}
		if e.Type == "server_error" || e.Code == "upstream_error" || e.Type == "" || e.Code == "" || e.Msg == "" {
			t.Errorf("late %d %q gave %+v; want a type, code and message of its own", status, body, e)
		}
	})
}
