-- Scanners share the 1,024 buckets under leases (docs/scaling.md).
--
-- A scanner is a member while its row in `scanners` is live (lease_until in the future);
-- it renews that one row every heartbeat, so a lease costs one row write per scanner and
-- heartbeat, whatever the number of buckets or occurrences. A bucket belongs to its
-- `owner` while that owner is a live member. Its epoch grows by one at every change of
-- owner, and every task claimed for the bucket records the epoch it was claimed under
-- (`tasks.claim_epoch`): the executor runs a task only from a message of that epoch, so a
-- scanner that lost a bucket cannot have an occurrence run a second time, whatever its
-- clock says.
--
-- Taking a bucket from a member whose lease has expired first deletes that member's
-- row. Every statement that writes for a bucket holds a KEY SHARE lock on its scanner's
-- own member row, and checks in the same statement that it owns the bucket, so the
-- deletion waits for a statement in flight and every later statement of the old owner
-- writes nothing.

-- The bucket of a timer: bytes 14 and 15 of its id, modulo 1,024 (as task::bucket_of).
CREATE FUNCTION punctual_bucket(timer_id uuid) RETURNS smallint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN ((get_byte(uuid_send(timer_id), 14) * 256 + get_byte(uuid_send(timer_id), 15)) % 1024)::smallint;

CREATE TABLE scanners (
    id           text        PRIMARY KEY,
    lease_until  timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    joined_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE buckets (
    bucket      smallint    PRIMARY KEY CHECK (bucket BETWEEN 0 AND 1023),
    -- A scanner's id; NULL when no scanner holds the bucket. Not a foreign key: a dead
    -- member's row is deleted before its buckets are taken.
    owner       text,
    epoch       bigint      NOT NULL DEFAULT 0,
    acquired_at timestamptz
);
INSERT INTO buckets (bucket) SELECT generate_series(0, 1023);

-- The epoch of the bucket's owner when the task was claimed (NULL while pending).
ALTER TABLE tasks ADD COLUMN claim_epoch bigint;
