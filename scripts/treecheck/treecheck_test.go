package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repo makes a git repository in a temporary directory and adds files to
// its index (path -> content; a path ending in "*" is added executable).
func repo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	git(t, dir, "init", "-q")
	for name, content := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, "*") {
			name, mode = strings.TrimSuffix(name, "*"), 0o755
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		git(t, dir, "add", name)
	}
	return dir
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func TestCheck(t *testing.T) {
	elf := "\x7fELF\x02\x01\x01" + strings.Repeat("\x00", 100)
	big := strings.Repeat("x", maxSize+1)
	tests := []struct {
		name  string
		files map[string]string
		want  []string // substrings, one per expected problem, in order
	}{
		{"sources, scripts and a 1 MiB file pass", map[string]string{
			"main.go": "package main\n", "run*": "#!/bin/sh\necho hi\n", "docs/a.png": "\x89PNG\r\n\x1a\n\x00\x00",
			"testdata/exactly-1MiB": strings.Repeat("y", maxSize),
		}, nil},
		{"an ELF binary fails, named", map[string]string{"main.go": "package main\n", "bench*": elf},
			[]string{"bench is an executable binary (ELF"}},
		{"an ELF without the executable bit fails too", map[string]string{"mockllm": elf},
			[]string{"mockllm is an executable binary (ELF"}},
		{"a Mach-O binary fails", map[string]string{"tool": "\xcf\xfa\xed\xfe\x07\x00"},
			[]string{"tool is an executable binary (Mach-O"}},
		{"an executable with binary content fails", map[string]string{"blob*": "#!x\x00\x01\x02"},
			[]string{"blob is an executable binary (executable bit and binary content"}},
		{"a file over 1 MiB fails, named", map[string]string{"testdata/big.json": big},
			[]string{"testdata/big.json is 1.0 MiB, more than the 1 MiB"}},
		{"an exception with a reason passes", map[string]string{
			"testdata/big.json": big, allowFile: "# exceptions\n\ntestdata/big.json  recorded trace the replay test needs\n",
		}, nil},
		{"an exception without a reason fails and exempts nothing", map[string]string{
			"testdata/big.json": big, allowFile: "testdata/big.json\n",
		}, []string{allowFile + ":1: testdata/big.json has no reason", "testdata/big.json is 1.0 MiB"}},
		{"an exception for an untracked path fails", map[string]string{
			allowFile: "gone.bin\tremoved long ago\n",
		}, []string{allowFile + " lists gone.bin, which is not tracked"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := check(repo(t, tt.files))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("problems:\n%s\nwant %d: %q", strings.Join(got, "\n"), len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q; want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

// The command exits 1 and names the file, as .ci/run shows it.
func TestCommandFails(t *testing.T) {
	dir := repo(t, map[string]string{"bench*": "\x7fELF\x02\x01\x01\x00"})
	cmd := exec.Command("go", "run", ".", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v; want status 1\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "treecheck: bench is an executable binary") {
		t.Errorf("stderr = %q; want it to name bench", stderr.String())
	}
}

// This repository itself tracks no build output.
func TestRepository(t *testing.T) {
	problems, err := check(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
