-- Each namespace's policy (docs/semantics.md, "Fairness"): the limits its occurrences run
-- under. A namespace needs no row: a missing row, or a NULL column, means the default
-- (shared/src/namespace_policy.rs). Written through PATCH /v1/namespaces/{namespace};
-- the executor reads this table every 5 s.
CREATE TABLE namespaces (
    namespace               text PRIMARY KEY,
    -- Most callbacks of the namespace's timers in flight at once, in each executor.
    max_concurrent_calls    integer CHECK (max_concurrent_calls BETWEEN 1 AND 1000000),
    -- Longest a callback of the namespace may take, whatever its timer's http_timeout_ms.
    max_callback_timeout_ms integer CHECK (max_callback_timeout_ms BETWEEN 1 AND 600000),
    updated_at              timestamptz NOT NULL DEFAULT now()
);
