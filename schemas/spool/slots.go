package spool

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
)

// OpenFree opens the first of the directories root/0 … root/(slots−1)
// that no other process holds, for services of which several may run from
// one working directory (two analyzers, one taking over the other's lease):
// each takes a slot of its own, and one started after a crash takes the
// crashed one's slot, and sends what it left. It returns the spool and its
// slot.
func OpenFree(root string, slots int, maxBytes int64, log *slog.Logger) (*Spool, int, error) {
	for i := range slots {
		s, err := Open(filepath.Join(root, strconv.Itoa(i)), maxBytes, log)
		if errors.Is(err, ErrLocked) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		return s, i, nil
	}
	return nil, 0, fmt.Errorf("open spool in %s: all %d slots are in use by other processes", root, slots)
}
