package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// clock is a settable time source.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func ev(action, pkg, test string, elapsed float64, output string) string {
	b, _ := json.Marshal(event{Action: action, Package: pkg, Test: test, Elapsed: elapsed, Output: output})
	return string(b)
}

const pkg = "github.com/graygate/graygate/gateway"

func TestRun(t *testing.T) {
	stream := strings.Join([]string{
		"go: downloading example v1.0.0",
		ev("start", pkg, "", 0, ""),
		ev("run", pkg, "TestFast", 0, ""),
		ev("output", pkg, "TestFast", 0, "=== RUN   TestFast\n"),
		ev("pass", pkg, "TestFast", 0.2, ""),
		ev("run", pkg, "TestSlow", 0, ""),
		ev("pass", pkg, "TestSlow", 42.5, ""),
		ev("run", pkg, "TestSkipped", 0, ""),
		ev("output", pkg, "TestSkipped", 0, "=== RUN   TestSkipped\n"),
		ev("output", pkg, "TestSkipped", 0, "    x_test.go:9: needs chromium\n"),
		ev("output", pkg, "TestSkipped", 0, "--- SKIP: TestSkipped (0.00s)\n"),
		ev("skip", pkg, "TestSkipped", 0, ""),
		ev("run", pkg, "TestBroken", 0, ""),
		ev("run", pkg, "TestBroken/case", 0, ""),
		ev("output", pkg, "TestBroken/case", 0, "    x_test.go:12: got 1, want 2\n"),
		ev("fail", pkg, "TestBroken/case", 0.1, ""),
		ev("fail", pkg, "TestBroken", 0.1, ""),
		ev("output", pkg, "", 0, "FAIL\n"),
		ev("fail", pkg, "", 43.1, ""),
		ev("output", pkg+"/internal/scan", "", 0, "ok  \tscan\t0.1s\n"),
		ev("pass", pkg+"/internal/scan", "", 0.1, ""),
		ev("output", pkg+"/internal/none", "", 0, "?   \tnone\t[no test files]\n"),
		ev("skip", pkg+"/internal/none", "", 0, ""),
	}, "\n") + "\n"
	var out strings.Builder
	c := &clock{time.Unix(0, 0)}
	if run(strings.NewReader(stream), &out, options{slow: 10 * time.Second, quiet: time.Minute, label: "task test"}, c.now, nil) {
		t.Error("run reported success for a stream with a failed package")
	}
	got := out.String()
	for _, want := range []string{
		"go: downloading example v1.0.0\n",
		"     gateway TestSlow (42.5s)\n",
		"--- FAIL gateway TestBroken (0.1s)\n    " + "    x_test.go:12: got 1, want 2\n",
		"FAIL github.com/graygate/graygate/gateway 43.1s\n",
		"ok   github.com/graygate/graygate/gateway/internal/scan 0.1s\n",
		"skipped tests (1):\n     gateway TestSkipped: x_test.go:9: needs chromium\n",
		"task test: 1 packages ok, 1 failed, 1 without tests, in 0s; slowest: gateway 43.1s, gateway/internal/scan 0.1s\n",
		"failed:\n     github.com/graygate/graygate/gateway\n     github.com/graygate/graygate/gateway TestBroken\n" +
			"          x_test.go:12: got 1, want 2\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q; got:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"TestFast", "internal/none"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("output mentions %s; got:\n%s", unwanted, got)
		}
	}
}

// TestTestReports: the summary repeats a failed test's first reports, not
// a process's log lines or the test's own "=== RUN" lines, each cut short.
func TestTestReports(t *testing.T) {
	out := "=== RUN   TestX\n" +
		"    e2e_test.go:88: analyzer exited before printing \"listening\": bind: address already in use\n" +
		"    process.go:80: gateway stderr:\n" +
		"        {\"level\":\"INFO\",\"msg\":\"created stream\"}\n" +
		"    a_test.go:x: not a line number\n" +
		"    e2e_test.go:90: " + strings.Repeat("é", 400) + "\n" +
		"    b_test.go:1: second\n    b_test.go:2: third\n    b_test.go:3: fourth\n" +
		"--- FAIL: TestX (3.32s)\n"
	got := testReports(out)
	want := []string{
		`e2e_test.go:88: analyzer exited before printing "listening": bind: address already in use`,
		"e2e_test.go:90: " + strings.Repeat("é", maxReportLen-len("e2e_test.go:90: ")) + "…",
		"b_test.go:1: second",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("testReports = %q; want %q", got, want)
	}
}

func TestRunPasses(t *testing.T) {
	stream := ev("run", pkg, "TestA", 0, "") + "\n" + ev("pass", pkg, "TestA", 1, "") + "\n" + ev("pass", pkg, "", 1, "") + "\n"
	var out strings.Builder
	c := &clock{time.Unix(0, 0)}
	if !run(strings.NewReader(stream), &out, options{slow: time.Minute, quiet: time.Minute, label: "x"}, c.now, nil) {
		t.Errorf("run reported failure; output:\n%s", out.String())
	}
}

// A build failure fails the run and shows the compiler's message.
func TestBuildFailure(t *testing.T) {
	stream := `{"ImportPath":"x [x.test]","Action":"build-output","Output":"x/a.go:3:1: syntax error\n"}` + "\n" +
		`{"ImportPath":"x [x.test]","Action":"build-fail"}` + "\n" + ev("fail", "x", "", 0, "") + "\n"
	var out strings.Builder
	c := &clock{time.Unix(0, 0)}
	if run(strings.NewReader(stream), &out, options{label: "x"}, c.now, nil) {
		t.Error("run reported success after a build failure")
	}
	if !strings.Contains(out.String(), "x/a.go:3:1: syntax error") || !strings.Contains(out.String(), "0 packages ok, 1 failed") {
		t.Errorf("output lacks the compiler's message:\n%s", out.String())
	}
}

// A silent minute names the package and the tests still running, once per
// quiet interval.
func TestQuiet(t *testing.T) {
	var out strings.Builder
	c := &clock{time.Unix(0, 0)}
	p := newPrinter(&out, options{slow: 10 * time.Second, quiet: time.Minute}, c.now)
	p.line(ev("start", pkg, "", 0, ""))
	p.line(ev("run", pkg, "TestLong", 0, ""))
	c.t = c.t.Add(30 * time.Second)
	p.checkQuiet()
	if out.Len() != 0 {
		t.Fatalf("printed after 30 s: %q", out.String())
	}
	c.t = c.t.Add(31 * time.Second)
	p.checkQuiet()
	if want := "     … still running: gateway (1m1s): TestLong 1m1s\n"; out.String() != want {
		t.Fatalf("after 61 s: %q; want %q", out.String(), want)
	}
	c.t = c.t.Add(30 * time.Second)
	p.checkQuiet()
	if n := strings.Count(out.String(), "still running"); n != 1 {
		t.Errorf("%d notes within one quiet interval; want 1", n)
	}

	// A paused parallel test is waiting, not running; its time counts
	// from when it continues.
	out.Reset()
	p.line(ev("run", pkg, "TestParallel", 0, ""))
	p.line(ev("pause", pkg, "TestParallel", 0, ""))
	c.t = c.t.Add(31 * time.Second)
	p.checkQuiet()
	if want := "     … still running: gateway (2m2s): TestLong 2m2s (1 parallel waiting)\n"; out.String() != want {
		t.Fatalf("with a paused test: %q; want %q", out.String(), want)
	}
	out.Reset()
	p.line(ev("cont", pkg, "TestParallel", 0, ""))
	c.t = c.t.Add(61 * time.Second)
	p.checkQuiet()
	if want := "TestLong 3m3s, TestParallel 1m1s\n"; !strings.HasSuffix(out.String(), want) {
		t.Fatalf("after cont: %q; want it to end %q", out.String(), want)
	}
}

// A test binary killed by its timeout leaves a test that never ended: its
// output is shown.
func TestTimeout(t *testing.T) {
	stream := strings.Join([]string{
		ev("run", pkg, "TestHang", 0, ""),
		ev("output", pkg, "TestHang", 0, "panic: test timed out after 10m0s\n"),
		ev("fail", pkg, "", 600, ""),
	}, "\n") + "\n"
	var out strings.Builder
	c := &clock{time.Unix(0, 0)}
	if run(strings.NewReader(stream), &out, options{label: "x"}, c.now, nil) {
		t.Error("run reported success")
	}
	if !strings.Contains(out.String(), "--- TestHang did not finish:\n    panic: test timed out after 10m0s\n") {
		t.Errorf("output:\n%s", out.String())
	}
}
