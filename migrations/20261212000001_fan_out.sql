-- Fan-out (docs/semantics.md, "Fan-out"): a timer whose occurrences each become several
-- calls, one task row per call (a shard). A shard is a task like any other (its own
-- identity, attempts, retries and dead letter); its bucket is the timer's plus its index,
-- so an occurrence's shards spread over buckets, scanners, partitions and executors.
--   * fan_out_shards: N calls to the action's target;
--   * fan_out_urls: a broadcast, one call to each URL listed instead of http_url;
--   * fan_out_dns: a broadcast to every address http_url's host resolves to when the
--     occurrence is due: the executor splits it into a shard an address (tasks.address).
ALTER TABLE timers ADD COLUMN fan_out_shards integer NOT NULL DEFAULT 1
    CHECK (fan_out_shards BETWEEN 1 AND 1000);

ALTER TABLE tasks ADD COLUMN shard smallint NOT NULL DEFAULT 0,
                  ADD COLUMN shards smallint NOT NULL DEFAULT 1,
                  ADD CONSTRAINT tasks_shard_check CHECK (shards BETWEEN 1 AND 1000 AND shard >= 0 AND shard < shards);

-- The identity of a task: its occurrence and its shard (0 for a timer without fan-out).
ALTER TABLE tasks DROP CONSTRAINT tasks_timer_id_scheduled_at_key,
                  ADD CONSTRAINT tasks_timer_id_scheduled_at_shard_key UNIQUE (timer_id, scheduled_at, shard);

-- A broadcast: at most one kind of fan-out a timer.
ALTER TABLE timers ADD COLUMN fan_out_urls text[]
                       CHECK (cardinality(fan_out_urls) BETWEEN 1 AND 100 AND array_position(fan_out_urls, NULL) IS NULL),
                   ADD COLUMN fan_out_dns boolean NOT NULL DEFAULT false,
                   ADD CONSTRAINT timers_fan_out_one_kind CHECK (
                       num_nonnulls(NULLIF(fan_out_shards, 1), fan_out_urls, NULLIF(fan_out_dns, false)) <= 1);

-- The address a shard of a DNS broadcast calls (NULL for any other task).
ALTER TABLE tasks ADD COLUMN address text;

-- The number of shards and the broadcast are part of what a timer does: a change is a new
-- version, planned from the next occurrence not yet started, as a change of its action is.
CREATE OR REPLACE FUNCTION punctual_timers_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Sealing stored secret values again (shared/src/sealed_store.rs) changes no definition:
    -- the values open to what they were.
    IF current_setting('punctual.resealing', true) = 'on' THEN
        RETURN NEW;
    END IF;
    IF (NEW.schedule_kind, NEW.run_at, NEW.delay_ms, NEW.interval_ms, NEW.cron_expr, NEW.timezone,
        NEW.start_at, NEW.end_at, NEW.dst_gap, NEW.action_kind, NEW.http_method, NEW.http_url,
        NEW.http_headers, NEW.http_body, NEW.http_timeout_ms,
        NEW.kafka_topic, NEW.kafka_key, NEW.kafka_headers, NEW.kafka_value, NEW.fan_out_shards,
        NEW.fan_out_urls, NEW.fan_out_dns)
       IS DISTINCT FROM
       (OLD.schedule_kind, OLD.run_at, OLD.delay_ms, OLD.interval_ms, OLD.cron_expr, OLD.timezone,
        OLD.start_at, OLD.end_at, OLD.dst_gap, OLD.action_kind, OLD.http_method, OLD.http_url,
        OLD.http_headers, OLD.http_body, OLD.http_timeout_ms,
        OLD.kafka_topic, OLD.kafka_key, OLD.kafka_headers, OLD.kafka_value, OLD.fan_out_shards,
        OLD.fan_out_urls, OLD.fan_out_dns)
    THEN
        NEW.version := OLD.version + 1;
        NEW.revision := OLD.revision + 1;
        NEW.plan_status := 'new';
        NEW.next_plan_at := NULL;
        NEW.invalid_reason := NULL;
        NEW.updated_at := now();
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state THEN
        NEW.revision := OLD.revision + 1;
        NEW.updated_at := now();
        IF OLD.state = 'paused' AND NEW.state = 'active' AND NEW.plan_status = 'planned' THEN
            NEW.plan_status := 'new';
        END IF;
    END IF;
    IF (NEW.namespace, NEW.name, NEW.retry_max_attempts, NEW.retry_initial_ms, NEW.retry_multiplier,
        NEW.retry_max_ms, NEW.misfire_policy, NEW.catchup_window_ms, NEW.overlap_policy)
       IS DISTINCT FROM
       (OLD.namespace, OLD.name, OLD.retry_max_attempts, OLD.retry_initial_ms, OLD.retry_multiplier,
        OLD.retry_max_ms, OLD.misfire_policy, OLD.catchup_window_ms, OLD.overlap_policy)
    THEN
        NEW.revision := OLD.revision + 1;
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END;
$$;

DROP TRIGGER timers_before_update ON timers;
CREATE TRIGGER timers_before_update
    BEFORE UPDATE OF schedule_kind, run_at, delay_ms, interval_ms, cron_expr, timezone,
                     start_at, end_at, dst_gap, action_kind, http_method, http_url,
                     http_headers, http_body, http_timeout_ms,
                     kafka_topic, kafka_key, kafka_headers, kafka_value, fan_out_shards, fan_out_urls,
                     fan_out_dns, state,
                     namespace, name, retry_max_attempts, retry_initial_ms, retry_multiplier,
                     retry_max_ms, misfire_policy, catchup_window_ms, overlap_policy
    ON timers
    FOR EACH ROW EXECUTE FUNCTION punctual_timers_before_update();
