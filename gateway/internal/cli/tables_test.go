package cli

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/graygate/graygate/schemas/events"
)

// hostile holds what a table cell must never pass to a terminal: an
// escape sequence, a right-to-left override, an isolate, a line break.
const hostile = "a\x1b[2Jb\u202ec\u2067d\ne"

// rawControls reports the first control or bidirectional character out
// holds besides the table's own line feeds.
func rawControls(t *testing.T, table, out string) {
	t.Helper()
	for _, r := range out {
		if r == '\n' {
			continue
		}
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 {
			t.Fatalf("%s table passes U+%04X to the terminal:\n%s", table, r, out)
		}
	}
	if !strings.Contains(out, `a\x1b[2Jb\u202ec\u2067d\x0ae`) {
		t.Errorf("%s table does not show the hostile text escaped:\n%s", table, out)
	}
}

func TestRolloutTableEscapes(t *testing.T) {
	var out bytes.Buffer
	printEntries(&out, []events.RolloutEntry{{Deployment: hostile, Status: events.RolloutStatus(hostile), Percentage: 5,
		Revision: 3, Actor: events.Actor(hostile), UpdatedAt: hostile, Reason: hostile, Note: hostile, Known: true}})
	rawControls(t, "gateway rollout list", out.String())
}

func TestUpstreamsTableEscapesEveryCell(t *testing.T) {
	esc := strings.NewReplacer("\x1b", `\u001b`, "\u202e", `\u202e`, "\u2067", `\u2067`, "\n", `\n`).Replace(hostile)
	body := `{"upstreams": [{"deployment": "` + esc + `", "arm": "` + esc + `", "balance": "` + esc + `", "index_entries": 3,
		"replicas": [{"replica": "` + esc + `", "state": "` + esc + `", "last_error": "` + esc + `", "engine": null}]}]}`
	srv, _ := adminServer(t, "tok", http.StatusOK, body)
	t.Setenv("GRAYGATE_ADMIN_TOKEN", "tok")
	out, _, err := runUpstreams(srv)
	if err != nil {
		t.Fatalf("gateway upstreams: %v", err)
	}
	rawControls(t, "gateway upstreams", out)
	if n := strings.Count(out, `a\x1b[2Jb\u202ec\u2067d\x0ae`); n < 6 {
		t.Errorf("gateway upstreams escaped %d cells; want deployment, arm, balance, replica, state and last error:\n%s", n, out)
	}
}
