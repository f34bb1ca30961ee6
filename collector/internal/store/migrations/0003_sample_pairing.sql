-- graygate collector schema, version 3 (SPEC rev. 3, §6.2 and §7).
--
-- A sample's outcome in the per-arm statistics, and for
-- schema_violation_both (gray broke the contract and primary's answer to
-- the same request broke it too or was cut by the client's token limit)
-- primary's answer beside the gray payload, with the payload's rules:
-- bytes as kept (base64 decoded), whether it arrived as base64, whether it
-- was cut (by the gateway or at collector.max_payload_bytes) and its
-- original size. NULL on samples of gateways before rev. 3, and the
-- primary_* columns on every other outcome. Adding nullable columns
-- rewrites no partition.
ALTER TABLE samples
    ADD COLUMN outcome                   text,
    ADD COLUMN primary_validation_errors jsonb,
    ADD COLUMN primary_payload           bytea,
    ADD COLUMN primary_payload_base64    boolean,
    ADD COLUMN primary_payload_truncated boolean,
    ADD COLUMN primary_payload_bytes     bigint;
