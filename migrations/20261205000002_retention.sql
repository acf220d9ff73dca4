-- Retention: the scanner holding bucket 0 deletes finished occurrences older than
-- PUNCTUAL_RETENTION_DAYS (docs/sql.md, "History"). A one-shot timer's task row was the
-- only record that its occurrence ran, and an edit sends the timer back to the planner
-- at the same instant: so before the row goes, the timer's `pruned_through` records the
-- occurrence, and the planner never plans an occurrence at or before it again.
-- Recurring timers need no mark: the planner never plans their past (an edited timer is
-- planned from now, a resumed one not before now).
ALTER TABLE timers ADD COLUMN pruned_through timestamptz;
