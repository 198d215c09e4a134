-- Several servers on one database (issue 13).
-- P9 across servers: one sequence for every server's pending-action revisions.
CREATE SEQUENCE pending_revisions;

-- Event bodies too large for NOTIFY; receivers read them by id, senders delete old rows.
CREATE TABLE event_spill (
    id TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX event_spill_created ON event_spill (created_at);
