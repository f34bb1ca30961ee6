package relay

import (
	"testing"
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
			ev, tail, ok := NextEvent(rest)
			if !ok {
				break
			}
			got, rest = append(got, string(ev)), tail
		}
		if len(got) != len(c.events) || string(rest) != c.rest {
			t.Errorf("NextEvent(%q) = %q rest %q; want %q rest %q", c.in, got, rest, c.events, c.rest)
			continue
		}
		for i := range got {
			if got[i] != c.events[i] {
				t.Errorf("event %d = %q; want %q", i, got[i], c.events[i])
			}
		}
	}
	if d := EventData([]byte("event: x\ndata:  {\"a\":1} \r\n\r\n")); string(d) != `{"a":1}` {
		t.Errorf("EventData = %q", d)
	}
}
