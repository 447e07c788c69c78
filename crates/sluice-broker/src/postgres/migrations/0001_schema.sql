-- Version 1 of the PostgreSQL broker's schema: every role's tables and
-- functions, in sections: the queue's (queue.rs), ordered groups'
-- (groups.rs), then dead letters', presence's, the key-value store's,
-- topics' and schedules'. Later files change these objects in place,
-- each replacing only what it changes (migrate.rs runs them in order).
--
-- Every object lives in the broker's own schema, which the connection's search_path names first;
-- each function keeps that search_path (SET ... FROM CURRENT), so it finds
-- the tables when called from a session of the user's, like publish.
-- Times are milliseconds since the Unix epoch from the server's clock
-- (now_ms), so hosts with skewed clocks agree on when a message is due.

CREATE FUNCTION now_ms() RETURNS bigint LANGUAGE sql VOLATILE AS $$
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

-- A message is one row while it waits or is leased, and is deleted when it
-- is done, so the table and its index hold only live messages.
-- visible_at is its due time while it waits and its lease expiry while it
-- is leased: an expired lease needs no sweeper, the row is due again.
CREATE TABLE messages (
    seq         bigserial PRIMARY KEY,
    id          text NOT NULL UNIQUE,
    queue       text NOT NULL,
    key         text NOT NULL,
    payload     bytea NOT NULL,
    headers     text,
    attempt     integer NOT NULL DEFAULT 0,
    enqueued_at bigint NOT NULL,
    visible_at  bigint NOT NULL,
    leased      boolean NOT NULL DEFAULT false,
    receipt     text,
    last_error  text,
    redrives    integer NOT NULL DEFAULT 0,
    grp         text,
    snoozes     integer NOT NULL DEFAULT 0,
    held_due    bigint   -- while it waits for its turn in its group (the ordered groups' section)
);
CREATE INDEX messages_due ON messages (queue, visible_at, seq);

CREATE TABLE keys (
    queue      text NOT NULL,
    key        text NOT NULL,
    done       boolean NOT NULL,
    holder     text NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (queue, key)
);
CREATE INDEX keys_expiry ON keys (expires_at);

CREATE TABLE queues (queue text PRIMARY KEY);

CREATE TABLE counters (
    queue      text PRIMARY KEY,
    done       bigint NOT NULL DEFAULT 0,
    duplicates bigint NOT NULL DEFAULT 0,
    retried    bigint NOT NULL DEFAULT 0,
    lost       bigint NOT NULL DEFAULT 0,
    ungrouped  bigint NOT NULL DEFAULT 0
);

CREATE TABLE dead (
    seq             bigserial PRIMARY KEY,
    id              text NOT NULL UNIQUE,
    queue           text NOT NULL,
    key             text NOT NULL,
    payload         bytea NOT NULL,
    headers         text,
    attempts        integer NOT NULL,
    enqueued_at     bigint NOT NULL,
    died_at         bigint NOT NULL,
    reason          text NOT NULL,
    last_error      text,
    handler_version text,
    redrives        integer NOT NULL DEFAULT 0,
    grp             text
);
CREATE INDEX dead_queue ON dead (queue, seq);

-- The rate bucket of each queue received with flow limits (tokens as of
-- updated_at); its row is also the lock such receives take turns on.
CREATE TABLE flow (
    queue      text PRIMARY KEY,
    tokens     double precision NOT NULL,
    updated_at bigint NOT NULL
);

-- Wake the receivers of queues that have due messages now, on every host:
-- the broker's listening connections hear it when the transaction commits.
CREATE FUNCTION wake(queues text[]) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  PERFORM pg_notify(current_schema(), q) FROM unnest(queues) AS q;
END
$$;

-- Enqueue messages (parallel arrays, one element per message); each is due
-- after its own delay. The queues are remembered for `stats`. A batch
-- with a message of an ordered queue goes through enqueue_grouped
-- (the ordered groups' section), which puts each in its group.
CREATE FUNCTION enqueue(ids text[], queues text[], keys text[], payloads bytea[],
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
    SELECT m.id, m.queue, coalesce(m.key, m.id), m.payload, m.headers, now,
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

-- Enqueue one message from SQL, in the caller's transaction: it is there
-- when the transaction commits and never was when it rolls back. headers
-- is a JSON object of string values ('{"tenant": "a"}'), key the
-- idempotency key (the new message's id when NULL), delay_ms how long it
-- waits. Returns the message's id.
CREATE FUNCTION publish(queue text, payload bytea, headers jsonb DEFAULT NULL,
                        key text DEFAULT NULL, delay_ms bigint DEFAULT 0) RETURNS text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  id text := gen_random_uuid()::text;
  pairs text;
BEGIN
  IF queue IS NULL OR queue = '' THEN
    RAISE EXCEPTION 'sluice.publish: the queue name is empty';
  END IF;
  IF headers IS NOT NULL AND jsonb_typeof(headers) <> 'object' THEN
    RAISE EXCEPTION 'sluice.publish: headers must be a JSON object of strings, like {"tenant": "a"}, not %', headers;
  END IF;
  SELECT CASE WHEN count(*) = 0 THEN NULL
              ELSE jsonb_agg(jsonb_build_array(h.key, h.value) ORDER BY h.ord)::text END
    INTO pairs
    FROM jsonb_each_text(coalesce(headers, '{}'::jsonb)) WITH ORDINALITY AS h(key, value, ord);
  PERFORM enqueue(ARRAY[id], ARRAY[queue], ARRAY[key], ARRAY[payload], ARRAY[pairs],
                  ARRAY[delay_ms]);
  RETURN id;
END
$$;

-- Take idempotency keys of a queue for lease_ms, one answer per key: 0
-- taken, 1 done already, 2 held by another delivery. A key is taken when
-- it is free, expired, or held by the same holder; the row lock of ON
-- CONFLICT makes two hosts' claims of one key take turns, and a key twice
-- in one batch is taken by its first holder only. A key whose holder
-- committed after this statement began reads as held (2): the delivery
-- waits and comes back, never runs twice. Each claim also deletes up to
-- twice as many expired keys as it takes, so the table keeps pace with
-- the keys' retention without a sweeper.
CREATE FUNCTION claim(q text, ks text[], holders text[], lease_ms bigint) RETURNS int[]
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
                        WHEN cur.done THEN 1 ELSE 2 END ORDER BY c.i)
    INTO out
    FROM c LEFT JOIN taken ON taken.key = c.k
           LEFT JOIN keys cur ON cur.queue = q AND cur.key = c.k;
  RETURN coalesce(out, '{}');
END
$$;

-- Settle a batch in one statement. Settlement i is kinds[i]: D done, U
-- duplicate, R retry, F defer, S snooze, X dead; each is fenced by its
-- delivery's receipt. Publishes (p_*) belong to settlement p_owner: a done
-- one's are enqueued when it counts as done, a dead one's (its notice)
-- when it is buried. A message of an ordered group that leaves moves its
-- group on, or blocks it when dead (groups_left, before the publishes, so
-- that they join their groups behind the waiting messages). Returns one
-- state per settlement: 0 lease lost (nothing applied), 1 done, 2
-- duplicate, 3 retried, 4 deferred, snoozed or dead.
CREATE FUNCTION settle(kinds text[], ids text[], receipts text[], queues text[],
                       ks text[], retentions bigint[], delays bigint[], errors text[],
                       reasons text[], versions text[], attempts integer[],
                       p_owner integer[], p_ids text[], p_queues text[], p_keys text[],
                       p_payloads bytea[], p_headers text[], p_delays bigint[])
RETURNS int[]
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  now bigint := now_ms();
  out int[] := '{}';
  st int;
  m messages%ROWTYPE;
  left_q text[];
  left_g text[];
  left_dead text[];
BEGIN
  FOR i IN 1 .. coalesce(array_length(kinds, 1), 0) LOOP
    st := 0;
    IF kinds[i] IN ('D', 'U', 'X') THEN
      DELETE FROM messages WHERE id = ids[i] AND receipt = receipts[i] RETURNING * INTO m;
      IF FOUND THEN
        IF m.grp IS NOT NULL THEN
          left_q := left_q || m.queue;
          left_g := left_g || m.grp;
          left_dead := left_dead || (CASE WHEN kinds[i] = 'X' THEN m.id END);
        END IF;
        IF kinds[i] = 'U' THEN
          st := 2;
        ELSIF kinds[i] = 'X' THEN
          INSERT INTO dead (id, queue, key, payload, headers, attempts, enqueued_at, died_at,
                            reason, last_error, handler_version, redrives, grp)
          VALUES (m.id, m.queue, m.key, m.payload, m.headers, attempts[i], m.enqueued_at, now,
                  reasons[i], errors[i], versions[i], m.redrives, m.grp);
          st := 4;
        ELSIF ks[i] IS NULL THEN
          st := 1;
        ELSIF EXISTS (SELECT 1 FROM keys WHERE queue = queues[i] AND key = ks[i] AND done
                      AND expires_at > now) THEN
          st := 2;
        ELSE
          INSERT INTO keys AS k (queue, key, done, holder, expires_at)
          VALUES (queues[i], ks[i], true, ids[i], now + retentions[i])
          ON CONFLICT (queue, key) DO UPDATE
            SET done = true, holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at;
          st := 1;
        END IF;
      END IF;
    ELSIF kinds[i] = 'R' THEN
      UPDATE messages SET leased = false, visible_at = now + delays[i], last_error = errors[i]
      WHERE id = ids[i] AND receipt = receipts[i];
      IF FOUND THEN st := 3; END IF;
    ELSIF kinds[i] IN ('F', 'S') THEN
      UPDATE messages SET leased = false, visible_at = now + delays[i],
             attempt = greatest(attempt - 1, 0),
             snoozes = snoozes + (CASE WHEN kinds[i] = 'S' THEN 1 ELSE 0 END)
      WHERE id = ids[i] AND receipt = receipts[i];
      IF FOUND THEN st := 4; END IF;
    ELSE
      RAISE EXCEPTION 'sluice.settle: unknown settlement kind %', kinds[i];
    END IF;
    -- A retried, deferred, snoozed or dead delivery lets its key go.
    IF st IN (3, 4) AND ks[i] IS NOT NULL THEN
      DELETE FROM keys WHERE queue = queues[i] AND key = ks[i] AND NOT done
                         AND holder = receipts[i];
    END IF;
    out := out || st;
  END LOOP;
  IF left_q IS NOT NULL THEN
    PERFORM groups_left(left_q, left_g, left_dead, now);
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

-- Lease each delivery that still holds its lease, and the key it holds,
-- for lease_ms from now; whether each still held its lease.
CREATE FUNCTION extend(q text, ids text[], receipts text[], ks text[], lease_ms bigint)
RETURNS boolean[]
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  until bigint := now_ms() + lease_ms;
  out boolean[] := '{}';
  held boolean;
BEGIN
  FOR i IN 1 .. coalesce(array_length(ids, 1), 0) LOOP
    UPDATE messages SET visible_at = until
    WHERE id = ids[i] AND receipt = receipts[i] AND leased;
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

-- Lease as queue.rs's RECEIVE does, for a queue with flow limits: no more
-- than leave max_in_flight of its messages leased (NULL: no limit; a
-- lease that ran out does not count), nor more than the whole tokens in
-- its rate bucket, refilled at per_ms a millisecond up to burst (NULL: no
-- rate). Receives of the queue take turns on its row of `flow`, and each
-- statement after the lock sees what the receive before it leased, so two
-- hosts receiving at once never both take the last place.
CREATE FUNCTION lease_limited(q text, want bigint, lease_ms bigint, expired text,
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
      receipt = substr(md5(random()::text || m.seq::text), 1, 16),
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

-- ======================================================================
-- Ordered groups
-- ======================================================================
-- Ordered groups (groups.rs): called by the queue's enqueue and settle
-- above.
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

-- ======================================================================
-- Dead letters (dead.rs): replaying and purging them; the `dead` table is
-- the queue's, above, since settle buries into it
-- ======================================================================
-- `replay_dead` moves up to `take` dead letters of queue q back to it,
-- oldest death first: those with seq in (past, upto] (no upper end when
-- upto is NULL: then the queue's newest dead letter now), dead by died_by,
-- with fewer than max_redrives redrives, among only_ids (filters that are
-- NULL take all). Each comes back with attempt 0 and `redrive` more
-- redrives; one of an ordered group is put back waiting and then rejoins
-- its group. Returns how many moved, the last seq moved, and the upper end
-- used, for the next batch.
CREATE FUNCTION replay_dead(q text, died_by bigint, max_redrives integer, only_ids text[],
                            take bigint, redrive integer, past bigint, upto bigint,
                            OUT moved bigint, OUT last_seq bigint, OUT bound bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  now bigint := now_ms();
  ordered boolean;
  waiting_ids text[];
  waiting_grps text[];
BEGIN
  bound := coalesce(upto, (SELECT max(seq) FROM dead WHERE queue = q));
  PERFORM ordering_lock(q, false);
  ordered := EXISTS (SELECT 1 FROM orderings WHERE queue = q);
  WITH picked AS (
      SELECT d.seq FROM dead d
      WHERE d.queue = q AND d.seq > past AND d.seq <= bound
        AND (died_by IS NULL OR d.died_at <= died_by)
        AND (max_redrives IS NULL OR d.redrives < max_redrives)
        AND (only_ids IS NULL OR d.id = ANY(only_ids))
      ORDER BY d.seq
      LIMIT take
      FOR UPDATE SKIP LOCKED
  ), gone AS (
      DELETE FROM dead d USING picked WHERE d.seq = picked.seq
      RETURNING d.*
  ), queued AS (
      INSERT INTO messages AS m (id, queue, key, payload, headers, attempt, enqueued_at,
                                 visible_at, held_due, last_error, redrives, grp)
      SELECT g.id, g.queue, g.key, g.payload, g.headers, 0, g.enqueued_at,
             CASE WHEN g.grp IS NOT NULL AND ordered THEN waiting_at() ELSE now END,
             CASE WHEN g.grp IS NOT NULL AND ordered THEN now END,
             g.last_error, g.redrives + redrive, g.grp
      FROM gone g ORDER BY g.seq
      RETURNING m.seq, m.id, m.grp, m.visible_at
  )
  SELECT (SELECT count(*) FROM queued), (SELECT max(g.seq) FROM gone g),
         (SELECT array_agg(x.id ORDER BY x.seq) FROM queued x WHERE x.visible_at = waiting_at()),
         (SELECT array_agg(x.grp ORDER BY x.seq) FROM queued x WHERE x.visible_at = waiting_at())
    INTO moved, last_seq, waiting_ids, waiting_grps;
  FOR i IN 1 .. coalesce(array_length(waiting_ids, 1), 0) LOOP
    PERFORM rejoin(q, waiting_grps[i], waiting_ids[i], now);
  END LOOP;
END
$$;

-- Delete queue q's dead letters; the groups they blocked move on. How
-- many went.
CREATE FUNCTION purge_dead(q text) RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  n bigint;
  grouped text[];
BEGIN
  WITH gone AS (DELETE FROM dead WHERE queue = q RETURNING id, grp)
  SELECT count(*), array_agg(id) FILTER (WHERE grp IS NOT NULL) INTO n, grouped FROM gone;
  IF grouped IS NOT NULL THEN
    PERFORM unblock(q, grouped, now_ms());
  END IF;
  RETURN n;
END
$$;

-- ======================================================================
-- Presence (presence.rs): each host's handler statuses, and paused queues
-- ======================================================================
CREATE TABLE handler_statuses (
    host     text PRIMARY KEY,
    statuses text NOT NULL
);
CREATE TABLE paused (
    queue     text PRIMARY KEY,
    paused_at bigint NOT NULL
);

-- ======================================================================
-- The key-value store (kv.rs)
-- ======================================================================
-- One row per entry of a handler's store (scope). expires_at is in ms
-- (now_ms), NULL for never; a row at or past it is as good as gone.
CREATE TABLE kv (
    scope      text NOT NULL,
    key        text NOT NULL,
    value      bytea NOT NULL,
    expires_at bigint,
    PRIMARY KEY (scope, key)
);
CREATE INDEX kv_expiry ON kv (expires_at) WHERE expires_at IS NOT NULL;

-- Add delta to the decimal integer at (s, k), 0 when it is not set or has
-- expired, keeping the entry's expiry. Values parse the way Redis's INCRBY
-- parses them: an optional '-', then digits without leading zeros, within
-- bigint. Returns the sum, or NULL and why not ('not an integer' or
-- 'overflow'), leaving the value alone.
CREATE FUNCTION kv_increment(s text, k text, delta bigint, OUT total bigint, OUT refusal text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  now bigint := now_ms();
  old text;
  added numeric;
BEGIN
  -- Make the entry exist and hold its row lock (ON CONFLICT locks the row
  -- even where WHERE declines the update), so increments take turns.
  INSERT INTO kv AS e (scope, key, value, expires_at) VALUES (s, k, '\x30', NULL)
  ON CONFLICT (scope, key) DO UPDATE SET value = EXCLUDED.value, expires_at = NULL
    WHERE e.expires_at <= now;
  SELECT encode(value, 'escape') INTO old FROM kv WHERE scope = s AND key = k;
  -- Two steps: only text that passed the pattern may be cast.
  IF old !~ '^(0|-?[1-9][0-9]{0,18})$' THEN
    refusal := 'not an integer';
    RETURN;
  END IF;
  IF old::numeric NOT BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
    refusal := 'not an integer';
    RETURN;
  END IF;
  added := old::numeric + delta;
  IF added NOT BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
    refusal := 'overflow';
    RETURN;
  END IF;
  total := added::bigint;
  UPDATE kv SET value = convert_to(total::text, 'UTF8') WHERE scope = s AND key = k;
END
$$;

-- ======================================================================
-- Topics (topics.rs): bindings of queues to topic patterns
-- ======================================================================
CREATE TABLE bindings (
    topic   text NOT NULL,
    queue   text NOT NULL,
    pattern text NOT NULL,
    origin  text NOT NULL,
    PRIMARY KEY (topic, queue, pattern)
);
CREATE INDEX bindings_origin ON bindings (origin);
CREATE TABLE topic_counts (
    topic     text PRIMARY KEY,
    unmatched bigint NOT NULL DEFAULT 0
);

-- ======================================================================
-- Schedules (schedules.rs): the last tick each schedule fired
-- ======================================================================
CREATE TABLE schedule_ticks (
    queue    text NOT NULL,
    schedule text NOT NULL,
    last_at  bigint NOT NULL,
    PRIMARY KEY (queue, schedule)
);

-- Fire tick at_ms of schedule s of queue q unless a tick at or after it
-- fired already: record it as the schedule's last and, when m_id is not
-- NULL, enqueue its message to q. Whether this call fired it.
CREATE FUNCTION fire_tick(q text, s text, at_ms bigint, m_id text, m_key text,
                          m_payload bytea, m_headers text, m_delay bigint)
RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  INSERT INTO schedule_ticks AS t (queue, schedule, last_at) VALUES (q, s, at_ms)
  ON CONFLICT (queue, schedule) DO UPDATE SET last_at = EXCLUDED.last_at
    WHERE t.last_at < EXCLUDED.last_at;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  IF m_id IS NOT NULL THEN
    PERFORM enqueue(ARRAY[m_id], ARRAY[q], ARRAY[m_key], ARRAY[m_payload],
                    ARRAY[m_headers], ARRAY[m_delay]);
  END IF;
  RETURN true;
END
$$;
