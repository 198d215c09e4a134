-- Several servers on one database (issue 13) need PostgreSQL; SQLite keeps the same tables so
-- both schemas stay alike. Revisions (P9) stay in memory on SQLite: one server.
CREATE TABLE event_spill (
    id TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX event_spill_created ON event_spill (created_at);

-- An answer given on one server for a call waiting on another: offered, then delivered by the
-- server that holds the call or withdrawn by the one that offered it (one compare-and-set
-- decides, so the agent gets the answer once: live there, or as an owed resume).
CREATE TABLE answer_handoffs (
    pending_id TEXT PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('offered', 'delivered', 'withdrawn')),
    created_at BIGINT NOT NULL
);

-- Which server runs each session's agent, and which servers are alive (a heartbeat every
-- 10 s): a server starting up leaves the sessions of live servers alone.
CREATE TABLE servers (
    id TEXT PRIMARY KEY,
    seen_at BIGINT NOT NULL
);
CREATE TABLE session_owners (
    session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    server_id TEXT NOT NULL
);
