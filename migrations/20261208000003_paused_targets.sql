-- Callback targets paused for a namespace (docs/semantics.md, "Fairness"): an executor
-- pauses a target (scheme://host:port) whose calls from the namespace have all failed for
-- a sustained time; while paused, the namespace's occurrences aimed at it end cancelled
-- without a call. A resume (the admin API) deletes the row. The executor reads this table
-- every 5 s.
CREATE TABLE paused_targets (
    namespace  text        NOT NULL,
    target     text        NOT NULL,
    reason     text        NOT NULL,
    paused_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, target)
);
