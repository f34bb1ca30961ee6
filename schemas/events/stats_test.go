package events_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/graygate/graygate/schemas/events"
)

// Every statistics entry carries band and cached, also "" and false
// (SPEC §7 rev. 4: "Each statistics entry gains band … and cached").
func TestStatsEntryWritesBandAndCached(t *testing.T) {
	b, err := json.Marshal(events.ArmStats{Arm: events.ArmGray, Endpoint: events.EndpointChat})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"band":""`, `"cached":false`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("entry %s lacks %s", b, want)
		}
	}
}
