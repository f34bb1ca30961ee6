package deploy

import (
	"encoding/json"
	"testing"

	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/schemas/config"
)

func TestArmPromptEdit(t *testing.T) {
	text := "Be <brief>.\n\"v1.3\""
	replace := NewPrompt(&config.Prompt{Text: []byte(text), Mode: config.PromptReplace})
	prepend := NewPrompt(&config.Prompt{Text: []byte(text), Mode: config.PromptPrepend})
	cases := []struct {
		name string
		p    *Prompt
		body string
		want string // the messages after the edit, as JSON
	}{
		{"replace system", replace, `{"messages":[{"role":"system","content":"old"},{"role":"user","content":"hi"}]}`,
			`[{"role":"system","content":"Be <brief>.\n\"v1.3\""},{"role":"user","content":"hi"}]`},
		{"replace developer parts", replace, `{"messages":[{"role":"user","content":"a"},{"content":[{"type":"text","text":"x"}],"role":"developer"}]}`,
			`[{"role":"user","content":"a"},{"content":"Be <brief>.\n\"v1.3\"","role":"developer"}]`},
		{"replace none: in front", replace, `{"messages":[{"role":"user","content":"hi"}]}`,
			`[{"role":"system","content":"Be <brief>.\n\"v1.3\""},{"role":"user","content":"hi"}]`},
		{"empty messages", replace, `{"messages":[ ]}`, `[{"role":"system","content":"Be <brief>.\n\"v1.3\""}]`},
		{"system without content", replace, `{"messages":[{"role":"system"}]}`, `[{"role":"system","content":"Be <brief>.\n\"v1.3\""}]`},
		{"prepend string", prepend, `{"messages":[{"role":"system","content":"own \u00e9"}]}`,
			`[{"role":"system","content":"Be <brief>.\n\"v1.3\"\n\nown é"}]`},
		{"prepend parts", prepend, `{"messages":[{"role":"system","content":[{"type":"text","text":"own"}]}]}`,
			`[{"role":"system","content":[{"type":"text","text":"Be <brief>.\n\"v1.3\"\n\n"},{"type":"text","text":"own"}]}]`},
		{"prepend none", prepend, `{"messages":[{"role":"user","content":"hi"}]}`,
			`[{"role":"system","content":"Be <brief>.\n\"v1.3\""},{"role":"user","content":"hi"}]`},
		{"only the first system message", replace, `{"messages":[{"role":"system","content":"a"},{"role":"system","content":"b"}]}`,
			`[{"role":"system","content":"Be <brief>.\n\"v1.3\""},{"role":"system","content":"b"}]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r scan.Request
			var e scan.Edits
			if err := scan.Scan([]byte(c.body), &r); err != nil {
				t.Fatal(err)
			}
			c.p.Edit([]byte(c.body), &r, &e)
			out := e.Apply(nil, []byte(c.body))
			var got struct{ Messages json.RawMessage }
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("edited body %s: %v", out, err)
			}
			var g, w any
			_ = json.Unmarshal(got.Messages, &g)
			_ = json.Unmarshal([]byte(c.want), &w)
			gb, _ := json.Marshal(g)
			wb, _ := json.Marshal(w)
			if string(gb) != string(wb) {
				t.Errorf("messages = %s; want %s", gb, wb)
			}
		})
	}
}
