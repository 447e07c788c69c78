-- Version 8: enqueue times in microseconds since the Unix epoch
-- (`enqueued_us`, was `enqueued_at` in milliseconds), so that a wait
-- under a millisecond can be measured. An earlier host's queries would not
-- find the column.
ALTER TABLE messages RENAME COLUMN enqueued_at TO enqueued_us;
UPDATE messages SET enqueued_us = enqueued_us * 1000;
ALTER TABLE dead RENAME COLUMN enqueued_at TO enqueued_us;
UPDATE dead SET enqueued_us = enqueued_us * 1000;
