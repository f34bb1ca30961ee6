package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ArmsLookback bounds how far back Arms looks for an arm's identity: a
// statistic or a request older than this may describe a version that is
// gone.
const ArmsLookback = 24 * time.Hour

// ArmIdentity is what an arm of a deployment is, as the newest events
// say (SPEC §7): its prompt version and hash and its fingerprint from the
// newest statistics entry of the arm, its upstream model from the newest
// request event the arm answered (or, for gray, the newest sample).
// Statistics carry no model, so Model is "" when request_log is off and
// no sample names one.
type ArmIdentity struct {
	Arm           string
	Model         string
	PromptVersion string
	PromptHash    string
	Fingerprint   string
	// SeenAt is the newest statistic the identity was read from.
	SeenAt time.Time
}

// Arms returns the identity of deployment's primary and gray arms (and
// shadow when it has statistics), in that order, as of now; an arm with
// no statistics within ArmsLookback is left out.
func (r *Reader) Arms(ctx context.Context, deployment string, now time.Time) ([]ArmIdentity, error) {
	since := now.Add(-ArmsLookback)
	// The newest rows first (one per gateway and interval): every arm
	// with traffic is in the last few of them.
	rows, err := r.pool.Query(ctx, `SELECT DISTINCT ON (a->>'arm') a->>'arm', coalesce(a->>'arm_prompt_version', ''),
			coalesce(a->>'arm_prompt_hash', ''), coalesce(a->>'arm_fingerprint', ''), s.occurred_at
		FROM (SELECT data, occurred_at FROM arm_stats WHERE deployment = $1 AND occurred_at >= $2
			ORDER BY occurred_at DESC LIMIT 32) s, jsonb_array_elements(s.data->'arms') a
		ORDER BY a->>'arm', s.occurred_at DESC`, deployment, since)
	if err != nil {
		return nil, fmt.Errorf("arms of %s: %w", deployment, err)
	}
	found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ArmIdentity, error) {
		var a ArmIdentity
		err := row.Scan(&a.Arm, &a.PromptVersion, &a.PromptHash, &a.Fingerprint, &a.SeenAt)
		a.SeenAt = a.SeenAt.UTC()
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("arms of %s: %w", deployment, err)
	}
	var out []ArmIdentity
	for _, arm := range []string{"primary", "gray", "shadow"} {
		for _, a := range found {
			if a.Arm != arm {
				continue
			}
			if a.Model, err = r.armModel(ctx, deployment, arm, since); err != nil {
				return nil, err
			}
			out = append(out, a)
		}
	}
	return out, nil
}

// armModel returns the upstream model of arm's newest request event since
// since (a fallback was answered by primary), else for gray and shadow
// the model of the newest sample; "" when neither names one.
func (r *Reader) armModel(ctx context.Context, deployment, arm string, since time.Time) (string, error) {
	arms := []string{arm}
	if arm == "primary" {
		arms = append(arms, "fallback")
	}
	var model string
	err := r.pool.QueryRow(ctx, `SELECT upstream_model FROM requests WHERE deployment = $1 AND arm = ANY($2)
		AND occurred_at >= $3 ORDER BY occurred_at DESC LIMIT 1`, deployment, arms, since).Scan(&model)
	if errors.Is(err, pgx.ErrNoRows) && arm != "primary" {
		err = r.pool.QueryRow(ctx, `SELECT upstream_model FROM samples WHERE deployment = $1 AND arm = $2
			AND occurred_at >= $3 ORDER BY occurred_at DESC, event_id DESC LIMIT 1`, deployment, arm, since).Scan(&model)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("model of %s's %s arm: %w", deployment, arm, err)
	}
	return model, nil
}
