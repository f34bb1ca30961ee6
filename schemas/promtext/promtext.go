// Package promtext is the Prometheus text every graygate service serves at
// /metrics (SPEC §10): VictoriaMetrics/metrics writes the `# HELP family`
// lines without text, and each service fills them in from its own table
// through WithHelp.
package promtext

import (
	"bufio"
	"bytes"
	"io"
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
