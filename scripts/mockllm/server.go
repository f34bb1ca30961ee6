package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Body limits: chat bodies are bounded well above the gateway's default
// max_body_bytes (8 MiB); config bodies are small.
const (
	maxChatBody   = 32 << 20
	maxConfigBody = 1 << 20
)

// idPrefix starts every completion id.
const idPrefix = "chatcmpl-"

// defaultModel names the model when neither the model option nor the
// request sets one.
const defaultModel = "mock-model"

// Server is the mock upstream. Its settings start from the process defaults
// and change live through /_mock/config; each request may override them
// with x-mock-* headers.
type Server struct {
	base    Settings
	mu      sync.Mutex // serialises config writes; reads go through live
	live    atomic.Pointer[Settings]
	rec     *recorder
	stats   stats
	content contentCache
	log     *slog.Logger
	now     func() time.Time

	idBase string
	idSeq  atomic.Uint64

	// engine, in engine mode, answers chat and text completions; Run
	// drives it.
	engine *engine
}

// NewServer returns a server whose defaults are base, recording the last
// record chat requests (0: none).
func NewServer(base Settings, record int, log *slog.Logger) *Server {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	s := &Server{
		base:   base,
		rec:    newRecorder(record),
		log:    log,
		now:    time.Now,
		idBase: idPrefix + hex.EncodeToString(rnd[:]),
	}
	live := base
	s.live.Store(&live)
	return s
}

// NewEngineServer returns a server in engine mode: one replica of the
// simulated engine cfg describes. Its scheduler runs in Run.
func NewEngineServer(base Settings, cfg EngineConfig, record int, log *slog.Logger) *Server {
	s := NewServer(base, record, log)
	model := base.Model
	if model == "" {
		model = defaultModel
	}
	s.engine = newEngine(cfg, model)
	return s
}

// Run drives the engine of an engine-mode server until ctx ends; for any
// other server it just waits for ctx.
func (s *Server) Run(ctx context.Context) error {
	if s.engine == nil {
		<-ctx.Done()
		return nil
	}
	return s.engine.Run(ctx)
}

// Handler routes every endpoint of the mock.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	chat, completions := s.handleChat, s.handleCompletions
	if s.engine != nil {
		chat, completions = s.handleEngineChat, s.handleEngineCompletions
		mux.HandleFunc("GET /health", s.handleHealth)
		mux.HandleFunc("GET /metrics", s.engine.m.handle)
	}
	mux.HandleFunc("POST /v1/chat/completions", chat)
	mux.HandleFunc("POST /chat/completions", chat)
	mux.HandleFunc("POST /v1/completions", completions)
	mux.HandleFunc("POST /completions", completions)
	mux.HandleFunc("POST /v1/embeddings", s.handleEmbeddings)
	mux.HandleFunc("POST /embeddings", s.handleEmbeddings)
	mux.HandleFunc("POST /v1/responses", s.handleResponses)
	mux.HandleFunc("POST /responses", s.handleResponses)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /models", s.handleModels)
	mux.HandleFunc("GET /_mock/requests", s.handleRequests)
	mux.HandleFunc("DELETE /_mock/requests", s.handleClearRequests)
	mux.HandleFunc("GET /_mock/stats", s.handleStats)
	mux.HandleFunc("DELETE /_mock/stats", s.handleResetStats)
	mux.HandleFunc("GET /_mock/config", s.handleGetConfig)
	mux.HandleFunc("PUT /_mock/config", s.handlePutConfig)
	mux.HandleFunc("DELETE /_mock/config", s.handleResetConfig)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

// nextID returns a unique completion id: chatcmpl-<random><sequence>.
func (s *Server) nextID() string {
	b := make([]byte, 0, len(s.idBase)+12)
	b = append(b, s.idBase...)
	b = strconv.AppendUint(b, s.idSeq.Add(1), 36)
	return string(b)
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	model := s.live.Load().Model
	if model == "" {
		model = defaultModel
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": model, "object": "model", "created": s.now().Unix(), "owned_by": "mockllm",
		}},
	})
}

func (s *Server) handleRequests(w http.ResponseWriter, r *http.Request) {
	limit := 0
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "limit must be a non-negative integer", "invalid_request_error", "bad_request", "")
			return
		}
		limit = n
	}
	writeJSON(w, http.StatusOK, s.rec.last(limit))
}

func (s *Server) handleClearRequests(w http.ResponseWriter, _ *http.Request) {
	s.rec.clear()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.stats.view())
}

func (s *Server) handleResetStats(w http.ResponseWriter, _ *http.Request) {
	s.stats.reset()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleGetConfig(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.live.Load())
}

// handlePutConfig merges a JSON object of option names into the live
// defaults. Nothing changes unless every key is valid.
func (s *Server) handlePutConfig(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxConfigBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "read config body: "+err.Error(), "invalid_request_error", "bad_request", "")
		return
	}
	s.mu.Lock()
	next := *s.live.Load()
	err = next.applyJSON(body, &s.base)
	if err == nil {
		s.live.Store(&next)
	}
	s.mu.Unlock()
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "bad_config", "")
		return
	}
	s.log.Info("config changed", "update", string(body))
	writeJSON(w, http.StatusOK, &next)
}

// handleResetConfig restores the process defaults given by flags.
func (s *Server) handleResetConfig(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	base := s.base
	s.live.Store(&base)
	s.mu.Unlock()
	s.log.Info("config reset")
	writeJSON(w, http.StatusOK, &base)
}

// writeJSON answers v as JSON; it is for the control endpoints, not the hot path.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encode answer: "+err.Error(), "server_error", "server_error", "")
		return
	}
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError answers an OpenAI error envelope with Content-Length set, so
// the connection stays reusable.
func writeError(w http.ResponseWriter, status int, message, typ, code, retryAfter string) error {
	buf := getBuf()
	defer putBuf(buf)
	*buf = appendError(*buf, message, typ, code)
	h := w.Header()
	h["Content-Type"] = jsonType
	h.Set("Content-Length", strconv.Itoa(len(*buf)))
	if retryAfter != "" {
		h.Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	if _, err := w.Write(*buf); err != nil {
		return errors.Join(errClientGone, err)
	}
	return nil
}
