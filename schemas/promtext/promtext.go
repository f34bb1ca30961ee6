// Package promtext is the Prometheus text every graygate service serves at
// /metrics (SPEC §10): VictoriaMetrics/metrics writes the `# HELP family`
// lines without text, and each service fills them in from its own table
// through WithHelp.
package promtext

import (
	"bufio"
	"bytes"
	"io"

	"github.com/VictoriaMetrics/metrics"
)

// WithHelp copies Prometheus text from r to w, giving each `# HELP family`
// line that has no text the one help holds for the family. Every other
// line is copied as it is.
func WithHelp(w io.Writer, r io.Reader, help map[string]string) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	bw := bufio.NewWriter(w)
	for sc.Scan() {
		line := sc.Bytes()
		if fam, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok && bytes.IndexByte(fam, ' ') < 0 {
			if text, ok := help[string(fam)]; ok {
				bw.WriteString("# HELP ")
				bw.Write(fam)
				bw.WriteByte(' ')
				bw.WriteString(text)
				bw.WriteByte('\n')
				continue
			}
		}
		bw.Write(line)
		bw.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return bw.Flush()
}

// Write writes a service's /metrics text to w: every series of set, then
// the Go runtime and process metrics, each family with its # HELP text
// from help and its # TYPE line.
func Write(w io.Writer, set *metrics.Set, help map[string]string) error {
	// The TYPE and HELP lines are a switch of the library, process-wide:
	// every graygate service serves them, so setting it again is a no-op.
	metrics.ExposeMetadata(true)
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	metrics.WriteProcessMetrics(&buf)
	return WithHelp(w, &buf, help)
}
