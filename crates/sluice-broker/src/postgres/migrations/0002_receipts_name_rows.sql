-- Version 2 of the schema, over version 1 (0001_schema.sql): the same
-- behaviour in fewer index writes and statements.
--
-- * A receipt starts with its row's seq ("seq.random": new_receipt,
--   receipt_seq), so a leased row is found by its primary key, and
--   messages.id needs no index of its own: every new row and every lease
--   wrote one entry more into it, and nothing looks a live message up by
--   id but rejoin, within its group. Settling and extending still check
--   both the id and the receipt, as before.
--   ids stay unique as before: each is a new UUID, and a replayed dead
--   letter leaves `dead` (id UNIQUE) as it enters `messages`.
-- * settle works on the whole batch in a few set statements (settle_apply)
--   instead of a few statements per settlement.

ALTER TABLE messages DROP CONSTRAINT IF EXISTS messages_id_key;

-- The row number a receipt starts with ("seq.random"), or NULL for one
-- that does not: a receipt from elsewhere, or one a version 1 host wrote,
-- which may still be running during an upgrade. The receipt is checked
-- against the row either way, so a receipt from elsewhere matches nothing
-- and its settlement is refused.
CREATE FUNCTION receipt_seq(receipt text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN receipt ~ '^[0-9]{1,18}\.' THEN split_part(receipt, '.', 1)::bigint END
$$;

-- The rows that deliveries (receipts[i], ids[i]) lease, by receipt_seq;
-- a version 1 host's receipts, rare and only during an upgrade, are looked
-- up by id, in one scan. Kept out of the statements that use the rows, so
-- that the scan's cost never weighs on their plans (a cost that high
-- turns on JIT compilation, which takes longer than the statement).
CREATE FUNCTION receipt_rows(receipts text[], ids text[]) RETURNS bigint[]
LANGUAGE plpgsql STABLE SET search_path FROM CURRENT AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM unnest(receipts) AS r WHERE receipt_seq(r) IS NULL) THEN
    RETURN ARRAY(SELECT coalesce(receipt_seq(r.receipt), x.seq)
                 FROM unnest(receipts, ids) WITH ORDINALITY AS r(receipt, id, i)
                      LEFT JOIN messages x ON x.id = r.id AND receipt_seq(r.receipt) IS NULL
                 ORDER BY r.i);
  END IF;
  RETURN ARRAY(SELECT receipt_seq(r.receipt)
               FROM unnest(receipts) WITH ORDINALITY AS r(receipt, i) ORDER BY r.i);
END
$$;

-- A new receipt for a lease of row seq (queue.rs's RECEIVE writes the same).
CREATE FUNCTION new_receipt(seq bigint) RETURNS text
LANGUAGE sql VOLATILE AS $$
  SELECT seq::text || '.' || substr(md5(random()::text), 1, 16)
$$;

-- Apply settlements (settle's arrays, one element each, and the rows
-- their receipts lease, seqs) to the messages, dead letters and keys,
-- with the semantics of applying them one after another, which holds
-- when no receipt is in the batch twice (settle takes care of that).
-- Returns each settlement's state, as settle does, and the messages of
-- groups that left (queue, group, id when dead).
CREATE FUNCTION settle_apply(now bigint, seqs bigint[], kinds text[], ids text[],
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
      AND m.receipt = s.receipt AND m.id = s.id
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

-- settle_apply's work done one settlement at a time, each seeing what the
-- ones before it did: for a batch with a receipt in it twice, which no
-- worker sends, but which version 1 settled that way.
CREATE FUNCTION settle_each(now bigint, seqs bigint[], kinds text[], ids text[],
                            receipts text[], queues text[], ks text[], retentions bigint[],
                            delays bigint[], errors text[], reasons text[], versions text[],
                            attempts integer[], OUT states int[], OUT left_q text[],
                            OUT left_g text[], OUT left_dead text[])
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  a record;
BEGIN
  states := '{}';
  FOR i IN 1 .. coalesce(array_length(kinds, 1), 0) LOOP
    SELECT * INTO a FROM settle_apply(now, seqs[i:i], kinds[i:i], ids[i:i], receipts[i:i],
                                      queues[i:i],
                                      ks[i:i], retentions[i:i], delays[i:i], errors[i:i],
                                      reasons[i:i], versions[i:i], attempts[i:i]);
    states := states || a.states;
    left_q := left_q || a.left_q;
    left_g := left_g || a.left_g;
    left_dead := left_dead || a.left_dead;
  END LOOP;
END
$$;

-- Settle a batch: as in version 1 (0001_schema.sql), with the same
-- arguments, states and order of effects, but applied by settle_apply, all at once
-- (or by settle_each when a receipt is in the batch twice). The kinds are
-- checked first, so that an unknown one applies nothing.
CREATE OR REPLACE FUNCTION settle(kinds text[], ids text[], receipts text[], queues text[],
                                  ks text[], retentions bigint[], delays bigint[],
                                  errors text[], reasons text[], versions text[],
                                  attempts integer[], p_owner integer[], p_ids text[],
                                  p_queues text[], p_keys text[], p_payloads bytea[],
                                  p_headers text[], p_delays bigint[])
RETURNS int[]
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  now bigint := now_ms();
  out int[];
  a record;
  bad text;
BEGIN
  SELECT k INTO bad FROM unnest(kinds) AS k
  WHERE k IS NULL OR k NOT IN ('D', 'U', 'R', 'F', 'S', 'X') LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'sluice.settle: unknown settlement kind %', bad;
  END IF;
  IF (SELECT count(DISTINCT r) = count(r) FROM unnest(receipts) AS r) THEN
    SELECT * INTO a FROM settle_apply(now, receipt_rows(receipts, ids), kinds, ids, receipts,
                                      queues, ks, retentions, delays, errors, reasons,
                                      versions, attempts);
  ELSE
    SELECT * INTO a FROM settle_each(now, receipt_rows(receipts, ids), kinds, ids, receipts,
                                     queues, ks, retentions, delays, errors, reasons,
                                     versions, attempts);
  END IF;
  out := coalesce(a.states, '{}');
  IF a.left_q IS NOT NULL THEN
    PERFORM groups_left(a.left_q, a.left_g, a.left_dead, now);
  END IF;
  IF coalesce(array_length(p_owner, 1), 0) > 0 THEN
    PERFORM enqueue(array_agg(p.id), array_agg(p.queue), array_agg(p.key),
                    array_agg(p.payload), array_agg(p.headers), array_agg(p.delay))
    FROM unnest(p_owner, p_ids, p_queues, p_keys, p_payloads, p_headers, p_delays)
         AS p(owner, id, queue, key, payload, headers, delay)
    WHERE (kinds[p.owner] = 'D' AND out[p.owner] = 1)
       OR (kinds[p.owner] = 'X' AND out[p.owner] = 4)
    HAVING count(*) > 0;
  END IF;
  PERFORM wake(array_agg(DISTINCT s.queue))
  FROM unnest(queues, kinds, delays, out) AS s(queue, kind, delay, st)
  WHERE s.kind IN ('R', 'F', 'S') AND s.st > 0 AND s.delay <= 0
  HAVING count(*) > 0;
  INSERT INTO counters AS c (queue, done, duplicates, retried, lost)
  SELECT s.queue, count(*) FILTER (WHERE s.st = 1), count(*) FILTER (WHERE s.st = 2),
         count(*) FILTER (WHERE s.st = 3), count(*) FILTER (WHERE s.st = 0)
  FROM unnest(queues, out) AS s(queue, st)
  GROUP BY s.queue
  ON CONFLICT (queue) DO UPDATE
    SET done = c.done + EXCLUDED.done, duplicates = c.duplicates + EXCLUDED.duplicates,
        retried = c.retried + EXCLUDED.retried, lost = c.lost + EXCLUDED.lost;
  RETURN out;
END
$$;

-- extend as in version 1, finding each row by its receipt.
CREATE OR REPLACE FUNCTION extend(q text, ids text[], receipts text[], ks text[],
                                  lease_ms bigint)
RETURNS boolean[]
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  until bigint := now_ms() + lease_ms;
  seqs bigint[] := receipt_rows(receipts, ids);
  out boolean[] := '{}';
  held boolean;
BEGIN
  FOR i IN 1 .. coalesce(array_length(ids, 1), 0) LOOP
    UPDATE messages SET visible_at = until
    WHERE seq = seqs[i] AND id = ids[i] AND receipt = receipts[i] AND leased;
    held := FOUND;
    IF held AND ks[i] IS NOT NULL THEN
      UPDATE keys SET expires_at = until
      WHERE queue = q AND key = ks[i] AND holder = receipts[i] AND NOT done;
    END IF;
    out := out || held;
  END LOOP;
  RETURN out;
END
$$;

-- rejoin as in version 1 (0001_schema.sql), finding the message among its
-- group's, now that messages.id has no index.
CREATE OR REPLACE FUNCTION rejoin(q text, g text, the_id text, now bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  leads boolean;
BEGIN
  UPDATE groups SET blocked_by = NULL WHERE queue = q AND grp = g AND blocked_by = the_id;
  leads := FOUND;
  IF NOT leads THEN
    INSERT INTO groups AS x (queue, grp) VALUES (q, g)
    ON CONFLICT (queue, grp) DO UPDATE SET grp = x.grp
    RETURNING x.xmax = 0 INTO leads;
  END IF;
  IF leads THEN
    UPDATE messages SET visible_at = coalesce(held_due, now), held_due = NULL
    WHERE queue = q AND grp = g AND id = the_id;
  END IF;
END
$$;

-- lease_limited as in version 1, with receipts that name their rows.
CREATE OR REPLACE FUNCTION lease_limited(q text, want bigint, lease_ms bigint, expired text,
                              max_in_flight bigint, per_ms double precision,
                              burst double precision)
RETURNS TABLE (r_id text, r_key text, r_payload bytea, r_headers text, r_attempt integer,
               r_enqueued_at bigint, r_last_error text, r_receipt text, r_visible_at bigint,
               r_grp text, r_snoozes integer, r_due bigint, r_seq bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  now bigint;
  n bigint := want;
  stored double precision;
  stamp bigint;
  t double precision;
  got bigint;
BEGIN
  SELECT f.tokens, f.updated_at INTO stored, stamp FROM flow f WHERE f.queue = q FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO flow AS f (queue, tokens, updated_at) VALUES (q, coalesce(burst, 0), now_ms())
    ON CONFLICT (queue) DO NOTHING;
    SELECT f.tokens, f.updated_at INTO stored, stamp FROM flow f WHERE f.queue = q FOR UPDATE;
  END IF;
  now := now_ms();
  IF max_in_flight IS NOT NULL THEN
    n := least(n, max_in_flight - (SELECT count(*) FROM messages m
                                   WHERE m.queue = q AND m.visible_at > now
                                     AND m.visible_at < waiting_at() AND m.leased));
  END IF;
  IF per_ms IS NOT NULL THEN
    t := least(burst, stored + greatest(now - stamp, 0) * per_ms);
    n := least(n, floor(t)::bigint);
  END IF;
  IF n <= 0 THEN
    RETURN;
  END IF;
  RETURN QUERY
  WITH picked AS (
      SELECT m.seq, m.visible_at AS due, m.leased AS was_leased FROM messages m
      WHERE m.queue = q AND m.visible_at <= now
      ORDER BY m.visible_at, m.seq
      LIMIT n
      FOR UPDATE SKIP LOCKED
  )
  UPDATE messages m
  SET leased = true,
      visible_at = now + lease_ms,
      receipt = new_receipt(m.seq),
      attempt = m.attempt + 1,
      last_error = CASE WHEN picked.was_leased
                        THEN replace(expired, '4294967295', m.attempt::text)
                        ELSE m.last_error END
  FROM picked
  WHERE m.seq = picked.seq
  RETURNING m.id, m.key, m.payload, m.headers, m.attempt, m.enqueued_at, m.last_error,
            m.receipt, m.visible_at, m.grp, m.snoozes, picked.due, m.seq;
  GET DIAGNOSTICS got = ROW_COUNT;
  IF per_ms IS NOT NULL AND got > 0 THEN
    UPDATE flow SET tokens = t - got, updated_at = now WHERE queue = q;
  END IF;
END
$$;
