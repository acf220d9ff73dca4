-- Secrets at rest (shared/src/sealed.rs): signing secrets and secret header values are
-- stored sealed, `sealed:v1:<key id>:<base64>`, with a key from PUNCTUAL_SECRET_KEY; the
-- admin seals what is stored in plaintext at its start. Sealing again with a new key changes
-- no timer's version or revision: the transaction that does it says so with the setting
-- punctual.resealing.
ALTER TABLE signing_secrets DROP CONSTRAINT signing_secrets_secret_check;
ALTER TABLE signing_secrets
    ADD CONSTRAINT signing_secrets_secret_check CHECK (secret LIKE 'whsec\_%' OR secret LIKE 'sealed:v1:%');

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
        NEW.kafka_topic, NEW.kafka_key, NEW.kafka_headers, NEW.kafka_value)
       IS DISTINCT FROM
       (OLD.schedule_kind, OLD.run_at, OLD.delay_ms, OLD.interval_ms, OLD.cron_expr, OLD.timezone,
        OLD.start_at, OLD.end_at, OLD.dst_gap, OLD.action_kind, OLD.http_method, OLD.http_url,
        OLD.http_headers, OLD.http_body, OLD.http_timeout_ms,
        OLD.kafka_topic, OLD.kafka_key, OLD.kafka_headers, OLD.kafka_value)
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
