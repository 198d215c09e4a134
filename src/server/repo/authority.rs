//! The current-turn authority: the one definition of "current turn" (L1) and "active bundle"
//! (L2), as SQL shared by the scalar and batch queries and by every guarded mutation, on SQLite
//! and PostgreSQL alike (L3). Nothing else in the code base decides whether a question is
//! active: the workflow guard, detach, expiry, response validation, projections, boot and the
//! transcript all go through the repository methods built from these statements.

use std::sync::LazyLock;

use super::Backend;

/// Session states that end a session (L2 and L11 exclude them).
const TERMINAL_STATES: &str = "('completed', 'failed', 'cancelled')";
/// P1: only these sessions can have a pending action.
const INPUT_CAPABLE_STATES: &str = "('running', 'waiting_for_input')";

/// L1, the definition, as an SQL scalar subquery: the id of the current turn of the session
/// whose id is the SQL expression `session`. Newest by `started_at`, then `created_at`, then
/// `id`; completed turns count; a reservation counts only once attempted or referenced by a
/// message (L19).
///
/// Readers do not run it: the database keeps its result in `sessions.current_turn_id`,
/// recomputed by triggers in the same statement as every change that can move it (migration
/// `0005_current_turn_pointer`, which holds this text verbatim; decision 0025). The authority's
/// reads then cost one session row whatever the history (B1).
pub fn current_turn_defined(session: &str) -> String {
    format!(
        "(SELECT ct.id FROM turns ct \
          WHERE ct.session_id = {session} \
            AND (ct.reservation <> 'reserved' \
                 OR EXISTS (SELECT 1 FROM messages cm WHERE cm.turn_id = ct.id)) \
          ORDER BY ct.started_at DESC, ct.created_at DESC, ct.id DESC LIMIT 1)"
    )
}

/// L1 as read: the maintained pointer of [`current_turn_defined`] for the session whose id is
/// the SQL expression `session`.
pub fn current_turn_of(session: &str) -> String {
    format!("(SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = {session})")
}

/// The current turn of the session `session` if that session is not terminal, else NULL: the
/// turn a bundle must be in to be active (L2), read from one session row. (A predicate compares
/// it through `COALESCE(…, '')` so that it is false, never NULL, for a terminal session: the
/// `active` column is read as a boolean.)
fn live_current_turn_of(session: &str) -> String {
    format!(
        "(SELECT ls.current_turn_id FROM sessions ls \
          WHERE ls.id = {session} AND ls.state NOT IN {TERMINAL_STATES})"
    )
}

/// L2 as an SQL predicate over the bundle row named `b` (an alias or the table name): pending,
/// in its session's current turn, and the session is not terminal. The status column is NOT
/// NULL (default 'pending'), so "missing status" cannot occur in this schema.
pub fn bundle_is_active(b: &str) -> String {
    bundle_is_active_in(b, &format!("{b}.session_id"))
}

/// [`bundle_is_active`] for bundles already known to belong to the session `session` (an SQL
/// expression that does not depend on the bundle row, e.g. `$1`): the session row is then
/// read once per statement instead of once per bundle row (B1; PostgreSQL evaluated the
/// correlated form per row).
pub fn bundle_is_active_in(b: &str, session: &str) -> String {
    format!(
        "({b}.status = 'pending' AND {b}.turn_id = COALESCE({current}, ''))",
        current = live_current_turn_of(session)
    )
}

/// L5 as an SQL predicate over the bundle row named `b`: its turn is no longer its session's
/// current turn (a newer one exists), or its session is terminal — whatever its status. An
/// answered bundle in the current turn is not superseded (it is no longer active, L2, but the
/// agent's call may still take its answer, L15).
pub fn bundle_is_superseded(b: &str) -> String {
    format!(
        "({b}.turn_id <> COALESCE({current}, ''))",
        current = live_current_turn_of(&format!("{b}.session_id"))
    )
}

/// The bundle columns in table order, for SELECT and RETURNING lists.
pub const BUNDLE_COLUMNS: &str = "pending_id, session_id, task_id, turn_id, status, detached, \
    delivery_pending, context, dedup_key, response, reject_reason, created_at, resolved_at, source";

/// Every statement that embodies L1/L2, built once.
pub struct AuthoritySql {
    pub current_turn_id: String,
    active_bundles_sqlite: String,
    active_bundles_postgres: String,
    bundle_with_activity_sqlite: String,
    bundle_with_activity_postgres: String,
    pub count_active: String,
    /// Whether one bundle is active (L2), nothing else; `$1` is the pending id.
    /// L2 and L5 of one bundle: `(active, superseded)`.
    pub bundle_standing: String,
    pending_actions_sqlite: String,
    pending_actions_postgres: String,
    task_sessions_sqlite: String,
    task_sessions_postgres: String,
    task_sessions_with_summaries_sqlite: String,
    task_sessions_with_summaries_postgres: String,
    pub detach_session: String,
    pub detach_turn: String,
    pub detach_bundle: String,
    pub expire_session: String,
    pub claim_bundle: String,
    pub restore_bundle: String,
    /// L19 across servers (decision 0036): [`AuthoritySql::restore_bundle`] for an abandoned
    /// claim, only while it is still the claim of the server that abandoned it (`$2`, NULL for
    /// a claim made before claimers were recorded).
    pub restore_abandoned: String,
    ask_bundle_sqlite: String,
    ask_bundle_postgres: String,
    pub dispatch_resume: String,
    /// [`AuthoritySql::dispatch_resume`] taken back: the resume owed again while it is still
    /// its session's open, current turn (L18/I4, a shutdown between the dispatch and the
    /// prompt).
    pub undo_dispatch: String,
}

/// [`AuthoritySql`]'s ask insert, with `lock` after its `SELECT`.
fn ask_bundle(lock: &str) -> String {
    format!(
        "INSERT INTO clarification_bundles ({BUNDLE_COLUMNS}) \
         SELECT $2, t.session_id, t.task_id, t.id, 'pending', FALSE, FALSE, $3, $4, NULL, \
                NULL, $5, NULL, $6 \
         FROM turns t \
         WHERE t.id = {} AND t.completed_at IS NULL AND t.reservation = 'none' \
           AND NOT EXISTS (SELECT 1 FROM clarification_bundles same \
                           WHERE same.session_id = $1 AND same.turn_id = t.id \
                             AND same.status = 'pending' AND same.dedup_key = $4){lock} \
         RETURNING {BUNDLE_COLUMNS}",
        live_current_turn_of("$1")
    )
}

impl AuthoritySql {
    /// The ask's insert (L6, L8), see its fields' comment.
    pub fn ask_bundle(&self, backend: Backend) -> &str {
        match backend {
            Backend::Sqlite => &self.ask_bundle_sqlite,
            Backend::Postgres => &self.ask_bundle_postgres,
        }
    }

    /// The session's active bundles (L2), each with its questions (`questions` column); `$1`
    /// is the session id.
    pub fn active_bundles(&self, backend: Backend) -> &str {
        match backend {
            Backend::Sqlite => &self.active_bundles_sqlite,
            Backend::Postgres => &self.active_bundles_postgres,
        }
    }

    /// One bundle with L2 evaluated (`active`) and its questions (`questions`), in one
    /// statement (B3: a bundle read is one round trip); `$1` is the pending id.
    pub fn bundle_with_activity(&self, backend: Backend) -> &str {
        match backend {
            Backend::Sqlite => &self.bundle_with_activity_sqlite,
            Backend::Postgres => &self.bundle_with_activity_postgres,
        }
    }

    /// The batch P1 query; `$1` is a JSON array of session ids.
    pub fn pending_actions(&self, backend: Backend) -> &str {
        match backend {
            Backend::Sqlite => &self.pending_actions_sqlite,
            Backend::Postgres => &self.pending_actions_postgres,
        }
    }

    /// The sessions of many tasks with their P1 pending action, in one statement; `$1` is a
    /// JSON array of task ids. The loader's read (B2, B3: one round trip instead of a session
    /// list and then the batch above).
    pub fn task_sessions(&self, backend: Backend) -> &str {
        match backend {
            Backend::Sqlite => &self.task_sessions_sqlite,
            Backend::Postgres => &self.task_sessions_postgres,
        }
    }

    /// [`Self::task_sessions`] and the tasks' stored summaries (`summaries`,
    /// `summaries_statement`) in one statement, hence one snapshot: the projector's read (P4),
    /// where a summary must never be older than the projection applied to it, in one round
    /// trip instead of two (B3).
    pub fn task_sessions_with_summaries(&self, backend: Backend) -> &str {
        match backend {
            Backend::Sqlite => &self.task_sessions_with_summaries_sqlite,
            Backend::Postgres => &self.task_sessions_with_summaries_postgres,
        }
    }
}

/// "`column` is one of the ids in the JSON array `$1`", written so that each planner searches
/// an index for the ids. PostgreSQL planned `column IN (SELECT jsonb_array_elements_text($1))`
/// as a hash semi-join over a scan of the whole table whenever its cost model preferred it:
/// with 10,000 tasks every task-list read scanned all 30,000 sessions (10 ms). `= ANY(ARRAY(…))`
/// is an index condition, so the batch reads stay bounded by the ids (B2; test
/// `b2_postgres_page_reads_only_the_pages_rows`).
pub fn is_one_of_json_ids(backend: Backend, column: &str) -> String {
    match backend {
        Backend::Sqlite => format!("{column} IN (SELECT value FROM json_each($1))"),
        Backend::Postgres => {
            format!("{column} = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))")
        }
    }
}

/// A JSON array parameter (`$1`) as a one-column relation `id`.
pub fn ids_from_json(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "SELECT value AS id FROM json_each($1)",
        Backend::Postgres => "SELECT jsonb_array_elements_text($1::jsonb) AS id",
    }
}

/// P1, the definition, for the current turn of the session whose id is the SQL expression
/// `session`, whatever the session's state: 'clarification' if a bundle of the current turn is
/// pending (L2 without the terminal check), else 'permission' if the latest permission request
/// of the current turn is pending, else NULL.
///
/// Readers do not run it either: the database keeps its result in
/// `sessions.current_turn_pending`, recomputed by triggers in the same statement as every change
/// that can move it (migration `0006_current_turn_pending`, which holds this text verbatim;
/// decision 0028). The batch then reads session rows only, whatever the history (B1).
pub fn current_turn_pending_defined(session: &str) -> String {
    let current = current_turn_of(session);
    format!(
        "(CASE \
           WHEN EXISTS (SELECT 1 FROM clarification_bundles pb \
                        WHERE pb.session_id = {session} AND pb.turn_id = {current} \
                          AND pb.status = 'pending') THEN 'clarification' \
           WHEN (SELECT pp.status FROM permission_requests pp \
                 WHERE pp.session_id = {session} AND pp.turn_id = {current} \
                 ORDER BY pp.created_at DESC, pp.id DESC LIMIT 1) = 'pending' THEN 'permission' \
           ELSE NULL \
         END)"
    )
}

/// P1 over the relation `cur(session_id, state, pending, …)`, where `pending` is the session
/// row's maintained [`current_turn_pending_defined`]: nothing unless the session is
/// input-capable (hence not terminal, L2), else what the current turn waits for.
fn pending_action_of_cur() -> String {
    pending_action_of("cur.state", "cur.pending")
}

/// P1 of a session row read or written by the statement itself, from its `state` and
/// `current_turn_pending` columns (unqualified, so it also serves `RETURNING`): every session
/// record carries its P1 as read in the same statement, so an event about a session write needs
/// no second read (B3).
pub fn pending_action_of_session_row() -> String {
    pending_action_of("state", "current_turn_pending")
}

/// P1 of the session whose id is the SQL expression `session`, as a scalar subquery (for the
/// `RETURNING` of a write about one of its rows).
pub fn pending_action_of_session(session: &str) -> String {
    format!(
        "(SELECT {} FROM sessions ps WHERE ps.id = {session})",
        pending_action_of("ps.state", "ps.current_turn_pending")
    )
}

/// Whether writing the message row `m` into its turn can move its session's current turn:
/// only when that turn is a reservation not yet attempted, which the message makes count
/// (L1, L19). This is the `WHEN` of the trigger that moves the pointer on a message insert
/// (migration `0005_current_turn_pointer`). Any other message leaves every input of P1 and
/// P2 as it was, so its event asks the projector for no refresh (P4, decision 0037).
pub fn message_can_move_current_turn(m: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM turns rt WHERE rt.id = {m}.turn_id AND rt.reservation = 'reserved')"
    )
}

fn pending_action_of(state: &str, pending: &str) -> String {
    format!("CASE WHEN {state} NOT IN {INPUT_CAPABLE_STATES} THEN NULL ELSE {pending} END")
}

fn active_bundles(backend: Backend) -> String {
    format!(
        "SELECT {BUNDLE_COLUMNS}, {questions} FROM clarification_bundles b \
         WHERE b.session_id = $1 AND {active} \
         ORDER BY b.created_at, b.pending_id",
        questions = super::sql::questions_of(backend, "b"),
        active = bundle_is_active_in("b", "$1"),
    )
}

fn bundle_with_activity(backend: Backend) -> String {
    format!(
        "SELECT {BUNDLE_COLUMNS}, {active} AS active, {questions} \
         FROM clarification_bundles b WHERE b.pending_id = $1",
        active = bundle_is_active("b"),
        questions = super::sql::questions_of(backend, "b"),
    )
}

fn pending_actions(backend: Backend) -> String {
    format!(
        "WITH cur AS ( \
           SELECT s.id AS session_id, s.state AS state, s.current_turn_pending AS pending \
           FROM sessions s WHERE {ids} \
         ) \
         SELECT cur.session_id AS session_id, {pending} AS pending_action \
         FROM cur",
        ids = is_one_of_json_ids(backend, "s.id"),
        pending = pending_action_of_cur(),
    )
}

/// Every session of the given tasks (id, task, state, primary flag) with its P1 pending action
/// and its queued prompts (P3). The rows come back as one JSON array of `[session_id, task_id,
/// state, is_primary, pending_action, queued_prompts]` ([`super::sql::json_rows`]).
fn task_sessions(backend: Backend) -> String {
    let rows = super::sql::json_rows(
        backend,
        "cur.session_id, cur.task_id, cur.state, cur.is_primary, cur.pending_action, cur.queued",
        "",
    );
    format!(
        "WITH cur AS ( \
           SELECT s.id AS session_id, s.task_id AS task_id, s.state AS state, \
                  s.is_primary AS is_primary, \
                  s.current_turn_pending AS pending, s.queued_prompts AS queued \
           FROM sessions s WHERE {ids} \
         ) \
         SELECT {rows} FROM (SELECT cur.session_id, cur.task_id, cur.state, cur.is_primary, \
                                    {pending} AS pending_action, cur.queued FROM cur) AS cur",
        ids = is_one_of_json_ids(backend, "s.task_id"),
        pending = pending_action_of_cur(),
    )
}

fn task_sessions_with_summaries(backend: Backend) -> String {
    format!(
        "SELECT ({sessions}) AS sessions, ({summaries}) AS summaries",
        sessions = task_sessions(backend),
        summaries = super::summaries::summaries_statement(backend),
    )
}

pub static SQL: LazyLock<AuthoritySql> = LazyLock::new(|| {
    let active_table = bundle_is_active("clarification_bundles");
    // L18: only an undelivered claim whose turn is still current goes back to pending.
    let restore_bundle = format!(
        "UPDATE clarification_bundles \
         SET status = 'pending', response = NULL, reject_reason = NULL, resolved_at = NULL, \
             delivery_pending = FALSE, claimed_by = NULL \
         WHERE pending_id = $1 AND delivery_pending = TRUE \
           AND status IN ('answered', 'rejected') \
           AND turn_id = {}",
        current_turn_of("clarification_bundles.session_id")
    );
    AuthoritySql {
        current_turn_id: format!("SELECT {} AS turn_id", current_turn_of("$1")),
        active_bundles_sqlite: active_bundles(Backend::Sqlite),
        active_bundles_postgres: active_bundles(Backend::Postgres),
        bundle_with_activity_sqlite: bundle_with_activity(Backend::Sqlite),
        bundle_with_activity_postgres: bundle_with_activity(Backend::Postgres),
        count_active: format!(
            "SELECT COUNT(*) FROM clarification_bundles b WHERE b.status = 'pending' AND {}",
            bundle_is_active("b")
        ),
        bundle_standing: format!(
            "SELECT {} AS active, {} AS superseded FROM clarification_bundles b \
             WHERE b.pending_id = $1",
            bundle_is_active("b"),
            bundle_is_superseded("b")
        ),
        pending_actions_sqlite: pending_actions(Backend::Sqlite),
        pending_actions_postgres: pending_actions(Backend::Postgres),
        task_sessions_sqlite: task_sessions(Backend::Sqlite),
        task_sessions_postgres: task_sessions(Backend::Postgres),
        task_sessions_with_summaries_sqlite: task_sessions_with_summaries(Backend::Sqlite),
        task_sessions_with_summaries_postgres: task_sessions_with_summaries(Backend::Postgres),
        // L9: one guarded statement; only what it changed is returned (repeat = no-op, I7).
        detach_session: format!(
            "UPDATE clarification_bundles SET detached = TRUE \
             WHERE session_id = $1 AND detached = FALSE AND {active_table} \
             RETURNING pending_id"
        ),
        // L10: a completion of a turn that is no longer current touches nothing.
        detach_turn: format!(
            "UPDATE clarification_bundles SET detached = TRUE \
             WHERE turn_id = $1 AND detached = FALSE AND {active_table} \
             RETURNING pending_id"
        ),
        detach_bundle: format!(
            "UPDATE clarification_bundles SET detached = TRUE \
             WHERE pending_id = $1 AND detached = FALSE AND {active_table} \
             RETURNING pending_id"
        ),
        // L11 runs after the session became terminal, so it checks "pending in the current
        // turn" rather than full activity.
        expire_session: format!(
            "UPDATE clarification_bundles SET status = 'expired', resolved_at = $2 \
             WHERE session_id = $1 AND status = 'pending' \
               AND turn_id = {} \
             RETURNING pending_id",
            current_turn_of("clarification_bundles.session_id")
        ),
        // L13: the claim succeeds only on an active bundle (detached ones included).
        claim_bundle: format!(
            "UPDATE clarification_bundles \
             SET status = $2, response = $3, reject_reason = $4, resolved_at = $5, \
                 delivery_pending = TRUE, claimed_by = $6 \
             WHERE pending_id = $1 AND {active_table} \
             RETURNING {BUNDLE_COLUMNS}"
        ),
        // L6: an agent asks in the current turn only while it is open and is not an owed
        // resume (an answer the user already gave comes next; the agent's turn is over). The
        // bundle goes into that turn in the same statement that finds it; no row when there is
        // none, nor when an identical question (the same dedup key) is active in it (L8: the
        // caller then takes that one over). `$1` session, `$2` pending id, `$3` context, `$4`
        // dedup key, `$5` time.
        // On PostgreSQL the turn row is locked for the insert (`FOR SHARE`): a completion
        // committing meanwhile would otherwise miss the new bundle (its detach and the N3
        // barrier read before this commit) and leave an attached question in a finished
        // turn. Held, the completion waits for this commit; finished first, the insert
        // re-reads the turn as completed and writes nothing. SQLite has one writer.
        ask_bundle_sqlite: ask_bundle(""),
        ask_bundle_postgres: ask_bundle(" FOR SHARE OF t"),
        // L18/L1: an owed resume is handed over once, only while it is the current turn (nothing
        // newer may start before it, L5) of a live session; it then starts now.
        dispatch_resume: format!(
            "UPDATE turns SET reservation = 'none', started_at = $2 \
             WHERE id = $1 AND reservation = 'attempted' AND id = {}",
            live_current_turn_of("turns.session_id")
        ),
        undo_dispatch: format!(
            "UPDATE turns SET reservation = 'attempted' \
             WHERE id = $1 AND reservation = 'none' AND completed_at IS NULL \
               AND resume_prompt IS NOT NULL AND id = {}",
            live_current_turn_of("turns.session_id")
        ),
        restore_abandoned: format!("{restore_bundle} AND claimed_by IS NOT DISTINCT FROM $2"),
        restore_bundle,
    }
});
