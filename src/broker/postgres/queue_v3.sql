-- Version 3 of the queue role's schema, over version 2: receiving keeps
-- to the messages_due index, whatever the planner's statistics say.
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

-- Lease up to want due messages of queue q for lease_ms ms, as queue.rs's
-- RECEIVE describes (that statement, in a function).
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
