// Command treecheck fails when the repository tracks what a build makes: an
// executable binary, or any file larger than 1 MiB. Intentional exceptions
// (test data, a large picture in docs/) are listed, each with its reason,
// in .ci/large-files-allowed. .ci/run runs it before the tests:
//
//	go run ./scripts/treecheck [repository]   (default: the current directory's repository)
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// maxSize is the largest file the tree may track without an exception.
const maxSize = 1 << 20

// allowFile lists the tracked paths exempt from the checks, relative to the
// repository root.
const allowFile = ".ci/large-files-allowed"

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	problems, err := check(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "treecheck:", err)
		os.Exit(2)
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "treecheck:", p)
		}
		fmt.Fprintf(os.Stderr, "treecheck: %d problem(s). Build outputs are not tracked: `git rm --cached PATH` and ignore it in .gitignore; an intentional exception goes in %s as `PATH  reason`.\n", len(problems), allowFile)
		os.Exit(1)
	}
}

// tracked is one file of the index.
type tracked struct {
	path       string
	executable bool // mode 100755
}

// check returns one sentence per tracked file that breaks the rules, and per
// line of the exception list that is wrong.
func check(dir string) ([]string, error) {
	root, err := gitOutput(dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, err
	}
	root = strings.TrimSpace(root)
	files, err := trackedFiles(root)
	if err != nil {
		return nil, err
	}
	allowed, problems, err := readAllowed(filepath.Join(root, allowFile))
	if err != nil {
		return nil, err
	}
	isTracked := map[string]bool{}
	for _, f := range files {
		isTracked[f.path] = true
		if _, ok := allowed[f.path]; ok {
			continue
		}
		if p := inspect(root, f); p != "" {
			problems = append(problems, p)
		}
	}
	var stale []string
	for path := range allowed {
		if !isTracked[path] {
			stale = append(stale, fmt.Sprintf("%s lists %s, which is not tracked: remove the line", allowFile, path))
		}
	}
	sort.Strings(stale)
	return append(problems, stale...), nil
}

// inspect returns why f may not be tracked, or "".
func inspect(root string, f tracked) string {
	file, err := os.Open(filepath.Join(root, f.path))
	if errors.Is(err, os.ErrNotExist) {
		return "" // deleted in the work tree; a fresh clone has what the index has
	}
	if err != nil {
		return fmt.Sprintf("%s: %v", f.path, err)
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return fmt.Sprintf("%s: %v", f.path, err)
	}
	head := make([]byte, 8000)
	n, err := io.ReadFull(file, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("%s: %v", f.path, err)
	}
	head = head[:n]
	if kind := executableKind(head, f.executable); kind != "" {
		return fmt.Sprintf("%s is an executable binary (%s, %s): a build output", f.path, kind, size(info.Size()))
	}
	if info.Size() > maxSize {
		return fmt.Sprintf("%s is %s, more than the 1 MiB a tracked file may have", f.path, size(info.Size()))
	}
	return ""
}

// executableKind names the executable format head starts with, or "".
// A file with the executable bit whose start holds a NUL byte is a binary
// of some other format (a script never holds one).
func executableKind(head []byte, executableBit bool) string {
	magics := []struct {
		magic []byte
		kind  string
	}{
		{[]byte("\x7fELF"), "ELF"},
		{[]byte{0xfe, 0xed, 0xfa, 0xce}, "Mach-O"},
		{[]byte{0xfe, 0xed, 0xfa, 0xcf}, "Mach-O"},
		{[]byte{0xce, 0xfa, 0xed, 0xfe}, "Mach-O"},
		{[]byte{0xcf, 0xfa, 0xed, 0xfe}, "Mach-O"},
		{[]byte{0xca, 0xfe, 0xba, 0xbe}, "Mach-O universal"},
		{[]byte("MZ"), "PE"},
		{[]byte("\x00asm"), "WebAssembly"},
		{[]byte("!<arch>\n"), "ar archive"},
	}
	for _, m := range magics {
		if bytes.HasPrefix(head, m.magic) {
			return m.kind
		}
	}
	if executableBit && bytes.IndexByte(head, 0) >= 0 {
		return "executable bit and binary content"
	}
	return ""
}

func size(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// trackedFiles lists the index: regular files with their executable bit
// (symbolic links and submodules are not files of this tree).
func trackedFiles(root string) ([]tracked, error) {
	out, err := gitOutput(root, "ls-files", "--stage", "-z")
	if err != nil {
		return nil, err
	}
	var files []tracked
	seen := map[string]bool{}
	for _, entry := range strings.Split(out, "\x00") {
		// "<mode> <object> <stage>\t<path>"
		meta, path, ok := strings.Cut(entry, "\t")
		if !ok || seen[path] {
			continue
		}
		mode, _, _ := strings.Cut(meta, " ")
		if mode != "100644" && mode != "100755" {
			continue
		}
		seen[path] = true
		files = append(files, tracked{path: path, executable: mode == "100755"})
	}
	return files, nil
}

// readAllowed reads the exception list: `PATH reason…` per line, blank
// lines and #-comments ignored. A missing list allows nothing. A line
// without a reason is a problem.
func readAllowed(path string) (map[string]string, []string, error) {
	allowed := map[string]string{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return allowed, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var problems []string
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		p, reason := text, ""
		if i := strings.IndexAny(text, " \t"); i >= 0 {
			p, reason = text[:i], strings.TrimSpace(text[i:])
		}
		if reason == "" {
			problems = append(problems, fmt.Sprintf("%s:%d: %s has no reason: write `PATH  why it is tracked`", allowFile, line, p))
			continue
		}
		allowed[p] = reason
	}
	return allowed, problems, sc.Err()
}

func gitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s in %s: %v: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
