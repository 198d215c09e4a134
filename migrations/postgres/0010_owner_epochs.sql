-- Turnstile schema, version 10. Kept in lockstep with migrations/sqlite/0010_owner_epochs.sql.
--
-- One agent per session across servers: a server claims a session (compare-and-set) before it
-- launches its agent, and each claim or takeover bumps the session's epoch. A server's writes
-- that start agent work (a dispatched resume, a prompt's turn) carry its epoch and are refused
-- once it is no longer the owner's (a server paused, then resumed, after another took over).
ALTER TABLE session_owners ADD COLUMN epoch BIGINT NOT NULL DEFAULT 1;
