-- Retries, attempt history and dead letters.
--
-- A failed attempt that may be retried sends its task back to 'pending' with a later
-- due_at (the task keeps its identity, scheduled_at); the scan → Kafka path then carries
-- the retry like any other due task. Each failed attempt is kept in task_attempts; a
-- successful one lives on the task row only, so the common path writes no extra row.
-- After the last attempt the task is 'dead' and a message goes to the dead-letter topic.

ALTER TABLE timers
    ADD COLUMN retry_max_attempts integer          NOT NULL DEFAULT 3     CHECK (retry_max_attempts BETWEEN 1 AND 100),
    ADD COLUMN retry_initial_ms   integer          NOT NULL DEFAULT 1000  CHECK (retry_initial_ms >= 1),
    ADD COLUMN retry_multiplier   double precision NOT NULL DEFAULT 2.0   CHECK (retry_multiplier >= 1.0 AND retry_multiplier <= 10.0),
    ADD COLUMN retry_max_ms       integer          NOT NULL DEFAULT 60000 CHECK (retry_max_ms >= 1);

-- When the task is next due: scheduled_at for the first attempt, later for a retry.
ALTER TABLE tasks ADD COLUMN due_at timestamptz;
UPDATE tasks SET due_at = scheduled_at;
ALTER TABLE tasks ALTER COLUMN due_at SET NOT NULL;
-- The executor running the task: a redelivered message for a task 'running' under
-- another executor (which crashed, or lost the partition) runs it again.
ALTER TABLE tasks ADD COLUMN run_owner text;

ALTER TABLE tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check
    CHECK (status IN ('pending', 'claimed', 'published', 'running', 'succeeded', 'dead', 'cancelled'));

DROP INDEX tasks_pending_due;
CREATE INDEX tasks_pending_due ON tasks (due_at) WHERE status = 'pending';
-- Dead tasks are listed and replayed by operators.
CREATE INDEX tasks_dead ON tasks (finished_at) WHERE status = 'dead';

CREATE TABLE task_attempts (
    task_id          bigint      NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt          integer     NOT NULL,
    started_at       timestamptz,
    finished_at      timestamptz NOT NULL DEFAULT now(),
    http_status      smallint,
    error            text,
    response_excerpt text,
    duration_ms      integer,
    PRIMARY KEY (task_id, attempt)
);
