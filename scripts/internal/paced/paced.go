// Package paced sends load at a fixed rate: a ticker hands numbered jobs to a
// fixed set of workers and counts the ticks that found every worker busy,
// rather than queueing them and sending a burst later.
package paced

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/schemas/tick"
)

// Runner numbers the jobs it hands out and counts the ones it dropped. The
// zero Runner is ready to use; its numbers go on across calls of Run.
type Runner struct {
	seq    atomic.Int64
	behind atomic.Int64
}

// Run calls do with the numbers 1, 2, 3, … rate times a second, on workers
// goroutines, until ctx ends; then it waits for the calls in flight and
// returns. A tick that finds every worker busy (and the hand-over buffer of
// workers jobs full) is dropped and counted in Behind. rate and workers must
// be positive.
func (r *Runner) Run(ctx context.Context, rate, workers int, do func(n int64)) {
	work := make(chan int64, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				do(n)
			}
		}()
	}
	tick.Every(ctx, time.Second/time.Duration(rate), func() bool {
		select {
		case work <- r.seq.Add(1):
		default:
			r.behind.Add(1)
		}
		return true
	})
	close(work)
	wg.Wait()
}

// Behind returns how many ticks were dropped so far because every worker was
// busy.
func (r *Runner) Behind() int64 { return r.behind.Load() }
