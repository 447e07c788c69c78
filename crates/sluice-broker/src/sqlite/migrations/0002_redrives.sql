-- Version 2: the scheduled redrives a message has been through, kept on
-- it and on its dead letter.
ALTER TABLE messages ADD COLUMN redrives INTEGER NOT NULL DEFAULT 0;
ALTER TABLE dead ADD COLUMN redrives INTEGER NOT NULL DEFAULT 0;

-- Tables that builds of version 1 added after its first release, without
-- a version of their own: a file of version 1 has them or not.

-- Each host's handlers and their statuses (presence.rs).
CREATE TABLE IF NOT EXISTS handler_status (
    host    TEXT NOT NULL,
    handler TEXT NOT NULL,
    status  TEXT NOT NULL,
    PRIMARY KEY (host, handler)
) WITHOUT ROWID;

-- The handlers' key-value stores (kv.rs); expires_at NULL for never.
CREATE TABLE IF NOT EXISTS kv (
    scope      TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      BLOB NOT NULL,
    expires_at INTEGER,
    PRIMARY KEY (scope, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_expiry ON kv (expires_at) WHERE expires_at IS NOT NULL;

-- Topic bindings and the publishes no binding matched (topics.rs).
CREATE TABLE IF NOT EXISTS bindings (
    topic   TEXT NOT NULL,
    queue   TEXT NOT NULL,
    pattern TEXT NOT NULL,
    origin  TEXT NOT NULL,
    PRIMARY KEY (topic, queue, pattern)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS bindings_origin ON bindings (origin);
CREATE TABLE IF NOT EXISTS topic_counts (
    topic     TEXT PRIMARY KEY,
    unmatched INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
