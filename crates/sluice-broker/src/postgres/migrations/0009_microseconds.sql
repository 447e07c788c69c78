-- Version 9 of the schema, over version 8: enqueue times in microseconds.
--
-- messages.enqueued_at and dead.enqueued_at were milliseconds since the
-- Unix epoch; they are now microseconds (now_us), so that a wait under a
-- millisecond can be measured. The columns keep their names: every
-- function that copies them (a lease returning one, a death, a replay)
-- works on as it was. The two functions that write them from the clock
-- are made again below, as version 1 made them but for now_us(). An
-- earlier host would read the new values as milliseconds.

CREATE FUNCTION now_us() RETURNS bigint LANGUAGE sql VOLATILE AS $$
  SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
$$;

UPDATE messages SET enqueued_at = enqueued_at * 1000;
UPDATE dead SET enqueued_at = enqueued_at * 1000;

CREATE OR REPLACE FUNCTION enqueue(ids text[], queues text[], keys text[], payloads bytea[],
                        headers text[], delays bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  now bigint := now_ms();
BEGIN
  INSERT INTO queues (queue) SELECT DISTINCT q FROM unnest(queues) AS q
  ON CONFLICT DO NOTHING;
  IF EXISTS (SELECT 1 FROM orderings o WHERE o.queue = ANY(queues)) THEN
    PERFORM enqueue_grouped(now, ids, queues, keys, payloads, headers, delays);
  ELSE
    INSERT INTO messages (id, queue, key, payload, headers, enqueued_at, visible_at)
    SELECT m.id, m.queue, coalesce(m.key, m.id), m.payload, m.headers, now_us(),
           now + greatest(coalesce(m.delay, 0), 0)
    FROM unnest(ids, queues, keys, payloads, headers, delays)
         AS m(id, queue, key, payload, headers, delay);
  END IF;
  PERFORM wake(array_agg(DISTINCT m.queue))
  FROM unnest(queues, delays) AS m(queue, delay)
  WHERE coalesce(m.delay, 0) <= 0
  HAVING count(*) > 0;
END
$$;

CREATE OR REPLACE FUNCTION enqueue_grouped(now bigint, ids text[], queues text[], keys text[],
                                payloads bytea[], headers text[], delays bigint[])
RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  q text;
  grps text[];
  ordered boolean[];
BEGIN
  FOR q IN SELECT DISTINCT x FROM unnest(queues) AS x ORDER BY 1 LOOP
    PERFORM ordering_lock(q, false);
  END LOOP;
  SELECT array_agg(CASE WHEN o.queue IS NOT NULL
                        THEN group_of(o.header, o.pointer, m.headers, m.payload) END ORDER BY m.ord),
         array_agg(o.queue IS NOT NULL ORDER BY m.ord)
    INTO grps, ordered
    FROM unnest(queues, headers, payloads) WITH ORDINALITY AS m(queue, headers, payload, ord)
    LEFT JOIN orderings o ON o.queue = m.queue;
  INSERT INTO counters AS c (queue, ungrouped)
  SELECT m.queue, count(*) FROM unnest(queues, grps, ordered) AS m(queue, grp, is_ordered)
  WHERE m.is_ordered AND m.grp IS NULL
  GROUP BY m.queue
  ON CONFLICT (queue) DO UPDATE SET ungrouped = c.ungrouped + EXCLUDED.ungrouped;
  WITH taken AS (
    INSERT INTO groups AS g (queue, grp)
    SELECT DISTINCT m.queue, m.grp FROM unnest(queues, grps) AS m(queue, grp)
    WHERE m.grp IS NOT NULL
    ORDER BY 1, 2
    ON CONFLICT (queue, grp) DO UPDATE SET grp = g.grp
    -- xmax is 0 on a row just inserted, and ours on one updated
    RETURNING g.queue, g.grp, g.xmax = 0 AS fresh
  ), batch AS (
    SELECT m.*, now + greatest(coalesce(m.delay, 0), 0) AS due,
           m.grp IS NOT NULL AND NOT (coalesce(t.fresh, false)
             AND row_number() OVER (PARTITION BY m.queue, m.grp ORDER BY m.ord) = 1) AS waits
    FROM unnest(ids, queues, keys, payloads, headers, delays, grps)
         WITH ORDINALITY AS m(id, queue, key, payload, headers, delay, grp, ord)
    LEFT JOIN taken t ON t.queue = m.queue AND t.grp = m.grp
  )
  INSERT INTO messages (id, queue, key, payload, headers, enqueued_at, visible_at, held_due, grp)
  SELECT b.id, b.queue, coalesce(b.key, b.id), b.payload, b.headers, now_us(),
         CASE WHEN b.waits THEN waiting_at() ELSE b.due END,
         CASE WHEN b.waits THEN b.due END, b.grp
  FROM batch b
  ORDER BY b.ord;
END
$$;
