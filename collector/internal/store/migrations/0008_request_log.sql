-- graygate collector schema, version 8 (SPEC rev. 4, §7 and §8): the
-- console's request log.
--
-- The prompt of the arm that answered (primary's on a fallback) and of the
-- gray attempt of a fallback, as the request event carries them (SPEC
-- §6.6): NULL for an arm without a prompt and for rows stored before this
-- migration (the collector did not keep them then). Adding nullable
-- columns rewrites no partition.
ALTER TABLE requests
    ADD COLUMN arm_prompt_version      text,
    ADD COLUMN arm_prompt_hash         text,
    ADD COLUMN gray_arm_prompt_version text,
    ADD COLUMN gray_arm_prompt_hash    text;

-- /requests reads newest first in keyset pages on (occurred_at, event_id),
-- with or without a deployment; a sample's page finds its request by id.
CREATE INDEX requests_time ON requests (occurred_at DESC, event_id DESC);
CREATE INDEX requests_deployment_time_id ON requests (deployment, occurred_at DESC, event_id DESC);
CREATE INDEX requests_request ON requests (request_id);
