package promtext

import (
	"bytes"
	"strings"
	"testing"
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
