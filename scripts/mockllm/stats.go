package main

import "sync/atomic"

// stats counts chat completion requests. A request ends exactly one way:
// completed (the mock wrote its whole answer, error answers included),
// cancelled (the client went away first) or dropped (drop-after cut it).
type stats struct {
	requests  atomic.Int64
	inFlight  atomic.Int64
	completed atomic.Int64
	cancelled atomic.Int64
	dropped   atomic.Int64
}

// statsView is the body of GET /_mock/stats.
type statsView struct {
	Requests  int64 `json:"requests"`
	Cancelled int64 `json:"cancelled"`
	InFlight  int64 `json:"in_flight"`
	Completed int64 `json:"completed"`
	Dropped   int64 `json:"dropped"`
}

func (s *stats) view() statsView {
	return statsView{
		Requests:  s.requests.Load(),
		Cancelled: s.cancelled.Load(),
		InFlight:  s.inFlight.Load(),
		Completed: s.completed.Load(),
		Dropped:   s.dropped.Load(),
	}
}

// reset zeroes the totals; in_flight keeps counting the requests running.
func (s *stats) reset() {
	s.requests.Store(0)
	s.completed.Store(0)
	s.cancelled.Store(0)
	s.dropped.Store(0)
}
