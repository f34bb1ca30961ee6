package process

import (
	"os"
	"slices"
	"strings"
)

// EnvironWithout returns this process's environment minus the named
// variables, for a child that must not be pointed elsewhere by the shell
// that started the script.
func EnvironWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			env = append(env, kv)
		}
	}
	return env
}

// TailFile returns the last n lines of the file at path, for an error
// message about the process that wrote it; "" when it cannot be read.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
