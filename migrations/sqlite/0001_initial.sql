-- Turnstile schema, version 1. Kept in lockstep with migrations/postgres/0001_initial.sql:
-- same tables, columns, constraints and indexes. Timestamps are microseconds since the Unix
-- epoch (UTC), written by Rust (docs/decisions/0003-timestamps-as-microseconds.md).

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);

CREATE TABLE workflows (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    is_default BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX workflows_one_default ON workflows (is_default) WHERE is_default = TRUE;

CREATE TABLE workflow_steps (
    id               TEXT PRIMARY KEY,
    workflow_id      TEXT NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    position         BIGINT NOT NULL,
    name             TEXT NOT NULL,
    on_turn_complete TEXT CHECK (on_turn_complete IS NULL OR on_turn_complete IN ('move_to_next')),
    UNIQUE (workflow_id, position)
);

CREATE TABLE agent_profiles (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    command    TEXT NOT NULL,
    args       TEXT NOT NULL,
    env        TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE tasks (
    id          TEXT PRIMARY KEY,
    title       TEXT NOT NULL,
    description TEXT NOT NULL,
    state       TEXT NOT NULL,
    workflow_id TEXT REFERENCES workflows (id),
    step_id     TEXT REFERENCES workflow_steps (id),
    archived_at BIGINT,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
CREATE INDEX tasks_by_created ON tasks (created_at, id);

CREATE TABLE sessions (
    id               TEXT PRIMARY KEY,
    task_id          TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    agent_profile_id TEXT REFERENCES agent_profiles (id),
    name             TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('created', 'starting', 'running',
                         'waiting_for_input', 'completed', 'failed', 'cancelled')),
    is_primary       BOOLEAN NOT NULL DEFAULT FALSE,
    mcp_token_hash   TEXT,
    acp_session_id   TEXT,
    started_at       BIGINT,
    completed_at     BIGINT,
    created_at       BIGINT NOT NULL
);
CREATE INDEX sessions_by_task ON sessions (task_id, created_at, id);
CREATE UNIQUE INDEX sessions_one_primary ON sessions (task_id) WHERE is_primary = TRUE;
CREATE UNIQUE INDEX sessions_by_token ON sessions (mcp_token_hash);

-- L1: authority comes from turn rows. `reservation` is 'reserved' for a resume turn that is not
-- yet attempted (not current unless a message references it), 'attempted' right before
-- dispatch, 'none' for ordinary and published turns (L19).
CREATE TABLE turns (
    id                TEXT PRIMARY KEY,
    session_id        TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    task_id           TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    started_at        BIGINT NOT NULL,
    completed_at      BIGINT,
    created_at        BIGINT NOT NULL,
    reservation       TEXT NOT NULL DEFAULT 'none' CHECK (reservation IN ('none', 'reserved', 'attempted')),
    resume_pending_id TEXT
);
CREATE INDEX turns_authority ON turns (session_id, started_at, created_at, id);

CREATE TABLE messages (
    id         TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    task_id    TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    turn_id    TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    author     TEXT NOT NULL CHECK (author IN ('user', 'agent', 'system')),
    kind       TEXT NOT NULL CHECK (kind IN ('text', 'thinking', 'tool_call',
                   'clarification_request', 'permission_request', 'status', 'error')),
    content    TEXT NOT NULL,
    pending_id TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX messages_by_session ON messages (session_id, created_at, id);
CREATE INDEX messages_by_turn ON messages (turn_id);

CREATE TABLE clarification_bundles (
    pending_id       TEXT PRIMARY KEY,
    session_id       TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    task_id          TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    turn_id          TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    status           TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'answered',
                         'rejected', 'expired', 'cancelled')),
    detached         BOOLEAN NOT NULL DEFAULT FALSE,
    delivery_pending BOOLEAN NOT NULL DEFAULT FALSE,
    context          TEXT,
    dedup_key        TEXT NOT NULL,
    response         TEXT,
    reject_reason    TEXT,
    created_at       BIGINT NOT NULL,
    resolved_at      BIGINT
);
CREATE INDEX bundles_authority ON clarification_bundles (session_id, turn_id, status);
CREATE INDEX bundles_delivery_pending ON clarification_bundles (delivery_pending) WHERE delivery_pending = TRUE;

CREATE TABLE clarification_questions (
    pending_id  TEXT NOT NULL REFERENCES clarification_bundles (pending_id) ON DELETE CASCADE,
    position    BIGINT NOT NULL,
    question_id TEXT NOT NULL,
    title       TEXT,
    prompt      TEXT NOT NULL,
    options     TEXT NOT NULL,
    PRIMARY KEY (pending_id, position),
    UNIQUE (pending_id, question_id)
);

CREATE TABLE permission_requests (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    task_id     TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    turn_id     TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    tool_call   TEXT NOT NULL,
    options     TEXT NOT NULL,
    status      TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'selected', 'cancelled')),
    outcome     TEXT,
    created_at  BIGINT NOT NULL,
    resolved_at BIGINT
);
CREATE INDEX permissions_authority ON permission_requests (session_id, turn_id, created_at, id);

-- P3: bounded, versioned, compare-and-set on `revision`.
CREATE TABLE task_status_summaries (
    task_id     TEXT PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    revision    BIGINT NOT NULL,
    summary     TEXT NOT NULL,
    invalidated BOOLEAN NOT NULL DEFAULT FALSE,
    updated_at  BIGINT NOT NULL
);
