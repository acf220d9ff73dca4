-- What a fire's row writes cost Postgres in four layouts of `tasks` (issue 37's lever "one
-- row write a fire"): the payoff of a redesign, measured before making it.
--
-- On a scratch database migrated by `punctual migrate`:
--   createdb -h H -p P -U postgres layouts_bench
--   PUNCTUAL_DATABASE_URL=postgres://postgres@H:P/layouts_bench target/release/punctual migrate
--   psql -h H -p P -U postgres -d layouts_bench -f bench/sql/fire_layouts.sql
--
-- Each layout has a table of its own shaped as `tasks` (its indexes and trigger), holding
-- 300,000 finished occurrences first. A round is 67 fires (the write-back's batch at 10,000
-- fires/s), written as the layout writes them:
--   today      the planner inserts the occurrence claimed; its success updates the row;
--   appended   the same insert; the success is appended to a narrow table without an index,
--              and merged into the row by one statement every 100 rounds (6,700 rows);
--   one write  the occurrence is inserted once, finished, by its success (the plan kept on
--              the timer, not in a row);
--   moved      the same insert; the success deletes the row and inserts a narrow history
--              row (keyed by task, and by timer and time for a timer's runs).
-- Prints Postgres' microseconds a fire (the statements' time; commits not counted) and the
-- WAL written a fire, two runs of each, in an order and then the reverse.

\set ON_ERROR_STOP on
SET client_min_messages = warning;

-- Occurrence g is timer md5(g % 10000)'s (tasks' timer_id has no foreign key), due at
-- 2020-01-01 + g ms for the finished ones stored first, 2030-01-01 + g ms for those fired.

CREATE FUNCTION pg_temp.shaped_as_tasks(tbl text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE tasks INCLUDING ALL)', tbl);
    EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE ON %I FOR EACH ROW WHEN (NEW.status = ''pending'')
                    EXECUTE FUNCTION punctual_notify(''punctual_tasks'')', tbl || '_notify_pending', tbl);
    EXECUTE format(
        'INSERT INTO %I (timer_id, scheduled_at, due_at, timer_version, bucket, status, started_at, finished_at,
                         http_status, duration_ms)
         SELECT md5((g %% 10000)::text)::uuid, timestamptz ''2020-01-01'' + g * interval ''1 millisecond'',
                timestamptz ''2020-01-01'' + g * interval ''1 millisecond'', 1, g %% 1024, ''succeeded'', now(), now(),
                200, 3
           FROM generate_series(1, 300000) g', tbl);
END $$;

SELECT pg_temp.shaped_as_tasks(l) FROM unnest(ARRAY['l_today', 'l_appended', 'l_one_write', 'l_moved']) l;
CREATE TABLE l_outcomes (task_id bigint, attempt int, status text, started_at timestamptz, finished_at timestamptz,
                         http_status smallint, duration_ms int);
CREATE TABLE l_history (task_id bigint PRIMARY KEY, timer_id uuid NOT NULL, scheduled_at timestamptz NOT NULL,
                        attempt int, status text, started_at timestamptz, finished_at timestamptz,
                        http_status smallint, duration_ms int);
CREATE INDEX l_history_timer ON l_history (timer_id, scheduled_at);
VACUUM ANALYZE l_today;
VACUUM ANALYZE l_appended;
VACUUM ANALYZE l_one_write;
VACUUM ANALYZE l_moved;
VACUUM ANALYZE l_outcomes;
VACUUM ANALYZE l_history;

-- The occurrences of a round: 67 from `first` on, each a timer's and a time of its own.
CREATE FUNCTION pg_temp.plan(tbl text, first bigint) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE ids bigint[];
BEGIN
    EXECUTE format(
        'WITH ins AS (
            INSERT INTO %I (timer_id, scheduled_at, due_at, timer_version, bucket, status, claim_owner, claim_epoch,
                            claimed_at, lease_until)
            SELECT md5((g %% 10000)::text)::uuid, timestamptz ''2030-01-01'' + g * interval ''1 millisecond'',
                   timestamptz ''2030-01-01'' + g * interval ''1 millisecond'', 1, g %% 1024, ''claimed'', ''bench'', 1,
                   now(), now() + interval ''30 seconds''
              FROM generate_series($1, $1 + 66) g
            RETURNING id)
         SELECT array_agg(id) FROM ins', tbl) INTO ids USING first;
    RETURN ids;
END $$;

CREATE FUNCTION pg_temp.round(layout text, first bigint, n int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE ids bigint[];
BEGIN
    IF layout = 'today' THEN
        ids := pg_temp.plan('l_today', first);
        UPDATE l_today SET status = 'succeeded', started_at = now(), finished_at = now(), claim_owner = NULL,
                           lease_until = NULL, http_status = 200, duration_ms = 3
         WHERE id = ANY(ids) AND status = 'claimed';
    ELSIF layout = 'appended' THEN
        ids := pg_temp.plan('l_appended', first);
        INSERT INTO l_outcomes SELECT unnest(ids), 1, 'succeeded', now(), now(), 200, 3;
        IF n % 100 = 99 THEN
            WITH m AS (DELETE FROM l_outcomes RETURNING *)
            UPDATE l_appended t SET status = m.status, started_at = m.started_at, finished_at = m.finished_at,
                                    claim_owner = NULL, lease_until = NULL, http_status = m.http_status,
                                    duration_ms = m.duration_ms
              FROM m WHERE t.id = m.task_id AND t.status = 'claimed';
        END IF;
    ELSIF layout = 'one write' THEN
        INSERT INTO l_one_write (timer_id, scheduled_at, due_at, timer_version, bucket, status, claim_epoch, started_at,
                                 finished_at, http_status, duration_ms)
        SELECT md5((g % 10000)::text)::uuid, timestamptz '2030-01-01' + g * interval '1 millisecond',
               timestamptz '2030-01-01' + g * interval '1 millisecond', 1, g % 1024, 'succeeded', 1, now(), now(), 200, 3
          FROM generate_series(first, first + 66) g
        ON CONFLICT (timer_id, scheduled_at, shard) DO NOTHING;
    ELSE
        ids := pg_temp.plan('l_moved', first);
        WITH d AS (DELETE FROM l_moved WHERE id = ANY(ids) AND status = 'claimed'
                   RETURNING id, timer_id, scheduled_at, attempt)
        INSERT INTO l_history SELECT d.id, d.timer_id, d.scheduled_at, d.attempt, 'succeeded', now(), now(), 200, 3 FROM d;
    END IF;
END $$;

CREATE TEMP TABLE runs (layout text, us_a_fire numeric, wal_bytes_a_fire numeric);
CREATE TEMP TABLE next_first (layout text PRIMARY KEY, first bigint);
INSERT INTO next_first SELECT l, 0 FROM unnest(ARRAY['today', 'appended', 'one write', 'moved']) l;

-- 200 rounds (13,400 fires) of a layout, each round in a statement of its own.
CREATE FUNCTION pg_temp.measure(which text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    started timestamptz := clock_timestamp();
    wal_from pg_lsn := pg_current_wal_insert_lsn();
    from_g bigint := (SELECT nf.first FROM next_first nf WHERE nf.layout = which);
BEGIN
    FOR r IN 0 .. 199 LOOP
        PERFORM pg_temp.round(which, from_g + r * 67, r);
    END LOOP;
    UPDATE next_first nf SET first = nf.first + 200 * 67 WHERE nf.layout = which;
    INSERT INTO runs VALUES (which,
        round((extract(epoch FROM clock_timestamp() - started) * 1e6 / (200 * 67))::numeric, 2),
        round((pg_current_wal_insert_lsn() - wal_from) / (200 * 67)));
END $$;

-- Each in a transaction of its own, in an order and then the reverse.
SELECT pg_temp.measure('today');
SELECT pg_temp.measure('appended');
SELECT pg_temp.measure('one write');
SELECT pg_temp.measure('moved');
SELECT pg_temp.measure('moved');
SELECT pg_temp.measure('one write');
SELECT pg_temp.measure('appended');
SELECT pg_temp.measure('today');

SELECT pg_sleep(1); -- the statistics of the writes, flushed
SELECT layout, string_agg(us_a_fire::text, ' · ') AS "µs a fire (two runs)",
       string_agg(wal_bytes_a_fire::text, ' · ') AS "WAL bytes a fire"
  FROM runs GROUP BY 1 ORDER BY 1;
SELECT relname, n_tup_ins AS inserts, n_tup_upd AS updates, n_tup_hot_upd AS hot, n_tup_del AS deletes
  FROM pg_stat_user_tables WHERE relname LIKE 'l\_%' ORDER BY 1;
