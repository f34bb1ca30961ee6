// Package params reads the query string of the collector's HTTP pages and
// API the one way both accept it.
package params

import (
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// Read returns the query parameters of c. A parameter not in allowed, or
// given more than once, is refused with the error bad makes of its name and
// what is wrong (the first such parameter).
func Read(c *fiber.Ctx, allowed []string, bad func(param, msg string) error) (map[string]string, error) {
	q := map[string]string{}
	var err error
	c.Context().QueryArgs().VisitAll(func(k, v []byte) {
		key := string(k)
		_, dup := q[key]
		switch {
		case err != nil:
		case !slices.Contains(allowed, key):
			err = bad(key, "unknown parameter (known: "+strings.Join(allowed, ", ")+")")
		case dup:
			err = bad(key, "given more than once")
		}
		q[key] = string(v)
	})
	return q, err
}
