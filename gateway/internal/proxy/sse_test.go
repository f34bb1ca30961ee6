package proxy

import (
	"bytes"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/relay"
	"github.com/graygate/graygate/gateway/internal/scan"
)

// FuzzStream feeds arbitrary upstream stream bytes through the event
// splitter, the chunk scan, the tally and the replay: nothing may panic,
// the events must reassemble into the input, and the replay must write
// every event but stripped usage chunks.
func FuzzStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"a\",\"arguments\":\"{\\\"\"}}]}}]}\r\n\r\n"))
	f.Add([]byte(": keep-alive\n\ndata: not json\n\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		var (
			rebuilt []byte
			a       scan.Answer
			tl      attempt.Tally
			req     scan.Request
		)
		tl.Reset(true)
		rest := stream
		for {
			ev, tail, ok := relay.NextEvent(rest)
			if !ok {
				break
			}
			rebuilt = append(rebuilt, ev...)
			rest = tail
			if d := relay.EventData(ev); d != nil && scan.ScanAnswer(d, &a) == nil {
				tl.Add(d, &a)
			}
		}
		if !bytes.Equal(append(rebuilt, rest...), stream) {
			t.Fatalf("events do not reassemble into the stream")
		}
		var m attempt.Measure
		tl.Fill(&m, nil, &req)
		var out bytes.Buffer
		r := relay.New(nil, &out, nil, time.Minute, func() {})
		defer r.Close()
		if !relay.Replay(r, stream, true) {
			t.Fatal("replay to a buffer failed")
		}
		if out.Len() > len(stream) {
			t.Fatalf("replay wrote %d bytes from %d", out.Len(), len(stream))
		}
	})
}
