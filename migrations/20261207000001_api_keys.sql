-- API keys of the admin API (README, "Keys and roles"): only a key's SHA-256 is stored.
-- A `read` or `write` key sees the namespaces it lists; an `admin` key sees every
-- namespace and manages the keys. A revoked key stays, for the record, and is refused.
CREATE TABLE api_keys (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name text NOT NULL CHECK (length(name) BETWEEN 1 AND 256),
    digest bytea NOT NULL UNIQUE CHECK (length(digest) = 32),
    -- The key's first characters, to tell keys apart in a listing.
    prefix text NOT NULL,
    role text NOT NULL CHECK (role IN ('read', 'write', 'admin')),
    namespaces text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    CHECK ((role = 'admin') = (cardinality(namespaces) = 0))
);
