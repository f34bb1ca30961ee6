package pool

import "sync"

// This file is where stored Responses live (SPEC §6.7): a response the
// Responses API stored stays in the memory of the replica that answered
// it, so a request naming it (previous_response_id) must go there. The
// pool learns, from the answers, which replica holds which response id,
// in a bounded map: the oldest id out first. Replicas are kept by name,
// as prefix.share sends them, so an id outlives its replica's ejection
// and is shared between gateways.

// MaxResponses bounds the response ids a pool remembers.
const MaxResponses = 1 << 16

// maxShareResponses bounds the ids one shared message carries for an
// arm (about 100 bytes each); more learned in one stats_interval are
// not shared (the other gateways send them as least_loaded).
const maxShareResponses = 1024

// SharedResponse is a response id and the replica that holds it.
type SharedResponse struct {
	ID      string `json:"id"`
	Replica string `json:"replica"`
}

// responseMap is response id → replica name, at most max entries, the
// oldest learned out first (a ring of the ids in learning order). Its
// methods are safe for concurrent use.
type responseMap struct {
	mu      sync.RWMutex
	max     int
	byID    map[string]string
	ring    []string // ids in learning order, from head
	head    int
	pending []SharedResponse // learned here since the last export (shared pools only)
	share   bool
}

func newResponseMap(max int, share bool) *responseMap {
	return &responseMap{max: max, byID: map[string]string{}, share: share}
}

// lookup returns the replica name holding id. The conversion of id
// does not allocate (the compiler reads the map with the bytes).
func (m *responseMap) lookup(id []byte) (string, bool) {
	m.mu.RLock()
	name, ok := m.byID[string(id)]
	m.mu.RUnlock()
	return name, ok
}

// learn records that replica name holds id; local says this gateway
// learned it (it is then shared, when the pool shares).
func (m *responseMap) learn(id, name string, local bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.byID[id]; ok {
		if old == name {
			return
		}
		m.byID[id] = name // the same id answered again elsewhere: the latest holds it
	} else {
		if len(m.ring) < m.max {
			m.ring = append(m.ring, id)
		} else {
			delete(m.byID, m.ring[m.head])
			m.ring[m.head] = id
			m.head = (m.head + 1) % m.max
		}
		m.byID[id] = name
	}
	if local && m.share && len(m.pending) < maxShareResponses {
		m.pending = append(m.pending, SharedResponse{ID: id, Replica: name})
	}
}

// export takes the ids learned here since the last export.
func (m *responseMap) export() []SharedResponse {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.pending
	m.pending = nil
	return out
}

// LearnResponse records that replica r answered (and so holds) the
// stored response id. A single url needs no map: it does nothing.
func (p *Pool) LearnResponse(id string, r *Replica) {
	if p.responses == nil || id == "" || r == nil {
		return
	}
	p.responses.learn(id, r.Name, true)
}

// KnowsResponse reports whether id is known to one of the pool's
// replicas (serving or not).
func (p *Pool) KnowsResponse(id string) bool {
	if p.responses == nil {
		return false
	}
	_, ok := p.responses.lookup([]byte(id))
	return ok
}

// responsePick returns the serving replica of s, none of tried, that
// holds the response id, or nil.
func (p *Pool) responsePick(s, tried []*Replica, id []byte) *Replica {
	name, ok := p.responses.lookup(id)
	if !ok {
		return nil
	}
	for _, r := range s {
		if r.Name == name {
			if contains(tried, r) {
				return nil
			}
			return r
		}
	}
	return nil
}

// ExportResponses takes the response ids learned since the last
// export, for prefix.share; nil when the pool does not share.
func (p *Pool) ExportResponses() []SharedResponse {
	if !p.Shares() || p.responses == nil {
		return nil
	}
	return p.responses.export()
}

// MergeResponses adds another gateway's response ids: the replica is
// kept by name (it may be ejected now and serve again later). At most
// maxShareResponses are read from one message.
func (p *Pool) MergeResponses(rs []SharedResponse) (merged int) {
	if !p.Shares() || p.responses == nil {
		return 0
	}
	p.mu.Lock()
	known := make(map[string]bool, len(p.members))
	for _, r := range p.members {
		known[r.Name] = true
	}
	p.mu.Unlock()
	for i, sr := range rs {
		if i == maxShareResponses {
			break
		}
		if sr.ID != "" && known[sr.Replica] {
			p.responses.learn(sr.ID, sr.Replica, false)
			merged++
		}
	}
	return merged
}
