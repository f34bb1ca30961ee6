package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/graygate/graygate/schemas/events"
)

// ReplicaStatusStale is how old a gateway's newest view may be and still
// be shown: a gateway publishes every 10 s, so one silent this long has
// stopped (or lost the event log) and its view would mislead. Its rows
// stay until ReplicaStatusKeep.
const ReplicaStatusStale = 10 * time.Minute

// ReplicaStatusKeep is how long the rows of a gateway that stopped
// publishing are kept before maintenance deletes them: GRAYGATE_POOLS'
// max age, so a replay of the stream brings back nothing older.
const ReplicaStatusKeep = events.PoolsMaxAge

// upsertReplicaStatus stores one part of a view unless a newer view of
// its gateway and deployment is stored already; it replaces the part's
// row of an older view. Parameters are the replica_status row of
// tables, in its column order.
const upsertReplicaStatus = `INSERT INTO replica_status
	(event_id, occurred_at, source, stream_seq, gateway, deployment, part, parts, arms)
	SELECT $1::uuid, $2::timestamptz, $3::text, $4::bigint, $5::text, $6::text, $7::integer, $8::integer, $9::jsonb
	WHERE NOT EXISTS (SELECT 1 FROM replica_status WHERE gateway = $5::text AND deployment = $6::text AND occurred_at > $2::timestamptz)
	ON CONFLICT (gateway, deployment, part) DO UPDATE SET
		event_id = EXCLUDED.event_id, occurred_at = EXCLUDED.occurred_at, source = EXCLUDED.source,
		stream_seq = EXCLUDED.stream_seq, parts = EXCLUDED.parts, arms = EXCLUDED.arms, stored_at = now()
	WHERE replica_status.occurred_at < EXCLUDED.occurred_at`

// dropOutnumberedParts removes the parts of older views that a view of
// fewer parts leaves behind (a pool that shrank).
const dropOutnumberedParts = `DELETE FROM replica_status
	WHERE gateway = $1 AND deployment = $2 AND part > $3 AND occurred_at < $4`

// writeReplicaStatus is replica_status' write: an upsert per part and the
// removal of outnumbered parts, in one round trip. Redelivered and older
// parts change nothing and count as duplicates.
func writeReplicaStatus(ctx context.Context, tx pgx.Tx, rows [][]any) (int64, error) {
	var b pgx.Batch
	for _, r := range rows {
		b.Queue(upsertReplicaStatus, r...)
		b.Queue(dropOutnumberedParts, r[4], r[5], r[7], r[1])
	}
	res := tx.SendBatch(ctx, &b)
	var n int64
	for range rows {
		tag, err := res.Exec()
		if err != nil {
			_ = res.Close()
			return n, err
		}
		n += tag.RowsAffected()
		if _, err := res.Exec(); err != nil {
			_ = res.Close()
			return n, err
		}
	}
	return n, res.Close()
}

// ReplicaView is one gateway's latest view of one deployment's replica
// pools: its newest stored parts, their arms merged in part order.
type ReplicaView struct {
	Gateway    string `json:"gateway"`
	Deployment string `json:"deployment"`
	// Time is when the gateway took the view.
	Time time.Time `json:"time"`
	// Parts is how many events the view was split into; PartsReceived
	// how many of them are stored. They differ only for the moment
	// between the parts' arrivals (or when a part was lost).
	Parts         int `json:"parts"`
	PartsReceived int `json:"parts_received"`
	// Arms are the view's arms, each with all its stored replicas.
	Arms []events.ArmReplicas `json:"arms"`
}

// ReplicaViews returns, per gateway and deployment (deployment "" for
// every deployment), the newest view stored, when it is at most
// ReplicaStatusStale old at now; ordered by deployment, then gateway.
func (r *Reader) ReplicaViews(ctx context.Context, deployment string, now time.Time) ([]ReplicaView, error) {
	rows, err := r.pool.Query(ctx, `SELECT gateway, deployment, occurred_at, part, parts, arms FROM replica_status s
		WHERE ($1 = '' OR deployment = $1) AND occurred_at >= $2
		AND occurred_at = (SELECT max(occurred_at) FROM replica_status m WHERE m.gateway = s.gateway AND m.deployment = s.deployment)
		ORDER BY deployment, gateway, part`, deployment, now.Add(-ReplicaStatusStale))
	if err != nil {
		return nil, fmt.Errorf("replica views: %w", err)
	}
	defer rows.Close()
	out := []ReplicaView{}
	for rows.Next() {
		var gw, dep string
		var at time.Time
		var part, parts int32
		var raw []byte
		if err := rows.Scan(&gw, &dep, &at, &part, &parts, &raw); err != nil {
			return nil, fmt.Errorf("replica views: %w", err)
		}
		var arms []events.ArmReplicas
		if err := json.Unmarshal(raw, &arms); err != nil {
			return nil, fmt.Errorf("replica view of %s for %s: %w", gw, dep, err)
		}
		if n := len(out); n == 0 || out[n-1].Gateway != gw || out[n-1].Deployment != dep {
			out = append(out, ReplicaView{Gateway: gw, Deployment: dep, Time: at.UTC(), Parts: int(parts), Arms: []events.ArmReplicas{}})
		}
		v := &out[len(out)-1]
		v.PartsReceived++
		for _, a := range arms {
			if a.Replicas == nil {
				a.Replicas = []events.ReplicaStatus{}
			}
			merged := false
			for i := range v.Arms {
				if v.Arms[i].Arm == a.Arm {
					v.Arms[i].Replicas = append(v.Arms[i].Replicas, a.Replicas...)
					merged = true
					break
				}
			}
			if !merged {
				v.Arms = append(v.Arms, a)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("replica views: %w", err)
	}
	return out, nil
}

// DropStaleReplicaStatus deletes the rows of views older than
// ReplicaStatusKeep (gateways that stopped publishing) and returns how
// many it deleted.
func (w *Writer) DropStaleReplicaStatus(ctx context.Context) (int64, error) {
	tag, err := w.pool.Exec(ctx, `DELETE FROM replica_status WHERE occurred_at < $1`, w.opts.Now().Add(-ReplicaStatusKeep))
	if err != nil {
		return 0, fmt.Errorf("drop stale replica views: %w", err)
	}
	return tag.RowsAffected(), nil
}
