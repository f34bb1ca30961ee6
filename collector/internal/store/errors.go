package store

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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

// Fault is what an error from this package means to a service answering
// a client: the API and the console both decide their answers from it, so
// the two never disagree on what is the client's mistake.
type Fault int

const (
	// FaultNone: not an error this package knows; the caller decides
	// (its own errors, routing errors).
	FaultNone Fault = iota
	// FaultNotFound: no row has the asked-for id (404).
	FaultNotFound
	// FaultParam: a parameter the store refuses, named by Classify's
	// *ParamError (400).
	FaultParam
	// FaultRange: a value Postgres refused as a data exception (SQLSTATE
	// class 22) — a time or cursor outside what it stores (400).
	FaultRange
	// FaultQuery: Postgres refused the query for another reason: a bug
	// or a schema out of date (500; log the cause, never show it).
	FaultQuery
	// FaultUnavailable: anything else from the store, most often
	// Postgres out of reach (503).
	FaultUnavailable
)

// Classify says what err means (see Fault). For FaultParam it returns the
// parameter error, with Param "limit" for ErrBadLimit and "cursor" for
// ErrBadCursor when they come bare.
func Classify(err error) (Fault, *ParamError) {
	var pe *ParamError
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return FaultNone, nil
	case errors.Is(err, ErrNotFound):
		return FaultNotFound, nil
	case errors.As(err, &pe):
		return FaultParam, pe
	case errors.Is(err, ErrBadCursor):
		return FaultParam, &ParamError{Param: "cursor", Err: ErrBadCursor}
	case errors.Is(err, ErrBadLimit):
		return FaultParam, &ParamError{Param: "limit", Err: ErrBadLimit}
	case errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22"):
		return FaultRange, nil
	case errors.As(err, &pgErr):
		return FaultQuery, nil
	}
	return FaultUnavailable, nil
}
