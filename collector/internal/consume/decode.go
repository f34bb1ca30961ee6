package consume

import (
	"fmt"

	"github.com/graygate/graygate/schemas/events"
)

// decodeEvent decodes a message body with events.DecodeEvent, the one
// decoder of the contract, and adds the collector's rule for statistics: a
// statistic's id, a UUIDv5, must be the StatsID of its own gateway,
// deployment and interval_start, because that id is what makes a
// statistic republished from a spool one row. A statistic whose id does
// not match could be stored twice, so it is refused like any invalid event.
func decodeEvent(b []byte) (events.Envelope, events.Data, error) {
	env, d, err := events.DecodeEvent(b)
	if err != nil {
		return events.Envelope{}, nil, err
	}
	if s, ok := d.(*events.StatsInterval); ok {
		if want := s.ID(); env.ID != want {
			return events.Envelope{}, nil, fmt.Errorf("%w: statistic id %s is not StatsID(gateway, deployment, interval_start) = %s",
				events.ErrMalformed, env.ID, want)
		}
	}
	return env, d, nil
}
