package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
)

// chatRequest is the part of a Chat Completions request the mock reads.
type chatRequest struct {
	Model         string         `json:"model"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options"`
	Messages      []chatMessage  `json:"messages"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// parsedRequest is what the answer is built from.
type parsedRequest struct {
	model        string
	stream       bool
	includeUsage bool
	messages     int
	textBytes    int
	lastUser     string
	system       string // the system and developer messages' text
}

var errNotObject = errors.New("request body must be a JSON object")

// parseRequest reads a Chat Completions body. It is lenient about what it
// does not need (missing model or messages are fine) but refuses bodies that
// are not a JSON object or whose known fields have the wrong type, as an
// OpenAI-compatible server does.
func parseRequest(body []byte) (parsedRequest, error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return parsedRequest{}, errNotObject
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return parsedRequest{}, fmt.Errorf("request body is not valid: %w", err)
	}
	p := parsedRequest{
		model:        req.Model,
		stream:       req.Stream,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		messages:     len(req.Messages),
	}
	for i, m := range req.Messages {
		sys := m.Role == "system" || m.Role == "developer"
		text, n, err := messageText(m.Content, m.Role == "user" || sys)
		if err != nil {
			return parsedRequest{}, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		p.textBytes += n
		if sys {
			p.system += text
		}
		if m.Role == "user" {
			p.lastUser = text
		}
	}
	return p, nil
}

// messageText returns the UTF-8 byte length of a message content's string or
// text parts and, when wantText is set, the text itself (parts joined).
func messageText(raw json.RawMessage, wantText bool) (string, int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", 0, nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", 0, err
		}
		return s, len(s), nil
	case '[':
		var parts []contentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", 0, err
		}
		n := 0
		var b strings.Builder
		for _, p := range parts {
			if p.Type != "text" {
				continue
			}
			n += len(p.Text)
			if wantText {
				b.WriteString(p.Text)
			}
		}
		return b.String(), n, nil
	}
	return "", 0, errors.New("must be a string, an array of parts or null")
}

// promptTokens is ceil(text_bytes / bytesPerToken) + 4 × messages.
func promptTokens(p parsedRequest, bytesPerToken float64) int {
	return int(math.Ceil(float64(p.textBytes)/bytesPerToken)) + 4*p.messages
}
