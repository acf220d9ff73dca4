-- Tasks published but never started (the broker lost them) are found by the scanner's
-- republish sweep through this index; it holds only tasks between publish and start.
CREATE INDEX tasks_published ON tasks (published_at) WHERE status = 'published';
