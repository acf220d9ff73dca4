-- Standard Webhooks signing secrets (docs/sql.md, "Signed callbacks"): every HTTP callback
-- of a namespace's timers is signed with each of its secrets (several while they rotate).
-- The executor reads this table every 5 s.
CREATE TABLE signing_secrets (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    namespace text NOT NULL,
    secret text NOT NULL CHECK (secret LIKE 'whsec\_%'),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX signing_secrets_by_namespace ON signing_secrets (namespace, created_at);
