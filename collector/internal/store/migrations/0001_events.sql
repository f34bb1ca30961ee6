-- graygate collector schema, version 1: one table per event type (SPEC §8).
--
-- Every table has event_id (the CloudEvents id, a UUIDv7) and occurred_at
-- (the event's time), so a redelivered event maps to the same row: inserts
-- are ON CONFLICT (event_id, occurred_at) DO NOTHING. stream_seq is the
-- JetStream stream sequence the event was stored at (for a rollout event,
-- the deployment's new revision); stored_at is when the collector wrote it.
--
-- requests, rejections, samples and analysis_evaluations are partitioned by
-- day (UTC) on occurred_at: the collector creates a day's partition before
-- inserting into it, named <table>_pYYYYMMDD, and drops partitions older
-- than collector.retention. There is no default partition, so a row never
-- lands where retention cannot drop it.

CREATE TABLE requests (
    event_id               uuid             NOT NULL,
    occurred_at            timestamptz      NOT NULL,
    source                 text             NOT NULL,
    stream_seq             bigint           NOT NULL,
    stored_at              timestamptz      NOT NULL DEFAULT now(),
    request_id             text             NOT NULL,
    route                  text             NOT NULL,
    deployment             text             NOT NULL,
    arm                    text             NOT NULL,
    upstream_model         text             NOT NULL,
    status                 integer          NOT NULL,
    error_type             text             NOT NULL,
    stream                 boolean          NOT NULL,
    estimated_tokens       bigint           NOT NULL,
    matched_context        text[]           NOT NULL,
    prompt_tokens          bigint           NOT NULL,
    completion_tokens      bigint           NOT NULL,
    usage_estimated        boolean          NOT NULL,
    ttft_ms                double precision NOT NULL,
    latency_ms             double precision NOT NULL,
    tool_calls             integer          NOT NULL,
    tool_steps             integer          NOT NULL,
    repeated_tool_call     boolean          NOT NULL,
    schema_valid           boolean,          -- NULL: not checked
    fallback_reason        text,             -- NULL unless arm = 'fallback'
    gray_status            integer,          -- gray_*: the gray attempt of a fallback, else NULL
    gray_error_type        text,
    gray_reason            text,
    gray_ttft_ms           double precision,
    gray_latency_ms        double precision,
    gray_prompt_tokens     bigint,
    gray_completion_tokens bigint,
    gray_schema_valid      boolean,
    PRIMARY KEY (event_id, occurred_at)
) PARTITION BY RANGE (occurred_at);

-- Request statistics per deployment over time.
CREATE INDEX requests_deployment_time ON requests (deployment, occurred_at DESC);

CREATE TABLE rejections (
    event_id         uuid        NOT NULL,
    occurred_at      timestamptz NOT NULL,
    source           text        NOT NULL,
    stream_seq       bigint      NOT NULL,
    stored_at        timestamptz NOT NULL DEFAULT now(),
    request_id       text        NOT NULL,
    route            text        NOT NULL,
    deployment       text,        -- NULL when none had been chosen
    code             text        NOT NULL,
    param            text,        -- NULL when the rejection names none
    detail           text        NOT NULL,
    estimated_tokens bigint      NOT NULL,
    PRIMARY KEY (event_id, occurred_at)
) PARTITION BY RANGE (occurred_at);

CREATE INDEX rejections_code_time ON rejections (code, occurred_at DESC);

CREATE TABLE samples (
    event_id          uuid             NOT NULL,
    occurred_at       timestamptz      NOT NULL,
    source            text             NOT NULL,
    stream_seq        bigint           NOT NULL,
    stored_at         timestamptz      NOT NULL DEFAULT now(),
    request_id        text             NOT NULL,
    deployment        text             NOT NULL,
    arm               text             NOT NULL,
    upstream_model    text             NOT NULL,
    reason            text             NOT NULL,
    status            integer          NOT NULL,
    validation_errors jsonb            NOT NULL,  -- [{"field": …, "description": …}, …]
    payload           bytea            NOT NULL,  -- the raw gray payload as kept (base64 decoded)
    payload_base64    boolean          NOT NULL,  -- it arrived as payload_base64 (not valid UTF-8)
    payload_truncated boolean          NOT NULL,  -- cut by the gateway or at collector.max_payload_bytes
    payload_bytes     bigint           NOT NULL,  -- size of the original payload
    prompt_hash       text             NOT NULL,
    latency_ms        double precision NOT NULL,
    PRIMARY KEY (event_id, occurred_at)
) PARTITION BY RANGE (occurred_at);

-- The sample-store queries: newest first, keyset on (occurred_at, event_id),
-- optionally filtered by deployment, reason or arm.
CREATE INDEX samples_time ON samples (occurred_at DESC, event_id DESC);
CREATE INDEX samples_deployment_time ON samples (deployment, occurred_at DESC, event_id DESC);
CREATE INDEX samples_reason_time ON samples (reason, occurred_at DESC, event_id DESC);
CREATE INDEX samples_arm_time ON samples (arm, occurred_at DESC, event_id DESC);
CREATE INDEX samples_request ON samples (request_id);

-- Rollout history is small and kept whatever the retention.
CREATE TABLE rollout_events (
    event_id               uuid             NOT NULL,
    occurred_at            timestamptz      NOT NULL,
    source                 text             NOT NULL,
    stream_seq             bigint           NOT NULL,
    stored_at              timestamptz      NOT NULL DEFAULT now(),
    deployment             text             NOT NULL,
    percentage             numeric(5, 2)    NOT NULL,
    status                 text             NOT NULL,
    reason                 text             NOT NULL,
    actor                  text             NOT NULL,
    revision               bigint           NOT NULL,  -- the revision the change was made from
    trigger_gate           text,                       -- trigger_*: the analyzer's failing gate, else NULL
    trigger_value          double precision,
    trigger_threshold      double precision,
    trigger_window_seconds double precision,
    PRIMARY KEY (event_id, occurred_at)
);

CREATE INDEX rollout_events_deployment_time ON rollout_events (deployment, occurred_at DESC, event_id DESC);

CREATE TABLE analysis_evaluations (
    event_id         uuid             NOT NULL,
    occurred_at      timestamptz      NOT NULL,
    source           text             NOT NULL,
    stream_seq       bigint           NOT NULL,
    stored_at        timestamptz      NOT NULL DEFAULT now(),
    deployment       text             NOT NULL,
    window_start     timestamptz      NOT NULL,
    window_seconds   double precision NOT NULL,
    gray_requests    bigint           NOT NULL,
    primary_requests bigint           NOT NULL,
    verdict          text             NOT NULL,
    gates            jsonb            NOT NULL,  -- [{"gate", "value", "threshold", "verdict"}, …]
    PRIMARY KEY (event_id, occurred_at)
) PARTITION BY RANGE (occurred_at);

CREATE INDEX analysis_evaluations_deployment_time ON analysis_evaluations (deployment, occurred_at DESC);
