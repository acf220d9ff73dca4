-- Who changed what through the admin API, and when: GET /v1/audit (docs/sql.md).
CREATE TABLE audit_log (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    -- The key that made the change; NULL (and key_name 'auth disabled') without authentication.
    key_id    uuid,
    key_name  text NOT NULL,
    -- The namespace changed; NULL for what belongs to none (API keys).
    namespace text,
    action    text NOT NULL,
    -- What was changed: a timer's or a key's id, a task's, a target.
    target    text,
    detail    jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_by_namespace ON audit_log (namespace, id);
