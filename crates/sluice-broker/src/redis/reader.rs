//! The receiving side of one queue: a connection of its own for the blocking
//! batch read, the consumer group made on first use, and the periodic
//! maintenance script (due delayed messages into the stream, expired leases
//! reclaimed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;
use tokio::sync::Mutex;

use super::codec::{self, Entry, int};
use super::conn::{Conn, classify};
use super::{BLOCK, GROUP, IDLE_WAIT, MAINTAIN_EVERY, QueueKeys, RedisBroker, scripts};
use crate::message::{Delivery, now_ms};
use crate::{Flow, Rate, Result};

/// The receiving side of one queue: its own connection, because a blocking
/// `XREADGROUP` holds the connection it runs on.
pub(super) struct Reader {
    /// Its own connection, with a response timeout longer than
    /// [`IDLE_WAIT`].
    conn: Conn,
    group_ready: bool,
    cursor: String,
    last_maintain: Option<Instant>,
    /// When the next delayed message is due, as the last maintenance saw.
    next_due: Option<Instant>,
    /// Entries leased when the last maintenance ran.
    leased: u64,
    /// Where the last maintenance left the stream and the wake stream, for
    /// an idle wait; taken by the wait, dropped by a read that finds
    /// something (the group has moved on since).
    marks: Option<Marks>,
    /// Rate tokens taken for the next read (a queue with a `rate` alone).
    tokens: usize,
    /// Set while an idle wait blocks on `conn`, cleared when it ends: still
    /// set, the wait was dropped (its worker stopped), and the connection
    /// is blocked server-side until its `XREAD` times out, so it is
    /// replaced before the next call (see [`Reader::unblocked`]).
    waiting: bool,
}

impl Reader {
    /// Replace the connection if an idle wait was dropped while it blocked.
    async fn unblocked(&mut self, client: &super::conn::Client) -> Result<()> {
        if self.waiting {
            self.conn = client.connect_blocking().await.map_err(classify)?;
            self.waiting = false;
        }
        Ok(())
    }
}

/// The group's last delivered entry of the stream, and the wake stream's
/// last entry (`0-0` for none), as one maintenance saw them.
struct Marks {
    delivered: String,
    wake: String,
}

impl RedisBroker {
    /// The reader of `queue`, made on first use.
    pub(super) async fn reader(&self, queue: &str) -> Result<Arc<Mutex<Reader>>> {
        let mut readers = self.readers.lock().await;
        if let Some(r) = readers.get(queue) {
            return Ok(r.clone());
        }
        let conn = self.client.connect_blocking().await.map_err(classify)?;
        let reader = Arc::new(Mutex::new(Reader {
            conn,
            group_ready: false,
            cursor: "0-0".into(),
            last_maintain: None,
            next_due: None,
            leased: 0,
            marks: None,
            tokens: 0,
            waiting: false,
        }));
        readers.insert(queue.to_string(), reader.clone());
        Ok(reader)
    }

    /// Up to `max` deliveries of `queue`: what maintenance reclaimed (every
    /// [`MAINTAIN_EVERY`]), then new entries, waiting up to [`BLOCK`] for
    /// them when there was nothing else.
    pub(super) async fn read_batch(
        &self,
        reader: &mut Reader,
        queue: &str,
        max: usize,
        lease: Duration,
        flow: Flow,
    ) -> Result<Vec<Delivery>> {
        let keys = QueueKeys::new(queue);
        reader.unblocked(&self.client).await?;
        if !reader.group_ready {
            self.register([queue]).await?;
            ensure_group(&mut reader.conn, &keys.stream).await?;
            reader.group_ready = true;
        }
        let mut out = Vec::new();
        if reader
            .last_maintain
            .is_none_or(|t| t.elapsed() >= MAINTAIN_EVERY)
        {
            reader.last_maintain = Some(Instant::now());
            let plain = flow.max_in_flight.is_none() && flow.rate.is_none();
            out = (self.maintain(reader, &keys, queue, (max, plain), lease)).await?;
        }
        if out.len() < max {
            let (count, spent, block) = (max - out.len(), out.len(), out.is_empty());
            let fresh = match flow {
                Flow {
                    max_in_flight: None,
                    rate: None,
                } => {
                    self.read_new(reader, &keys, queue, count, block, lease)
                        .await?
                }
                Flow {
                    max_in_flight: None,
                    rate: Some(rate),
                } => {
                    self.read_rated(reader, &keys, queue, (count, spent, block), lease, rate)
                        .await?
                }
                Flow { .. } => {
                    self.take_new(reader, &keys, queue, count, spent, lease, flow)
                        .await?
                }
            };
            out.extend(fresh);
        }
        Ok(out)
    }

    /// Up to `count` new entries within `rate`, read only with tokens the
    /// bucket granted before: never more than the rate. With none held,
    /// tokens are taken (`TOKENS`), then as many entries read. While the
    /// queue is busy, each read also takes the tokens of the next in the
    /// same round trip, so a rate that does not bind costs no round trip;
    /// a read that finds nothing gives back what is held, for other hosts.
    /// `spent` deliveries of this batch were reclaimed already and take
    /// their tokens too.
    async fn read_rated(
        &self,
        reader: &mut Reader,
        keys: &QueueKeys,
        queue: &str,
        (count, spent, block): (usize, usize, bool),
        lease: Duration,
        rate: Rate,
    ) -> Result<Vec<Delivery>> {
        let spent = -(spent as i64);
        let read = if reader.tokens == 0 {
            let granted = self.tokens(keys, rate, count, spent).await?;
            if granted == 0 {
                return Ok(Vec::new());
            }
            reader.tokens = granted;
            self.read_new(reader, keys, queue, granted, block, lease)
                .await?
        } else {
            self.read_and_take(reader, keys, queue, count, spent, lease, rate)
                .await?
        };
        reader.tokens = reader.tokens.saturating_sub(read.len());
        if read.is_empty() && reader.tokens > 0 {
            let back = std::mem::take(&mut reader.tokens);
            self.tokens(keys, rate, 0, back as i64).await?;
        }
        Ok(read)
    }

    /// Read with the tokens held (without blocking), and take the next
    /// read's in the same round trip: enough to hold `count` again.
    #[allow(clippy::too_many_arguments)]
    async fn read_and_take(
        &self,
        reader: &mut Reader,
        keys: &QueueKeys,
        queue: &str,
        count: usize,
        spent: i64,
        lease: Duration,
        rate: Rate,
    ) -> Result<Vec<Delivery>> {
        let n = count.min(reader.tokens);
        let want = count.saturating_sub(reader.tokens - n);
        let mut pipe = redis::pipe();
        pipe.cmd("EVAL")
            .arg(scripts::TOKENS_SOURCE)
            .arg(1)
            .arg(&keys.flow)
            .arg(want)
            .arg(rate.per_ms())
            .arg(rate.burst())
            .arg(spent);
        pipe.cmd("XREADGROUP")
            .arg("GROUP")
            .arg(GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(n)
            .arg("STREAMS")
            .arg(&keys.stream)
            .arg(">");
        let reply: redis::RedisResult<(i64, Value)> = pipe.query_async(&mut reader.conn).await;
        match reply {
            Ok((granted, read)) => {
                reader.tokens += granted.max(0) as usize;
                Ok(codec::read_reply(read, queue, lease.as_millis() as u64))
            }
            Err(e) if e.code() == Some("NOGROUP") => {
                // The tokens taken with it are let go: the bucket refills.
                reader.group_ready = false;
                reader.tokens = 0;
                Ok(Vec::new())
            }
            Err(e) => Err(classify(e)),
        }
    }

    /// Run `TOKENS`: give `back` tokens to the queue's bucket, then take up
    /// to `want`; how many were taken.
    async fn tokens(&self, keys: &QueueKeys, rate: Rate, want: usize, back: i64) -> Result<usize> {
        let mut conn = self.conn.clone();
        let granted: i64 = scripts::TOKENS
            .key(&keys.flow)
            .arg(want)
            .arg(rate.per_ms())
            .arg(rate.burst())
            .arg(back)
            .invoke_async(&mut conn)
            .await
            .map_err(classify)?;
        Ok(granted.max(0) as usize)
    }

    /// Up to `count` new entries within `flow`'s limits, read by `TAKE`
    /// (without blocking: the worker waits between empty receives).
    /// `spent` deliveries of this batch were reclaimed already and take
    /// their tokens too.
    #[allow(clippy::too_many_arguments)]
    async fn take_new(
        &self,
        reader: &mut Reader,
        keys: &QueueKeys,
        queue: &str,
        count: usize,
        spent: usize,
        lease: Duration,
        flow: Flow,
    ) -> Result<Vec<Delivery>> {
        let (per_ms, burst) = flow.rate.map_or((0.0, 0.0), |r| (r.per_ms(), r.burst()));
        let reply: redis::RedisResult<Value> = scripts::TAKE
            .key(&keys.stream)
            .key(&keys.flow)
            .arg(GROUP)
            .arg(&self.consumer)
            .arg(count)
            .arg(flow.max_in_flight.unwrap_or(0))
            .arg(per_ms)
            .arg(burst)
            .arg(spent)
            .invoke_async(&mut reader.conn)
            .await;
        match reply {
            Ok(v) => Ok(codec::read_reply(v, queue, lease.as_millis() as u64)),
            Err(e) if e.to_string().contains("NOGROUP") => {
                reader.group_ready = false;
                Ok(Vec::new())
            }
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
        let read = codec::read_reply(reply, queue, lease.as_millis() as u64);
        if !read.is_empty() {
            reader.marks = None;
        }
        Ok(read)
    }

    /// Wait, as `Queue::idle` does, until `queue` may have work: a new entry
    /// in its stream, a delayed message due before every other (its wake
    /// stream), or the next one due, [`IDLE_WAIT`] at most, by one blocking
    /// `XREAD` from where the last maintenance left both streams. Only
    /// while the queue has nothing leased and its reads take no tokens (no
    /// flow limit) and maintenance ran since the last read that found
    /// something; otherwise `up_to`, as a poll.
    pub(super) async fn wait_idle(&self, queue: &str, up_to: Duration) {
        let Ok(reader) = self.reader(queue).await else {
            return tokio::time::sleep(up_to).await;
        };
        let mut reader = reader.lock().await;
        if reader.unblocked(&self.client).await.is_err() {
            drop(reader);
            return tokio::time::sleep(up_to).await;
        }
        let Some(marks) = reader.marks.take().filter(|_| reader.leased == 0) else {
            drop(reader);
            return tokio::time::sleep(up_to).await;
        };
        let keys = QueueKeys::new(queue);
        let wait = reader.next_due.map_or(IDLE_WAIT, |at| {
            at.saturating_duration_since(Instant::now())
                .clamp(up_to, IDLE_WAIT)
        });
        reader.waiting = true;
        let reply: redis::RedisResult<Value> = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(wait.as_millis().max(1) as u64)
            .arg("STREAMS")
            .arg(&keys.stream)
            .arg(&keys.wake)
            .arg(&marks.delivered)
            .arg(&marks.wake)
            .query_async(&mut reader.conn)
            .await;
        reader.waiting = false;
        match reply {
            // A delayed message is due sooner than maintenance saw: the
            // next receive maintains first.
            Ok(v) if codec::names_stream(&v, &keys.wake) => reader.last_maintain = None,
            Ok(_) => {}
            Err(_) => {
                drop(reader);
                tokio::time::sleep(up_to).await;
            }
        }
    }

    /// Run `MAINTAIN`: up to `max` reclaimed deliveries, and what an idle
    /// wait needs to know (kept only for a queue whose reads are `plain`,
    /// without flow limits).
    async fn maintain(
        &self,
        reader: &mut Reader,
        keys: &QueueKeys,
        queue: &str,
        (max, flow_plain): (usize, bool),
        lease: Duration,
    ) -> Result<Vec<Delivery>> {
        let mut conn = self.conn.clone();
        let reply: Value = scripts::MAINTAIN
            .key(&keys.stream)
            .key(&keys.delayed)
            .key(&keys.bodies)
            .key(&keys.leases)
            .key(&keys.wake)
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
        let claimed = parts.next().map(codec::into_array).unwrap_or_default();
        // -1 (no delayed message) reads as none.
        reader.next_due = (parts.next().as_ref().and_then(int))
            .map(|ms| Instant::now() + Duration::from_millis(ms));
        reader.leased = parts.next().as_ref().and_then(int).unwrap_or(0);
        let delivered = parts.next().and_then(codec::into_string);
        let wake = parts.next().and_then(codec::into_string);
        reader.marks = match (delivered, wake) {
            (Some(delivered), Some(wake)) if flow_plain => Some(Marks { delivered, wake }),
            _ => None,
        };
        let mut out = Vec::new();
        for item in claimed {
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
}

/// Make the queue's consumer group (and stream) unless it exists.
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
