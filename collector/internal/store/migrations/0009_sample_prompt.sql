-- graygate collector schema, version 9 (SPEC §7 rev. 2, "Prompt fields"):
-- a sample carries the failing arm's prompt version and hash; the
-- collector now keeps them. NULL for an arm without a prompt and for rows
-- stored before this migration. Adding nullable columns rewrites no
-- partition.
ALTER TABLE samples
    ADD COLUMN arm_prompt_version text,
    ADD COLUMN arm_prompt_hash    text;
