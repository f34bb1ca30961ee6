package process

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestEnvironWithout(t *testing.T) {
	t.Setenv("PROCESS_TEST_DROP", "1")
	t.Setenv("PROCESS_TEST_KEEP", "2")
	env := EnvironWithout("PROCESS_TEST_DROP", "PROCESS_TEST_ABSENT")
	if slices.Contains(env, "PROCESS_TEST_DROP=1") || !slices.Contains(env, "PROCESS_TEST_KEEP=2") {
		t.Errorf("EnvironWithout(PROCESS_TEST_DROP) = %q; want KEEP and not DROP", env)
	}
	if len(env) != len(os.Environ())-1 {
		t.Errorf("EnvironWithout dropped %d variables; want 1", len(os.Environ())-len(env))
	}
}

func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		n    int
		want string
	}{
		{path, 2, "b\nc"},
		{path, 5, "a\nb\nc"},
		{path + ".missing", 2, ""},
	} {
		if got := TailFile(tc.path, tc.n); got != tc.want {
			t.Errorf("TailFile(%s, %d) = %q; want %q", filepath.Base(tc.path), tc.n, got, tc.want)
		}
	}
}
