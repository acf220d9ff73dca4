-- Why a timer was last paused or resumed, as the operator put it (POST /v1/timers/{id}/pause
-- with {"note": ...}): shown beside its state; a change of state without a note clears it.
ALTER TABLE timers ADD COLUMN state_note text CHECK (char_length(state_note) <= 500);
