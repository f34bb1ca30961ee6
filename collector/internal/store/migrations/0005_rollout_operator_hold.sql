-- graygate collector schema, version 5 (SPEC rev. 4, §3 and §8).
--
-- A rollout event's operator: the name of the operator whose admin token
-- made an admin change, '' for the shared token, for other actors and for
-- events older than rev. 4. hold: true when the event held the rollout
-- (the analyzer may roll it back but never promotes it), false when it
-- released it, NULL when the event does not speak of the hold (every
-- analyzer and config event, every admin change of percentage or status,
-- events older than rev. 4). The current hold of a deployment is the hold
-- of its last event where hold IS NOT NULL. A constant default and a
-- nullable column rewrite no table.
ALTER TABLE rollout_events
    ADD COLUMN operator text NOT NULL DEFAULT '',
    ADD COLUMN hold     boolean;

-- The console's "held by" reads the last event that spoke of the hold.
CREATE INDEX rollout_events_hold ON rollout_events (deployment, stream_seq DESC) WHERE hold IS NOT NULL;
