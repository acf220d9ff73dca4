-- A second kind of action: publishing a message to a Kafka topic. The occurrence's
-- identity travels as the header 'punctual-idempotency-key' (and is the default key).
ALTER TABLE timers DROP CONSTRAINT timers_action_kind_check;
ALTER TABLE timers ADD CONSTRAINT timers_action_kind_check CHECK (action_kind IN ('http', 'kafka'));
ALTER TABLE timers
    ADD COLUMN kafka_topic   text,
    ADD COLUMN kafka_key     text,
    ADD COLUMN kafka_headers jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(kafka_headers) = 'object'),
    ADD COLUMN kafka_value   jsonb;

CREATE OR REPLACE FUNCTION punctual_timers_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.schedule_kind, NEW.run_at, NEW.delay_ms, NEW.interval_ms, NEW.cron_expr, NEW.timezone,
        NEW.start_at, NEW.end_at, NEW.dst_gap, NEW.action_kind, NEW.http_method, NEW.http_url,
        NEW.http_headers, NEW.http_body, NEW.http_timeout_ms,
        NEW.kafka_topic, NEW.kafka_key, NEW.kafka_headers, NEW.kafka_value)
       IS DISTINCT FROM
       (OLD.schedule_kind, OLD.run_at, OLD.delay_ms, OLD.interval_ms, OLD.cron_expr, OLD.timezone,
        OLD.start_at, OLD.end_at, OLD.dst_gap, OLD.action_kind, OLD.http_method, OLD.http_url,
        OLD.http_headers, OLD.http_body, OLD.http_timeout_ms,
        OLD.kafka_topic, OLD.kafka_key, OLD.kafka_headers, OLD.kafka_value)
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
