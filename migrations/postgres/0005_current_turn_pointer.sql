-- Turnstile schema, version 5. Kept in lockstep with migrations/sqlite/0005_current_turn_pointer.sql.
--
-- L1 maintained (B1, docs/decisions/0025-current-turn-pointer.md): each session row holds the id
-- of its current turn, recomputed in the same statement as every change that can move it: a
-- turn inserted, deleted, re-timed or changing reservation (L19), and a message written into a
-- reserved turn. The readers (`authority.rs`) read the pointer; the recomputation below is the
-- L1 definition of `authority::current_turn_defined`, copied verbatim (the test
-- `l1_the_pointer_is_maintained_with_the_authoritys_definition` compares them).
ALTER TABLE sessions ADD COLUMN current_turn_id TEXT;

UPDATE sessions SET current_turn_id = (SELECT ct.id FROM turns ct WHERE ct.session_id = sessions.id AND (ct.reservation <> 'reserved' OR EXISTS (SELECT 1 FROM messages cm WHERE cm.turn_id = ct.id)) ORDER BY ct.started_at DESC, ct.created_at DESC, ct.id DESC LIMIT 1);

-- The session row is locked first, and the pointer computed by the next statement, which reads
-- a fresh snapshot (READ COMMITTED): two transactions changing one session's turns recompute
-- one after the other, and the second sees the first's turn.
CREATE FUNCTION move_current_turn(moved TEXT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM sessions WHERE id = moved FOR NO KEY UPDATE;
    UPDATE sessions SET current_turn_id = (SELECT ct.id FROM turns ct WHERE ct.session_id = moved AND (ct.reservation <> 'reserved' OR EXISTS (SELECT 1 FROM messages cm WHERE cm.turn_id = ct.id)) ORDER BY ct.started_at DESC, ct.created_at DESC, ct.id DESC LIMIT 1)
    WHERE id = moved;
END
$$;

CREATE FUNCTION turns_move_current() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM move_current_turn(OLD.session_id);
        RETURN OLD;
    END IF;
    PERFORM move_current_turn(NEW.session_id);
    RETURN NEW;
END
$$;

CREATE TRIGGER turns_move_current
AFTER INSERT OR DELETE OR UPDATE OF started_at, created_at, reservation ON turns
FOR EACH ROW EXECUTE FUNCTION turns_move_current();

-- A message makes a reserved turn count (L19). Deleting one moves nothing (L4).
CREATE FUNCTION messages_move_current() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM turns rt WHERE rt.id = NEW.turn_id AND rt.reservation = 'reserved') THEN
        PERFORM move_current_turn(NEW.session_id);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER messages_move_current
AFTER INSERT ON messages
FOR EACH ROW EXECUTE FUNCTION messages_move_current();
