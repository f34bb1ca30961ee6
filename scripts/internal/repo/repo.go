// Package repo finds the graygate checkout the scripts run in.
package repo

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Root walks up from the working directory to graygate's go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/graygate/graygate") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no graygate go.mod in %s or its parents", dir)
		}
	}
}
