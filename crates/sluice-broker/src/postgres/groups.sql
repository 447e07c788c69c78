-- Ordered groups: their part of version 1 of the PostgreSQL broker's
-- schema, run after queue.sql (whose enqueue and settle call these).
--
-- A queue's ordering is a row of `orderings`. A message with a group has
-- it in messages.grp; of a group's messages only one is active (ready,
-- delayed or leased) at a time, and the others wait with visible_at at
-- waiting_at() (past every due time, so no receive ever reads them) and
-- their own due time in held_due. A group has a row in `groups` while one
-- of its messages is active or a dead one blocks it (blocked_by): that row
-- is what publishing to the group and moving it on take turns on, so two
-- hosts never both make a message of one group active.

CREATE TABLE orderings (
    queue         text PRIMARY KEY,
    spec          text NOT NULL,  -- OrderedGroups::encode, to tell a change
    header        text,           -- the group is this header's value,
    pointer       text[],         -- or at this JSON pointer (its tokens)
    block_on_dead boolean NOT NULL
);

CREATE TABLE groups (
    queue      text NOT NULL,
    grp        text NOT NULL,
    blocked_by text,              -- the id of the dead letter blocking it
    PRIMARY KEY (queue, grp)
);

-- Whether a group has an active message is a seek (visible_at below
-- waiting_at()), and its oldest waiting one the first of visible_at =
-- waiting_at() by seq. Messages without a group are not in it.
CREATE INDEX messages_group ON messages (queue, grp, visible_at, seq) WHERE grp IS NOT NULL;

-- visible_at of a message waiting for its turn in its group.
CREATE FUNCTION waiting_at() RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
  SELECT 9223372036854775807::bigint
$$;

-- Changing a queue's ordering holds this lock alone; publishing to the
-- queue and burying one of its grouped messages share it, so a message is
-- never grouped, nor a group blocked, by an ordering that is no longer the
-- queue's. Advisory, so that sharing it writes nothing.
CREATE FUNCTION ordering_lock(q text, alone boolean) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF alone THEN
    PERFORM pg_advisory_xact_lock(hashtext(current_schema() || ' orderings'), hashtext(q));
  ELSE
    PERFORM pg_advisory_xact_lock_shared(hashtext(current_schema() || ' orderings'), hashtext(q));
  END IF;
END
$$;

-- The value of the first header `name` in headers stored as JSON pairs,
-- read without a JSON parser (which cannot hold an escaped NUL in text):
-- NULL when there is none, or when it holds an escape other than \" \\ \/
-- (the writers escape nothing else but control characters).
CREATE FUNCTION header_value(headers text, name text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN h.p[2] ~ '(^|[^\\])(\\\\)*\\[^"\\/]' THEN NULL
              ELSE regexp_replace(h.p[2], '\\(.)', '\1', 'g') END
  FROM regexp_matches(headers, '\[\s*"((?:[^"\\]|\\.)*)"\s*,\s*"((?:[^"\\]|\\.)*)"\s*\]', 'g')
       WITH ORDINALITY AS h(p, ord)
  WHERE h.p[1] = substr(to_json(name)::text, 2, length(to_json(name)::text) - 2)
  ORDER BY h.ord
  LIMIT 1
$$;

-- A JSON number as serde_json reads and writes it: an integer in the
-- range of u64 (of i64 when negative) as written; any other as the f64
-- serde_json makes of it (its fast reading, as float_text_of reads it),
-- written as serde_json writes floats. NULL when serde_json refuses it
-- (out of f64's range).
CREATE FUNCTION number_text(lit text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path FROM CURRENT AS $$
DECLARE
  m text[] := regexp_match(lit, '^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([-+]?)([0-9]+))?$');
BEGIN
  IF m[3] IS NULL AND m[5] IS NULL AND m[2]::numeric <= 18446744073709551615
     AND (m[1] = '' OR m[2]::numeric BETWEEN 1 AND 9223372036854775808) THEN
    RETURN lit;
  END IF;
  RETURN float_text(json_f64(m[1] = '-', m[2], m[3], m[4] = '-', m[5]));
END
$$;

-- The f64 serde_json (without float_roundtrip) reads from a JSON number's
-- sign, digits before and after the point, exponent sign and exponent:
-- the digits that fit a u64 (later integer digits count as powers of
-- ten, later fraction digits are dropped), times or divided by the power
-- of ten, in f64 steps as it does them. NULL when it refuses the number.
CREATE FUNCTION json_f64(negative boolean, whole text, frac text, exp_negative boolean,
                         exp text) RETURNS double precision
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  sig numeric := 0;
  e bigint := 0;
  saturated boolean := false;
  d int;
  f double precision;
BEGIN
  FOR i IN 1 .. length(whole) LOOP
    d := substr(whole, i, 1)::int;
    saturated := saturated OR sig * 10 + d > 18446744073709551615;
    IF saturated THEN e := e + 1; ELSE sig := sig * 10 + d; END IF;
  END LOOP;
  FOR i IN 1 .. coalesce(length(frac), 0) LOOP
    d := substr(frac, i, 1)::int;
    EXIT WHEN sig * 10 + d > 18446744073709551615;
    sig := sig * 10 + d;
    e := e - 1;
  END LOOP;
  IF exp::numeric > 2147483647 THEN
    IF sig <> 0 AND NOT exp_negative THEN
      RETURN NULL;
    END IF;
    sig := 0;
  ELSIF exp IS NOT NULL THEN
    e := greatest(least(e + CASE WHEN exp_negative THEN -exp::bigint ELSE exp::bigint END,
                        2147483647), -2147483648);
  END IF;
  f := sig::double precision;
  LOOP
    IF abs(e) <= 308 AND e >= 0 THEN
      f := f * ('1e' || e)::double precision;  -- an overflow raises: NULL
      EXIT;
    ELSIF f = 0 THEN
      EXIT;
    ELSIF e >= 0 THEN
      RETURN NULL;
    END IF;
    BEGIN
      f := f / ('1e' || least(-e, 308))::double precision;
    EXCEPTION WHEN numeric_value_out_of_range THEN
      f := 0;  -- PostgreSQL refuses an underflow to zero, which Rust makes
    END;
    EXIT WHEN -e <= 308;
    e := e + 308;
  END LOOP;
  RETURN CASE WHEN negative THEN -f ELSE f END;
END
$$;

-- An f64 as serde_json writes it: the fewest digits that read back the
-- same (which PostgreSQL's float8 output finds too), plainly for powers of
-- ten from -5 to 15 (1.0, 0.00001, 1000000000000000.0), else as 1.5e-7
-- or 1e+16.
CREATE FUNCTION float_text(f double precision) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET extra_float_digits = 1 AS $$
DECLARE
  m text[];
  digits text;
  n int;   -- how many significant digits
  k int;   -- the power of ten of the last one
  kk int;  -- where the decimal point goes
BEGIN
  IF f = 0 THEN
    RETURN CASE WHEN f::text LIKE '-%' THEN '-0.0' ELSE '0.0' END;
  END IF;
  m := regexp_match(f::text, '^(-?)([0-9]+)(?:\.([0-9]+))?(?:e([-+][0-9]+))?$');
  digits := ltrim(m[2] || coalesce(m[3], ''), '0');
  n := length(rtrim(digits, '0'));
  k := coalesce(m[4]::int, 0) - length(coalesce(m[3], '')) + length(digits) - n;
  digits := left(digits, n);
  kk := n + k;
  RETURN m[1] || CASE
    WHEN k >= 0 AND kk <= 16 THEN digits || repeat('0', k) || '.0'
    WHEN kk > 0 AND kk <= 16 THEN left(digits, kk) || '.' || substr(digits, kk + 1)
    WHEN kk > -5 AND kk <= 0 THEN '0.' || repeat('0', -kk) || digits
    ELSE left(digits, 1) || CASE WHEN n > 1 THEN '.' || substr(digits, 2) ELSE '' END
         || 'e' || CASE WHEN kk > 0 THEN '+' ELSE '' END || (kk - 1)
  END;
END
$$;

-- The string or number at the pointer `tokens` (unescaped) in a JSON
-- payload, as serde_json's pointer finds it: an object's member (the last
-- of equal names), an array's element by an index written without sign or
-- leading zero. NULL for anything else, and for a payload that is not
-- UTF-8 JSON (or a number out of f64's range, which serde_json refuses).
-- An escaped NUL is read as another control character, which no group
-- holds either: PostgreSQL's JSON cannot turn it into text.
CREATE FUNCTION pointer_value(payload bytea, tokens text[]) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path FROM CURRENT AS $$
DECLARE
  j json;
  t text;
BEGIN
  j := regexp_replace(convert_from(payload, 'UTF8'), '(?<!\\)((?:\\\\)*)\\u0000', '\1\\u0001', 'g')::json;
  FOREACH t IN ARRAY tokens LOOP
    j := CASE json_typeof(j)
           WHEN 'object' THEN j -> t
           WHEN 'array' THEN CASE WHEN t ~ '^(0|[1-9][0-9]{0,8})$' THEN j -> t::int END
         END;
    IF j IS NULL THEN
      RETURN NULL;
    END IF;
  END LOOP;
  RETURN CASE json_typeof(j)
           WHEN 'string' THEN j #>> '{}'
           WHEN 'number' THEN number_text(j::text)
         END;
EXCEPTION WHEN others THEN
  RETURN NULL;
END
$$;

-- The group of a message under an ordering that reads `header` or else
-- `pointer` (neither: a pointer that finds nothing), as
-- OrderedGroups::group_of takes it: NULL when there is no value, or it is
-- empty, longer than 256 bytes or holds a control character.
CREATE FUNCTION group_of(header text, pointer text[], headers text, payload bytea)
RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path FROM CURRENT AS $$
DECLARE
  v text;
BEGIN
  IF header IS NOT NULL THEN
    v := header_value(headers, header);
  ELSIF pointer IS NOT NULL THEN
    v := pointer_value(payload, pointer);
  END IF;
  IF v = '' OR octet_length(v) > 256 OR v ~ '[\u0001-\u001f\u007f-\u009f]' THEN
    RETURN NULL;
  END IF;
  RETURN v;
END
$$;

-- enqueue's part for a batch with messages of ordered queues: each takes
-- its group by its queue's ordering, and leads the group when the group
-- had no row before and it is the group's first in the batch, or waits.
-- Group rows are taken in order of name, so two batches never wait on
-- each other in a circle; ungrouped messages of ordered queues are
-- counted.
CREATE FUNCTION enqueue_grouped(now bigint, ids text[], queues text[], keys text[],
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
  SELECT b.id, b.queue, coalesce(b.key, b.id), b.payload, b.headers, now,
         CASE WHEN b.waits THEN waiting_at() ELSE b.due END,
         CASE WHEN b.waits THEN b.due END, b.grp
  FROM batch b
  ORDER BY b.ord;
END
$$;

-- The active message of group g left (done, a duplicate, or dead without
-- blocking) or the dead letter blocking it is gone: the oldest waiting one
-- becomes active, due when it was due or now, unless the group is blocked
-- or another of its messages is active (a replayed one); with none
-- waiting the group's row goes.
CREATE FUNCTION advance(q text, g text, now bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  due bigint;
BEGIN
  PERFORM 1 FROM groups WHERE queue = q AND grp = g AND blocked_by IS NULL FOR UPDATE;
  IF NOT FOUND
     OR EXISTS (SELECT 1 FROM messages
                WHERE queue = q AND grp = g AND visible_at < waiting_at()) THEN
    RETURN;
  END IF;
  UPDATE messages SET visible_at = coalesce(held_due, now), held_due = NULL
  WHERE seq = (SELECT seq FROM messages
               WHERE queue = q AND grp = g AND visible_at = waiting_at()
               ORDER BY seq LIMIT 1)
  RETURNING visible_at INTO due;
  IF NOT FOUND THEN
    DELETE FROM groups WHERE queue = q AND grp = g;
  ELSIF due <= now THEN
    PERFORM wake(ARRAY[q]);
  END IF;
END
$$;

-- Message dead_id of group g died: it blocks the group if the ordering
-- says so, or the group moves on.
CREATE FUNCTION died(q text, g text, dead_id text, now bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  PERFORM ordering_lock(q, false);
  IF EXISTS (SELECT 1 FROM orderings WHERE queue = q AND block_on_dead) THEN
    INSERT INTO groups (queue, grp, blocked_by) VALUES (q, g, dead_id)
    ON CONFLICT (queue, grp) DO UPDATE SET blocked_by = EXCLUDED.blocked_by;
  ELSE
    PERFORM advance(q, g, now);
  END IF;
END
$$;

-- Messages of groups left the queue for good, settlement by settlement
-- (parallel arrays; dead_ids[i] the message's id when it died, else
-- NULL): their groups move on or are blocked, in order of name.
CREATE FUNCTION groups_left(qs text[], gs text[], dead_ids text[], now bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  l record;
BEGIN
  FOR l IN SELECT DISTINCT x FROM unnest(qs) AS x ORDER BY 1 LOOP
    PERFORM ordering_lock(l.x, false);
  END LOOP;
  FOR l IN SELECT * FROM unnest(qs, gs, dead_ids) AS x(q, g, dead_id) ORDER BY 1, 2 LOOP
    IF l.dead_id IS NULL THEN
      PERFORM advance(l.q, l.g, now);
    ELSE
      PERFORM died(l.q, l.g, l.dead_id, now);
    END IF;
  END LOOP;
END
$$;

-- A replayed dead letter (message the_id of group g, put back waiting):
-- it leads its group again when it was the one blocking it, or when the
-- group has no message; otherwise it waits behind the group's messages.
CREATE FUNCTION rejoin(q text, g text, the_id text, now bigint) RETURNS void
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
    WHERE id = the_id;
  END IF;
END
$$;

-- Every group of queue q blocked by one of the dead letters dead_ids
-- (NULL: by any) moves on: they were purged, or dead ones no longer block.
CREATE FUNCTION unblock(q text, dead_ids text[], now bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  g text;
BEGIN
  FOR g IN
    WITH freed AS (
      UPDATE groups SET blocked_by = NULL
      WHERE queue = q AND blocked_by IS NOT NULL
        AND (dead_ids IS NULL OR blocked_by = ANY(dead_ids))
      RETURNING grp
    )
    SELECT grp FROM freed ORDER BY 1
  LOOP
    PERFORM advance(q, g, now);
  END LOOP;
END
$$;

-- Make spec (with its header or pointer tokens, and whether dead letters
-- block) queue q's ordering, or stop ordering it (spec NULL): then every
-- waiting message is due when it was due or now, and the groups are
-- forgotten. With an ordering whose dead letters do not block, blocked
-- groups move on. Nothing happens when the ordering is the same, and then
-- the lock is not taken either: every host sets the ordering when it
-- loads the handler, and waiting for the lock would hold up publishing to
-- the queue behind a transaction that published to it and is still open.
CREATE FUNCTION set_ordering(q text, new_spec text, hdr text, ptr text[], blocks boolean)
RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  now bigint := now_ms();
BEGIN
  IF new_spec IS NOT DISTINCT FROM (SELECT spec FROM orderings WHERE queue = q) THEN
    RETURN;
  END IF;
  PERFORM ordering_lock(q, true);
  IF new_spec IS NOT DISTINCT FROM (SELECT spec FROM orderings WHERE queue = q) THEN
    RETURN;
  END IF;
  IF new_spec IS NULL THEN
    DELETE FROM orderings WHERE queue = q;
    DELETE FROM groups WHERE queue = q;
    UPDATE messages SET visible_at = coalesce(held_due, now), held_due = NULL
    WHERE queue = q AND visible_at = waiting_at();
    PERFORM wake(ARRAY[q]);
    RETURN;
  END IF;
  INSERT INTO orderings AS o (queue, spec, header, pointer, block_on_dead)
  VALUES (q, new_spec, hdr, ptr, blocks)
  ON CONFLICT (queue) DO UPDATE
    SET spec = EXCLUDED.spec, header = EXCLUDED.header, pointer = EXCLUDED.pointer,
        block_on_dead = EXCLUDED.block_on_dead;
  IF NOT blocks THEN
    PERFORM unblock(q, NULL, now);
  END IF;
END
$$;
