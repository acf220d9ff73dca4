-- The timer list (GET /v1/timers, the console's timers page); docs/BENCHMARKS.md, "Timer list".
-- Narrowed to a name prefix: LIKE 'prefix%' range-scans only an index in byte order, which
-- timers_namespace_name (in the database's collation) is not.
CREATE INDEX timers_namespace_name_prefix ON timers (namespace, name text_pattern_ops) WHERE state <> 'deleted';
-- A namespace's timers by id (the list's order and cursor): without it, a small namespace's
-- few timers, or a filter that matches few, are sought by scanning every timer's id.
CREATE INDEX timers_namespace_id ON timers (namespace, id) WHERE state <> 'deleted';
