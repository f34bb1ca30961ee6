package console

import (
	"errors"

	"github.com/gofiber/fiber/v2"
)

// The console's sentinels.
var (
	// errUnsealed: a sealed admin token did not open (another key,
	// another row, or altered bytes); the session does not hold.
	errUnsealed = errors.New("the sealed admin token does not open under this session key")
	// errUnreachable wraps a failure to reach the gateway's admin API or
	// to read its answer.
	errUnreachable = errors.New("the gateway's admin API cannot be reached")
	// errStaleForm answers a POST whose CSRF token is not its session's
	// (or, at sign-in, not its cookie's).
	errStaleForm = httpError(fiber.StatusForbidden, "the form's CSRF token is missing or stale: reload the page and send it again")
)
