-- Why an occurrence waits after a deferral (docs/semantics.md, "Fairness"): its target
-- answered 429 or 503 with Retry-After, or it or its namespace had no turn soon. Written
-- with every outcome (NULL for all but a deferral), so it names the last deferral until
-- the occurrence's next outcome; the runs API shows it as `deferred_reason`.
ALTER TABLE tasks ADD COLUMN deferred_reason text
    CHECK (deferred_reason IN ('retry_after', 'target_limit', 'namespace_limit'));
