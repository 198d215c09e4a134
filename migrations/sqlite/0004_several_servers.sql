-- Several servers on one database (issue 13) need PostgreSQL; SQLite keeps the same tables so
-- both schemas stay alike. Revisions (P9) stay in memory on SQLite: one server.
CREATE TABLE event_spill (
    id TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX event_spill_created ON event_spill (created_at);
