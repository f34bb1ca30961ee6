package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
)

// The memory budget of SPEC §11, measured on a running gateway (README,
// "Memory budget"). Each hostile case runs clientsPerCase clients at
// once, all cases together; the gateway's peak resident size (VmHWM) may
// grow by at most budgetMiB over its resident size before the attack:
// perBufferedMiB for each buffered answer read up to the 64 MiB cap (the
// chunked 300 MiB body; one announced over the cap is refused unread),
// perStreamMiB for each other hostile answer (a stream held to its 1 MiB
// event cap, a refused or timed-out body), and slack for the runtime.
const (
	clientsPerCase = 2
	perBufferedMiB = 160 // 2.5 × max_buffered_answer_bytes: the buffer, its last growth, GC lag
	perStreamMiB   = 4   // 4 × max_sse_event_bytes: the event, its growth, fasthttp's pipe
	slackMiB       = 48
	budgetMiB      = clientsPerCase*(perBufferedMiB+4*perStreamMiB) + slackMiB
	answerWithin   = 20 * time.Second
)

// hostileConfig routes one model per hostile case to its own path of
// the hostile upstream. The caps are the defaults (1 MiB event, 1 MiB
// tool arguments, 64 MiB buffered answer); the trickle deployment has a
// short max_duration to keep the test short.
const hostileConfig = `
nats: {url: ""}
gateway:
  listen: {{LISTEN}}
  admin_listen: {{ADMIN}}
routing:
  routes:
    - {model: endless, candidates: [{deployment: endless}]}
    - {model: toolargs, candidates: [{deployment: toolargs}]}
    - {model: bigbody, candidates: [{deployment: bigbody}]}
    - {model: trickle, candidates: [{deployment: trickle}]}
    - {model: bigchunked, candidates: [{deployment: bigchunked}]}
deployments:
  endless:
    primary: {url: {{UPSTREAM}}/endless, model: m, timeout: 5s}
  toolargs:
    primary: {url: {{UPSTREAM}}/toolargs, model: m, timeout: 5s}
  bigbody:
    primary: {url: {{UPSTREAM}}/bigbody, model: m, timeout: 5s}
  trickle:
    primary: {url: {{UPSTREAM}}/trickle, model: m, timeout: 5s, max_duration: 3s}
  bigchunked:
    primary: {url: {{UPSTREAM}}/bigchunked, model: m, timeout: 5s}
`

// hostileUpstream serves the corpus of SPEC §11: one SSE line that never
// ends, 300 MiB of well-formed tool-call chunks, a 100 MiB body with its
// Content-Length, a 300 MiB chunked one, and a
// body trickled one byte every two seconds. Each writes until the
// gateway hangs up.
func hostileUpstream(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	fl := w.(http.Flusher)
	const mib = 1 << 20
	switch {
	case strings.HasPrefix(r.URL.Path, "/endless/"):
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: ")
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			fl.Flush()
		}
	case strings.HasPrefix(r.URL.Path, "/toolargs/"):
		w.Header().Set("Content-Type", "text/event-stream")
		ev := []byte(`data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"` +
			strings.Repeat("a", 64<<10) + "\"}}]}}]}\n\n")
		for sent := 0; sent < 300*mib; sent += len(ev) {
			if _, err := w.Write(ev); err != nil {
				return
			}
			fl.Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	case strings.HasPrefix(r.URL.Path, "/bigbody/"), strings.HasPrefix(r.URL.Path, "/bigchunked/"):
		// With its length announced, and chunked (read up to the cap).
		w.Header().Set("Content-Type", "application/json")
		if strings.HasPrefix(r.URL.Path, "/bigbody/") {
			w.Header().Set("Content-Length", strconv.Itoa(100*mib))
		}
		// The chunked one is longer: 300 MiB unread is what the cap saves.
		n := 100
		if strings.HasPrefix(r.URL.Path, "/bigchunked/") {
			n = 300
		}
		chunk := bytes.Repeat([]byte(" "), mib)
		for range n {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	case strings.HasPrefix(r.URL.Path, "/trickle/"):
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(200)
		for range 1000 {
			if _, err := w.Write([]byte(" ")); err != nil {
				return
			}
			fl.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(2 * time.Second):
			}
		}
	default:
		http.NotFound(w, r)
	}
}

// procKiB reads a "Vm…:" line of /proc/pid/status, in KiB.
func procKiB(t *testing.T, pid int, key string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	testenv.Must(t, err)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			testenv.Must(t, err)
			return n
		}
	}
	t.Fatalf("%s not in /proc/%d/status", key, pid)
	return 0
}

// hostileCase is one kind of hostile answer and the clean ending a
// client must get.
type hostileCase struct {
	model, want string // want: a substring of the clean ending
	stream      bool
	status      int
	budgetMiB   int // per client
}

var hostileCases = []hostileCase{
	{"endless", `"code":"upstream_error"`, true, 200, perStreamMiB},
	{"toolargs", `"code":"upstream_error"`, true, 200, perStreamMiB},
	{"bigbody", `"code":"upstream_error"`, false, 502, perStreamMiB},
	{"trickle", `"code":"upstream_timeout"`, false, 504, perStreamMiB},
	{"bigchunked", `"code":"upstream_error"`, false, 502, perBufferedMiB},
}

// TestE2EHostileUpstreamMemory runs the hostile-upstream corpus against a
// running gateway, each case alone and then all at once: every client
// gets an answer or a clean error within answerWithin, and the gateway's
// resident size stays within the budget.
func TestE2EHostileUpstreamMemory(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc to read the gateway's resident size")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	up := &http.Server{Handler: http.HandlerFunc(hostileUpstream)}
	go up.Serve(ln)
	t.Cleanup(func() { up.Close() })
	cfg := strings.ReplaceAll(hostileConfig, "{{UPSTREAM}}", "http://"+ln.Addr().String())

	for _, c := range hostileCases {
		t.Run(c.model, func(t *testing.T) {
			runCorpus(t, cfg, []hostileCase{c}, clientsPerCase*c.budgetMiB+slackMiB)
		})
	}
	t.Run("all at once", func(t *testing.T) {
		runCorpus(t, cfg, hostileCases, budgetMiB)
	})
}

// runCorpus starts a gateway, sends clientsPerCase clients per case at
// once, and checks their answers and the gateway's growth in resident
// size against budget (MiB).
func runCorpus(t *testing.T, cfg string, cases []hostileCase, budget int) {
	gw := testenv.StartGateway(t, cfg)
	pid := gw.Cmd.Process.Pid
	before := procKiB(t, pid, "VmRSS")
	type result struct {
		model string
		took  time.Duration
		err   string
	}
	results := make(chan result, len(cases)*clientsPerCase)
	var wg sync.WaitGroup
	cl := &http.Client{Timeout: 2 * answerWithin}
	for _, c := range cases {
		for range clientsPerCase {
			wg.Go(func() {
				body := fmt.Sprintf(`{"model":%q,"stream":%t,"messages":[{"role":"user","content":"hi"}]}`, c.model, c.stream)
				start := time.Now()
				resp, err := cl.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				r := result{model: c.model}
				if err != nil {
					r.err = err.Error()
				} else {
					out, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					switch {
					case err != nil:
						r.err = "reading the answer: " + err.Error()
					case resp.StatusCode != c.status || !bytes.Contains(out, []byte(c.want)):
						r.err = fmt.Sprintf("got %d %.200q; want %d with %s", resp.StatusCode, out, c.status, c.want)
					}
				}
				r.took = time.Since(start)
				results <- r
			})
		}
	}
	// Sample the resident size while the attack runs.
	stop := make(chan struct{})
	peakRSS := before
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				peakRSS = max(peakRSS, procKiB(t, pid, "VmRSS"))
			}
		}
	})
	wg.Wait()
	close(stop)
	sampler.Wait()
	close(results)
	for r := range results {
		t.Logf("%-8s answered in %v", r.model, r.took.Round(10*time.Millisecond))
		if r.err != "" {
			t.Errorf("%s: %s", r.model, r.err)
		}
		if r.took > answerWithin {
			t.Errorf("%s: answered after %v; want within %v", r.model, r.took, answerWithin)
		}
	}
	hwm := procKiB(t, pid, "VmHWM")
	t.Logf("gateway resident: %d MiB before, %d MiB peak sampled, %d MiB high-water mark (+%d MiB, budget +%d MiB)",
		before>>10, peakRSS>>10, hwm>>10, (hwm-before)>>10, budget)
	if grew := (hwm - before) >> 10; grew > budget {
		t.Errorf("resident size grew by %d MiB under the hostile corpus; budget %d MiB", grew, budget)
	}
	// The gateway still serves after the attack.
	resp, err := http.Get(gw.Admin + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("healthz after the attack: %v %v", resp, err)
	}
	if resp != nil {
		resp.Body.Close()
	}
}
