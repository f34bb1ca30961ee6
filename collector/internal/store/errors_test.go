package store_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestClassify: the API and the console answer from Classify, so each
// kind of store error must land on its fault — Postgres's own errors
// taken from a real server, not made up.
func TestClassify(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	pgErr := func(sql string) error {
		_, err := pool.Exec(ctx, sql)
		if err == nil {
			t.Fatalf("%s: no error", sql)
		}
		return fmt.Errorf("query: %w", err)
	}
	closed, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	closed.Close()
	_, unreachable := closed.Exec(ctx, `SELECT 1`)

	cases := []struct {
		name  string
		err   error
		want  store.Fault
		param string
	}{
		{"nil", nil, store.FaultNone, ""},
		{"foreign", errors.New("routing"), store.FaultUnavailable, ""},
		{"not found", fmt.Errorf("sample x: %w", store.ErrNotFound), store.FaultNotFound, ""},
		{"param", &store.ParamError{Param: "since", Err: store.ErrTimeOutOfRange}, store.FaultParam, "since"},
		{"bare cursor", store.ErrBadCursor, store.FaultParam, "cursor"},
		{"bare limit", fmt.Errorf("page: %w", store.ErrBadLimit), store.FaultParam, "limit"},
		{"data exception", pgErr(`SELECT 'yesterday-ish'::timestamptz`), store.FaultRange, ""},
		{"out of range", pgErr(`SELECT '294277-01-01 00:00:00+00'::timestamptz`), store.FaultRange, ""},
		{"refused query", pgErr(`SELECT no_such_column FROM samples`), store.FaultQuery, ""},
		{"unreachable", unreachable, store.FaultUnavailable, ""},
	}
	for _, c := range cases {
		got, pe := store.Classify(c.err)
		if got != c.want {
			t.Errorf("%s: Classify(%v) = %d; want %d", c.name, c.err, got, c.want)
		}
		if (pe != nil) != (c.param != "") || pe != nil && pe.Param != c.param {
			t.Errorf("%s: param error = %v; want param %q", c.name, pe, c.param)
		}
	}
}
