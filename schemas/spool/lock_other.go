//go:build !unix

package spool

import (
	"os"
	"path/filepath"
)

// lockDir opens the lock file; without flock, two processes sharing a
// spool directory are not detected.
func lockDir(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o600)
}

func unlockDir(f *os.File) error {
	return f.Close()
}
