package publish

import (
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
)

// TestConnectPings: the gateway's connection pings every 5 s and gives a
// server up after 2 unanswered pings (SPEC §11 rev. 4), so a gateway
// leaves a hung node of a cluster within 15 s.
func TestConnectPings(t *testing.T) {
	nc := connect(t, testenv.StartNATS(t).URL)
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
	if nc.Opts.PingInterval != 5*time.Second || nc.Opts.MaxPingsOut != 2 {
		t.Errorf("ping every %v, give up after %d unanswered; want 5s and 2", nc.Opts.PingInterval, nc.Opts.MaxPingsOut)
	}
}
