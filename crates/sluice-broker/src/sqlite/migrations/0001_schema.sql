-- Version 1 of a SQLite broker file: the queue's messages and idempotency
-- keys, its counters, and its dead letters. Later files change these in
-- place (migrate.rs runs them in order, in one transaction).
--
-- Every table and index is made only if it is missing, in this file and
-- the later ones: a file written before the numbered migrations may hold
-- objects that a build of its version made without a version of its own.

-- A message is one row. visible_at is when it may next be received: its
-- due time while it waits, its lease expiry while leased, so an expired
-- lease needs no sweeper.
CREATE TABLE IF NOT EXISTS messages (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    queue       TEXT NOT NULL,
    key         TEXT NOT NULL,
    payload     BLOB NOT NULL,
    headers     TEXT,
    attempt     INTEGER NOT NULL DEFAULT 0,
    enqueued_at INTEGER NOT NULL,
    visible_at  INTEGER NOT NULL,
    leased      INTEGER NOT NULL DEFAULT 0,
    receipt     TEXT,
    last_error  TEXT
);
CREATE INDEX IF NOT EXISTS messages_due ON messages (queue, visible_at);

-- Idempotency keys: held by a delivery while it runs, then done for the
-- key's retention.
CREATE TABLE IF NOT EXISTS keys (
    queue      TEXT NOT NULL,
    key        TEXT NOT NULL,
    done       INTEGER NOT NULL,
    holder     TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS keys_expiry ON keys (expires_at);

CREATE TABLE IF NOT EXISTS counters (
    queue      TEXT PRIMARY KEY,
    done       INTEGER NOT NULL DEFAULT 0,
    duplicates INTEGER NOT NULL DEFAULT 0,
    retried    INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS dead (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    queue           TEXT NOT NULL,
    key             TEXT NOT NULL,
    payload         BLOB NOT NULL,
    headers         TEXT,
    attempts        INTEGER NOT NULL,
    enqueued_at     INTEGER NOT NULL,
    died_at         INTEGER NOT NULL,
    reason          TEXT NOT NULL,
    last_error      TEXT,
    handler_version TEXT
);
CREATE INDEX IF NOT EXISTS dead_queue ON dead (queue, seq);
