-- Version 7: how many times a handler snoozed a message. An earlier
-- host's queries would not find the column.
ALTER TABLE messages ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;

-- The first builds of version 6 made messages_group without visible_at,
-- which version 6 kept for files that had it: it is made again as version
-- 6 makes it, so that every file ends with the same index.
DROP INDEX IF EXISTS messages_group;
CREATE INDEX messages_group
    ON messages (queue, grp, visible_at, seq) WHERE grp IS NOT NULL;
