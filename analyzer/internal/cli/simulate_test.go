package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestSimulateCommand(t *testing.T) {
	var out, errb bytes.Buffer
	err := Run(context.Background(), []string{"simulate", "--days", "0", "--rates", "10", "--runs", "1", "--json"}, &out, &errb)
	if err != nil {
		t.Fatalf("simulate: %v (%s)", err, errb.String())
	}
	var rep struct {
		Breakage []struct {
			Breakage string `json:"breakage"`
		} `json:"breakage"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Breakage) == 0 {
		t.Fatalf("simulate --json printed %q (%v)", out.String(), err)
	}
	for _, bad := range [][]string{{"simulate", "--rates", "x"}, {"simulate", "--rates", "-1"}, {"simulate", "extra"}} {
		if err := Run(context.Background(), bad, &out, &errb); err == nil {
			t.Errorf("Run(%q) = nil; want an error", strings.Join(bad, " "))
		}
	}
}
