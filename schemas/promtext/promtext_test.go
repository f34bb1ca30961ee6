package promtext

import (
	"bytes"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

func TestWithHelp(t *testing.T) {
	in := "# HELP graygate_a_total\n# TYPE graygate_a_total counter\ngraygate_a_total 3\n" +
		"# HELP graygate_b\n# TYPE graygate_b gauge\ngraygate_b 1\n" +
		"# HELP graygate_c has its own\ngraygate_c 2\n"
	var out bytes.Buffer
	err := WithHelp(&out, strings.NewReader(in), map[string]string{
		"graygate_a_total": "Things counted.",
		"graygate_c":       "Not used: the line has text.",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "# HELP graygate_a_total Things counted.\n# TYPE graygate_a_total counter\ngraygate_a_total 3\n" +
		"# HELP graygate_b\n# TYPE graygate_b gauge\ngraygate_b 1\n" +
		"# HELP graygate_c has its own\ngraygate_c 2\n"
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestWrite(t *testing.T) {
	set := metrics.NewSet()
	set.GetOrCreateCounter(`graygate_a_total{kind="x"}`).Add(2)
	other := metrics.NewSet()
	other.GetOrCreateCounter(`graygate_other_total`).Inc()
	var out bytes.Buffer
	if err := Write(&out, set, map[string]string{"graygate_a_total": "Things counted."}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"# HELP graygate_a_total Things counted.\n# TYPE graygate_a_total counter\ngraygate_a_total{kind=\"x\"} 2\n",
		"# TYPE go_goroutines gauge\n",
		"\nprocess_start_time_seconds ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Write lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "graygate_other_total") {
		t.Errorf("Write wrote a series of another set:\n%s", got)
	}
}
