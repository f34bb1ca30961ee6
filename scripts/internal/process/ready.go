package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// ErrExited is what AwaitReady's error wraps when the process ended before
// it was ready.
var ErrExited = errors.New("exited while starting")

// A Ready check returns nil once a started process serves.
type Ready func(context.Context) error

// TCPReady is a readiness check: addr accepts connections (within 200 ms).
func TCPReady(addr string) Ready {
	return func(context.Context) error {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	}
}

// HTTPReady is a readiness check: GET url answers 200 (within a second).
func HTTPReady(url string) Ready {
	client := &http.Client{Timeout: time.Second}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// AwaitReady calls ready every 100 ms until it returns nil, and then returns
// nil. It blocks until then, or until done is closed (the process ended: an
// error wrapping ErrExited, with the last lines of the log at logPath), ctx
// ends (ctx's error) or timeout has passed (an error with ready's last one).
// name is the process's name in these errors; done may be nil and logPath
// "" for a process the caller does not own.
func AwaitReady(ctx context.Context, name, logPath string, ready Ready, done <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s %w; last lines of %s:\n%s", name, ErrExited, logPath, TailFile(logPath, 15))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			if logPath == "" {
				return fmt.Errorf("%s not ready after %s: %v", name, shortDuration(timeout), err)
			}
			return fmt.Errorf("%s not ready after %s: %v; see %s", name, shortDuration(timeout), err, logPath)
		}
	}
}

// shortDuration prints a whole number of minutes as "1m" rather than "1m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		return strings.TrimSuffix(s, "0s")
	}
	return s
}
