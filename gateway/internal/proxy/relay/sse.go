package relay

import (
	"bytes"

	"github.com/graygate/graygate/gateway/internal/scan"
)

// SSE framing: an answer stream split into its events.

// Replay writes a buffered stream to the client event by event, keeping
// the upstream's chunk boundaries, without the usage chunk when strip.
// It reports false when the client went away.
func Replay(r *Relay, stream []byte, strip bool) bool {
	var a scan.Answer
	rest := stream
	for {
		ev, tail, ok := NextEvent(rest)
		if !ok {
			break
		}
		rest = tail
		if strip {
			if data := EventData(ev); data != nil && scan.ScanAnswer(data, &a) == nil && a.HasUsage && a.Choices == 0 {
				continue
			}
		}
		if r.Send(ev) != nil {
			return false
		}
	}
	return r.Send(rest) == nil
}

// DoneMarker is the data of the event that ends a chat stream.
var DoneMarker = []byte("[DONE]")

// NextEvent splits the first complete SSE event (through its blank line)
// off b.
func NextEvent(b []byte) (ev, rest []byte, ok bool) {
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return nil, b, false
		}
		i += j + 1
		// A blank line ("\n" or "\r\n") ends the event.
		if i < len(b) && b[i] == '\n' {
			return b[:i+1], b[i+1:], true
		}
		if i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n' {
			return b[:i+2], b[i+2:], true
		}
	}
	return nil, b, false
}

// EventData returns the payload of an event's data line, or nil.
func EventData(ev []byte) []byte {
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			return bytes.TrimSpace(d)
		}
	}
	return nil
}
