package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// replayResult is what one replayed request saw.
type replayResult struct {
	// ttft is from writing the request to the first non-empty content
	// delta of its stream; 0 when none came.
	ttft time.Duration
	err  error
}

// replayCounts are the replay's running totals, for its progress lines.
type replayCounts struct {
	sent, done, errors atomic.Int64
}

// replayPlan is one replay: the rows in arrival order, sent at speed to
// one of urls drawn at random each (a load balancer's random spread over
// several gateways), within window, then waiting at most wait for the
// last ones.
type replayPlan struct {
	rows         []traceRow
	urls         []string
	speed        float64
	window, wait time.Duration
	seed         uint64
	// label names the replay in its progress lines (the policy).
	label string
	// every is the period of the progress lines on stderr; 0: none.
	every time.Duration
}

// replay sends every row of the plan as the trace says — each at its
// scaled arrival on its own goroutine, whatever is still in flight — and
// returns each row's result. A request that has not ended by window +
// wait after the start is cut: an error, like a non-200 answer, an error
// event, or a stream that ends without [DONE]. It returns when every
// request has ended or been cut, or ctx ends.
func replay(ctx context.Context, client *http.Client, p replayPlan) []replayResult {
	results := make([]replayResult, len(p.rows))
	start := time.Now()
	rctx, cancel := context.WithDeadline(ctx, start.Add(p.window+p.wait))
	defer cancel()
	var counts replayCounts
	stopProgress := make(chan struct{})
	var progress sync.WaitGroup
	if p.every > 0 {
		progress.Go(func() {
			t := time.NewTicker(p.every)
			defer t.Stop()
			for {
				select {
				case <-stopProgress:
					return
				case <-t.C:
					sent, done := counts.sent.Load(), counts.done.Load()
					logf("%s %3.0fs: sent %d/%d, done %d, in flight %d, errors %d",
						p.label, time.Since(start).Seconds(), sent, len(p.rows), done, sent-done, counts.errors.Load())
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(p.seed, 0x7265706c6179)) // "replay"
	prompts := newPromptWriter(blockCacheSize)
	var wg sync.WaitGroup
	for i, row := range p.rows {
		body := prompts.body(row)
		url := p.urls[rng.IntN(len(p.urls))]
		if d := time.Until(start.Add(arrival(row, p.rows[0], p.speed))); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-rctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if rctx.Err() != nil {
			for j := i; j < len(p.rows); j++ {
				results[j].err = fmt.Errorf("not sent: %w", context.Cause(rctx))
			}
			break
		}
		counts.sent.Add(1)
		wg.Go(func() {
			results[i] = replayOne(rctx, client, url, body)
			if results[i].err != nil {
				counts.errors.Add(1)
			}
			counts.done.Add(1)
		})
	}
	wg.Wait()
	close(stopProgress)
	progress.Wait()
	return results
}

// replayClient is the replay's HTTP client: as many connections to a
// gateway as requests in flight, none of them timed by the client (the
// replay's deadline bounds them).
func replayClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}

// replayOne posts body to url and reads the answer's event stream to
// [DONE], timing its first content.
func replayOne(ctx context.Context, client *http.Client, url string, body []byte) (r replayResult) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	sent := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		r.err = cutError("no answer", ctx, err)
		return r
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		r.err = fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
		return r
	}
	ttft, err := readStream(resp.Body, sent)
	r.ttft = ttft
	var event *errorEvent
	switch {
	case err == nil:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16)) // to EOF, so the connection is reused
	case errors.As(err, &event):
		r.err = err
	case ttft == 0:
		r.err = cutError("no first token", ctx, err)
	default:
		r.err = cutError("no end", ctx, err)
	}
	return r
}

// errNoDone is a stream that ended without [DONE].
var errNoDone = errors.New("stream ended without [DONE]")

// errorEvent is an error the answer's stream carried.
type errorEvent struct{ payload string }

func (e *errorEvent) Error() string { return "error event: " + e.payload }

// readStream reads server-sent events to [DONE]. It returns the time from
// sent to the first event whose choices carry content, and an error for
// an error event or a stream that ends (or fails) before [DONE].
func readStream(body io.Reader, sent time.Time) (time.Duration, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 16<<10), 4<<20)
	var ttft time.Duration
	for sc.Scan() {
		line := sc.Bytes()
		payload, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		payload = bytes.TrimSpace(payload)
		if bytes.Equal(payload, []byte("[DONE]")) {
			if ttft == 0 {
				return 0, errors.New("[DONE] before any content")
			}
			return ttft, nil
		}
		if bytes.HasPrefix(payload, []byte(`{"error"`)) {
			return ttft, &errorEvent{payload: string(payload[:min(len(payload), 240)])}
		}
		if ttft == 0 && hasContent(payload) {
			ttft = time.Since(sent)
		}
	}
	if err := sc.Err(); err != nil {
		return ttft, err
	}
	return ttft, errNoDone
}

// hasContent reports whether a chunk's choices carry content.
func hasContent(chunk []byte) bool {
	if !bytes.Contains(chunk, []byte(`"content"`)) {
		return false
	}
	var c struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal(chunk, &c) != nil {
		return false
	}
	for _, ch := range c.Choices {
		if ch.Delta.Content != "" {
			return true
		}
	}
	return false
}

// cutError names what was missing when the replay's deadline cut a
// request, and otherwise wraps err.
func cutError(what string, ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return fmt.Errorf("%s within the wait", what)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", what, context.Cause(ctx))
	}
	return fmt.Errorf("%s: %w", what, err)
}
