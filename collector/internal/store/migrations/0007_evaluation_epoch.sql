-- graygate collector schema, version 7 (SPEC rev. 4, §8 "The console is
-- where an operator decides"). Version 6 is left to the console's
-- sessions; the versions need not be contiguous.
--
-- What an evaluation says beyond its gates, so the console can say what
-- happens next without asking the analyzer: the epoch it judged (its
-- start, number, both arm fingerprints, its least percentage and its
-- attempts), when the current step began, since when every gate has passed
-- on the epoch (the promotion hold), and the analyzer's promotion rule
-- (steps, hold, min_soak, min_percentage). Each is NULL in evaluations of
-- analyzers that did not send it. Nullable columns rewrite no partition.
ALTER TABLE analysis_evaluations
    ADD COLUMN epoch         jsonb,
    ADD COLUMN step_since    timestamptz,
    ADD COLUMN passing_since timestamptz,
    ADD COLUMN promotion     jsonb;

COMMENT ON COLUMN analysis_evaluations.epoch IS
    'the evaluation''s epoch as published: {"start", "index", "gray_fingerprint", "primary_fingerprint", "periods", "min_percentage", "gray_requests", "primary_requests", "rebuilt", "note"}';
COMMENT ON COLUMN analysis_evaluations.promotion IS
    'the analyzer''s promotion rule as published: {"steps", "hold_seconds", "min_soak_seconds", "min_percentage"}';

-- A statistic's outcomes per arm, summed over its entries
-- ({"gray": {"ok": 40, "timeout": 1, ...}, "primary": {...}}), so the
-- console's attempt charts read a few numbers per row rather than every
-- entry's histograms. NULL on rows stored before this version, which the
-- console reads from data as before.
ALTER TABLE arm_stats
    ADD COLUMN outcomes jsonb;
