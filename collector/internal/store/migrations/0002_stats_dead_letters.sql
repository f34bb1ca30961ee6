-- graygate collector schema, version 2 (SPEC rev. 2, §8).
--
-- arm_stats: one row per graygate.stats.interval event, so the history of a
-- rollout's gate inputs can be queried after the analyzer's window has
-- passed. occurred_at is the interval's start (not the envelope's time), so
-- a statistic republished from a spool maps to the same row; data is the
-- event's data as published. Partitioned by day like the other
-- high-volume tables.
CREATE TABLE arm_stats (
    event_id    uuid        NOT NULL,  -- a UUIDv5 of (gateway, deployment, interval_start)
    occurred_at timestamptz NOT NULL,  -- interval_start
    source      text        NOT NULL,
    stream_seq  bigint      NOT NULL,
    stored_at   timestamptz NOT NULL DEFAULT now(),
    gateway     text        NOT NULL,
    deployment  text        NOT NULL,
    data        jsonb       NOT NULL,
    PRIMARY KEY (event_id, occurred_at)
) PARTITION BY RANGE (occurred_at);

CREATE INDEX arm_stats_deployment_time ON arm_stats (deployment, occurred_at DESC);

-- dead_letters: messages that decode as valid events but that Postgres
-- refuses to store (a NUL in a text, a value out of range: SQLSTATE classes
-- 22, 23 and 54), isolated from their batch so they never block the others,
-- and acknowledged. message is the message body exactly as it was read from
-- JetStream, so it can be inspected, fixed and republished. Not partitioned
-- and never dropped by retention: an operator deletes rows once handled.
CREATE TABLE dead_letters (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id    uuid        NOT NULL,  -- the event's id; one dead letter per event
    event_type  text        NOT NULL,
    stream      text        NOT NULL,
    stream_seq  bigint      NOT NULL,  -- JetStream sequence of the message (0 when unknown)
    subject     text        NOT NULL,
    message     bytea       NOT NULL,
    error       text        NOT NULL,  -- what Postgres said, with its SQLSTATE
    received_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id)
);

CREATE INDEX dead_letters_received ON dead_letters (received_at DESC);

-- A rollback's trigger now carries the gate's estimate (in trigger_value,
-- as before), the confidence bound that decided and, for a per-class gate,
-- the stream class (SPEC §9 rev. 2). Rows written before this migration
-- have NULL here; readers take the estimate as their bound.
ALTER TABLE rollout_events
    ADD COLUMN trigger_bound  double precision,
    ADD COLUMN trigger_stream boolean;

COMMENT ON COLUMN rollout_events.trigger_value IS 'the failing gate''s point estimate';

COMMENT ON COLUMN analysis_evaluations.gates IS
    'the evaluation''s gate results as published: [{"gate", "stream", "estimate", "bound", "threshold", "gray_n", "primary_n", "verdict"}, …]';
