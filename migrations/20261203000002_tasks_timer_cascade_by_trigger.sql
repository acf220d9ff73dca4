-- A task no longer checks its timer through a foreign key; deleting timers still deletes
-- their tasks (and, through task_attempts' key, their attempts), now by a statement-level
-- trigger.
--
-- Why: the foreign key's check ran for every task row inserted, a lookup of the timer
-- with a row lock on it (`SELECT ... FOR KEY SHARE`, which writes to the timer's row and
-- to the WAL). The planner writes one task row per occurrence, so that check was paid
-- once per fire: in psql, 100,000 task rows planned in batches of 2,000 took 10.1–11.1 µs
-- a row with the key and 6.2–6.5 µs without it (docs/BENCHMARKS.md, item 17).
--
-- What the key guarded is kept otherwise:
--   * only the planner inserts tasks, and it inserts them for timers it has locked
--     (`FOR UPDATE`) in the same transaction, so a task cannot be planned for a timer
--     that is gone;
--   * `DELETE FROM timers` removes the timers' tasks in the same statement, as
--     `ON DELETE CASCADE` did. A delete that waits for the planner's lock on a timer runs
--     this trigger after the planner has committed, and its own statement sees the
--     tasks just planned;
--   * `TRUNCATE timers`, which the key refused, now empties tasks and task_attempts with
--     it, so no task is left whose timer is gone.
ALTER TABLE tasks DROP CONSTRAINT tasks_timer_id_fkey;

CREATE FUNCTION punctual_timers_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM tasks t USING deleted_timers d WHERE t.timer_id = d.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER timers_after_delete
    AFTER DELETE ON timers
    REFERENCING OLD TABLE AS deleted_timers
    FOR EACH STATEMENT EXECUTE FUNCTION punctual_timers_after_delete();

CREATE FUNCTION punctual_timers_after_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE task_attempts, tasks;
    RETURN NULL;
END;
$$;

CREATE TRIGGER timers_after_truncate
    AFTER TRUNCATE ON timers
    FOR EACH STATEMENT EXECUTE FUNCTION punctual_timers_after_truncate();
