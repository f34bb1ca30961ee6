package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"sync"
	"time"
)

// traffic sends chat completions to a running gateway from a set of users
// and prints what came back: status codes, the upstream model that answered
// (which shows the primary/gray split) and latency.
func traffic(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("devenv traffic", flag.ContinueOnError)
	base := fs.String("url", "http://127.0.0.1:8080", "gateway base URL")
	model := fs.String("model", "agent-chat", "route model to ask for")
	n := fs.Int("requests", 200, "requests to send")
	conc := fs.Int("concurrency", 4, "requests in flight")
	users := fs.Int("users", 50, "distinct `user` values (gray assignment is sticky per user)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *n < 1 || *conc < 1 || *users < 1 {
		return errors.New("traffic: --requests, --concurrency and --users must be positive")
	}
	type result struct {
		status  int
		model   string
		latency time.Duration
		err     error
	}
	results := make([]result, *n)
	jobs := make(chan int)
	client := &http.Client{Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	for range *conc {
		wg.Go(func() {
			for i := range jobs {
				body, _ := json.Marshal(map[string]any{
					"model": *model,
					"user":  fmt.Sprintf("user-%d", i%*users),
					"messages": []map[string]string{
						{"role": "system", "content": "You are a terse assistant. Answer in JSON."},
						{"role": "user", "content": fmt.Sprintf("Request %d: list three prime numbers.", i)},
					},
				})
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, *base+"/v1/chat/completions", bytes.NewReader(body))
				if err != nil {
					results[i].err = err
					continue
				}
				req.Header.Set("Content-Type", "application/json")
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					results[i].err = err
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				results[i] = result{status: resp.StatusCode, latency: time.Since(start), err: err}
				var answer struct {
					Model string `json:"model"`
				}
				if json.Unmarshal(b, &answer) == nil {
					results[i].model = answer.Model
				}
			}
		})
	}
	logf("traffic: %d requests, %d in flight, %d users, model %q → %s", *n, *conc, *users, *model, *base)
	start := time.Now()
send:
	for i := range *n {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break send
		}
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)

	statuses, models := map[string]int{}, map[string]int{}
	var lat []time.Duration
	var firstErr error
	for _, r := range results {
		switch {
		case r.err != nil:
			statuses["error"]++
			if firstErr == nil {
				firstErr = r.err
			}
		default:
			statuses[fmt.Sprint(r.status)]++
			lat = append(lat, r.latency)
			if r.model != "" {
				models[r.model]++
			}
		}
	}
	fmt.Printf("traffic: %d requests in %s\n", *n, elapsed.Round(time.Millisecond))
	printCounts("status", statuses)
	printCounts("answered by model", models)
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
		fmt.Printf("  latency p50 %s  p99 %s  max %s\n", q(0.50).Round(time.Microsecond), q(0.99).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	}
	if firstErr != nil {
		fmt.Fprintf(os.Stderr, "devenv: traffic: first transport error: %v\n", firstErr)
	}
	if statuses["error"] == *n {
		return errors.New("traffic: no request got an answer; is the gateway running (task up)?")
	}
	return nil
}

func printCounts(title string, m map[string]int) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Printf("  %s:", title)
	for _, k := range keys {
		fmt.Printf("  %s=%d", k, m[k])
	}
	fmt.Println()
}
