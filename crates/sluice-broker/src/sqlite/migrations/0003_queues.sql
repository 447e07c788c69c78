-- Version 3: the table of queue names that `stats` lists, so that counts
-- come from index ranges, filled from what the file holds.
CREATE TABLE IF NOT EXISTS queues (
    queue TEXT PRIMARY KEY
) WITHOUT ROWID;
INSERT OR IGNORE INTO queues (queue)
SELECT queue FROM messages UNION SELECT queue FROM dead UNION SELECT queue FROM counters;
