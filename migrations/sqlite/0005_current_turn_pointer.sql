-- Turnstile schema, version 5. Kept in lockstep with migrations/postgres/0005_current_turn_pointer.sql.
--
-- L1 maintained (B1, docs/decisions/0025-current-turn-pointer.md): each session row holds the id
-- of its current turn, recomputed in the same statement as every change that can move it: a
-- turn inserted, deleted, re-timed or changing reservation (L19), and a message written into a
-- reserved turn. The readers (`authority.rs`) read the pointer; the recomputation below is the
-- L1 definition of `authority::current_turn_defined`, copied verbatim (the test
-- `l1_the_pointer_is_maintained_with_the_authoritys_definition` compares them).
ALTER TABLE sessions ADD COLUMN current_turn_id TEXT;

UPDATE sessions SET current_turn_id = (SELECT ct.id FROM turns ct WHERE ct.session_id = sessions.id AND (ct.reservation <> 'reserved' OR EXISTS (SELECT 1 FROM messages cm WHERE cm.turn_id = ct.id)) ORDER BY ct.started_at DESC, ct.created_at DESC, ct.id DESC LIMIT 1);

CREATE TRIGGER turns_move_current_on_insert AFTER INSERT ON turns
BEGIN
    UPDATE sessions SET current_turn_id = (SELECT ct.id FROM turns ct WHERE ct.session_id = NEW.session_id AND (ct.reservation <> 'reserved' OR EXISTS (SELECT 1 FROM messages cm WHERE cm.turn_id = ct.id)) ORDER BY ct.started_at DESC, ct.created_at DESC, ct.id DESC LIMIT 1)
    WHERE id = NEW.session_id;
END;

CREATE TRIGGER turns_move_current_on_update AFTER UPDATE OF started_at, created_at, reservation ON turns
BEGIN
    UPDATE sessions SET current_turn_id = (SELECT ct.id FROM turns ct WHERE ct.session_id = NEW.session_id AND (ct.reservation <> 'reserved' OR EXISTS (SELECT 1 FROM messages cm WHERE cm.turn_id = ct.id)) ORDER BY ct.started_at DESC, ct.created_at DESC, ct.id DESC LIMIT 1)
    WHERE id = NEW.session_id;
END;

CREATE TRIGGER turns_move_current_on_delete AFTER DELETE ON turns
BEGIN
    UPDATE sessions SET current_turn_id = (SELECT ct.id FROM turns ct WHERE ct.session_id = OLD.session_id AND (ct.reservation <> 'reserved' OR EXISTS (SELECT 1 FROM messages cm WHERE cm.turn_id = ct.id)) ORDER BY ct.started_at DESC, ct.created_at DESC, ct.id DESC LIMIT 1)
    WHERE id = OLD.session_id;
END;

-- A message makes a reserved turn count (L19). Deleting one moves nothing (L4).
CREATE TRIGGER messages_move_current_on_insert AFTER INSERT ON messages
WHEN EXISTS (SELECT 1 FROM turns rt WHERE rt.id = NEW.turn_id AND rt.reservation = 'reserved')
BEGIN
    UPDATE sessions SET current_turn_id = (SELECT ct.id FROM turns ct WHERE ct.session_id = NEW.session_id AND (ct.reservation <> 'reserved' OR EXISTS (SELECT 1 FROM messages cm WHERE cm.turn_id = ct.id)) ORDER BY ct.started_at DESC, ct.created_at DESC, ct.id DESC LIMIT 1)
    WHERE id = NEW.session_id;
END;
