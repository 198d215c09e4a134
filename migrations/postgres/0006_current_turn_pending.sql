-- Turnstile schema, version 6. Kept in lockstep with migrations/sqlite/0006_current_turn_pending.sql.
--
-- P1 maintained (B1, docs/decisions/0028-current-turn-pending.md): each session row holds what
-- its current turn waits for ('clarification', 'permission' or NULL, whatever the session's
-- state), recomputed in the same statement as every change that can move it: the current turn
-- moved (0005's pointer), a bundle inserted, deleted or changing status, a permission request
-- inserted, deleted or changing status. The batch reads it from the session rows it already
-- has; the recomputation below is `authority::current_turn_pending_defined`, copied verbatim
-- (the test `p1_the_pending_action_is_maintained_with_the_authoritys_definition` compares them).
ALTER TABLE sessions ADD COLUMN current_turn_pending TEXT;

UPDATE sessions SET current_turn_pending = (CASE WHEN EXISTS (SELECT 1 FROM clarification_bundles pb WHERE pb.session_id = sessions.id AND pb.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = sessions.id) AND pb.status = 'pending') THEN 'clarification' WHEN (SELECT pp.status FROM permission_requests pp WHERE pp.session_id = sessions.id AND pp.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = sessions.id) ORDER BY pp.created_at DESC, pp.id DESC LIMIT 1) = 'pending' THEN 'permission' ELSE NULL END);

-- As in 0005, the session row is locked first and the value computed by the next statement,
-- which reads a fresh snapshot (READ COMMITTED): two transactions changing one session's bundles
-- or permission requests recompute one after the other, and the second sees the first's rows.
-- Lock order: a statement that writes a bundle or a permission request holds that row and then
-- takes its session's row here (at the end of the statement). A transaction that holds a
-- session row must not then write an existing bundle or request of that session; the
-- repository orders its transactions so (decision 0028).
CREATE FUNCTION refresh_current_turn_pending(changed TEXT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM sessions WHERE id = changed FOR NO KEY UPDATE;
    UPDATE sessions SET current_turn_pending = (CASE WHEN EXISTS (SELECT 1 FROM clarification_bundles pb WHERE pb.session_id = changed AND pb.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = changed) AND pb.status = 'pending') THEN 'clarification' WHEN (SELECT pp.status FROM permission_requests pp WHERE pp.session_id = changed AND pp.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = changed) ORDER BY pp.created_at DESC, pp.id DESC LIMIT 1) = 'pending' THEN 'permission' ELSE NULL END)
    WHERE id = changed;
END
$$;

CREATE FUNCTION pending_source_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM refresh_current_turn_pending(OLD.session_id);
        RETURN OLD;
    END IF;
    PERFORM refresh_current_turn_pending(NEW.session_id);
    RETURN NEW;
END
$$;

CREATE TRIGGER bundles_pending_changed
AFTER INSERT OR DELETE OR UPDATE OF status, turn_id, session_id ON clarification_bundles
FOR EACH ROW EXECUTE FUNCTION pending_source_changed();

CREATE TRIGGER permissions_pending_changed
AFTER INSERT OR DELETE OR UPDATE OF status, turn_id, session_id ON permission_requests
FOR EACH ROW EXECUTE FUNCTION pending_source_changed();

-- The pointer moved (0005's `move_current_turn` updates it, holding the session row).
CREATE FUNCTION sessions_turn_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM refresh_current_turn_pending(NEW.id);
    RETURN NEW;
END
$$;

CREATE TRIGGER sessions_pending_on_move
AFTER UPDATE OF current_turn_id ON sessions
FOR EACH ROW WHEN (OLD.current_turn_id IS DISTINCT FROM NEW.current_turn_id)
EXECUTE FUNCTION sessions_turn_moved();
