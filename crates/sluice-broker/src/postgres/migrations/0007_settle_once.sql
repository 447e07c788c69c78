-- Version 7 of the schema, over version 6: a settle write sent
-- again after it was applied is applied, and counted, once.
--
-- A worker writes a settle batch again until the broker takes it. When the
-- connection dropped after the commit, the first write was applied and
-- only its reply was lost: the second found the rows it names gone or no
-- longer leased, refused every settlement, and counted each as a lost
-- lease (version 6 made sure it applied none of them twice). Now each
-- write is named by a digest of its settlements (codec.rs,
-- settle_digest) and `settled` remembers the digests of the writes
-- applied: a write whose digest is there applies nothing, counts nothing
-- and answers NULL. A second write that comes while the first is still
-- running waits on the digest's row until the first commits (then finds
-- it) or rolls back (then applies).
--
-- A digest is kept for keep_ms (the broker passes SETTLED_KEPT, ten
-- minutes); each write deletes up to four older ones, more than the one
-- it adds, so the table holds about a window's writes: one row a batch.

CREATE TABLE settled (
    digest text PRIMARY KEY,
    at     bigint NOT NULL
);
CREATE INDEX settled_at ON settled (at);

-- settle (0002_receipts_name_rows.sql), unless a write with this digest
-- was applied already: then NULL, and nothing applied.
CREATE FUNCTION settle_once(digest text, keep_ms bigint, kinds text[], ids text[],
                            receipts text[], queues text[], ks text[], retentions bigint[],
                            delays bigint[], errors text[], reasons text[], versions text[],
                            attempts integer[], p_owner integer[], p_ids text[],
                            p_queues text[], p_keys text[], p_payloads bytea[],
                            p_headers text[], p_delays bigint[])
RETURNS int[]
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  now bigint := now_ms();
BEGIN
  DELETE FROM settled WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM settled WHERE at <= now - keep_ms ORDER BY at
    LIMIT 4 FOR UPDATE SKIP LOCKED));
  INSERT INTO settled AS s (digest, at) VALUES (settle_once.digest, now)
  ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  RETURN settle(kinds, ids, receipts, queues, ks, retentions, delays, errors, reasons,
                versions, attempts, p_owner, p_ids, p_queues, p_keys, p_payloads, p_headers,
                p_delays);
END
$$;
