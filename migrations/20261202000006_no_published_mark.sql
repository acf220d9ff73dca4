-- Tasks are no longer marked 'published' once their message is sent: that was one row
-- write per occurrence, and it raced the executor's start for the same row. A claimed
-- task is published at its fire time; if its message never reaches an executor (the
-- scanner died before sending it, the broker lost it), the claim's lease expires and the
-- task is claimed and published again. Tasks an older scanner left 'published' become
-- such expired claims.
UPDATE tasks SET status = 'claimed', lease_until = now() WHERE status = 'published';
DROP INDEX tasks_published;
ALTER TABLE tasks DROP COLUMN published_at;
ALTER TABLE tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check
    CHECK (status IN ('pending', 'claimed', 'running', 'succeeded', 'dead', 'cancelled'));
