package attempt

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/pool"
	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

func arm(t *testing.T, url string) *deploy.Arm {
	t.Helper()
	return poolArm(t, config.Upstream{URL: url})
}

// poolArm is an arm of upstream u, with test timeouts.
func poolArm(t *testing.T, u config.Upstream) *deploy.Arm {
	t.Helper()
	u.Model, u.ConnectTimeout, u.MaxDuration, u.StreamIdleTimeout = "m", time.Second, 5*time.Second, 5*time.Second
	if u.Timeout == 0 {
		u.Timeout = 5 * time.Second
	}
	if u.Balance == "" {
		u.Balance = config.BalanceRoundRobin
	}
	u.Outlier = config.Outlier{ConsecutiveFailures: 5, Ejection: 30 * time.Second, MaxEjection: 300 * time.Second, MaxEjectedPercent: 50}
	p, err := pool.New("d", "primary", u, pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &deploy.Arm{Pool: p, Model: "m"}
}

// TestSend: an attempt is sent to the upstream its arm names, and starts
// its Measure with the answer's status and the time to its headers; one
// that gets no answer has ended with its error and latency, and Failure
// classifies it (SPEC §7).
func TestSend(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusTeapot)
	}))
	defer srv.Close()
	a := Send(context.Background(), arm(t, srv.URL), events.ArmGray, upstream.Request{Body: []byte(`{}`)}, nil)
	if a.Err != nil || a.Resp == nil {
		t.Fatalf("Send: %v", a.Err)
	}
	if a.Name != events.ArmGray || a.Status != http.StatusTeapot || a.ErrorType != events.ErrorNone || a.Headers <= 0 {
		t.Errorf("attempt %s: status %d, error type %s, headers after %v", a.Name, a.Status, a.ErrorType, a.Headers)
	}
	if a.Streams() {
		t.Error("a 418 event stream counts as the stream asked for")
	}
	if f := a.Failure(); f.Outcome != events.OutcomeUpstream4xx || f.ErrorType != events.ErrorUpstreamStatus {
		t.Errorf("a 418 fails as %s %s; want upstream_4xx upstream_status", f.Outcome, f.ErrorType)
	}
	a.Close()
	if a.Resp != nil {
		t.Error("Close leaves the response")
	}
	a.Close() // twice is harmless

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	a = Send(context.Background(), arm(t, "http://"+addr), events.ArmPrimary, upstream.Request{Body: []byte(`{}`)}, nil)
	if a.Err == nil || a.Resp != nil || a.Latency <= 0 {
		t.Fatalf("Send to a closed port: err %v, resp %v, latency %v", a.Err, a.Resp, a.Latency)
	}
	if f := a.Failure(); f.Outcome != events.OutcomeUpstreamError || f.ErrorType != events.ErrorUpstreamUnreachable {
		t.Errorf("an unreachable upstream fails as %s %s; want upstream_error upstream_unreachable", f.Outcome, f.ErrorType)
	}
}
