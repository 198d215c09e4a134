-- Turnstile schema, version 7. Kept in lockstep with migrations/postgres/0007_claimed_by.sql.
--
-- L19 across servers: a claim (status answered/rejected with delivery_pending) names the server
-- whose request made it. Until that request accepts or undoes it, only that server may; once
-- the server is gone (it restarted, or stopped beating for --server-ttl) the claim is
-- abandoned, and recovery settles it by who made it, not by which server runs the session's
-- agent (docs/decisions/0036-abandoned-claims.md). NULL: a claim made before this version.
ALTER TABLE clarification_bundles ADD COLUMN claimed_by TEXT;
