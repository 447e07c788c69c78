-- Version 6: ordered groups. A message of an ordered queue has its group
-- in grp; while it waits for its turn, visible_at is past every due time
-- and held_due keeps its own. A dead letter keeps its group; a group that
-- a dead letter blocks has a row in `blocked`. An earlier host would
-- lease a group's waiting messages out of order.
ALTER TABLE messages ADD COLUMN grp TEXT;
ALTER TABLE messages ADD COLUMN held_due INTEGER;
ALTER TABLE dead ADD COLUMN grp TEXT;
ALTER TABLE counters ADD COLUMN ungrouped INTEGER NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS orderings (
    queue TEXT PRIMARY KEY,
    spec  TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS blocked (
    queue   TEXT NOT NULL,
    grp     TEXT NOT NULL,
    dead_id TEXT NOT NULL,
    PRIMARY KEY (queue, grp)
) WITHOUT ROWID;
-- Whether a group is held is a seek, and its oldest waiting message the
-- first of its waiting ones by seq.
CREATE INDEX IF NOT EXISTS messages_group
    ON messages (queue, grp, visible_at, seq) WHERE grp IS NOT NULL;

-- The last tick of each schedule (schedules.rs). Builds of version 5
-- after its first added this table without a version of their own.
CREATE TABLE IF NOT EXISTS schedule_ticks (
    queue    TEXT NOT NULL,
    schedule TEXT NOT NULL,
    last_at  INTEGER NOT NULL,
    PRIMARY KEY (queue, schedule)
) WITHOUT ROWID;
