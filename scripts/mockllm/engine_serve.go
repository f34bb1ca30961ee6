package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// This file answers chat and text completions in engine mode: the request
// joins the replica's engine, and the answer follows the engine's timing
// (SPEC §6.7) instead of the latency, ttft and inter-token settings.

// engineRequest is the part of a chat or completions body the engine reads.
type engineRequest struct {
	chatRequest
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
}

// engineKind is the endpoint an engine request came through.
type engineKind bool

const (
	kindChat engineKind = false
	kindText engineKind = true // /v1/completions
)

// parseEngineRequest reads a body: its rendered prompt, what the answer is
// built from, and the requested completion length (0 when not given).
func parseEngineRequest(body []byte, kind engineKind) (prompt []byte, p parsedRequest, maxTokens int, err error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, p, 0, errNotObject
	}
	var req engineRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, p, 0, fmt.Errorf("request body is not valid: %w", err)
	}
	p = parsedRequest{
		model:        req.Model,
		stream:       req.Stream,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		messages:     len(req.Messages),
	}
	switch {
	case req.MaxCompletionTokens != nil:
		maxTokens = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		maxTokens = *req.MaxTokens
	default:
		maxTokens = 0
	}
	if (req.MaxCompletionTokens != nil || req.MaxTokens != nil) && (maxTokens < 1 || maxTokens > maxCompletionTokens) {
		return nil, p, 0, fmt.Errorf("max_tokens must be in [1, %d], got %d", maxCompletionTokens, maxTokens)
	}
	if kind == kindText {
		if !textPrompt(req.Prompt) {
			return nil, p, 0, errors.New("prompt must be a string or an array of strings (this engine mock serves no token ids)")
		}
		// An array of prompts is one sequence: their concatenation.
		for _, t := range promptStrings(req.Prompt) {
			prompt = append(prompt, t...)
		}
		p.lastUser = string(prompt)
		return prompt, p, maxTokens, nil
	}
	for i, m := range req.Messages {
		text, n, err := messageText(m.Content, true)
		if err != nil {
			return nil, p, 0, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		p.textBytes += n
		switch m.Role {
		case "system", "developer":
			p.system += text
		case "user":
			p.lastUser = text
		}
		prompt = append(prompt, m.Role...)
		prompt = append(prompt, '\n')
		prompt = append(prompt, text...)
		prompt = append(prompt, '\n')
	}
	return prompt, p, maxTokens, nil
}

func (s *Server) handleEngineChat(w http.ResponseWriter, r *http.Request) {
	s.handleEngine(w, r, kindChat)
}

func (s *Server) handleEngineCompletions(w http.ResponseWriter, r *http.Request) {
	s.handleEngine(w, r, kindText)
}

// handleEngine answers one request through the engine and counts how it
// ended, as handleChat does.
func (s *Server) handleEngine(w http.ResponseWriter, r *http.Request, kind engineKind) {
	start := s.now()
	s.stats.requests.Add(1)
	s.stats.inFlight.Add(1)
	defer s.stats.inFlight.Add(-1)
	s.ended(w, s.serveEngine(w, r, start, kind))
}

// serveEngine writes the answer. It returns nil when it was written whole,
// errClientGone or errDropped otherwise.
func (s *Server) serveEngine(w http.ResponseWriter, r *http.Request, start time.Time, kind engineKind) error {
	var pause pauser
	defer pause.stop()
	body, set, done, err := s.admit(w, r, start, nil, &pause)
	if done {
		return err
	}
	ctx := r.Context()
	prompt, req, maxTokens, err := parseEngineRequest(body, kind)
	if err != nil {
		return writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "bad_request", "")
	}
	if maxTokens == 0 {
		// No max_tokens: the configured length, which inflate-on and
		// spread may change.
		set.applyInflate(req.system)
		maxTokens = max(1, set.CompletionTokens)
	}
	set.CompletionTokens = maxTokens
	sq, err := s.engine.newSeq(prompt, maxTokens)
	if err != nil {
		return writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "context_length_exceeded", "")
	}
	// latency and ttft, in engine mode, delay the request's entry into the
	// engine: a slow front end rather than a slow engine.
	if !pause.wait(ctx, set.Latency+set.TTFT) {
		return errClientGone
	}
	if err := s.engine.enqueue(ctx, sq); err != nil {
		return errClientGone
	}
	defer func() {
		if sq.generated.Load() < int64(sq.maxTokens) {
			s.engine.abandon(sq)
		}
	}()

	a := s.newAnswer(start, &set, &req, sq.promptTokens)
	a.promptDetails = true
	if set.ToolCalls == 0 || kind == kindText {
		a.gen = s.content.get(&set, &req)
	}
	if kind == kindText {
		a.id = "cmpl-" + strings.TrimPrefix(a.id, "chatcmpl-")
	}

	wait := func() (int, error) {
		select {
		case <-sq.wake:
			return int(sq.generated.Load()), nil
		case <-ctx.Done():
			return 0, errClientGone
		case <-s.engine.stopped:
			return 0, errClientGone
		}
	}
	if !req.stream {
		for n := 0; n < maxTokens; {
			if n, err = wait(); err != nil {
				return err
			}
		}
		a.cachedTokens = int(sq.cached.Load())
		buf := getBuf()
		defer putBuf(buf)
		return s.writeEngineCompletion(ctx, w, &a, kind, buf)
	}

	st := engineStream{sseWriter: newSSEWriter(ctx, w, &a), kind: kind}
	if err := st.start(); err != nil {
		return err
	}
	for sent := 0; sent < maxTokens; {
		n, err := wait()
		if err != nil {
			return err
		}
		if n == sent {
			continue
		}
		if err := st.tokens(sent, n); err != nil {
			return err
		}
		sent = n
	}
	a.cachedTokens = int(sq.cached.Load())
	return st.close()
}

// writeEngineCompletion writes a non-streaming chat.completion or
// text_completion, truncated in invalid-json mode and cut after half of
// it with drop-after.
func (s *Server) writeEngineCompletion(ctx context.Context, w http.ResponseWriter, a *answer, kind engineKind, buf *[]byte) error {
	if kind == kindChat {
		return s.writeCompletion(ctx, w, a, buf)
	}
	b := a.appendHead((*buf)[:0], "text_completion")
	b = append(b, `{"index":0,"text":`...)
	b = appendString(b, a.gen.content)
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	b = append(b, a.quotedFinishReason()...)
	b = append(b, `}]`...)
	if a.set.Usage {
		b = append(b, `,"usage":`...)
		b = a.appendUsage(b)
	}
	b = append(b, '}')
	*buf = b
	if a.set.Content == contentInvalidJSON {
		b = b[:len(b)/2]
	}
	return writeBody(ctx, w, a.set, http.StatusOK, b)
}

// engineStream writes an engine answer as server-sent events: nothing but
// the headers until the first token, then one chunk per wake of the
// handler — one per decoded token while the client keeps up.
type engineStream struct {
	sseWriter
	kind engineKind
	buf  []byte
}

// start writes the headers, as vLLM does before the first token.
func (st *engineStream) start() error {
	object := "chat.completion.chunk"
	if st.kind == kindText {
		object = "text_completion"
	}
	return st.open(http.StatusOK, object)
}

// tokens writes the chunk of completion tokens from up to to (the role
// chunk first, with the first token). Tool-call answers stay silent until
// their last token.
func (st *engineStream) tokens(from, to int) error {
	a := st.a
	if a.gen == nil {
		return nil
	}
	if from == 0 && st.kind == kindChat {
		if err := st.chunk([]byte(`{"role":"assistant","content":""}`), finishNull, false); err != nil {
			return err
		}
	}
	pieces := a.gen.pieces
	lo, hi := min(from, len(pieces)), min(to, len(pieces))
	if lo == hi {
		return nil
	}
	b := st.buf[:0]
	if st.kind == kindChat {
		b = append(b, `{"content":`...)
	}
	b = appendJoined(b, pieces[lo:hi])
	if st.kind == kindChat {
		b = append(b, '}')
	}
	st.buf = b
	return st.chunk(b, finishNull, a.set.Content == contentInvalidJSON)
}

// appendJoined appends the concatenation of pieces as one JSON string.
func appendJoined(dst []byte, pieces []string) []byte {
	if len(pieces) == 1 {
		return appendString(dst, pieces[0])
	}
	n := 0
	for _, p := range pieces {
		n += len(p)
	}
	joined := make([]byte, 0, n)
	for _, p := range pieces {
		joined = append(joined, p...)
	}
	return appendString(dst, string(joined))
}

// close writes the tool calls of a tool-call answer, the finishing chunk,
// the usage chunk when asked for, and [DONE].
func (st *engineStream) close() error {
	a := st.a
	if a.gen == nil {
		if err := st.chunk([]byte(`{"role":"assistant","content":null}`), finishNull, false); err != nil {
			return err
		}
		args := split(a.set.ToolArgs, 2)
		for i := range a.set.ToolCalls {
			b := append(st.buf[:0], `{"tool_calls":[{"index":`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `,"id":`...)
			b = a.appendToolCallID(b, i)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendString(b, a.set.ToolName)
			b = append(b, `,"arguments":`...)
			b = appendJoined(b, args)
			b = append(b, `}}]}`...)
			st.buf = b
			if err := st.chunk(b, finishNull, false); err != nil {
				return err
			}
		}
	}
	last := []byte(`{}`)
	if st.kind == kindText {
		last = []byte(`""`)
	}
	if err := st.chunk(last, a.quotedFinishReason(), false); err != nil {
		return err
	}
	var err error
	st.buf, err = st.done(st.buf)
	return err
}

// chunk writes one event whose choice carries payload: the delta of a chat
// chunk, the text of a completion chunk. With truncate, the JSON is cut in
// half (invalid-json).
func (st *engineStream) chunk(payload []byte, finish string, truncate bool) error {
	buf := getBuf()
	defer putBuf(buf)
	b := append((*buf)[:0], dataPrefix...)
	b = append(b, st.head...)
	if st.kind == kindChat {
		b = append(b, `{"index":0,"delta":`...)
	} else {
		b = append(b, `{"index":0,"text":`...)
	}
	b = append(b, payload...)
	b, err := st.end(b, finish, truncate)
	*buf = b
	return err
}

// handleHealth answers GET /health as an engine does: 200 "ok", or the
// fault the live settings give (a status of 300 and above, a hang).
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	set := s.live.Load()
	if set.Hang {
		<-r.Context().Done()
		abort(http.NewResponseController(w))
		return
	}
	if set.Status >= 300 {
		typ, code := errorType(set.Status)
		_ = writeError(w, set.Status, "mockllm: simulated upstream status "+strconv.Itoa(set.Status), typ, code, set.RetryAfter)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}
