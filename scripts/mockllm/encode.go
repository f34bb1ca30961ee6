package main

import (
	"strconv"
	"sync"

	"github.com/graygate/graygate/schemas/events"
)

// Answers are written by appending to pooled byte slices rather than through
// encoding/json: this is the benchmarks' hot path and the shapes are fixed.

// bufPool holds answer buffers; oversized ones are not kept.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledBuf = 1 << 20

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > maxPooledBuf {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

// appendString appends s as a JSON string, as the event log writes one
// (events.AppendString: encoding/json's escaping, invalid UTF-8 as U+FFFD).
func appendString(dst []byte, s string) []byte { return events.AppendString(dst, s) }

// answer is what every part of one response shares.
type answer struct {
	id           string // chatcmpl-…; tool call ids derive from it
	created      int64
	model        string
	set          *Settings
	req          *parsedRequest
	gen          *generated // nil when the answer is tool calls
	promptTokens int
	// cachedTokens, with promptDetails, is usage.prompt_tokens_details.cached_tokens
	// (the engine mode's, as vLLM reports it).
	cachedTokens  int
	promptDetails bool
}

// quotedFinishReason is the answer's finish_reason as a JSON string.
func (a *answer) quotedFinishReason() string {
	if a.gen == nil {
		return `"tool_calls"`
	}
	return `"` + a.set.FinishReason + `"`
}

func (a *answer) appendToolCallID(dst []byte, i int) []byte {
	dst = append(dst, `"call_`...)
	dst = append(dst, a.id[len(idPrefix):]...)
	dst = append(dst, '_')
	dst = strconv.AppendInt(dst, int64(i), 10)
	return append(dst, '"')
}

// appendUsage appends the usage object.
func (a *answer) appendUsage(dst []byte) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(a.promptTokens), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(a.set.CompletionTokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(a.promptTokens+a.set.CompletionTokens), 10)
	if a.promptDetails {
		dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
		dst = strconv.AppendInt(dst, int64(a.cachedTokens), 10)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// appendHead appends `{"id":…,"object":…,"created":…,"model":…,"choices":[`.
func (a *answer) appendHead(dst []byte, object string) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, a.id)
	dst = append(dst, `,"object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = strconv.AppendInt(dst, a.created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendString(dst, a.model)
	return append(dst, `,"choices":[`...)
}

// appendCompletion appends a whole chat.completion object.
func (a *answer) appendCompletion(dst []byte) []byte {
	dst = a.appendHead(dst, "chat.completion")
	dst = append(dst, `{"index":0,"message":{"role":"assistant","content":`...)
	if a.gen == nil {
		dst = append(dst, `null,"refusal":null,"tool_calls":[`...)
		for i := range a.set.ToolCalls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":`...)
			dst = a.appendToolCallID(dst, i)
			dst = append(dst, `,"type":"function","function":{"name":`...)
			dst = appendString(dst, a.set.ToolName)
			dst = append(dst, `,"arguments":`...)
			dst = appendString(dst, a.set.ToolArgs)
			dst = append(dst, `}}`...)
		}
		dst = append(dst, ']')
	} else {
		dst = appendString(dst, a.gen.content)
		dst = append(dst, `,"refusal":null`...)
	}
	dst = append(dst, `},"logprobs":null,"finish_reason":`...)
	dst = append(dst, a.quotedFinishReason()...)
	dst = append(dst, `}]`...)
	if a.set.Usage {
		dst = append(dst, `,"usage":`...)
		dst = a.appendUsage(dst)
	}
	return append(dst, '}')
}

// errorType maps a status to the OpenAI error type and code.
func errorType(status int) (typ, code string) {
	switch {
	case status == 401:
		return "authentication_error", "invalid_api_key"
	case status == 403:
		return "permission_error", "permission_denied"
	case status == 404:
		return "invalid_request_error", "model_not_found"
	case status == 429:
		return "rate_limit_error", "rate_limit_exceeded"
	case status >= 500:
		return "server_error", "server_error"
	}
	return "invalid_request_error", "bad_request"
}

// appendError appends an OpenAI error envelope.
func appendError(dst []byte, message, typ, code string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendString(dst, message)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, typ)
	dst = append(dst, `,"param":null,"code":`...)
	dst = appendString(dst, code)
	return append(dst, "}}\n"...)
}
