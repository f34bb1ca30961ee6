package console

import (
	"net/url"
	"time"

	"github.com/gofiber/fiber/v2"
)

// listing is what the paged lists (/requests, /samples) share: the
// filter form's values and the links to the first and the next page.
type listing struct {
	// Filter holds each parameter as the form sent it ("" when absent).
	Filter map[string]string
	// Next is the URL of the next page ("" on the last one); First the
	// first page's.
	Next, First string
	// Paged is set on every page but the first.
	Paged bool
	// pinned holds the time filters as the first page resolved them
	// (RFC 3339): the next pages' links carry them, so "since=1h" means
	// the same hour on every page, not an hour before each click.
	pinned map[string]string
}

// pin records that the time filter k, when given, resolved to t.
func (l *listing) pin(k string, t time.Time) {
	if l.Filter[k] == "" || t.IsZero() {
		return
	}
	if l.pinned == nil {
		l.pinned = map[string]string{}
	}
	l.pinned[k] = t.UTC().Format(time.RFC3339Nano)
}

func readListing(c *fiber.Ctx, params []string) listing {
	l := listing{Filter: make(map[string]string, len(params))}
	for _, k := range params {
		l.Filter[k] = c.Query(k)
	}
	l.Paged = l.Filter["cursor"] != ""
	return l
}

// given is the filter without its empty values: an empty form field does
// not filter.
func (l *listing) given() map[string]string {
	g := map[string]string{}
	for k, v := range l.Filter {
		if v != "" {
			g[k] = v
		}
	}
	return g
}

// link sets First and Next: path with the same filters, without a
// cursor and with next (when there is a next page).
func (l *listing) link(path string, params []string, next string) {
	q := url.Values{}
	for _, k := range params {
		if v := l.Filter[k]; v != "" && k != "cursor" {
			q.Set(k, v)
		}
	}
	l.First = path + "?" + q.Encode()
	if next != "" {
		for k, v := range l.pinned {
			q.Set(k, v)
		}
		q.Set("cursor", next)
		l.Next = path + "?" + q.Encode()
	}
}

// pageBounds refuses a cursor no page link of this console holds, and
// makes a limit not given the console's page size.
func pageBounds(cursor string, limit *int, size int) error {
	if len(cursor) > 64 {
		return badParam("cursor", "not a cursor from this console (follow the page links)")
	}
	if *limit == 0 {
		*limit = size
	}
	return nil
}
