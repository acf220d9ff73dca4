-- A namespace's fires a second in each executor (docs/semantics.md, "Fairness"); NULL:
-- the default (shared/src/namespace_policy.rs).
ALTER TABLE namespaces
    ADD COLUMN max_fires_per_second integer CHECK (max_fires_per_second BETWEEN 1 AND 1000000);
