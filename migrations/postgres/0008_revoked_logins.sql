-- Turnstile schema, version 8. Kept in lockstep with migrations/sqlite/0008_revoked_logins.sql.
--
-- A login cookie names its login (spec "Server process", decision 0008): POST /logout revokes
-- that login here, for every server on this database. Rows older than a cookie's lifetime are
-- deleted by the next logout (the cookie has expired in the browser by then).
CREATE TABLE revoked_logins (
    login_id TEXT PRIMARY KEY,
    revoked_at BIGINT NOT NULL
);
