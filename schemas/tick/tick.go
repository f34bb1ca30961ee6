// Package tick runs a function on a ticker: the loop the services and the
// scripts write when something is to happen each interval until a context
// ends.
package tick

import (
	"context"
	"time"
)

// Every calls f each interval until ctx ends or f returns false. The first
// call is one interval after Every starts.
func Every(ctx context.Context, interval time.Duration, f func() bool) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !f() {
				return
			}
		}
	}
}
