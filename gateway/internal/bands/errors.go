package bands

import "errors"

// Errors returned by NewMatcher and NewRouter. Each one means the
// configuration cannot be served as written; the loader's validation
// normally reports the same problems earlier, with key paths.
var (
	// ErrTooManyBands: a Set holds at most MaxBands bands.
	ErrTooManyBands = errors.New("too many context bands")
	// ErrBadBand: a band has no name, a duplicated name or min > max.
	ErrBadBand = errors.New("invalid context band")
	// ErrBadRoute: a route has no candidates, or a candidate names a
	// deployment or band that is not configured.
	ErrBadRoute = errors.New("invalid route")
)
