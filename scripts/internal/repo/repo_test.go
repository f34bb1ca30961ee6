package repo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRoot(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "scripts", "internal", "repo", "repo.go")); err != nil {
		t.Errorf("Root = %s, not the checkout holding this package: %v", root, err)
	}
	t.Chdir(t.TempDir())
	if root, err := Root(); err == nil {
		t.Errorf("Root outside a checkout = %s, want an error", root)
	}
}
