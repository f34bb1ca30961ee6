package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/graygate/graygate/scripts/testenv"
)

// stateReplica is a Responses API replica that stores what it answers,
// as an engine does: each answer's id names the replica, and a request
// naming a previous_response_id it does not hold gets its 404.
type stateReplica struct {
	name   string
	url    string
	mu     sync.Mutex
	n      int
	stored map[string]bool
	named  []string // the previous_response_id of each request
}

func startStateReplica(t *testing.T, name string) *stateReplica {
	t.Helper()
	r := &stateReplica{name: name, stored: map[string]bool{}}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body struct {
			Stream bool   `json:"stream"`
			Prev   string `json:"previous_response_id"`
		}
		b, _ := io.ReadAll(req.Body)
		_ = json.Unmarshal(b, &body)
		r.mu.Lock()
		r.named = append(r.named, body.Prev)
		if body.Prev != "" && !r.stored[body.Prev] {
			r.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(404)
			_, _ = fmt.Fprintf(w, `{"error":{"message":"Response with id '%s' not found on %s.","type":"invalid_request_error","param":"previous_response_id","code":null}}`, body.Prev, r.name)
			return
		}
		r.n++
		id := fmt.Sprintf("resp_%s_%d", r.name, r.n)
		r.stored[id] = true
		r.mu.Unlock()
		if body.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, respEvent("response.created", 0, `"response":{"id":"`+id+`","status":"in_progress","output":[],"usage":null},`)+
				respEvent("response.output_text.delta", 1, `"output_index":0,"delta":"{\"action\":\"search\",\"parameters\":{\"query\":\"q\"},\"confidence_score\":0.9}",`)+
				respEvent("response.completed", 2, `"response":{"id":"`+id+`","status":"completed","output":[],"usage":{"input_tokens":7,"output_tokens":5}},`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, strings.Replace(respAnswer, `"id":"resp_1"`, `"id":"`+id+`"`, 1))
	}))
	t.Cleanup(s.Close)
	r.url = s.URL
	return r
}

// answerID reads the response id of a buffered answer or of a stream's
// response.created event.
func answerID(t *testing.T, b []byte, stream bool) string {
	t.Helper()
	if stream {
		for _, ev := range sseEvents(b) {
			var e struct {
				Response struct{ ID string } `json:"response"`
			}
			if json.Unmarshal([]byte(ev[1]), &e) == nil && e.Response.ID != "" {
				return e.Response.ID
			}
		}
		t.Fatalf("no response id in the stream: %s", b)
	}
	var a struct{ ID string }
	testenv.Must(t, json.Unmarshal(b, &a))
	return a.ID
}

// TestResponsesFollowTheirReplica: in a pool of 3 replicas balanced
// round robin, a request naming previous_response_id goes to the
// replica that answered that response, turn after turn, buffered or
// streamed (SPEC §6.7); an unknown id goes to some replica, whose own
// 404 the client gets.
func TestResponsesFollowTheirReplica(t *testing.T) {
	reps := []*stateReplica{startStateReplica(t, "a"), startStateReplica(t, "b"), startStateReplica(t, "c")}
	var urls []string
	for _, r := range reps {
		urls = append(urls, r.url)
	}
	g := startGateway(t, poolConfig(urls, 50))
	holder := func(id string) string { return strings.Split(id, "_")[1] }

	for conv, stream := range []bool{false, true, false, true} {
		streamKey := ""
		if stream {
			streamKey = `,"stream":true`
		}
		resp, b := postResponses(t, g.url, `{"model":"agent-chat","input":"hi"`+streamKey+`}`)
		if resp.StatusCode != 200 {
			t.Fatalf("conversation %d: first turn: %d %s", conv, resp.StatusCode, b)
		}
		first := answerID(t, b, stream)
		prev := first
		for turn := range 10 {
			// Every other turn names the conversation's first response.
			named := prev
			if turn%2 == 1 {
				named = first
			}
			resp, b := postResponses(t, g.url, `{"model":"agent-chat","input":"next","previous_response_id":"`+named+`"`+streamKey+`}`)
			if resp.StatusCode != 200 {
				t.Fatalf("conversation %d turn %d naming %s: %d %s", conv, turn, named, resp.StatusCode, b)
			}
			id := answerID(t, b, stream)
			if holder(id) != holder(first) {
				t.Fatalf("conversation %d turn %d: answered by %s, want %s (the holder of %s)", conv, turn, holder(id), holder(first), named)
			}
			prev = id
		}
	}

	resp, b := postResponses(t, g.url, `{"model":"agent-chat","input":"x","previous_response_id":"resp_nowhere_1"}`)
	if resp.StatusCode != 404 || !strings.Contains(string(b), "resp_nowhere_1") {
		t.Fatalf("unknown id: %d %s, want the replica's 404", resp.StatusCode, b)
	}
	// The conversations spread: round robin placed their first turns.
	used := 0
	for _, r := range reps {
		r.mu.Lock()
		if r.n > 0 {
			used++
		}
		r.mu.Unlock()
	}
	if used < 2 {
		t.Errorf("the conversations' first turns went to %d replica(s), want them spread", used)
	}
}
