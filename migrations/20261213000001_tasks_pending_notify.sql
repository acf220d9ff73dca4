-- A scanner that finds nothing to do scans less often (PUNCTUAL_SCAN_IDLE_INTERVAL_MS): a
-- task made pending (a retry, a deferral, a replay, a backfill, an occurrence split into
-- shards) wakes it at once, whichever path wrote it. The condition is checked per row without
-- calling the function, so rows written claimed or finished (the hot path) pay only the
-- check; notifications of one transaction on one channel are delivered once.
--
-- One function for both channels, named by the trigger: the timers' own notify function
-- was the same function with the channel written in.
CREATE FUNCTION punctual_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER tasks_notify_pending
    AFTER INSERT OR UPDATE ON tasks
    FOR EACH ROW WHEN (NEW.status = 'pending') EXECUTE FUNCTION punctual_notify('punctual_tasks');

DROP TRIGGER timers_notify ON timers;
CREATE TRIGGER timers_notify
    AFTER INSERT OR UPDATE ON timers
    FOR EACH ROW WHEN (NEW.plan_status = 'new') EXECUTE FUNCTION punctual_notify('punctual_timers');
DROP FUNCTION punctual_notify_timers();
