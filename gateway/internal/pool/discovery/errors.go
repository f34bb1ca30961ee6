package discovery

import "errors"

// ErrNoAddress is the error of a resolution that answered without a
// usable address (the name exists, but has no A or AAAA record).
var ErrNoAddress = errors.New("no address")
