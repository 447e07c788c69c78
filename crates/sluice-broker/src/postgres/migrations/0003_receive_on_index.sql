-- Version 3 of the schema, over version 2: receiving keeps
-- to the messages_due index, and claiming keys to the keys' primary key,
-- whatever the planner's statistics say.
--
-- A queue filled faster than autovacuum analyzes it (a backlog published
-- in a burst) has no statistics, or stale ones. The planner then chose to
-- read every due row of the queue with a bitmap scan and sort them all
-- (on disk, past work_mem) to lease the first few thousand, or, right
-- after an analyze, to join the picked rows back with a scan of the whole
-- table: either way each receive cost time in proportion to the backlog.
-- Walking messages_due in order and finding each picked row by its
-- primary key costs time in proportion to the rows leased. The receiving
-- functions turn the other plans off for their own statements (the
-- planner still takes one when nothing else is possible).

-- Lease up to want due messages of queue q for lease_ms ms: the statement
-- queue.rs's RECEIVE sent before, which says what comes back.
CREATE FUNCTION lease_due(q text, want bigint, lease_ms bigint, expired text)
RETURNS TABLE (r_id text, r_key text, r_payload bytea, r_headers text, r_attempt integer,
               r_enqueued_at bigint, r_last_error text, r_receipt text, r_visible_at bigint,
               r_grp text, r_snoozes integer, r_due bigint, r_seq bigint)
LANGUAGE sql
SET search_path FROM CURRENT
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
  WITH picked AS (
      SELECT seq, visible_at AS due, leased AS was_leased FROM messages
      WHERE queue = q AND visible_at <= (SELECT now_ms())
      ORDER BY visible_at, seq
      LIMIT want
      FOR UPDATE SKIP LOCKED
  )
  UPDATE messages m
  SET leased = true,
      visible_at = now_ms() + lease_ms,
      receipt = new_receipt(m.seq),
      attempt = m.attempt + 1,
      last_error = CASE WHEN picked.was_leased
                        THEN replace(expired, '4294967295', m.attempt::text)
                        ELSE m.last_error END
  FROM picked
  WHERE m.seq = picked.seq
  RETURNING m.id, m.key, m.payload, m.headers, m.attempt, m.enqueued_at, m.last_error,
            m.receipt, m.visible_at, m.grp, m.snoozes, picked.due, m.seq
$$;

ALTER FUNCTION lease_limited(text, bigint, bigint, text, bigint, double precision,
                             double precision)
  SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
  SET enable_hashjoin = off SET enable_mergejoin = off;

-- claim as in version 1, but each key's state is read by its primary key,
-- one lookup per claimed key. Version 1 joined the claimed keys with
-- `keys`, which the planner could (and, with a few thousand keys kept
-- done for their retention, did) plan as a bitmap scan of every key of
-- the queue, hashed: each claim then read the whole table.
CREATE OR REPLACE FUNCTION claim(q text, ks text[], holders text[], lease_ms bigint) RETURNS int[]
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  now bigint := now_ms();
  out int[];
BEGIN
  DELETE FROM keys WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM keys WHERE expires_at <= now ORDER BY expires_at
    LIMIT 2 * coalesce(array_length(ks, 1), 0) FOR UPDATE SKIP LOCKED));
  WITH c AS (
    SELECT c.k, c.holder, c.i, row_number() OVER w AS nth, first_value(c.holder) OVER w AS first
    FROM unnest(ks, holders) WITH ORDINALITY AS c(k, holder, i)
    WINDOW w AS (PARTITION BY c.k ORDER BY c.i)
  ), taken AS (
    INSERT INTO keys AS t (queue, key, done, holder, expires_at)
    SELECT q, c.k, false, c.holder, now + lease_ms FROM c WHERE c.nth = 1
    ON CONFLICT (queue, key) DO UPDATE
      SET done = false, holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
      WHERE t.expires_at <= now OR (NOT t.done AND t.holder = EXCLUDED.holder)
    RETURNING t.key
  )
  SELECT array_agg(CASE WHEN taken.key IS NOT NULL AND c.holder = c.first THEN 0
                        WHEN (SELECT cur.done FROM keys cur WHERE cur.queue = q AND cur.key = c.k)
                        THEN 1 ELSE 2 END ORDER BY c.i)
    INTO out
    FROM c LEFT JOIN taken ON taken.key = c.k;
  RETURN coalesce(out, '{}');
END
$$;
