-- Turnstile schema, version 6. Kept in lockstep with migrations/postgres/0006_current_turn_pending.sql.
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

-- The pointer moved (0005's triggers recompute it).
CREATE TRIGGER sessions_pending_on_move AFTER UPDATE OF current_turn_id ON sessions
WHEN OLD.current_turn_id IS NOT NEW.current_turn_id
BEGIN
    UPDATE sessions SET current_turn_pending = (CASE WHEN EXISTS (SELECT 1 FROM clarification_bundles pb WHERE pb.session_id = NEW.id AND pb.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = NEW.id) AND pb.status = 'pending') THEN 'clarification' WHEN (SELECT pp.status FROM permission_requests pp WHERE pp.session_id = NEW.id AND pp.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = NEW.id) ORDER BY pp.created_at DESC, pp.id DESC LIMIT 1) = 'pending' THEN 'permission' ELSE NULL END)
    WHERE id = NEW.id;
END;

CREATE TRIGGER bundles_pending_on_insert AFTER INSERT ON clarification_bundles
BEGIN
    UPDATE sessions SET current_turn_pending = (CASE WHEN EXISTS (SELECT 1 FROM clarification_bundles pb WHERE pb.session_id = NEW.session_id AND pb.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = NEW.session_id) AND pb.status = 'pending') THEN 'clarification' WHEN (SELECT pp.status FROM permission_requests pp WHERE pp.session_id = NEW.session_id AND pp.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = NEW.session_id) ORDER BY pp.created_at DESC, pp.id DESC LIMIT 1) = 'pending' THEN 'permission' ELSE NULL END)
    WHERE id = NEW.session_id;
END;

CREATE TRIGGER bundles_pending_on_update AFTER UPDATE OF status, turn_id, session_id ON clarification_bundles
BEGIN
    UPDATE sessions SET current_turn_pending = (CASE WHEN EXISTS (SELECT 1 FROM clarification_bundles pb WHERE pb.session_id = NEW.session_id AND pb.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = NEW.session_id) AND pb.status = 'pending') THEN 'clarification' WHEN (SELECT pp.status FROM permission_requests pp WHERE pp.session_id = NEW.session_id AND pp.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = NEW.session_id) ORDER BY pp.created_at DESC, pp.id DESC LIMIT 1) = 'pending' THEN 'permission' ELSE NULL END)
    WHERE id = NEW.session_id;
END;

CREATE TRIGGER bundles_pending_on_delete AFTER DELETE ON clarification_bundles
BEGIN
    UPDATE sessions SET current_turn_pending = (CASE WHEN EXISTS (SELECT 1 FROM clarification_bundles pb WHERE pb.session_id = OLD.session_id AND pb.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = OLD.session_id) AND pb.status = 'pending') THEN 'clarification' WHEN (SELECT pp.status FROM permission_requests pp WHERE pp.session_id = OLD.session_id AND pp.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = OLD.session_id) ORDER BY pp.created_at DESC, pp.id DESC LIMIT 1) = 'pending' THEN 'permission' ELSE NULL END)
    WHERE id = OLD.session_id;
END;

CREATE TRIGGER permissions_pending_on_insert AFTER INSERT ON permission_requests
BEGIN
    UPDATE sessions SET current_turn_pending = (CASE WHEN EXISTS (SELECT 1 FROM clarification_bundles pb WHERE pb.session_id = NEW.session_id AND pb.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = NEW.session_id) AND pb.status = 'pending') THEN 'clarification' WHEN (SELECT pp.status FROM permission_requests pp WHERE pp.session_id = NEW.session_id AND pp.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = NEW.session_id) ORDER BY pp.created_at DESC, pp.id DESC LIMIT 1) = 'pending' THEN 'permission' ELSE NULL END)
    WHERE id = NEW.session_id;
END;

CREATE TRIGGER permissions_pending_on_update AFTER UPDATE OF status, turn_id, session_id ON permission_requests
BEGIN
    UPDATE sessions SET current_turn_pending = (CASE WHEN EXISTS (SELECT 1 FROM clarification_bundles pb WHERE pb.session_id = NEW.session_id AND pb.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = NEW.session_id) AND pb.status = 'pending') THEN 'clarification' WHEN (SELECT pp.status FROM permission_requests pp WHERE pp.session_id = NEW.session_id AND pp.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = NEW.session_id) ORDER BY pp.created_at DESC, pp.id DESC LIMIT 1) = 'pending' THEN 'permission' ELSE NULL END)
    WHERE id = NEW.session_id;
END;

CREATE TRIGGER permissions_pending_on_delete AFTER DELETE ON permission_requests
BEGIN
    UPDATE sessions SET current_turn_pending = (CASE WHEN EXISTS (SELECT 1 FROM clarification_bundles pb WHERE pb.session_id = OLD.session_id AND pb.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = OLD.session_id) AND pb.status = 'pending') THEN 'clarification' WHEN (SELECT pp.status FROM permission_requests pp WHERE pp.session_id = OLD.session_id AND pp.turn_id = (SELECT cs.current_turn_id FROM sessions cs WHERE cs.id = OLD.session_id) ORDER BY pp.created_at DESC, pp.id DESC LIMIT 1) = 'pending' THEN 'permission' ELSE NULL END)
    WHERE id = OLD.session_id;
END;
