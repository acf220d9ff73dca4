-- A namespace's policy beyond its execution limits (docs/semantics.md, "Tenants"): the
-- private callback targets it may reach besides public addresses (added to
-- PUNCTUAL_CALLBACK_ALLOW, which opens them for all), the live timers it may hold through
-- the API and the shortest time between two fires of one of its timers. NULL: the service's
-- setting (PUNCTUAL_NAMESPACE_MAX_TIMERS, PUNCTUAL_MIN_FIRE_INTERVAL_MS).
ALTER TABLE namespaces
    ADD COLUMN callback_allow text[] NOT NULL DEFAULT '{}',
    ADD COLUMN max_timers integer CHECK (max_timers BETWEEN 0 AND 1000000000),
    ADD COLUMN min_fire_interval_ms integer CHECK (min_fire_interval_ms BETWEEN 0 AND 86400000);
