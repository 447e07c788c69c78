-- Version 4: paused queues, which every host honours (a host of an
-- earlier version would not, so it must not open the file).
CREATE TABLE IF NOT EXISTS paused (
    queue     TEXT PRIMARY KEY,
    paused_at INTEGER NOT NULL
) WITHOUT ROWID;

-- Settlements refused for a lost lease. Builds of version 3 after its
-- first added this column without a version of their own, so a file of
-- version 3 has it or not; an ADD COLUMN of a column the table has
-- already is passed over (migrate.rs).
ALTER TABLE counters ADD COLUMN lost INTEGER NOT NULL DEFAULT 0;
