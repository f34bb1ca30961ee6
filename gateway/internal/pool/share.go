package pool

import (
	"encoding/json"
	"errors"
	"fmt"
)

// This file is prefix.share (SPEC §6.7): gateways behind one load
// balancer teach one another which replica holds which prefix. Each
// publishes, once per stats_interval, the index entries it added since
// the last time, on core NATS subject graygate.balance.<deployment> (a
// lost message costs a cache miss, never correctness), and merges the
// others'. Replicas travel by name (host:port): ids are each gateway's
// own.

// BalanceSubject is the core NATS subject of a deployment's shared
// index entries.
func BalanceSubject(deployment string) string { return "graygate.balance." + deployment }

// MaxShareBytes bounds a shared message, sent or read.
const MaxShareBytes = 1 << 20

// Shared is one gateway's message on BalanceSubject.
type Shared struct {
	Gateway string      `json:"gateway"`
	Arms    []SharedArm `json:"arms"`
}

// SharedArm is an arm's new index entries: runs of whole prefixes (each
// run starts at the chain's first block), by replica, and the stored
// responses its replicas answered (at most maxShareResponses).
type SharedArm struct {
	Arm       string           `json:"arm"`
	Runs      []SharedRun      `json:"runs"`
	Responses []SharedResponse `json:"responses,omitempty"`
}

// SharedRun is a prefix sent to a replica.
type SharedRun struct {
	Replica string   `json:"replica"`
	Blocks  []uint64 `json:"blocks"`
}

// Shares reports whether the pool shares its index (prefix with share).
func (p *Pool) Shares() bool { return p.index != nil && p.cfg.Prefix.Share }

// Export takes the index entries added since the last Export, by
// replica name; nil when there are none.
func (p *Pool) Export() []SharedRun {
	if !p.Shares() {
		return nil
	}
	runs, _ := p.index.Export(nil)
	if len(runs) == 0 {
		return nil
	}
	p.mu.Lock()
	names := make(map[int32]string, len(p.members))
	for _, r := range p.members {
		names[r.ID] = r.Name
	}
	p.mu.Unlock()
	out := make([]SharedRun, 0, len(runs))
	for _, run := range runs {
		if name, ok := names[run.Replica]; ok {
			out = append(out, SharedRun{Replica: name, Blocks: run.Blocks})
		}
	}
	return out
}

// Merge adds another gateway's runs to the index: a replica this
// gateway does not know (or no longer serves) is skipped.
func (p *Pool) Merge(runs []SharedRun) (merged int) {
	if !p.Shares() {
		return 0
	}
	serving := p.snap.Load()
	p.mu.Lock()
	ids := make(map[string]int32, len(p.members))
	for _, r := range p.members {
		if serving.byID(r.ID) != nil {
			ids[r.Name] = r.ID
		}
	}
	p.mu.Unlock()
	for _, run := range runs {
		if id, ok := ids[run.Replica]; ok && len(run.Blocks) > 0 {
			p.index.Merge(id, run.Blocks)
			merged++
		}
	}
	return merged
}

// EncodeShared writes m, or returns nil when it holds no run.
func EncodeShared(m *Shared) ([]byte, error) {
	empty := true
	for _, a := range m.Arms {
		empty = empty && len(a.Runs) == 0 && len(a.Responses) == 0
	}
	if empty {
		return nil, nil
	}
	b, err := json.Marshal(m)
	if err == nil && len(b) > MaxShareBytes {
		return nil, fmt.Errorf("shared index entries: %d bytes, more than %d", len(b), MaxShareBytes)
	}
	return b, err
}

// DecodeShared reads a message from another gateway; it is untrusted
// (any gateway identity may publish): a malformed or oversized one is
// an error, and at worst a well-formed lie costs cache misses.
func DecodeShared(b []byte) (*Shared, error) {
	if len(b) > MaxShareBytes {
		return nil, fmt.Errorf("shared index entries: %d bytes, more than %d", len(b), MaxShareBytes)
	}
	var m Shared
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("shared index entries: %w", err)
	}
	if m.Gateway == "" {
		return nil, errors.New("shared index entries: no gateway")
	}
	return &m, nil
}
