-- graygate collector schema, version 4 (SPEC rev. 4, §6.7 and §7).
--
-- The replica that answered, and the prompt tokens its engine served from
-- its prefix cache (usage.prompt_tokens_details.cached_tokens). replica is
-- `host:port`; NULL for an arm with a single url and for events of
-- gateways before rev. 4, as is cached_tokens when the answer did not
-- report it. gray_replica is the gray attempt's of a fallback. Adding
-- nullable columns rewrites no partition.
ALTER TABLE requests
    ADD COLUMN replica       text,
    ADD COLUMN cached_tokens bigint,
    ADD COLUMN gray_replica  text;

ALTER TABLE samples
    ADD COLUMN replica text;

-- replica_status: the latest graygate.replicas.status of each gateway and
-- deployment, one row per part (a view of more than 256 replicas is split
-- over several events sharing its time). occurred_at is the view's time
-- (the data's `time`); a part replaces its row only when newer, and a
-- newer view removes the older view's parts past its own count. Readers
-- take, per gateway and deployment, the parts of the newest time; a
-- gateway whose newest view is older than 10 minutes is gone (the API
-- leaves it out) and its rows are deleted after a day (the stream's age).
CREATE TABLE replica_status (
    gateway     text        NOT NULL,
    deployment  text        NOT NULL,
    part        integer     NOT NULL,
    event_id    uuid        NOT NULL,
    occurred_at timestamptz NOT NULL,  -- the view's time
    source      text        NOT NULL,
    stream_seq  bigint      NOT NULL,
    stored_at   timestamptz NOT NULL DEFAULT now(),
    parts       integer     NOT NULL,
    arms        jsonb       NOT NULL,  -- [{"arm", "balance", "replicas": [entries of GET /admin/upstreams]}]
    PRIMARY KEY (gateway, deployment, part)
);

CREATE INDEX replica_status_time ON replica_status (deployment, occurred_at DESC);
