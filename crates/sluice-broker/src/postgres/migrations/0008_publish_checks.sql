-- Version 8 of the schema, over version 7: the SQL entry
-- point, publish(), refuses what every other entry point refuses.
--
-- Version 1's publish took any queue name, any key and any delay, so
-- `SELECT sluice.publish('bad queue name!', ...)` or a delay of -5 made a
-- message that no handler, no `stats` and no `dlq` command could name. Now
-- it makes the checks of NewMessage::validate (message.rs), which the
-- Client, `sluice send` and a handler's publish make, with the same
-- bounds:
--
--   queue     1 to 128 of A-Z a-z 0-9 - _ .       (validate_queue_name)
--   payload   not NULL
--   headers   NULL, or a JSON object of at most 64 string values, each
--             name not empty and without `=`   (MAX_HEADERS; jsonb cannot
--             hold NUL, which the Rust checks refuse too)
--   key       NULL (the message's id), or 1 to 512 bytes   (MAX_KEY)
--   delay_ms  NULL (no delay), or 0 to 30 days in ms       (MAX_DELAY)
--   size      payload + each header's name, value and 32 + key, at most
--             the setting sluice.max_message_size (bytes; 1 MiB when
--             unset, DEFAULT_MAX_MESSAGE_SIZE; as max_message_size in
--             sluice.toml, which this function cannot read)
--
-- A refusal raises an error, so the caller's transaction fails: SQLSTATE
-- 22004 (null_value_not_allowed) for a NULL queue or payload, 54000
-- (program_limit_exceeded) for a limit (size, header count, key length),
-- 22023 (invalid_parameter_value) for the rest; the message names the
-- argument, the hint says what to do. tests/integration/entry_points.rs
-- runs the same inputs through every entry point and checks they agree.

-- Refuse a publish: raise `state` for argument `argument`.
CREATE FUNCTION publish_refuse(state text, argument text, problem text, hint text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = state,
    MESSAGE = format('sluice.publish: argument %s %s', argument, problem),
    HINT = hint;
END
$$;

-- `text` quoted as JSON (as the Rust errors quote), cut to 140 characters.
CREATE FUNCTION publish_quote(t text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT to_json(CASE WHEN length(t) > 140 THEN left(t, 140) || '…' ELSE t END)::text
$$;

-- The queue name rule of validate_queue_name. translate() deletes the
-- allowed characters, so the rule does not depend on the locale.
CREATE FUNCTION publish_check_queue(q text) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF q IS NULL THEN
    PERFORM publish_refuse('22004', 'queue', 'is NULL',
      'Name the queue: 1 to 128 of A-Z a-z 0-9 - _ .');
  ELSIF octet_length(q) NOT BETWEEN 1 AND 128 OR translate(q,
      'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.', '') <> '' THEN
    PERFORM publish_refuse('22023', 'queue', 'is a bad queue name: ' || publish_quote(q),
      'Use 1 to 128 of A-Z a-z 0-9 - _ . (every sluice entry point refuses other names).');
  END IF;
END
$$;

-- The headers as the broker keeps them (a JSON array of [name, value]
-- pairs, NULL for none) and their bytes in the message's size.
CREATE FUNCTION publish_headers(h jsonb, OUT pairs text, OUT bytes bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  bad text;
  shape text := 'Pass a JSON object of string values, like {"tenant": "a"}, or NULL.';
BEGIN
  IF h IS NOT NULL AND jsonb_typeof(h) <> 'object' THEN
    PERFORM publish_refuse('22023', 'headers',
      'must be a JSON object of string values, not ' || left(h::text, 140), shape);
  END IF;
  IF (SELECT count(*) FROM jsonb_object_keys(h)) > 64 THEN
    PERFORM publish_refuse('54000', 'headers',
      format('has %s headers; at most 64 are allowed', (SELECT count(*) FROM jsonb_object_keys(h))),
      'Send at most 64 headers; put the rest in the payload.');
  END IF;
  SELECT e.name INTO bad FROM jsonb_each(h) AS e(name, value)
    WHERE e.name = '' OR strpos(e.name, '=') > 0 LIMIT 1;
  IF FOUND THEN
    PERFORM publish_refuse('22023', 'headers', 'has a bad header name ' || publish_quote(bad),
      'A header name is 1 or more characters without =.');
  END IF;
  SELECT e.name INTO bad FROM jsonb_each(h) AS e(name, value)
    WHERE jsonb_typeof(e.value) <> 'string' LIMIT 1;
  IF FOUND THEN
    PERFORM publish_refuse('22023', 'headers',
      'has a header that is not a string: ' || publish_quote(bad), shape);
  END IF;
  SELECT CASE WHEN count(*) = 0 THEN NULL
              ELSE jsonb_agg(jsonb_build_array(e.name, e.value) ORDER BY e.ord)::text END,
         coalesce(sum(octet_length(e.name) + octet_length(e.value) + 32), 0)
    INTO pairs, bytes
    FROM jsonb_each_text(h) WITH ORDINALITY AS e(name, value, ord);
END
$$;

-- The key rule of NewMessage::validate (NULL: the message's id).
CREATE FUNCTION publish_check_key(k text) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF k = '' THEN
    PERFORM publish_refuse('22023', 'key', 'is empty',
      'Give an idempotency key of 1 to 512 bytes, or NULL to key the message by its id.');
  ELSIF octet_length(k) > 512 THEN
    PERFORM publish_refuse('54000', 'key',
      format('is %s bytes; at most 512 are allowed', octet_length(k)),
      'Use a key of at most 512 bytes (hash a longer one).');
  END IF;
END
$$;

-- 0 to 30 days (MAX_DELAY); NULL is no delay.
CREATE FUNCTION publish_check_delay(d bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF d NOT BETWEEN 0 AND 2592000000 THEN
    PERFORM publish_refuse('22023', 'delay_ms',
      format('is %s; a delay is 0 to 2592000000 ms (30 days)', d),
      'Pass a delay of 0 to 30 days in milliseconds, or NULL for none.');
  END IF;
END
$$;

-- The size limit: the setting sluice.max_message_size (bytes, 1 to 64
-- MiB as max_message_size in sluice.toml), 1 MiB when it is not set.
CREATE FUNCTION publish_max_size() RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  setting text := nullif(current_setting('sluice.max_message_size', true), '');
BEGIN
  IF setting IS NULL THEN
    RETURN 1048576;
  -- CASE, not OR: SQL may evaluate the cast first.
  ELSIF (CASE WHEN setting ~ '^[0-9]{1,9}$' THEN setting::bigint NOT BETWEEN 1 AND 67108864
              ELSE true END) THEN
    PERFORM publish_refuse('22023', 'payload',
      'cannot be checked: the setting sluice.max_message_size is ' || publish_quote(setting),
      'Set sluice.max_message_size to a byte count from 1 to 67108864, as max_message_size in sluice.toml.');
  END IF;
  RETURN setting::bigint;
END
$$;

-- Enqueue one message from SQL, in the caller's transaction: it is there
-- when the transaction commits and never was when it rolls back. headers
-- is a JSON object of string values ('{"tenant": "a"}'), key the
-- idempotency key (the new message's id when NULL), delay_ms how long it
-- waits. Returns the message's id. Refuses what the other entry points
-- refuse (see the top of this file).
CREATE OR REPLACE FUNCTION publish(queue text, payload bytea, headers jsonb DEFAULT NULL,
                                   key text DEFAULT NULL, delay_ms bigint DEFAULT 0)
RETURNS text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  id text := gen_random_uuid()::text;
  h record;
  size bigint;
  max_size bigint;
BEGIN
  PERFORM publish_check_queue(publish.queue);
  IF publish.payload IS NULL THEN
    PERFORM publish_refuse('22004', 'payload', 'is NULL',
      'Pass the message''s bytes as bytea (''''::bytea for none).');
  END IF;
  h := publish_headers(publish.headers);
  PERFORM publish_check_key(publish.key);
  PERFORM publish_check_delay(publish.delay_ms);
  size := octet_length(publish.payload) + h.bytes + coalesce(octet_length(publish.key), 0);
  max_size := publish_max_size();
  IF size > max_size THEN
    PERFORM publish_refuse('54000', 'payload',
      format('makes a message of %s bytes for queue %s, over the %s-byte limit',
             size, publish_quote(publish.queue), max_size),
      'Send less, or raise the limit: max_message_size in sluice.toml and the setting sluice.max_message_size (ALTER DATABASE ... SET sluice.max_message_size = ''BYTES'').');
  END IF;
  PERFORM enqueue(ARRAY[id], ARRAY[publish.queue], ARRAY[publish.key], ARRAY[publish.payload],
                  ARRAY[h.pairs], ARRAY[coalesce(publish.delay_ms, 0)]);
  RETURN id;
END
$$;
