BEGIN;

SET LOCAL ROLE tenure_owner;

-- Active/passive replicas (Canton's participant HA): replicas configured alike share
-- one lock id, derived from (scope, counter); the active one holds a session-level
-- advisory lock with that id on a dedicated connection. pg_locks is the truth of who
-- holds the lock; this registry adds what pg_locks cannot say: the fencing epoch,
-- the holder's replica name, since when it holds it (server clock), and the
-- reservation that lets it reclaim the lock after a short blip.
CREATE TABLE tenure.replica_lock (
    scope          text        NOT NULL CHECK (btrim(scope) <> ''),
    counter        integer     NOT NULL CHECK (counter >= 0),
    lock_id        integer     NOT NULL UNIQUE CHECK (lock_id BETWEEN 0 AND 1073741823),
    epoch          bigint      NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    replica        text,
    holder_pid     integer,
    acquired_at    timestamptz,
    renewed_at     timestamptz,
    reserved_until timestamptz,
    registered_at  timestamptz NOT NULL,
    PRIMARY KEY (scope, counter),
    CHECK ((replica IS NULL) = (epoch = 0)),
    CHECK ((replica IS NULL) = (acquired_at IS NULL))
);
COMMENT ON TABLE tenure.replica_lock IS
    'Registry of replica locks: one row per (scope, counter) with its 30-bit lock id (unique: a second scope/counter hashing to a registered id is refused). epoch grows at every acquisition; replica, holder_pid and acquired_at describe the last acquisition, renewed_at its last ping; until reserved_until only that replica may acquire the lock.';

-- Every acquisition, by the server's clock, so that who was active when can be read back.
CREATE TABLE tenure.replica_term (
    lock_id     integer     NOT NULL REFERENCES tenure.replica_lock (lock_id) ON DELETE CASCADE,
    epoch       bigint      NOT NULL CHECK (epoch > 0),
    replica     text        NOT NULL,
    pid         integer     NOT NULL,
    acquired_at timestamptz NOT NULL,
    PRIMARY KEY (lock_id, epoch)
);
COMMENT ON TABLE tenure.replica_term IS
    'One row per acquisition of a replica lock: lock id, epoch, replica name, backend pid of the lock session and when it acquired (server clock). The term ends when the next one starts, or earlier.';

-- Terms by the time they began (replica_prune, oldest first).
CREATE INDEX replica_term_acquired ON tenure.replica_term (acquired_at);

CREATE TYPE tenure.replica_grant AS (
    lock_id        integer,
    acquired       boolean,
    epoch          bigint,
    replica        text,
    pid            integer,
    since          timestamptz,
    reserved_until timestamptz
);
COMMENT ON TYPE tenure.replica_grant IS
    'Answer of replica_acquire: acquired tells whether the calling session holds the lock now; epoch, replica, pid and since describe the holder (the caller when acquired); reserved_until is set when the lock is free but reserved for its previous holder.';

CREATE TYPE tenure.replica_holder AS (
    scope            text,
    counter          integer,
    lock_id          integer,
    pid              integer,
    application_name text,
    replica          text,
    epoch            bigint,
    since            timestamptz,
    renewed_at       timestamptz,
    reserved_until   timestamptz
);
COMMENT ON TYPE tenure.replica_holder IS
    'Who holds a replica lock: pid and application_name from pg_locks and pg_stat_activity (NULL when nobody holds it); replica, epoch, since and renewed_at from the registry, only when its recorded pid is the one holding the lock.';

COMMIT;
