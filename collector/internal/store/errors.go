package store

import (
	"errors"
	"fmt"
	"time"
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
	// ErrTimeOutOfRange means a time outside MinTime–MaxTime, the range
	// the store holds and a query may name.
	ErrTimeOutOfRange = fmt.Errorf("outside the stored range, %s to %s",
		MinTime.Format(time.RFC3339Nano), MaxTime.Format(time.RFC3339Nano))
)

// ParamError is a query parameter the store refuses (since, until,
// cursor): Param names it, Err is ErrBadCursor or ErrTimeOutOfRange.
// The API answers it 400 naming Param, never 5xx.
type ParamError struct {
	Param string
	Err   error
}

func (e *ParamError) Error() string { return e.Param + ": " + e.Err.Error() }

func (e *ParamError) Unwrap() error { return e.Err }
