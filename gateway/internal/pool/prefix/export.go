package prefix

// Run is a chain of block hashes that a gateway sent to a replica, as
// Export hands it out to be published on graygate.balance.<deployment>
// and Merge takes it back on the gateways that receive it.
//
// Replicas are numbered per gateway, so Replica is the exporting index's
// id: the caller publishes the replica's key (host:port) in its place, and
// the receiver translates that key to its own id, skipping replicas it does
// not know. A run is a whole chain prefix, block 0 first, so that a
// receiver that merges it keeps the prefix property however many other
// messages it lost.
type Run struct {
	Replica int32
	Blocks  []uint64
}

// run is a queued Run; its blocks are the next n of the queue's.
type run struct {
	replica int32
	n       int32
}

// exportQueue holds the chains Add queued since the last Export, at most
// limit hashes: beyond it, the oldest runs go first, and a run longer than
// limit keeps its first limit blocks (still a prefix).
type exportQueue struct {
	limit   int
	blocks  []uint64
	runs    []run
	first   int // first live run
	offset  int // its first block
	n       int // live blocks
	dropped int // runs dropped since the last Export
}

func (q *exportQueue) push(id int32, chain []uint64) {
	if q.limit == 0 || len(chain) == 0 {
		return
	}
	chain = chain[:min(len(chain), q.limit)]
	q.blocks = append(q.blocks, chain...)
	q.runs = append(q.runs, run{replica: id, n: int32(len(chain))})
	q.n += len(chain)
	for q.n > q.limit {
		r := q.runs[q.first]
		q.first++
		q.offset += int(r.n)
		q.n -= int(r.n)
		q.dropped++
	}
	if q.offset >= q.limit { // amortised: at most limit blocks copied per limit pushed
		q.blocks = q.blocks[:copy(q.blocks, q.blocks[q.offset:])]
		q.runs = q.runs[:copy(q.runs, q.runs[q.first:])]
		q.offset, q.first = 0, 0
	}
}

// drop forgets the queued runs of replica id.
func (q *exportQueue) drop(id int32) {
	for i := q.first; i < len(q.runs); i++ {
		if q.runs[i].replica == id {
			q.runs[i].replica = none
		}
	}
}

// Export appends to dst the runs that Add queued since the last Export,
// oldest first, and empties the queue; it also returns how many runs were
// dropped because the queue was full (a cache miss on other gateways, not
// an error: raise the limit if it is often more than 0). The runs' Blocks
// share one new array, owned by the caller. An index made with
// exportBlocks 0 always returns dst and 0.
func (x *Index) Export(dst []Run) (runs []Run, dropped int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	q := &x.export
	dropped = q.dropped
	if q.n > 0 {
		blocks := make([]uint64, q.n)
		copy(blocks, q.blocks[q.offset:])
		off := 0
		for _, r := range q.runs[q.first:] {
			if r.replica != none {
				dst = append(dst, Run{Replica: r.replica, Blocks: blocks[off : off+int(r.n) : off+int(r.n)]})
			}
			off += int(r.n)
		}
	}
	q.blocks, q.runs = q.blocks[:0], q.runs[:0]
	q.first, q.offset, q.n, q.dropped = 0, 0, 0, 0
	return dst, dropped
}
