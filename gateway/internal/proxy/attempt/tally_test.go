package attempt

import (
	"testing"

	"github.com/graygate/graygate/gateway/internal/scan"
)

// TestEstimatedTokens: without usage, completion tokens are the generated
// bytes at 4 a token — content, reasoning and tool-call arguments as
// decoded strings, however many fragments a stream sent them in.
func TestEstimatedTokens(t *testing.T) {
	var tl Tally
	tl.Reset(false)
	chunks := []string{
		`{"choices":[{"index":0,"delta":{"reasoning_content":"abcd"}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"q\""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":\"abc\"}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"12345678"}}]}`,
	}
	var a scan.Answer
	for _, c := range chunks {
		if err := scan.ScanAnswer([]byte(c), &a); err != nil {
			t.Fatal(err)
		}
		tl.Add([]byte(c), &a)
	}
	var m Measure
	tl.Fill(&m, nil, &scan.Request{})
	// 4 reasoning + 12 arguments ({"q":"abc"}) + 8 content = 24 bytes.
	if !m.UsageEstimated || m.CompletionTokens != 6 {
		t.Errorf("completion tokens %d (estimated %v); want 6, estimated", m.CompletionTokens, m.UsageEstimated)
	}
}
