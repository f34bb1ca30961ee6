package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// envFile is the ordered content of .data/env: `export NAME='value'` lines
// that a POSIX shell (and Task's interpreter) can source.
type envFile struct {
	names  []string
	values map[string]string
}

func readEnv(path string) (*envFile, error) {
	e := &envFile{values: map[string]string{}}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return e, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, value, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		e.set(name, unquote(value))
	}
	return e, sc.Err()
}

func (e *envFile) set(name, value string) {
	if _, ok := e.values[name]; !ok {
		e.names = append(e.names, name)
	}
	e.values[name] = value
}

func (e *envFile) get(name string) string { return e.values[name] }

func (e *envFile) String() string {
	var b bytes.Buffer
	for _, n := range e.names {
		fmt.Fprintf(&b, "export %s=%s\n", n, quote(e.values[n]))
	}
	return b.String()
}

// secret reports whether a variable holds a secret that devenv never
// prints: the NATS passwords.
func secret(name string) bool { return strings.HasSuffix(name, "_PASSWORD") }

// printable is String without the secrets' values: a comment names them
// and the file they are in (mode 0600), which the tasks source.
func (e *envFile) printable(file string) string {
	var b bytes.Buffer
	var hidden []string
	for _, n := range e.names {
		if secret(n) {
			hidden = append(hidden, n)
			continue
		}
		fmt.Fprintf(&b, "export %s=%s\n", n, quote(e.values[n]))
	}
	if len(hidden) > 0 {
		fmt.Fprintf(&b, "# not printed: %s (in %s; . %s sets them)\n", strings.Join(hidden, " "), file, file)
	}
	return b.String()
}

func (e *envFile) write(path string) error {
	tmp := path + ".tmp"
	content := "# written by `go run ./scripts/devenv up`; source it: . .data/env\n" + e.String()
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil { // it holds the NATS passwords
		return err
	}
	return os.Rename(tmp, path)
}

// quote single-quotes a value for a POSIX shell.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func unquote(s string) string {
	if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
		return strings.ReplaceAll(s[1:len(s)-1], `'\''`, "'")
	}
	return s
}

// redact hides a URL's password for progress lines.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}

// oneLine folds a multi-line error (pgx lists every address it tried) into
// one progress line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
