// Command testprogress turns the `go test -json` stream on stdin into lines
// a person can follow while a long run goes on: one line per package as it
// finishes, one per top-level test that took a while, a note naming what
// still runs when the run has been silent for a minute, the whole output
// of every test that fails, and a summary. It exits 1 when a package or a
// build failed.
//
//	go test -json -count=1 -p 1 ./... | go run ./scripts/testprogress [flags]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

func main() {
	var o options
	flag.DurationVar(&o.slow, "slow", 10*time.Second, "print a line for each top-level test that takes at least this long")
	flag.DurationVar(&o.quiet, "quiet", time.Minute, "after this long without a line, say which tests still run")
	flag.StringVar(&o.label, "label", "go test", "name of the run in the summary")
	flag.Parse()
	ok := run(os.Stdin, os.Stdout, o, time.Now, time.Tick(time.Second))
	if !ok {
		os.Exit(1)
	}
}

type options struct {
	slow, quiet time.Duration
	label       string
}

// event is one line of test2json output (go doc test2json); build-output
// and build-fail lines carry ImportPath instead of Package.
type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
}

// pkgState is what is known of one package while its tests run.
type pkgState struct {
	started time.Time
	running map[string]time.Time // top-level tests that started (or continued) and did not end
	paused  map[string]bool      // parallel top-level tests waiting to continue
	output  map[string]*strings.Builder
	failed  []string // "TestX", each followed by its first report lines (testReports)
	skipped []string
}

type printer struct {
	o        options
	w        io.Writer
	now      func() time.Time
	start    time.Time
	lastLine time.Time
	pkgs     map[string]*pkgState
	order    []string // packages in the order they started
	ok, fail int
	noTests  int
	// buildFailed is set by a build-fail line, in case no package fail
	// event follows it.
	buildFailed bool
	failures    []string // "pkg" or "pkg TestX"
	skipped     []string // "pkg TestX: reason"
	timings     []timing
}

type timing struct {
	pkg     string
	elapsed float64
}

// run reads the stream until EOF, printing as it goes; tick wakes it to
// notice a silent minute. It reports whether everything passed.
func run(r io.Reader, w io.Writer, o options, now func() time.Time, tick <-chan time.Time) bool {
	p := newPrinter(w, o, now)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for {
		select {
		case line, open := <-lines:
			if !open {
				return p.summary()
			}
			p.line(line)
		case <-tick:
			p.checkQuiet()
		}
	}
}

func newPrinter(w io.Writer, o options, now func() time.Time) *printer {
	return &printer{o: o, w: w, now: now, start: now(), lastLine: now(), pkgs: map[string]*pkgState{}}
}

func (p *printer) printf(format string, args ...any) {
	fmt.Fprintf(p.w, format, args...)
	p.lastLine = p.now()
}

func (p *printer) line(line string) {
	var e event
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil {
		p.printf("%s\n", line) // go's own messages (a download, a vet failure)
		return
	}
	switch e.Action {
	case "build-output":
		p.printf("%s", e.Output)
		return
	case "build-fail":
		// The package's own fail event follows and counts it.
		p.buildFailed = true
		return
	}
	s := p.pkgs[e.Package]
	if s == nil {
		s = &pkgState{started: p.now(), running: map[string]time.Time{}, paused: map[string]bool{}, output: map[string]*strings.Builder{}}
		p.pkgs[e.Package] = s
		p.order = append(p.order, e.Package)
	}
	top, _, _ := strings.Cut(e.Test, "/")
	switch e.Action {
	case "run", "cont":
		if e.Test == top {
			s.running[top] = p.now()
			delete(s.paused, top)
		}
	case "pause":
		// A parallel test waits for the serial ones, or for a free slot.
		if e.Test == top {
			delete(s.running, top)
			s.paused[top] = true
		}
	case "output":
		b := s.output[top] // top "" is the package's own output
		if b == nil {
			b = &strings.Builder{}
			s.output[top] = b
		}
		b.WriteString(e.Output)
	case "pass", "fail", "skip":
		if e.Test == "" {
			p.packageDone(e, s)
			return
		}
		if e.Test != top {
			return // a subtest: its output belongs to its top-level test
		}
		delete(s.running, top)
		delete(s.paused, top)
		switch {
		case e.Action == "fail":
			f := top
			for _, l := range testReports(s.output[top].String()) {
				f += "\n          " + l
			}
			s.failed = append(s.failed, f)
			p.printf("--- FAIL %s %s (%s)\n%s", short(e.Package), top, seconds(e.Elapsed), indent(s.output[top].String()))
		case e.Action == "skip":
			s.skipped = append(s.skipped, top+": "+skipReason(s.output[top].String()))
		case time.Duration(e.Elapsed*float64(time.Second)) >= p.o.slow:
			p.printf("     %s %s (%s)\n", short(e.Package), top, seconds(e.Elapsed))
		}
		delete(s.output, top)
	}
}

func (p *printer) packageDone(e event, s *pkgState) {
	delete(p.pkgs, e.Package)
	own := ""
	if b := s.output[""]; b != nil {
		own = b.String()
	}
	switch {
	case e.Action == "skip" || strings.Contains(own, "[no test files]"):
		p.noTests++
		return
	case e.Action == "pass":
		p.ok++
		p.printf("ok   %s %s\n", e.Package, seconds(e.Elapsed))
	default:
		p.fail++
		p.failures = append(p.failures, e.Package)
		for _, t := range s.failed {
			p.failures = append(p.failures, e.Package+" "+t)
		}
		// A panic, a timeout or a failing TestMain shows in the package's
		// own output, or in that of a test that never ended.
		var unfinished []string
		for t := range s.running {
			unfinished = append(unfinished, t)
		}
		sort.Strings(unfinished)
		for _, t := range unfinished {
			p.printf("--- %s did not finish:\n%s", t, indent(s.output[t].String()))
		}
		p.printf("FAIL %s %s\n%s", e.Package, seconds(e.Elapsed), indent(own))
	}
	for _, sk := range s.skipped {
		p.skipped = append(p.skipped, short(e.Package)+" "+sk)
	}
	p.timings = append(p.timings, timing{e.Package, e.Elapsed})
}

// checkQuiet names the tests that still run when nothing was printed for
// the quiet interval.
func (p *printer) checkQuiet() {
	now := p.now()
	if now.Sub(p.lastLine) < p.o.quiet {
		return
	}
	var parts []string
	for _, pkg := range p.order {
		s := p.pkgs[pkg]
		if s == nil {
			continue
		}
		var tests []string
		for t, at := range s.running {
			tests = append(tests, fmt.Sprintf("%s %s", t, now.Sub(at).Round(time.Second)))
		}
		sort.Strings(tests)
		what := fmt.Sprintf("%s (%s)", short(pkg), now.Sub(s.started).Round(time.Second))
		if len(tests) > 0 {
			what += ": " + strings.Join(tests, ", ")
		}
		if len(s.paused) > 0 {
			what += fmt.Sprintf(" (%d parallel waiting)", len(s.paused))
		}
		parts = append(parts, what)
	}
	if len(parts) == 0 {
		parts = []string{"building"}
	}
	p.printf("     … still running: %s\n", strings.Join(parts, "; "))
}

func (p *printer) summary() bool {
	for _, pkg := range p.order { // the stream ended inside a package (killed)
		if s := p.pkgs[pkg]; s != nil && len(s.running) > 0 {
			p.fail++
			p.failures = append(p.failures, pkg+" (did not finish)")
		}
	}
	sort.Slice(p.timings, func(i, j int) bool { return p.timings[i].elapsed > p.timings[j].elapsed })
	var slowest []string
	for i := 0; i < len(p.timings) && i < 5; i++ {
		slowest = append(slowest, fmt.Sprintf("%s %s", short(p.timings[i].pkg), seconds(p.timings[i].elapsed)))
	}
	if len(p.skipped) > 0 {
		p.printf("skipped tests (%d):\n", len(p.skipped))
		for _, s := range p.skipped {
			p.printf("     %s\n", s)
		}
	}
	p.printf("%s: %d packages ok, %d failed, %d without tests, in %s", p.o.label, p.ok, p.fail, p.noTests, p.now().Sub(p.start).Round(time.Second))
	if len(slowest) > 0 {
		p.printf("; slowest: %s", strings.Join(slowest, ", "))
	}
	p.printf("\n")
	if p.buildFailed && p.fail == 0 {
		p.fail++
		p.failures = append(p.failures, "(a build failed)")
	}
	if p.fail > 0 {
		p.printf("failed:\n")
		for _, f := range p.failures {
			p.printf("     %s\n", f)
		}
		return false
	}
	return true
}

// short drops the module path from a package name.
func short(pkg string) string {
	return strings.TrimPrefix(strings.TrimPrefix(pkg, "github.com/graygate/graygate"), "/")
}

func seconds(s float64) string { return fmt.Sprintf("%.1fs", s) }

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ") + "\n"
}

// maxReports and maxReportLen bound what the summary repeats of a failed
// test: its first report lines, each cut short.
const (
	maxReports   = 3
	maxReportLen = 300
)

// testReports returns the first lines of a test's output that a test file
// reported ("    x_test.go:12: got 1, want 2"), the failure's own words,
// which the summary repeats because the test's whole output, printed
// above, may end in pages of a process's stderr and a log can keep only
// its tail.
func testReports(out string) []string {
	var kept []string
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		file, _, ok := strings.Cut(t, ": ")
		name, line, _ := strings.Cut(file, ":")
		if !ok || !strings.HasSuffix(name, "_test.go") || line == "" || strings.Trim(line, "0123456789") != "" {
			continue
		}
		if r := []rune(t); len(r) > maxReportLen {
			t = string(r[:maxReportLen]) + "…"
		}
		if kept = append(kept, t); len(kept) == maxReports {
			break
		}
	}
	return kept
}

// skipReason is the message of a skipped test: its output without the
// "=== RUN" and "--- SKIP" lines go test adds.
func skipReason(out string) string {
	var kept []string
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		kept = append(kept, t)
	}
	return strings.Join(kept, " ")
}
