package deploy

import (
	"bytes"
	"encoding/json"

	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/config"
)

// This file is an arm's system prompt (SPEC §6.6): one more in-place edit
// of the single pass, recorded per arm so that the client's edits serve
// either arm.

// Prompt is an arm's prompt, JSON-encoded once at start.
type Prompt struct {
	prepend bool
	// quoted is the text as a JSON string; prefix the same string
	// without its closing quote, followed by a blank line (prepend puts
	// it before the client's own string); message a whole system message;
	// instructions a responses body's member.
	quoted, prefix, message, instructions string
}

func NewPrompt(p *config.Prompt) *Prompt {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(string(p.Text)) // validated UTF-8 at load
	q := string(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	return &Prompt{
		prepend:      p.Mode == config.PromptPrepend,
		quoted:       q,
		prefix:       q[:len(q)-1] + `\n\n`,
		message:      `{"role":"system","content":` + q + `}`,
		instructions: `"instructions":` + q,
	}
}

// Edit records in e the prompt's edit of a chat request: replace puts the
// text in place of the first system (or developer) message's content, or
// in front of the messages when there is none; prepend puts it before
// that message's own text, separated by a blank line.
func (p *Prompt) Edit(body []byte, r *scan.Request, e *scan.Edits) {
	if p == nil || r.Messages.Kind != scan.KindArray || r.MessagesOpen == 0 {
		return
	}
	c := r.SystemContent
	switch {
	case r.System.Kind == scan.KindAbsent:
		text := p.message
		if r.MessageCount > 0 {
			text += ","
		}
		e.Replace(r.MessagesOpen, r.MessagesOpen, text)
	case p.prepend && c.Kind == scan.KindString:
		// `"client` becomes `"prompt\n\nclient`.
		e.Replace(c.Value.Start, c.Value.Start+1, p.prefix)
	case p.prepend && c.Kind == scan.KindArray:
		part := `{"type":"text","text":` + p.prefix + `"}`
		if len(bytes.TrimSpace(body[c.Value.Start+1:c.Value.End-1])) > 0 {
			part += ","
		}
		e.Replace(c.Value.Start+1, c.Value.Start+1, part)
	case c.Present():
		e.Replace(c.Value.Start, c.Value.End, p.quoted)
	default: // a system message without content
		e.Replace(r.System.Value.Start, r.System.Value.End, p.message)
	}
}

// Param is one sampling value an arm sets, as JSON text.
type Param struct {
	p            scan.Param
	text, member string // the value; `"key":value`
}

// ParamEdits records in e the arm's sampling values: a value the client
// sent is replaced where it stands, a missing key is added before the
// closing brace. The contract's own edits of these keys are left out by
// the caller (ApplyWith's skip). Only the parameters in the bit set only
// (1<<Param) are set.
func (a *Arm) ParamEdits(r *scan.Request, e *scan.Edits, only uint16) {
	for _, ap := range a.Params {
		if only&(1<<ap.p) == 0 {
			continue
		}
		if m := r.Params[ap.p]; m.Present() {
			e.Replace(m.Value.Start, m.Value.End, ap.text)
			continue
		}
		e.InsertRaw(r, ap.member)
	}
}

// EditInstructions records in e the prompt's edit of a responses request
// (SPEC §6.6): replace puts the text in place of "instructions" (added
// when absent); prepend puts it before the client's own instructions,
// separated by a blank line.
func (p *Prompt) EditInstructions(r *scan.Request, e *scan.Edits) {
	if p == nil {
		return
	}
	in := r.Instructions
	switch {
	case p.prepend && in.Kind == scan.KindString:
		e.Replace(in.Value.Start, in.Value.Start+1, p.prefix)
	case in.Present():
		e.Replace(in.Value.Start, in.Value.End, p.quoted)
	default:
		e.InsertRaw(r, p.instructions)
	}
}

// AddedInstructions is the instructions value (a JSON string) that
// EditInstructions adds to a responses body without one; "" when it adds
// none.
func (p *Prompt) AddedInstructions(r *scan.Request) string {
	if p == nil || r.Instructions.Present() {
		return ""
	}
	return p.quoted
}

// GrayMayServe reports whether a request of endpoint ep may go to the
// deployment's gray arm: a Responses API request holds state at the
// upstream that answers it (store defaults to true) or names state one
// upstream holds, so it goes to a gray with its own upstream only when
// it is stateless (SPEC §3). A gray without url shares primary's
// upstream and its state.
func GrayMayServe(ep upstream.Endpoint, d *Deployment, r *scan.Request) bool {
	return ep != upstream.Responses || !d.GrayOwnUpstream || r.Stateless()
}
