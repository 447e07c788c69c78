//! The receiving side of a queue: a connection per queue for the blocking
//! batch read, the periodic maintenance script (due delayed messages into the
//! stream, expired leases reclaimed), and taking a batch's idempotency keys
//! with pipelined plain commands.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;
use tokio::sync::Mutex;

use super::codec::{self, Entry, int};
use super::conn::{Conn, classify};
use super::{
    BLOCK, DONE_PREFIX, GROUP, LEASE_PREFIX, MAINTAIN_EVERY, QueueKeys, RedisBroker, idem_key,
    lease_value, scripts,
};
use crate::broker::{ClaimState, KeyClaim, Result};
use crate::message::{Delivery, now_ms};

/// The receiving side of one queue: its own connection, because a blocking
/// `XREADGROUP` holds the connection it runs on.
pub(super) struct Reader {
    conn: Conn,
    group_ready: bool,
    cursor: String,
    last_maintain: Option<Instant>,
}

impl RedisBroker {
    async fn reader(&self, queue: &str) -> Result<Arc<Mutex<Reader>>> {
        let mut readers = self.readers.lock().await;
        if let Some(r) = readers.get(queue) {
            return Ok(r.clone());
        }
        let conn = self.client.connect().await.map_err(classify)?;
        let reader = Arc::new(Mutex::new(Reader {
            conn,
            group_ready: false,
            cursor: "0-0".into(),
            last_maintain: None,
        }));
        readers.insert(queue.to_string(), reader.clone());
        Ok(reader)
    }

    async fn ensure_group(conn: &mut Conn, stream: &str) -> Result<()> {
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(stream)
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(conn)
            .await;
        match created {
            Ok(()) => Ok(()),
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            Err(e) => Err(classify(e)),
        }
    }

    async fn read_new(
        &self,
        reader: &mut Reader,
        keys: &QueueKeys,
        queue: &str,
        count: usize,
        block: bool,
        lease: Duration,
    ) -> Result<Vec<Delivery>> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(count);
        if block {
            cmd.arg("BLOCK").arg(BLOCK.as_millis() as u64);
        }
        cmd.arg("STREAMS").arg(&keys.stream).arg(">");
        let reply: Value = match cmd.query_async(&mut reader.conn).await {
            Ok(v) => v,
            Err(e) if e.code() == Some("NOGROUP") => {
                // The stream or group is gone (e.g. Redis lost its data):
                // make them again and read next time.
                reader.group_ready = false;
                return Ok(Vec::new());
            }
            Err(e) => return Err(classify(e)),
        };
        Ok(codec::read_reply(reply, queue, lease.as_millis() as u64))
    }

    async fn maintain(
        &self,
        reader: &mut Reader,
        keys: &QueueKeys,
        queue: &str,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Delivery>> {
        let mut conn = self.conn.clone();
        let reply: Value = scripts::MAINTAIN
            .key(&keys.stream)
            .key(&keys.delayed)
            .key(&keys.bodies)
            .arg(GROUP)
            .arg(&self.consumer)
            .arg(lease.as_millis() as u64)
            .arg(max.max(1))
            .arg(&reader.cursor)
            .invoke_async(&mut conn)
            .await
            .map_err(classify)?;
        let mut parts = codec::into_array(reply).into_iter();
        reader.cursor = parts
            .next()
            .and_then(codec::into_string)
            .unwrap_or_else(|| "0-0".into());
        let lease_until = now_ms() + lease.as_millis() as u64;
        let mut out = Vec::new();
        for item in parts.next().map(codec::into_array).unwrap_or_default() {
            // {entry id, fields, delivery count}
            let mut e = codec::into_array(item);
            let count = e.get(2).and_then(int);
            e.truncate(2);
            if let (Some(count), Some(entry)) = (count, Entry::parse(Value::Array(e))) {
                out.push(entry.into_delivery(queue, count, lease_until));
            }
        }
        Ok(out)
    }

    pub(super) async fn receive_batch(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Delivery>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        self.served
            .lock()
            .expect("served lock")
            .insert(queue.to_string());
        let keys = QueueKeys::new(queue);
        let reader = self.reader(queue).await?;
        let mut reader = reader.lock().await;
        if !reader.group_ready {
            self.register([queue]).await?;
            Self::ensure_group(&mut reader.conn, &keys.stream).await?;
            reader.group_ready = true;
        }
        let mut out = Vec::new();
        if reader
            .last_maintain
            .is_none_or(|t| t.elapsed() >= MAINTAIN_EVERY)
        {
            reader.last_maintain = Some(Instant::now());
            out = self.maintain(&mut reader, &keys, queue, max, lease).await?;
        }
        if out.len() < max {
            let block = out.is_empty();
            let fresh = self
                .read_new(&mut reader, &keys, queue, max - out.len(), block, lease)
                .await?;
            out.extend(fresh);
        }
        Ok(out)
    }

    pub(super) async fn claim_keys(
        &self,
        queue: &str,
        claims: &[KeyClaim],
        lease: Duration,
    ) -> Result<Vec<ClaimState>> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        // One plain `SET NX GET` per key, pipelined: cheaper for Redis than
        // the same commands inside a script, and it answers in one go.
        let lease_ms = lease.as_millis() as u64;
        let mut pipe = redis::pipe();
        for c in claims {
            pipe.cmd("SET")
                .arg(idem_key(queue, &c.key))
                .arg(lease_value(&c.message_id))
                .arg("NX")
                .arg("GET")
                .arg("PX")
                .arg(lease_ms);
        }
        let mut conn = self.conn.clone();
        let before: Vec<Value> = pipe.query_async(&mut conn).await.map_err(classify)?;
        let mut states = Vec::with_capacity(claims.len());
        // Claims that found this message's own earlier lease (it was
        // delivered again): taken over by a script, by index into `states`.
        let mut own = Vec::new();
        for (i, (c, held)) in claims.iter().zip(before).enumerate() {
            let state = match held {
                Value::Nil => ClaimState::Acquired,
                Value::BulkString(v) if v.starts_with(DONE_PREFIX.as_bytes()) => {
                    ClaimState::AlreadyDone
                }
                Value::BulkString(v)
                    if v.strip_prefix(LEASE_PREFIX.as_bytes()) == Some(c.message_id.as_bytes()) =>
                {
                    own.push(i);
                    ClaimState::Busy
                }
                _ => ClaimState::Busy,
            };
            states.push(state);
        }
        if !own.is_empty() {
            let mut renew = scripts::RENEW.prepare_invoke();
            renew.arg(lease_ms);
            for &i in &own {
                renew
                    .key(idem_key(queue, &claims[i].key))
                    .arg(&claims[i].message_id);
            }
            let renewed: Vec<u8> = renew.invoke_async(&mut conn).await.map_err(classify)?;
            for (&i, r) in own.iter().zip(renewed) {
                states[i] = match r {
                    0 => ClaimState::Acquired,
                    1 => ClaimState::AlreadyDone,
                    _ => ClaimState::Busy,
                };
            }
        }
        Ok(states)
    }
}
