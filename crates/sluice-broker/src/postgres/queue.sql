-- The queue role's part of version 1 of the PostgreSQL broker's schema
-- (migrate.rs runs every role's part). Every object lives in the
-- broker's own schema, which the connection's search_path names first;
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
    held_due    bigint   -- while it waits for its turn in its group (groups.sql)
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
-- (groups.sql), which puts each in its group.
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
