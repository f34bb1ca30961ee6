package proxy

import (
	"bytes"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/scan"
)

func TestNextEvent(t *testing.T) {
	cases := []struct {
		in     string
		events []string
		rest   string
	}{
		{"data: a\n\ndata: b\n\n", []string{"data: a\n\n", "data: b\n\n"}, ""},
		{"data: a\r\n\r\ndata: b", []string{"data: a\r\n\r\n"}, "data: b"},
		{": keep-alive\n\ndata: x\nid: 1\n\n", []string{": keep-alive\n\n", "data: x\nid: 1\n\n"}, ""},
		{"data: partial\n", nil, "data: partial\n"},
	}
	for _, c := range cases {
		rest := []byte(c.in)
		var got []string
		for {
			ev, tail, ok := nextEvent(rest)
			if !ok {
				break
			}
			got, rest = append(got, string(ev)), tail
		}
		if len(got) != len(c.events) || string(rest) != c.rest {
			t.Errorf("nextEvent(%q) = %q rest %q; want %q rest %q", c.in, got, rest, c.events, c.rest)
			continue
		}
		for i := range got {
			if got[i] != c.events[i] {
				t.Errorf("event %d = %q; want %q", i, got[i], c.events[i])
			}
		}
	}
	if d := eventData([]byte("event: x\ndata:  {\"a\":1} \r\n\r\n")); string(d) != `{"a":1}` {
		t.Errorf("eventData = %q", d)
	}
}

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
			tl      tally
			req     scan.Request
		)
		tl.reset(true)
		rest := stream
		for {
			ev, tail, ok := nextEvent(rest)
			if !ok {
				break
			}
			rebuilt = append(rebuilt, ev...)
			rest = tail
			if d := eventData(ev); d != nil && scan.ScanAnswer(d, &a) == nil {
				tl.add(d, &a)
			}
		}
		if !bytes.Equal(append(rebuilt, rest...), stream) {
			t.Fatalf("events do not reassemble into the stream")
		}
		var m Measure
		tl.fill(&m, nil, &req)
		var out bytes.Buffer
		r := newRelay(nil, &out, nil, time.Minute, func() {})
		defer r.Close()
		if !replay(r, stream, true) {
			t.Fatal("replay to a buffer failed")
		}
		if out.Len() > len(stream) {
			t.Fatalf("replay wrote %d bytes from %d", out.Len(), len(stream))
		}
	})
}
