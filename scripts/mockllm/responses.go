package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// This file answers the OpenAI Responses API (POST /v1/responses), streamed
// (typed events, each with its sequence_number) and not. It honours the
// settings that apply: status, latency, ttft, inter-token,
// completion-tokens, answer-bytes, content (invalid-json truncates the
// body, or each streamed event's data), usage, tool-calls, tool-name,
// tool-args, model, hang, drop-after (a stream is cut after that many
// events, so it never sends response.completed), spread, and inflate-on
// (the marker is looked for in instructions and system or developer
// input messages).

// responsesBody is what the mock reads of a Responses API request.
type responsesBody struct {
	Instructions *string         `json:"instructions"`
	Input        json.RawMessage `json:"input"`
}

// inputItem is one element of an input array.
type inputItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// responsesInput returns the input's last user text, its system and
// developer text, its text bytes and its number of items.
func responsesInput(raw json.RawMessage) (lastUser, system string, textBytes, items int) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return one, "", len(one), 1
	}
	var list []inputItem
	if json.Unmarshal(raw, &list) != nil {
		return "", "", 0, 0
	}
	for _, it := range list {
		text := ""
		var s string
		var parts []contentPart
		switch {
		case json.Unmarshal(it.Content, &s) == nil:
			text = s
		case json.Unmarshal(it.Content, &parts) == nil:
			for _, p := range parts {
				text += p.Text
			}
		}
		textBytes += len(text)
		switch it.Role {
		case "user":
			lastUser = text
		case "system", "developer":
			system += text
		}
	}
	return lastUser, system, textBytes, len(list)
}

// handleResponses answers POST /v1/responses.
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	req, set, _, ok := s.textPrelude(w, r)
	if !ok {
		return
	}
	var body responsesBody
	_ = json.Unmarshal(req.raw, &body)
	lastUser, system, textBytes, items := responsesInput(body.Input)
	if body.Instructions != nil {
		system = *body.Instructions + system
		textBytes += len(*body.Instructions)
		items++
	}
	set.applyInflate(system)
	p := parsedRequest{model: req.Model, lastUser: lastUser}
	var gen *generated
	if set.ToolCalls == 0 {
		gen = s.content.get(&set, &p)
	}
	a := responseAnswer{
		id: "resp_" + strings.TrimPrefix(s.nextID(), idPrefix), created: time.Now().Unix(), model: set.Model, set: &set, gen: gen,
		input: int(float64(textBytes)/set.BytesPerToken+0.999) + 4*items,
	}
	if body.Instructions != nil {
		a.instructions = *body.Instructions
	}
	if !req.Stream {
		out := a.response("completed")
		if set.Content == contentInvalidJSON {
			out = out[:len(out)/2]
		}
		s.ended(w, writeBody(r.Context(), w, &set, http.StatusOK, out))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	st := responseStream{w: w, rc: http.NewResponseController(w), r: r, set: &set}
	s.ended(w, a.stream(&st))
}

// responseAnswer is one answer of the Responses API.
type responseAnswer struct {
	id, model, instructions string
	created                 int64
	input                   int
	set                     *Settings
	gen                     *generated // nil: tool calls
}

// messageItem is the answer's output message with text.
func (a *responseAnswer) messageItem(status, text string) map[string]any {
	content := []any{}
	if status == "completed" {
		content = append(content, map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}})
	}
	return map[string]any{"id": "msg_" + a.id, "type": "message", "status": status, "role": "assistant", "content": content}
}

// callItem is the answer's i-th function call.
func (a *responseAnswer) callItem(i int, status, args string) map[string]any {
	id := a.id + "_" + strconv.Itoa(i)
	return map[string]any{"id": "fc_" + id, "type": "function_call", "status": status, "call_id": "call_" + id,
		"name": a.set.ToolName, "arguments": args}
}

// object is the response object with the given status; the output and
// usage only once completed.
func (a *responseAnswer) object(status string) map[string]any {
	output := []any{}
	var usage any
	if status == "completed" {
		if a.gen != nil {
			output = append(output, a.messageItem("completed", a.gen.content))
		}
		for i := range a.set.ToolCalls {
			output = append(output, a.callItem(i, "completed", a.set.ToolArgs))
		}
		if a.set.Usage {
			usage = map[string]any{
				"input_tokens": a.input, "input_tokens_details": map[string]any{"cached_tokens": 0},
				"output_tokens": a.set.CompletionTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
				"total_tokens": a.input + a.set.CompletionTokens,
			}
		}
	}
	var instructions any
	if a.instructions != "" {
		instructions = a.instructions
	}
	return map[string]any{
		"id": a.id, "object": "response", "created_at": a.created, "status": status, "model": a.model,
		"output": output, "usage": usage, "error": nil, "incomplete_details": nil, "instructions": instructions,
		"metadata": map[string]any{}, "parallel_tool_calls": true, "temperature": 1, "top_p": 1,
		"tool_choice": "auto", "tools": []any{}, "text": map[string]any{"format": map[string]any{"type": "text"}},
	}
}

// response is the whole answer as JSON.
func (a *responseAnswer) response(status string) []byte {
	b, _ := json.Marshal(a.object(status))
	return b
}

// responseStream writes typed events, numbering them.
type responseStream struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	r    *http.Request
	set  *Settings
	seq  int
	sent int
}

// event writes one event of type typ with the fields of data.
func (st *responseStream) event(typ string, data map[string]any) error {
	data["type"], data["sequence_number"] = typ, st.seq
	st.seq++
	b, _ := json.Marshal(data)
	if st.set.Content == contentInvalidJSON && strings.HasSuffix(typ, ".delta") {
		b = b[:len(b)/2]
	}
	if _, err := st.w.Write([]byte("event: " + typ + "\ndata: " + string(b) + "\n\n")); err != nil {
		return errClientGone
	}
	if st.rc.Flush() != nil {
		return errClientGone
	}
	st.sent++
	if st.sent == st.set.DropAfter {
		abort(st.rc)
		return errDropped
	}
	return nil
}

func (st *responseStream) wait(d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-st.r.Context().Done():
		return errClientGone
	}
}

// stream writes the answer as the Responses API streams it.
func (a *responseAnswer) stream(st *responseStream) error {
	if st.set.DropAfter == 0 {
		abort(st.rc)
		return errDropped
	}
	steps := []func() error{
		func() error { return st.event("response.created", map[string]any{"response": a.object("in_progress")}) },
		func() error {
			return st.event("response.in_progress", map[string]any{"response": a.object("in_progress")})
		},
	}
	for _, f := range steps {
		if err := f(); err != nil {
			return err
		}
	}
	if err := st.wait(st.set.TTFT); err != nil {
		return err
	}
	if a.gen != nil {
		item := "msg_" + a.id
		if err := st.event("response.output_item.added", map[string]any{"output_index": 0, "item": a.messageItem("in_progress", "")}); err != nil {
			return err
		}
		if err := st.event("response.content_part.added", map[string]any{"item_id": item, "output_index": 0, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}}); err != nil {
			return err
		}
		for i, piece := range a.gen.pieces {
			if i > 0 {
				if err := st.wait(st.set.InterToken); err != nil {
					return err
				}
			}
			if err := st.event("response.output_text.delta", map[string]any{"item_id": item, "output_index": 0, "content_index": 0,
				"delta": piece, "logprobs": []any{}}); err != nil {
				return err
			}
		}
		text := a.gen.content
		for _, e := range []struct {
			typ  string
			data map[string]any
		}{
			{"response.output_text.done", map[string]any{"item_id": item, "output_index": 0, "content_index": 0, "text": text, "logprobs": []any{}}},
			{"response.content_part.done", map[string]any{"item_id": item, "output_index": 0, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}},
			{"response.output_item.done", map[string]any{"output_index": 0, "item": a.messageItem("completed", text)}},
		} {
			if err := st.event(e.typ, e.data); err != nil {
				return err
			}
		}
	}
	for i := range st.set.ToolCalls {
		idx := i
		if a.gen != nil {
			idx++
		}
		id := "fc_" + a.id + "_" + strconv.Itoa(i)
		for _, e := range []struct {
			typ  string
			data map[string]any
		}{
			{"response.output_item.added", map[string]any{"output_index": idx, "item": a.callItem(i, "in_progress", "")}},
			{"response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": idx, "delta": st.set.ToolArgs}},
			{"response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": idx, "arguments": st.set.ToolArgs}},
			{"response.output_item.done", map[string]any{"output_index": idx, "item": a.callItem(i, "completed", st.set.ToolArgs)}},
		} {
			if err := st.event(e.typ, e.data); err != nil {
				return err
			}
		}
	}
	return st.event("response.completed", map[string]any{"response": a.object("completed")})
}
