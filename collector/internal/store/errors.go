package store

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound means no row has the asked-for id.
	ErrNotFound = errors.New("not found")
	// ErrBadCursor means a pagination cursor was not made by this package.
	ErrBadCursor = errors.New("malformed cursor")
	// ErrMigrationChanged means a migration that was applied has different
	// content now; migrations are never edited after release.
	ErrMigrationChanged = errors.New("applied migration was edited")
	// ErrBadLimit means a page size outside 1–MaxPage.
	ErrBadLimit = fmt.Errorf("limit must be between 1 and %d", MaxPage)
)
