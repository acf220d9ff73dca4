-- Listings of finished tasks by scheduled time (GET /v1/tasks?status=succeeded, cancelled:
-- the last day unless given) read the block ranges of that time, not the whole history.
-- A BRIN index: tasks are inserted about in scheduled order, it costs next to nothing to
-- keep up, and scheduled_at never changes, so it keeps no status write from being HOT.
CREATE INDEX tasks_scheduled_brin ON tasks USING brin (scheduled_at) WITH (pages_per_range = 32);
