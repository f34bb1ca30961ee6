-- graygate collector schema, version 6 (SPEC rev. 4, §8): the console's
-- sessions, server-side, so every collector replica knows them and a
-- logout ends one for all.
--
-- id_hash is the SHA-256 of the random id the browser's cookie holds (the
-- id itself is never stored). operator is '' for a session signed in with
-- the API token (read-only); for an operator, sealed_token is their admin
-- token sealed with AES-256-GCM under collector.console.session_key_file
-- (nonce || ciphertext, the row's id_hash and operator as additional
-- data). credential binds an API-token session to the token it was signed
-- in with (an HMAC of the token keyed by the cookie's id, which the table
-- does not hold): rotating the token ends those sessions. csrf_secret keys
-- the session's CSRF tokens. Rows past expires_at are never accepted and
-- are deleted by every sign-in.
CREATE TABLE console_sessions (
    id_hash      bytea       PRIMARY KEY CHECK (length(id_hash) = 32),
    operator     text        NOT NULL DEFAULT '',
    sealed_token bytea,
    credential   bytea,
    csrf_secret  bytea       NOT NULL CHECK (length(csrf_secret) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    CHECK ((operator = '') = (sealed_token IS NULL)),
    CHECK ((operator = '') = (credential IS NOT NULL))
);

CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
