-- What an outcome's row write costs, and what a HOT update would save (issue 37's lever
-- "one row write a fire": fillfactor, or a status the partial indexes do not read).
--
-- On a scratch database migrated by `punctual migrate`:
--   createdb -h H -p P -U postgres outcome_bench
--   PUNCTUAL_DATABASE_URL=postgres://postgres@H:P/outcome_bench target/release/punctual migrate
--   psql -h H -p P -U postgres -d outcome_bench -f bench/sql/outcome_update.sql
--
-- 500,000 claimed tasks of 10,000 timers, then batches of 67 consecutive tasks (the
-- write-back's batch at 10,000 fires/s) updated as `task::finish` updates a success, and as
-- an update that changes no indexed column would, at fillfactor 100 (the table's) and 50.
-- Prints microseconds a row.

\set ON_ERROR_STOP on
SET client_min_messages = warning;

CREATE FUNCTION pg_temp.per_row(statement text, first bigint, reps int) RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE
    started timestamptz := clock_timestamp();
    batch constant int := 67;
BEGIN
    FOR i IN 0 .. reps - 1 LOOP
        EXECUTE statement USING ARRAY(SELECT generate_series(first + i * batch, first + (i + 1) * batch - 1));
    END LOOP;
    RETURN round((extract(epoch FROM clock_timestamp() - started) * 1e6 / (reps * batch))::numeric, 2);
END $$;

INSERT INTO timers (name, schedule_kind, interval_ms, start_at, http_url, plan_status, next_plan_at)
SELECT 'outcome-' || g, 'interval', 1000, now(), 'http://127.0.0.1:9/', 'planned', now()
  FROM generate_series(1, 10000) g;

CREATE TEMP TABLE runs (fillfactor int, update_kind text, us_a_row numeric);

CREATE FUNCTION pg_temp.fill(tbl text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format(
        'INSERT INTO %I (timer_id, scheduled_at, due_at, timer_version, bucket, status, claim_owner, claim_epoch,
                         claimed_at, lease_until)
         SELECT t.id, now() + s * interval ''1 second'', now() + s * interval ''1 second'', 1, 0, ''claimed'', ''bench'',
                1, now(), now() + interval ''1 hour''
           FROM timers t, generate_series(1, 50) s', tbl);
END $$;

-- The table as migrated (fillfactor 100), and a copy at fillfactor 50 with the same indexes
-- and trigger.
SELECT pg_temp.fill('tasks');
CREATE TABLE tasks_ff50 (LIKE tasks INCLUDING ALL) WITH (fillfactor = 50);
CREATE TRIGGER tasks_ff50_notify_pending AFTER INSERT OR UPDATE ON tasks_ff50
    FOR EACH ROW WHEN (NEW.status = 'pending') EXECUTE FUNCTION punctual_notify('punctual_tasks');
SELECT pg_temp.fill('tasks_ff50');
VACUUM ANALYZE tasks;
VACUUM ANALYZE tasks_ff50;

-- A success, as task::finish writes it: status, lease and finish time change.
\set success 'SET status = ''succeeded'', started_at = now(), finished_at = now(), claim_owner = NULL, lease_until = NULL, http_status = 200, duration_ms = 3'
-- The same outcome without touching an indexed column or a partial index's predicate.
\set unindexed 'SET started_at = now(), claim_owner = NULL, http_status = 200, duration_ms = 3'

SELECT min(id) AS first FROM tasks \gset t_
SELECT min(id) AS first FROM tasks_ff50 \gset f_

INSERT INTO runs SELECT 100, 'success', pg_temp.per_row('UPDATE tasks ' || :'success' || ' WHERE id = ANY($1)', :t_first, 100);
INSERT INTO runs SELECT 100, 'unindexed', pg_temp.per_row('UPDATE tasks ' || :'unindexed' || ' WHERE id = ANY($1)', :t_first + 10000, 100);
INSERT INTO runs SELECT 50, 'success', pg_temp.per_row('UPDATE tasks_ff50 ' || :'success' || ' WHERE id = ANY($1)', :f_first, 100);
INSERT INTO runs SELECT 50, 'unindexed', pg_temp.per_row('UPDATE tasks_ff50 ' || :'unindexed' || ' WHERE id = ANY($1)', :f_first + 10000, 100);
-- Again, in the other order, against the drift of the host.
INSERT INTO runs SELECT 50, 'unindexed', pg_temp.per_row('UPDATE tasks_ff50 ' || :'unindexed' || ' WHERE id = ANY($1)', :f_first + 20000, 100);
INSERT INTO runs SELECT 50, 'success', pg_temp.per_row('UPDATE tasks_ff50 ' || :'success' || ' WHERE id = ANY($1)', :f_first + 30000, 100);
INSERT INTO runs SELECT 100, 'unindexed', pg_temp.per_row('UPDATE tasks ' || :'unindexed' || ' WHERE id = ANY($1)', :t_first + 20000, 100);
INSERT INTO runs SELECT 100, 'success', pg_temp.per_row('UPDATE tasks ' || :'success' || ' WHERE id = ANY($1)', :t_first + 30000, 100);

SELECT pg_sleep(1); -- the statistics of the updates, flushed
SELECT fillfactor, update_kind, string_agg(us_a_row::text, ' · ') AS "µs a row (two runs)"
  FROM runs GROUP BY 1, 2 ORDER BY 1 DESC, 2;
SELECT relname, n_tup_upd AS updates, n_tup_hot_upd AS hot
  FROM pg_stat_user_tables WHERE relname IN ('tasks', 'tasks_ff50') ORDER BY 1;
