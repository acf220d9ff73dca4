-- Punctual's schema. It is a public interface: users create timers with plain SQL
-- (see docs/sql.md), so every column a user may write has a sensible default and a
-- CHECK that rejects what can be rejected without the planner's help. What only the
-- planner can judge (a cron expression, a time zone name, a URL) is judged when it
-- first plans the row: a row it cannot understand is marked plan_status = 'invalid'
-- with the reason in invalid_reason, never dropped.

CREATE TABLE timers (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    namespace        text        NOT NULL DEFAULT 'default',
    name             text        NOT NULL,

    -- Schedule: exactly the columns its kind needs.
    --   once:     run_at
    --   delay:    delay_ms     (fires at created_at + delay_ms)
    --   interval: interval_ms  (fires at start_at, or created_at + interval_ms, then every interval_ms)
    --   cron:     cron_expr, timezone (5, 6 or 7 fields; seconds resolution)
    schedule_kind    text        NOT NULL CHECK (schedule_kind IN ('once', 'delay', 'interval', 'cron')),
    run_at           timestamptz,
    delay_ms         bigint      CHECK (delay_ms >= 0),
    interval_ms      bigint      CHECK (interval_ms >= 1000),
    cron_expr        text,
    timezone         text        NOT NULL DEFAULT 'UTC',
    start_at         timestamptz,
    end_at           timestamptz,

    -- Action: an HTTP callback.
    action_kind      text        NOT NULL DEFAULT 'http' CHECK (action_kind IN ('http')),
    http_method      text        NOT NULL DEFAULT 'POST',
    http_url         text,
    http_headers     jsonb       NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(http_headers) = 'object'),
    http_body        jsonb,
    http_timeout_ms  integer     NOT NULL DEFAULT 10000 CHECK (http_timeout_ms BETWEEN 1 AND 600000),

    state            text        NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'paused', 'deleted')),
    version          bigint      NOT NULL DEFAULT 1,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),

    -- Planner bookkeeping. 'new' rows (plain SQL inserts) are validated by the planner;
    -- 'planned' rows have task rows up to next_plan_at (exclusive); 'done' rows have no
    -- occurrence left; 'invalid' rows could not be understood (reason in invalid_reason).
    plan_status      text        NOT NULL DEFAULT 'new' CHECK (plan_status IN ('new', 'planned', 'done', 'invalid')),
    next_plan_at     timestamptz,
    invalid_reason   text,

    CHECK (end_at IS NULL OR start_at IS NULL OR end_at > start_at)
);

-- A name is unique among the live timers of a namespace; a deleted timer frees its name.
CREATE UNIQUE INDEX timers_namespace_name ON timers (namespace, name) WHERE state <> 'deleted';
-- The planner's two scans.
CREATE INDEX timers_plan_due ON timers (next_plan_at) WHERE plan_status = 'planned' AND state = 'active';
CREATE INDEX timers_plan_new ON timers (created_at) WHERE plan_status = 'new';

-- One row per occurrence. (timer_id, scheduled_at) is the task's identity end to end:
-- the unique key here, the Kafka message key, the Idempotency-Key of the callback.
CREATE TABLE tasks (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    timer_id         uuid        NOT NULL REFERENCES timers (id) ON DELETE CASCADE,
    scheduled_at     timestamptz NOT NULL,
    -- Version of the timer this occurrence was planned from; an edited timer's stale
    -- occurrences are cancelled by the executor instead of run.
    timer_version    bigint      NOT NULL,
    bucket           smallint    NOT NULL,
    status           text        NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'claimed', 'published', 'running', 'succeeded', 'failed', 'cancelled')),
    attempt          integer     NOT NULL DEFAULT 1,
    claim_owner      text,
    lease_until      timestamptz,
    claimed_at       timestamptz,
    published_at     timestamptz,
    started_at       timestamptz,
    finished_at      timestamptz,
    http_status      smallint,
    response_excerpt text,
    error            text,
    duration_ms      integer,
    UNIQUE (timer_id, scheduled_at)
);

-- The claimer's scans are index range scans on these partial indexes, so their cost
-- depends on what is due, not on how many tasks are stored.
CREATE INDEX tasks_pending_due ON tasks (scheduled_at) WHERE status = 'pending';
CREATE INDEX tasks_claim_lease ON tasks (lease_until) WHERE status = 'claimed';

-- Writes through SQL and through the admin API share one set of rules, kept here:
--   * a change to what a timer does or when (its definition) bumps its version and sends
--     it back to the planner, which plans from now; occurrences planned from the old
--     version are cancelled by the executor instead of run;
--   * resuming a paused timer sends it back to the planner, which continues from the
--     first occurrence not before now: occurrences missed while paused are not fired.
CREATE FUNCTION punctual_timers_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.schedule_kind, NEW.run_at, NEW.delay_ms, NEW.interval_ms, NEW.cron_expr, NEW.timezone,
        NEW.start_at, NEW.end_at, NEW.action_kind, NEW.http_method, NEW.http_url, NEW.http_headers,
        NEW.http_body, NEW.http_timeout_ms)
       IS DISTINCT FROM
       (OLD.schedule_kind, OLD.run_at, OLD.delay_ms, OLD.interval_ms, OLD.cron_expr, OLD.timezone,
        OLD.start_at, OLD.end_at, OLD.action_kind, OLD.http_method, OLD.http_url, OLD.http_headers,
        OLD.http_body, OLD.http_timeout_ms)
    THEN
        NEW.version := OLD.version + 1;
        NEW.plan_status := 'new';
        NEW.next_plan_at := NULL;
        NEW.invalid_reason := NULL;
        NEW.updated_at := now();
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state THEN
        NEW.updated_at := now();
        IF OLD.state = 'paused' AND NEW.state = 'active' AND NEW.plan_status = 'planned' THEN
            NEW.plan_status := 'new';
        END IF;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER timers_before_update
    BEFORE UPDATE ON timers
    FOR EACH ROW EXECUTE FUNCTION punctual_timers_before_update();

-- Wake the scanner as soon as a timer needs planning, so a timer due in one second fires
-- on time without a short polling interval. Notifications with the same payload are folded
-- into one per transaction, so a bulk insert sends one.
CREATE FUNCTION punctual_notify_timers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('punctual_timers', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER timers_notify
    AFTER INSERT OR UPDATE ON timers
    FOR EACH ROW WHEN (NEW.plan_status = 'new') EXECUTE FUNCTION punctual_notify_timers();
