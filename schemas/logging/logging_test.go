package logging

import (
	"bytes"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, " warn ")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("dropped")
	log.Warn("kept", "k", "v")
	if got := buf.String(); strings.Contains(got, "dropped") || !strings.Contains(got, `"msg":"kept","k":"v"`) {
		t.Errorf("log = %q, want the warning alone, as JSON", got)
	}
	if _, err := New(&buf, "loud"); err == nil || !strings.Contains(err.Error(), `--log-level "loud"`) {
		t.Errorf("New(loud) error = %v, want one naming the flag and its value", err)
	}
}
