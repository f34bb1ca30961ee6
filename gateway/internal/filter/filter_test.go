package filter

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

func agentSchema(t *testing.T) []byte { return readAgentSchema(t) }

func readAgentSchema(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "schemas", "contracts", "agent-action.schema.json"))
	testenv.Must(t, err)
	return b
}

// chatBodySchema is a body target whose first choice's content must be
// "ok".
func chatBodySchema(t *testing.T) *Filter {
	f, err := New([]byte(`{"type":"object","required":["object","choices"],"properties":{"object":{"const":"chat.completion"},`+
		`"choices":{"type":"array","items":[{"required":["index","message"],"properties":{"message":{"properties":{"content":{"const":"ok"}}}}}]}}}`), TargetBody)
	testenv.Must(t, err)
	return f
}

func TestCheck(t *testing.T) {
	content, err := New(agentSchema(t), TargetContent)
	testenv.Must(t, err)
	body, err := New([]byte(`{"type":"object","required":["choices"]}`), TargetBody)
	testenv.Must(t, err)
	plain, err := New(nil, TargetContent)
	testenv.Must(t, err)
	good := `{"action":"search","parameters":{"query":"weather"},"confidence_score":0.9}`
	cases := []struct {
		name     string
		f        *Filter
		body     string
		contents []string
		want     events.SampleReason
		field    string
	}{
		{"valid content", content, `{}`, []string{good}, OK, ""},
		{"two valid choices", content, `{}`, []string{good, good}, OK, ""},
		{"no content to check (tool call)", content, `{}`, nil, OK, ""},
		{"content not JSON", content, `{}`, []string{"Sure! Here you go"}, events.ReasonInvalidJSON, "choices[0].message.content"},
		{"content breaks schema", content, `{}`, []string{`{"action":"search","confidence_score":"high"}`}, events.ReasonSchemaViolation, ""},
		{"second choice breaks schema", content, `{}`, []string{good, `{"action":"dance"}`}, events.ReasonSchemaViolation, ""},
		{"body target valid", body, `{"choices":[]}`, nil, OK, ""},
		{"body target invalid", body, `{"id":"x"}`, nil, events.ReasonSchemaViolation, "(root)"},
		{"no schema accepts any content", plain, `{}`, []string{"not json"}, OK, ""},
		// A stream (no body): the body target judges the chat completion
		// its contents assemble to.
		{"body target, stream", body, "", []string{"prose, not JSON"}, OK, ""},
		{"body target, stream, a schema on the content", chatBodySchema(t), "", []string{"prose"}, events.ReasonSchemaViolation, "choices.0.message.content"},
		{"body target, stream, content as the schema wants", chatBodySchema(t), "", []string{"ok"}, OK, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var contents [][]byte
			for _, s := range c.contents {
				contents = append(contents, []byte(s))
			}
			var b []byte // nil: a stream
			if c.body != "" {
				b = []byte(c.body)
			}
			got, errs := c.f.Check(b, contents)
			if got != c.want {
				t.Fatalf("Check = %q %v; want %q", got, errs, c.want)
			}
			if got != OK && len(errs) == 0 {
				t.Errorf("no validation errors for a refused answer")
			}
			if c.field != "" && errs[0].Field != c.field {
				t.Errorf("first error field %q; want %q", errs[0].Field, c.field)
			}
		})
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	if _, err := New([]byte(`{"type": 12}`), TargetContent); err == nil {
		t.Error("New(bad schema) succeeded")
	}
	if _, err := New(nil, "headers"); err == nil {
		t.Error("New(bad target) succeeded")
	}
}
