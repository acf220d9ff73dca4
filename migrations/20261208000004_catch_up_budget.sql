-- A namespace's budget for catching up (docs/semantics.md, "Fairness"): replays of dead
-- tasks and backfills are due at most max_catch_up_per_second a second (NULL: the
-- default, shared/src/namespace_policy.rs), each request's after the last one's
-- (catch_up_booked_until), so that a large replay does not come due at once beside
-- everyone's on-time occurrences.
ALTER TABLE namespaces
    ADD COLUMN max_catch_up_per_second integer CHECK (max_catch_up_per_second BETWEEN 1 AND 1000000),
    ADD COLUMN catch_up_booked_until timestamptz;
