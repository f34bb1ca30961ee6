package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// handleChat answers POST /v1/chat/completions with the behaviour chosen by
// the live settings and the request's x-mock-* headers, and counts how the
// request ended.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	start := s.now()
	s.stats.requests.Add(1)
	s.stats.inFlight.Add(1)
	defer s.stats.inFlight.Add(-1)
	s.ended(w, s.serveChat(w, r, start))
}

// ended counts how a request ended, by the error its serve function
// returned.
func (s *Server) ended(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errDropped):
		s.stats.dropped.Add(1)
	case errors.Is(err, errClientGone):
		s.stats.cancelled.Add(1)
		// The client is gone, or the process is stopping: never let net/http
		// finish the response as if it were whole (an empty 200, or a stream
		// ended cleanly without [DONE]).
		abort(http.NewResponseController(w))
	default:
		s.stats.completed.Add(1)
	}
}

// admit reads a request into dst and answers what ends it before any
// work: a body over the limit, a bad x-mock header, a hang, a simulated
// status (after its latency, waited through pause). done reports that
// the request ended there, with err as the handler's result; otherwise
// set holds the request's settings, spread applied.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, start time.Time, dst []byte, pause *pauser) (body []byte, set Settings, done bool, err error) {
	body, err = readBody(r, dst)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return body, set, true, writeError(w, http.StatusRequestEntityTooLarge,
				fmt.Sprintf("request body is larger than %d bytes", tooLarge.Limit), "invalid_request_error", "payload_too_large", "")
		}
		return body, set, true, errClientGone
	}
	s.rec.add(r, body, start)
	if set, err = s.settingsFor(r.Header); err != nil {
		return body, set, true, writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "mock_bad_header", "")
	}
	set.applySpread()
	if set.Hang {
		<-r.Context().Done()
		return body, set, true, errClientGone
	}
	if set.Status >= 300 {
		if !pause.wait(r.Context(), set.Latency-time.Since(start)) {
			return body, set, true, errClientGone
		}
		typ, code := errorType(set.Status)
		return body, set, true, writeError(w, set.Status, "mockllm: simulated upstream status "+strconv.Itoa(set.Status), typ, code, set.RetryAfter)
	}
	return body, set, false, nil
}

// serveChat writes the answer. It returns nil when the answer was written
// whole, errClientGone or errDropped otherwise.
func (s *Server) serveChat(w http.ResponseWriter, r *http.Request, start time.Time) error {
	buf := getBuf()
	defer putBuf(buf)
	var pause pauser
	defer pause.stop()
	body, set, done, err := s.admit(w, r, start, *buf, &pause)
	*buf = body[:0]
	if done {
		return err
	}
	ctx := r.Context()
	// From here on body is dead: parseRequest and the recorder copied what
	// they keep, and the answer reuses its buffer.
	req, err := parseRequest(body)
	if err != nil {
		return writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "bad_request", "")
	}

	set.applyInflate(req.system)
	a := s.newAnswer(start, &set, &req, promptTokens(req, set.BytesPerToken))
	if set.ToolCalls == 0 {
		a.gen = s.content.get(&set, &req)
	}

	if req.stream {
		st := streamer{sseWriter: newSSEWriter(ctx, w, &a), buf: *buf}
		err := st.stream(set.Status)
		*buf = st.buf[:0]
		return err
	}
	if !pause.wait(ctx, set.Latency-time.Since(start)) {
		return errClientGone
	}
	return s.writeCompletion(ctx, w, &a, buf)
}

// newAnswer starts the answer to req: a fresh id, the model the settings
// name, else the request's, else the default.
func (s *Server) newAnswer(start time.Time, set *Settings, req *parsedRequest, promptTokens int) answer {
	a := answer{id: s.nextID(), created: start.Unix(), model: set.Model, set: set, req: req, promptTokens: promptTokens}
	if a.model == "" {
		a.model = req.model
	}
	if a.model == "" {
		a.model = defaultModel
	}
	return a
}

// writeCompletion writes a non-streaming chat.completion, truncated in
// invalid-json mode and cut after half of it with drop-after.
func (s *Server) writeCompletion(ctx context.Context, w http.ResponseWriter, a *answer, buf *[]byte) error {
	full := a.appendCompletion((*buf)[:0])
	*buf = full
	body := full
	if a.set.Content == contentInvalidJSON && a.gen != nil {
		body = full[:len(full)/2]
	}
	return writeBody(ctx, w, a.set, a.set.Status, body)
}

// writeBody writes one whole JSON answer with status, or, with
// drop-after, half of it before cutting the connection (errDropped);
// errClientGone when the client went away.
func writeBody(ctx context.Context, w http.ResponseWriter, set *Settings, status int, body []byte) error {
	h := w.Header()
	h["Content-Type"] = jsonType
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if set.DropAfter >= 0 {
		_, _ = w.Write(body[:len(body)/2])
		abort(http.NewResponseController(w))
		return errDropped
	}
	if _, err := w.Write(body); err != nil || ctx.Err() != nil {
		return errClientGone
	}
	return nil
}

// settingsFor returns the settings of one request: the live defaults with
// the request's x-mock-* headers applied.
func (s *Server) settingsFor(h http.Header) (Settings, error) {
	set := *s.live.Load()
	err := set.applyHeaders(h)
	return set, err
}

// readBody reads the whole request body into buf's storage, refusing bodies
// larger than maxChatBody.
func readBody(r *http.Request, buf []byte) ([]byte, error) {
	if r.ContentLength > maxChatBody {
		return buf, &http.MaxBytesError{Limit: maxChatBody}
	}
	if r.ContentLength > 0 && int64(cap(buf)) < r.ContentLength+1 {
		buf = make([]byte, 0, r.ContentLength+1)
	}
	b := buf[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if len(b) > maxChatBody {
			return b, &http.MaxBytesError{Limit: maxChatBody}
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}
