package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestE2EOperatorTextIsText: a rollout reason holding NUL, a control or a
// bidirectional formatting character is refused through the admin API
// with 400 bad_request naming the field, and nothing is appended (SPEC §11
// rev. 4); one already in the log (stored by an older writer) is applied
// and shown escaped by `gateway rollout list` (§8), never reversing the
// row.
func TestE2EOperatorTextIsText(t *testing.T) {
	ns := testenv.StartNATS(t)
	primary := testenv.StartMock(t)
	gw := startEventsGateway(t, ns.URL, primary.URL, primary.URL)
	before := rolloutOf(t, gw).Revision

	refused := map[string]string{
		"NUL":                     `schema\u0000drift`,
		"tab":                     `a\tb`,
		"line feed":               `first line\nsecond`,
		"carriage return":         `x\ry`,
		"escape sequence":         `\u001b[2Jcleared`,
		"DEL":                     `a\u007f`,
		"C1 control":              "a\u0085b",
		"right-to-left override":  "promote \u202egnp.exe",
		"left-to-right embedding": `\u202aembedded`,
		"isolate":                 "\u2067isolated\u2069",
		"right-to-left mark":      `a\u200fb`,
		"line separator":          `a\u2028b`,
	}
	for name, reason := range refused {
		body := `{"percentage": 5, "reason": "` + reason + `"}`
		code, b := admin(t, gw, http.MethodPut, "/admin/rollouts/qwen", body)
		var env struct {
			Error struct {
				Code, Message string
				Param         *string
			}
		}
		_ = json.Unmarshal(b, &env)
		if code != http.StatusBadRequest || env.Error.Code != "bad_request" || env.Error.Param == nil || *env.Error.Param != "reason" ||
			!strings.HasPrefix(env.Error.Message, "reason holds ") {
			t.Errorf("%s: PUT %s = %d %s; want 400 bad_request with param reason", name, body, code, b)
		}
	}
	code, b := admin(t, gw, http.MethodPut, "/admin/rollouts/qwen", "{\"percentage\": 5, \"reason\": \"bad \xff byte\"}")
	if code != http.StatusBadRequest || !strings.Contains(string(b), "bad_request") {
		t.Errorf("reason with a byte that is not UTF-8 = %d %s; want 400 bad_request", code, b)
	}
	// The re-affirmation's reason is the same text.
	code, b = admin(t, gw, http.MethodPost, "/admin/rollouts/qwen/reaffirm", `{"reason": "rotate \u202ekey"}`)
	if code != http.StatusBadRequest || !strings.Contains(string(b), `"param":"reason"`) {
		t.Errorf("reaffirm with U+202E in the reason = %d %s; want 400 bad_request with param reason", code, b)
	}
	if r := rolloutOf(t, gw); r.Revision != before {
		t.Errorf("after the refusals the revision is %d; want %d (nothing appended)", r.Revision, before)
	}
	// Text that is text passes: other scripts, emoji, a written-out escape.
	if code, b := admin(t, gw, http.MethodPut, "/admin/rollouts/qwen", `{"percentage": 5, "reason": "回滚测试 — تراجع 🚦 \\u202e"}`); code != http.StatusOK {
		t.Errorf("a reason in other scripts = %d %s; want 200", code, b)
	}

	// An event an older writer stored, holding U+202E and a NUL: applied,
	// and shown escaped.
	_, js := testenv.Connect(t, ns.URL)
	stored := "rolled back \u202egnp.exe\x00 by hand"
	ev := &events.RolloutChanged{Deployment: "qwen", Percentage: 7, Status: events.StatusActive, Reason: stored, Actor: events.ActorAdmin}
	env, err := events.NewEnvelope(events.TypeRolloutChanged, "test", ev, time.Now(), testenv.UUIDv7(t))
	testenv.Must(t, err)
	raw, _ := json.Marshal(env)
	_, err = js.Publish(context.Background(), events.RolloutSubject("qwen"), raw)
	testenv.Must(t, err)
	testenv.WaitFor(t, 5*time.Second, "the stored event applied", func() bool { return rolloutOf(t, gw).Percentage == 7 })
	code, out, errs := rolloutCLI(t, gw, "admin-secret", "list")
	if code != 0 {
		t.Fatalf("rollout list = %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, `rolled back \u202egnp.exe\x00 by hand`) || strings.ContainsAny(out, "\u202e\x00") {
		t.Errorf("rollout list shows the reason as %q; want U+202E and NUL escaped (\\u202e, \\x00)", out)
	}
	t.Logf("gateway rollout list:\n%s", out)
}
