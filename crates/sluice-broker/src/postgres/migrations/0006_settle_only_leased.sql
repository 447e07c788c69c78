-- Version 6 of the schema, over version 5: a retry, defer or
-- snooze applies only to a row still leased.
--
-- Those settlements leave the row with its receipt (a new one is made
-- when it is leased again), and settle_apply found the row by its receipt
-- alone. So a batch written again after its reply was lost (the
-- connection dropped after the commit) applied them a second time: the
-- retry was counted twice, and a defer or snooze gave back a second
-- attempt and counted a second snooze. Now the second write finds the row
-- no longer leased and refuses them, as it refuses the rest of the batch,
-- whose rows are gone (counted as lost leases: the broker cannot tell a
-- batch written again from a delivery that lost its lease). The function
-- is settle_apply of version 2 with `AND m.leased` in `moved`.

CREATE OR REPLACE FUNCTION settle_apply(now bigint, seqs bigint[], kinds text[], ids text[],
                             receipts text[], queues text[], ks text[], retentions bigint[],
                             delays bigint[], errors text[], reasons text[], versions text[],
                             attempts integer[], OUT states int[], OUT left_q text[],
                             OUT left_g text[], OUT left_dead text[])
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  WITH s AS (
    SELECT * FROM unnest(seqs, kinds, ids, receipts, queues, ks, retentions, delays, errors,
                         reasons, versions, attempts)
      WITH ORDINALITY AS s(seq, kind, id, receipt, queue, k, retention, delay, error, reason,
                           version, attempt, i)
  ), gone AS (
    DELETE FROM messages m USING s
    WHERE s.kind IN ('D', 'U', 'X') AND m.seq = s.seq
      AND m.receipt = s.receipt AND m.id = s.id
    RETURNING s.i, s.kind, s.queue AS s_queue, s.k, s.retention, s.attempt, s.reason,
              s.error, s.version, m.id, m.queue, m.key, m.payload, m.headers,
              m.enqueued_at, m.redrives, m.grp
  ), buried AS (
    INSERT INTO dead (id, queue, key, payload, headers, attempts, enqueued_at, died_at,
                      reason, last_error, handler_version, redrives, grp)
    SELECT g.id, g.queue, g.key, g.payload, g.headers, g.attempt, g.enqueued_at, now,
           g.reason, g.error, g.version, g.redrives, g.grp
    FROM gone g WHERE g.kind = 'X' ORDER BY g.i
  ), moved AS (
    UPDATE messages m
    SET leased = false, visible_at = now + s.delay,
        last_error = CASE WHEN s.kind = 'R' THEN s.error ELSE m.last_error END,
        attempt = CASE WHEN s.kind = 'R' THEN m.attempt ELSE greatest(m.attempt - 1, 0) END,
        snoozes = m.snoozes + CASE WHEN s.kind = 'S' THEN 1 ELSE 0 END
    FROM s
    WHERE s.kind IN ('R', 'F', 'S') AND m.seq = s.seq
      AND m.receipt = s.receipt AND m.id = s.id AND m.leased
    RETURNING s.i
  ), keyed AS (
    -- A done delivery with a key is a duplicate when its key was done
    -- already, or one before it in the batch marked it done for longer
    -- than no time (a retention of 0 leaves the key expired at once).
    SELECT g.i,
           EXISTS (SELECT 1 FROM keys t WHERE t.queue = g.s_queue AND t.key = g.k
                                         AND t.done AND t.expires_at > now)
           OR coalesce(bool_or(g.retention > 0) OVER (
                PARTITION BY g.s_queue, g.k ORDER BY g.i
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), false) AS dup
    FROM gone g WHERE g.kind = 'D' AND g.k IS NOT NULL
  )
  SELECT array_agg(CASE WHEN s.kind = 'R' THEN CASE WHEN mv.i IS NULL THEN 0 ELSE 3 END
                        WHEN s.kind IN ('F', 'S') THEN CASE WHEN mv.i IS NULL THEN 0 ELSE 4 END
                        WHEN g.i IS NULL THEN 0
                        WHEN s.kind = 'U' THEN 2
                        WHEN s.kind = 'X' THEN 4
                        WHEN kd.dup THEN 2
                        ELSE 1 END ORDER BY s.i),
         array_agg(g.queue ORDER BY s.i) FILTER (WHERE g.grp IS NOT NULL),
         array_agg(g.grp ORDER BY s.i) FILTER (WHERE g.grp IS NOT NULL),
         array_agg(CASE WHEN s.kind = 'X' THEN g.id END ORDER BY s.i)
           FILTER (WHERE g.grp IS NOT NULL)
    INTO states, left_q, left_g, left_dead
    FROM s LEFT JOIN gone g ON g.i = s.i
           LEFT JOIN moved mv ON mv.i = s.i
           LEFT JOIN keyed kd ON kd.i = s.i;
  -- A retried, deferred, snoozed or dead delivery lets its key go.
  DELETE FROM keys t
  USING unnest(queues, ks, receipts, states) AS r(queue, k, receipt, st)
  WHERE r.st IN (3, 4) AND r.k IS NOT NULL
    AND t.queue = r.queue AND t.key = r.k AND NOT t.done AND t.holder = r.receipt;
  -- A done one marks its key done; of several in the batch, the last wins.
  INSERT INTO keys AS t (queue, key, done, holder, expires_at)
  SELECT DISTINCT ON (r.queue, r.k) r.queue, r.k, true, r.id, now + r.retention
  FROM unnest(kinds, queues, ks, ids, retentions, states)
       WITH ORDINALITY AS r(kind, queue, k, id, retention, st, i)
  WHERE r.kind = 'D' AND r.st = 1 AND r.k IS NOT NULL
  ORDER BY r.queue, r.k, r.i DESC
  ON CONFLICT (queue, key) DO UPDATE
    SET done = true, holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at;
END
$$;

-- A CREATE OR REPLACE drops the settings version 4 gave the function.
ALTER FUNCTION settle_apply SET plan_cache_mode = force_custom_plan;
