package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// dialAsGateway connects to the cluster the way gateway-1 does, reading
// its configuration: its identity may read the rollout stream (direct get)
// and every stream's info, which is all the drill reads from NATS.
func (s *system) dialAsGateway() (*nats.Conn, jetstream.JetStream, error) {
	// With the environment gateway-1 got, not the drill's own: a NATS_URL
	// there (task test's server, or .data/env's) would name another server.
	gw := s.gateways[0]
	path := gw.Args[len(gw.Args)-1]
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read the gateway's configuration: %w", err)
	}
	cfg, _, err := config.Parse(data, filepath.Dir(path), envLookup(gw.Env), config.ForGateway)
	if err != nil {
		return nil, nil, fmt.Errorf("load the gateway's configuration: %w", err)
	}
	opts, err := cfg.NATS.ServiceOptions(config.ForGateway, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, nil, err
	}
	opts = append(opts, nats.Name("graygate-drill"), nats.PingInterval(2*time.Second), nats.MaxPingsOutstanding(2))
	nc, err := nats.Connect(cfg.NATS.URL, opts...)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if apiPrefix != "" {
		js, err = jetstream.NewWithAPIPrefix(nc, apiPrefix)
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// envLookup looks a variable up in env (KEY=value entries, the last one
// winning, as exec does).
func envLookup(env []string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if k, v, ok := strings.Cut(env[i], "="); ok && k == name {
				return v, true
			}
		}
		return "", false
	}
}

// readRollouts reads every message of the rollout stream with its
// stream timestamp. The `lease` of an event is read when the event has
// one (SPEC §11 rev. 4); nothing else of an event is required but its
// deployment, actor and status.
func readRollouts(ctx context.Context, js jetstream.JetStream) ([]rolloutEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := js.Stream(ctx, events.StreamRollout)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", events.StreamRollout, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []rolloutEvent
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			return nil, fmt.Errorf("%s seq %d: %w", events.StreamRollout, seq, err)
		}
		e, ok := decodeRollout(m.Data)
		if !ok {
			continue // not a rollout event: the gateways skip it too
		}
		e.Seq, e.Stored = m.Sequence, m.Time
		out = append(out, e)
	}
	return out, nil
}

// decodeRollout reads what the drill needs of a rollout event's envelope:
// its deployment, percentage, status, actor and, when it has one, lease.
func decodeRollout(b []byte) (rolloutEvent, bool) {
	var env struct {
		Data struct {
			Deployment string    `json:"deployment"`
			Percentage float64   `json:"percentage"`
			Status     string    `json:"status"`
			Actor      string    `json:"actor"`
			Lease      *leaseRef `json:"lease"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil || env.Data.Deployment == "" {
		return rolloutEvent{}, false
	}
	d := env.Data
	return rolloutEvent{Deployment: d.Deployment, Actor: d.Actor, Status: d.Status, Percentage: d.Percentage, Lease: d.Lease}, true
}

// streamMessages is the number of messages GRAYGATE_EVENTS holds.
func streamMessages(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// storedRows counts the collector's rows per drill request id (requests
// and rejections), and the distinct event ids of every per-request table.
func storedRows(ctx context.Context, db string) (map[string]int, int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `
		SELECT request_id, count(*) FROM (
			SELECT request_id FROM requests WHERE request_id LIKE 'drill-%'
			UNION ALL SELECT request_id FROM rejections WHERE request_id LIKE 'drill-%') r
		GROUP BY request_id`)
	if err != nil {
		return nil, 0, err
	}
	m := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return nil, 0, err
		}
		m[id] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	var ids int
	err = conn.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM (
		SELECT event_id FROM requests UNION ALL SELECT event_id FROM rejections UNION ALL SELECT event_id FROM samples) e`).Scan(&ids)
	return m, ids, err
}
