package admin

import (
	"context"
	"sync"
)

// serial lets the rollout changes of one deployment through one at a
// time, so that two changes sent to the same gateway at once never race
// for the same revision of the log: each reads the state the other left.
// (Changes through other gateways, and the analyzer's, can still come
// between a read and an append; putRollout tries those again.)
type serial struct {
	mu    sync.Mutex
	turns map[string]chan struct{} // one slot per deployment, made on first use
}

// acquire waits for the deployment's turn, at most until ctx is done, and
// returns the function that ends it.
func (s *serial) acquire(ctx context.Context, deployment string) (release func(), err error) {
	s.mu.Lock()
	if s.turns == nil {
		s.turns = make(map[string]chan struct{})
	}
	turn, ok := s.turns[deployment]
	if !ok {
		turn = make(chan struct{}, 1)
		s.turns[deployment] = turn
	}
	s.mu.Unlock()
	select {
	case turn <- struct{}{}:
		return func() { <-turn }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
