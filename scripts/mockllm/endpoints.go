package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// This file answers the rev. 2 endpoints the gateway proxies besides chat:
// legacy text completions (streaming and not) and embeddings. They honour
// the same settings as chat where they apply (status, latency, ttft,
// inter-token, completion-tokens, content, usage, model, hang).

// textRequest is what a completions or embeddings body holds for the mock.
type textRequest struct {
	Model         string          `json:"model"`
	Stream        bool            `json:"stream"`
	Prompt        json.RawMessage `json:"prompt"`
	Input         json.RawMessage `json:"input"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`

	raw []byte // the whole body, for an endpoint that reads more of it
}

// promptStrings returns the strings of a prompt or input value (a string
// or an array of strings; token arrays count as one empty string each).
func promptStrings(raw json.RawMessage) []string {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}
	}
	var many []json.RawMessage
	if json.Unmarshal(raw, &many) != nil {
		return nil
	}
	out := make([]string, 0, len(many))
	for _, m := range many {
		var s string
		_ = json.Unmarshal(m, &s)
		out = append(out, s)
	}
	return out
}

// textPrompt reports whether raw is a prompt of text: a string or an
// array of strings.
func textPrompt(raw json.RawMessage) bool {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return true
	}
	var many []string
	return json.Unmarshal(raw, &many) == nil
}

// textPrelude reads the body and the settings, and answers errors; ok
// false means the answer was written.
func (s *Server) textPrelude(w http.ResponseWriter, r *http.Request) (textRequest, Settings, []string, bool) {
	start := s.now()
	s.stats.requests.Add(1)
	body, err := readBody(r, nil)
	if err != nil {
		return textRequest{}, Settings{}, nil, false
	}
	s.rec.add(r, body, start)
	set, err := s.settingsFor(r.Header)
	if err != nil {
		_ = writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "mock_bad_header", "")
		return textRequest{}, Settings{}, nil, false
	}
	set.applySpread()
	var req textRequest
	if err := json.Unmarshal(body, &req); err != nil {
		_ = writeError(w, http.StatusBadRequest, "request body is not valid: "+err.Error(), "invalid_request_error", "bad_request", "")
		return textRequest{}, Settings{}, nil, false
	}
	req.raw = body
	if set.Hang {
		<-r.Context().Done()
		return textRequest{}, Settings{}, nil, false
	}
	select {
	case <-time.After(set.Latency - time.Since(start)):
	case <-r.Context().Done():
		return textRequest{}, Settings{}, nil, false
	}
	if set.Status >= 300 {
		typ, code := errorType(set.Status)
		_ = writeError(w, set.Status, "mockllm: simulated upstream status "+strconv.Itoa(set.Status), typ, code, set.RetryAfter)
		return textRequest{}, Settings{}, nil, false
	}
	if set.Model == "" {
		set.Model = req.Model
	}
	if set.Model == "" {
		set.Model = defaultModel
	}
	texts := promptStrings(req.Prompt)
	if req.Input != nil {
		texts = promptStrings(req.Input)
	}
	return req, set, texts, true
}

func countTokens(texts []string, bytesPerToken float64) int {
	n := 0
	for _, t := range texts {
		n += int(float64(len(t))/bytesPerToken + 0.999)
	}
	return max(n, 1)
}

// handleCompletions answers POST /v1/completions.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	req, set, texts, ok := s.textPrelude(w, r)
	if !ok {
		return
	}
	defer s.stats.completed.Add(1)
	p := parsedRequest{model: req.Model, lastUser: strings.Join(texts, "\n")}
	gen := s.content.get(&set, &p)
	id, created := "cmpl-"+s.nextID(), time.Now().Unix()
	prompt := countTokens(texts, set.BytesPerToken)
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, prompt, set.CompletionTokens, prompt+set.CompletionTokens)
	head := `{"id":"` + id + `","object":"text_completion","created":` + strconv.FormatInt(created, 10) + `,"model":` + quote(set.Model)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		out := head + `,"choices":[{"index":0,"text":` + quote(gen.content) + `,"logprobs":null,"finish_reason":"` + set.FinishReason + `"}]`
		if set.Usage {
			out += `,"usage":` + usage
		}
		_, _ = w.Write([]byte(out + "}"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(data string) bool {
		if _, err := w.Write([]byte("data: " + data + "\n\n")); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	wait := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-r.Context().Done():
			return false
		}
	}
	if !wait(set.TTFT) {
		return
	}
	for i, piece := range gen.pieces {
		if i > 0 && !wait(set.InterToken) {
			return
		}
		if !send(head + `,"choices":[{"index":0,"text":` + quote(piece) + `,"logprobs":null,"finish_reason":null}]}`) {
			return
		}
	}
	send(head + `,"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"` + set.FinishReason + `"}]}`)
	if set.Usage && req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		send(head + `,"choices":[],"usage":` + usage + `}`)
	}
	send("[DONE]")
}

// handleEmbeddings answers POST /v1/embeddings with one small vector per
// input, derived from its bytes.
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	_, set, texts, ok := s.textPrelude(w, r)
	if !ok {
		return
	}
	defer s.stats.completed.Add(1)
	var b strings.Builder
	b.WriteString(`{"object":"list","data":[`)
	for i, t := range texts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"object":"embedding","index":` + strconv.Itoa(i) + `,"embedding":[`)
		for j := range 8 {
			if j > 0 {
				b.WriteByte(',')
			}
			v := float64((len(t)*(j+3))%97) / 97
			b.WriteString(strconv.FormatFloat(v, 'g', 6, 64))
		}
		b.WriteString(`]}`)
	}
	n := countTokens(texts, set.BytesPerToken)
	b.WriteString(`],"model":` + quote(set.Model) + fmt.Sprintf(`,"usage":{"prompt_tokens":%d,"total_tokens":%d}}`, n, n))
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(b.String()))
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
