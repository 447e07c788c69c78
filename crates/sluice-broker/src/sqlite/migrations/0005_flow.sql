-- Version 5: each limited queue's rate bucket (tokens as of updated_at).
-- A host of an earlier version would lease past max_in_flight and rate.
CREATE TABLE IF NOT EXISTS flow (
    queue      TEXT PRIMARY KEY,
    tokens     REAL NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;
