package main

import (
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// words are the "tokens" of generated answers.
var words = [...]string{
	"graygate", "canary", "rollout", "primary", "gray", "upstream", "latency", "token",
	"schema", "contract", "fleet", "sample", "window", "stream", "answer", "agent",
}

// filler pads content to answer-bytes; it is ASCII and needs no JSON escaping.
const filler = " lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor"

// contentKey identifies generated content: everything but echo is a pure
// function of these.
type contentKey struct {
	mode        string
	tokens      int
	answerBytes int
}

// generated is an answer's content and its split into stream pieces.
type generated struct {
	key     contentKey
	content string
	pieces  []string
}

var emptyContent generated

// contentCache keeps the last generated content so that a steady load (a
// benchmark, the demo) builds it once rather than per request.
type contentCache struct {
	last atomic.Pointer[generated]
}

// get returns the content for the settings and request. Echo content is
// built per request and not cached. The result is shared: callers must not
// modify it.
func (c *contentCache) get(s *Settings, p *parsedRequest) *generated {
	if s.CompletionTokens == 0 {
		// No tokens, no content: streams send no content chunk either.
		return &emptyContent
	}
	if s.Content == contentEcho {
		return &generated{content: p.lastUser, pieces: split(p.lastUser, s.CompletionTokens)}
	}
	key := contentKey{mode: s.Content, tokens: s.CompletionTokens, answerBytes: s.AnswerBytes}
	if g := c.last.Load(); g != nil && g.key == key {
		return g
	}
	content := generate(key)
	g := &generated{key: key, content: content, pieces: split(content, key.tokens)}
	c.last.Store(g)
	return g
}

// generate builds the content for a non-echo mode: key.tokens words of
// variable text inside the mode's frame, padded to key.answerBytes.
func generate(key contentKey) string {
	var head, tail string
	switch key.mode {
	case contentSchemaBreak:
		// Valid JSON that breaks the agent-action contract three ways: no
		// parameters, a string confidence_score and an extra property.
		head, tail = `{"action":"search","confidence_score":"high","reasoning":"`, `"}`
	case contentText:
		head, tail = "Sure. Here is a plain prose answer, not JSON:", "."
	default: // json, and invalid-json whose body is truncated later
		head, tail = `{"action":"search","parameters":{"query":"`, `"},"confidence_score":0.92}`
	}
	var b strings.Builder
	b.Grow(max(key.answerBytes, len(head)+len(tail)+key.tokens*9))
	b.WriteString(head)
	for i := range key.tokens {
		if i > 0 || key.mode == contentText {
			b.WriteByte(' ')
		}
		b.WriteString(words[i%len(words)])
	}
	for pad := key.answerBytes - b.Len() - len(tail); pad > 0; pad -= len(filler) {
		b.WriteString(filler[:min(pad, len(filler))])
	}
	b.WriteString(tail)
	return b.String()
}

// split cuts s into n pieces of about equal byte length on rune boundaries.
// It gives fewer pieces when s has fewer than n runes, and none for n <= 0
// or an empty s.
func split(s string, n int) []string {
	if n <= 0 || s == "" {
		return nil
	}
	pieces := make([]string, 0, min(n, len(s)))
	start := 0
	for i := 1; i <= n && start < len(s); i++ {
		end := len(s) * i / n
		for end < len(s) && !utf8.RuneStart(s[end]) {
			end++
		}
		if end <= start {
			continue
		}
		pieces = append(pieces, s[start:end])
		start = end
	}
	if start < len(s) {
		pieces = append(pieces, s[start:])
	}
	return pieces
}
