//! Turning Redis replies into deliveries and dead letters.
//!
//! Replies are consumed, not borrowed: a payload moves out of the reply into
//! the delivery without a copy. Entry fields (see `scripts.rs`) are short and
//! mostly optional, so a fresh message is just `i` and `p` and costs the
//! least to store, send and parse.

use std::fmt::Write as _;

use redis::Value;

use crate::DeadLetter;
use crate::codec::{decode_headers, lease_expired};
use crate::message::{Delivery, now_ms};

/// The fields of one stream entry, parsed once.
#[derive(Debug, Default)]
pub(crate) struct Entry {
    /// The stream entry id, e.g. `1796106278455-0`.
    pub(crate) entry: String,
    pub(crate) id: String,
    /// The idempotency key when it is not the id.
    pub(crate) key: Option<String>,
    pub(crate) payload: Vec<u8>,
    pub(crate) headers: Option<Vec<u8>>,
    /// When the message was first enqueued; when absent, the entry id's time.
    pub(crate) enqueued_at_ms: Option<u64>,
    /// The microseconds of the second it was enqueued in (0 to 999,999),
    /// when the publish wrote them.
    pub(crate) micros: Option<u64>,
    /// Attempts spent before this entry was written.
    pub(crate) attempts: u64,
    pub(crate) last_error: Option<String>,
    /// Scheduled redrives the message has been through.
    pub(crate) redrives: u64,
    /// Dead letters only: reason, handler version, attempts. A dead
    /// letter died at its entry id's time.
    pub(crate) reason: Option<String>,
    pub(crate) version: Option<String>,
    pub(crate) dead_attempts: u64,
    /// The ordered group the message is in.
    pub(crate) group: Option<String>,
    /// Times the handler snoozed the message.
    pub(crate) snoozes: u64,
}

impl Entry {
    /// `[entry id, [field, value, ...]]`, as XRANGE and XREADGROUP give it.
    /// `None` for an entry that was deleted while pending (no fields).
    pub(crate) fn parse(v: Value) -> Option<Entry> {
        let (entry, mut fields) = entry_fields(v)?;
        if let [name, Value::BulkString(packed)] = fields.as_slice()
            && bulk(name) == Some(b"m")
            && let Some(unpacked) = unpack(packed)
        {
            fields = unpacked;
        }
        if fields.is_empty() {
            return None;
        }
        let mut e = Entry {
            entry,
            ..Entry::default()
        };
        for (name, value) in pairs(fields) {
            match bulk(&name) {
                Some(b"i") => e.id = utf8(value),
                Some(b"p") => e.payload = value,
                Some(b"k") => e.key = Some(utf8(value)).filter(|k| !k.is_empty()),
                Some(b"h") => e.headers = Some(value).filter(|h| !h.is_empty()),
                Some(b"t") => e.enqueued_at_ms = number(&value),
                Some(b"u") => e.micros = number(&value),
                Some(b"a") => e.attempts = number(&value).unwrap_or(0),
                Some(b"e") => e.last_error = Some(utf8(value)).filter(|s| !s.is_empty()),
                Some(b"c") => e.redrives = number(&value).unwrap_or(0),
                Some(b"r") => e.reason = Some(utf8(value)),
                Some(b"v") => e.version = Some(utf8(value)).filter(|s| !s.is_empty()),
                Some(b"n") => e.dead_attempts = number(&value).unwrap_or(0),
                Some(b"g") => e.group = Some(utf8(value)).filter(|g| !g.is_empty()),
                Some(b"s") => e.snoozes = number(&value).unwrap_or(0),
                _ => {}
            }
        }
        Some(e)
    }

    fn key(&mut self) -> String {
        self.key.take().unwrap_or_else(|| self.id.clone())
    }

    fn enqueued(&self) -> u64 {
        self.enqueued_at_ms
            .unwrap_or_else(|| entry_time(&self.entry))
    }

    /// When the message was first enqueued, in microseconds: of the times
    /// whose microseconds in their second are `u`, the one nearest the
    /// enqueue millisecond (the two come from the same clock, at most a
    /// few milliseconds apart); that millisecond's start without `u`.
    fn enqueued_us(&self) -> u64 {
        let base = self.enqueued().saturating_mul(1000);
        let Some(u) = self.micros.filter(|u| *u < 1_000_000) else {
            return base;
        };
        let us = (base - base % 1_000_000).saturating_add(u);
        if us.saturating_add(500_000) < base {
            us.saturating_add(1_000_000)
        } else if us > base + 500_000 {
            us.saturating_sub(1_000_000)
        } else {
            us
        }
    }

    fn headers(&self) -> Vec<(String, String)> {
        self.headers
            .as_deref()
            .map_or_else(Vec::new, decode_headers)
    }

    /// The delivery of this entry on its `count`-th delivery.
    pub(crate) fn into_delivery(
        mut self,
        queue: &str,
        count: u64,
        lease_until_ms: u64,
    ) -> Delivery {
        let attempt = (self.attempts + count) as u32;
        let last_error = if count > 1 {
            Some(lease_expired(attempt - 1))
        } else {
            self.last_error.take()
        };
        let mut receipt = String::with_capacity(self.entry.len() + 4);
        receipt.push_str(&self.entry);
        let _ = write!(receipt, " {count}");
        Delivery {
            key: self.key(),
            headers: self.headers(),
            enqueued_at_us: self.enqueued_us(),
            id: self.id,
            queue: queue.to_string(),
            payload: self.payload,
            attempt,
            last_error,
            receipt,
            lease_until_ms,
            group: self.group,
            snoozes: self.snoozes as u32,
        }
    }

    pub(crate) fn into_dead_letter(mut self, queue: &str) -> DeadLetter {
        DeadLetter {
            key: self.key(),
            headers: self.headers(),
            enqueued_at_ms: self.enqueued(),
            died_at_ms: entry_time(&self.entry),
            id: self.id,
            queue: queue.to_string(),
            payload: self.payload,
            attempts: self.dead_attempts as u32,
            redrives: self.redrives as u32,
            reason: self.reason.unwrap_or_default(),
            last_error: self.last_error,
            handler_version: self.version,
            group: self.group,
        }
    }
}

/// A publish held in a queue's outbox until the relay moves it: fields `q`
/// target queue, `i` id, `k` key, `p` payload, `h` headers, `d` delay ms.
#[derive(Debug, Default)]
pub(crate) struct Held {
    pub(crate) entry: String,
    pub(crate) queue: String,
    pub(crate) id: String,
    pub(crate) key: Vec<u8>,
    pub(crate) payload: Vec<u8>,
    pub(crate) headers: Vec<u8>,
    pub(crate) delay_ms: u64,
}

/// An outbox entry as the relay reads it: a publish to pass on, or one it
/// cannot read (kept as its fields' text, for the dead letter it becomes).
#[derive(Debug)]
pub(crate) enum Outboxed {
    Held(Held),
    Unreadable { entry: String, fields: String },
}

impl Held {
    /// An outbox entry, `[entry id, [field, value, ...]]`. `None` for what
    /// is not a stream entry at all.
    pub(crate) fn parse(v: Value) -> Option<Outboxed> {
        let (entry, fields) = entry_fields(v)?;
        let text = fields_text(&fields);
        let mut h = Held {
            entry,
            ..Held::default()
        };
        let mut delay_ok = true;
        for (name, value) in pairs(fields) {
            match bulk(&name) {
                Some(b"q") => h.queue = utf8(value),
                Some(b"i") => h.id = utf8(value),
                Some(b"k") => h.key = value,
                Some(b"p") => h.payload = value,
                Some(b"h") => h.headers = value,
                Some(b"d") => match number(&value) {
                    Some(d) => h.delay_ms = d,
                    None => delay_ok = false,
                },
                _ => {}
            }
        }
        let readable =
            crate::message::validate_queue_name(&h.queue).is_ok() && !h.id.is_empty() && delay_ok;
        Some(if readable {
            Outboxed::Held(h)
        } else {
            Outboxed::Unreadable {
                entry: h.entry,
                fields: text,
            }
        })
    }
}

/// A stream entry's fields as a JSON object of text, for people to read.
fn fields_text(fields: &[Value]) -> String {
    let mut map = serde_json::Map::new();
    for pair in fields.chunks(2) {
        let text = |v: &Value| match v {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            other => format!("{other:?}"),
        };
        let value = pair.get(1).map(text).unwrap_or_default();
        map.insert(text(&pair[0]), serde_json::Value::String(value));
    }
    serde_json::Value::Object(map).to_string()
}

/// The deliveries in an `XREADGROUP` reply, each on its first delivery.
pub(crate) fn read_reply(reply: Value, queue: &str, lease_ms: u64) -> Vec<Delivery> {
    let lease_until = now_ms() + lease_ms;
    let mut out = Vec::new();
    for stream in into_array(reply) {
        let Some(entries) = into_array(stream).into_iter().nth(1) else {
            continue;
        };
        let entries = into_array(entries);
        out.reserve(entries.len());
        for entry in entries {
            if let Some(e) = Entry::parse(entry) {
                out.push(e.into_delivery(queue, 1, lease_until));
            }
        }
    }
    out
}

/// Whether an `XREAD` reply holds entries of `stream`.
pub(crate) fn names_stream(reply: &Value, stream: &str) -> bool {
    array(reply)
        .iter()
        .any(|part| array(part).first().and_then(text).as_deref() == Some(stream))
}

/// The items of a msgpack array as `cmsgpack.pack` writes an entry's
/// fields (see `activate` in `scripts.rs`): strings, or binary, or integers
/// (read as their decimal text). `None` for anything else, or bytes left
/// over.
fn unpack(mut b: &[u8]) -> Option<Vec<Value>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = b.split_at_checked(n)?;
        *b = rest;
        Some(head)
    }
    fn be(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0, |n, &x| n << 8 | u64::from(x))
    }
    let len = |b: &mut &[u8], width: usize| take(b, width).map(|x| be(x) as usize);
    // A string or binary whose length takes `width` bytes.
    let sized = |b: &mut &[u8], width: usize| {
        let n = len(b, width)?;
        take(b, n).map(<[u8]>::to_vec)
    };
    let n = match take(&mut b, 1)?[0] {
        t @ 0x90..=0x9f => usize::from(t & 0x0f),
        0xdc => len(&mut b, 2)?,
        0xdd => len(&mut b, 4)?,
        _ => return None,
    };
    let mut items = Vec::with_capacity(n.min(b.len()));
    for _ in 0..n {
        let t = take(&mut b, 1)?[0];
        let item = match t {
            0xa0..=0xbf => take(&mut b, usize::from(t & 0x1f))?.to_vec(),
            0xd9 | 0xc4 => sized(&mut b, 1)?,
            0xda | 0xc5 => sized(&mut b, 2)?,
            0xdb | 0xc6 => sized(&mut b, 4)?,
            0x00..=0x7f => t.to_string().into_bytes(),
            0xe0..=0xff => (t as i8).to_string().into_bytes(),
            0xcc..=0xcf => be(take(&mut b, 1 << (t - 0xcc))?).to_string().into_bytes(),
            0xd0..=0xd3 => {
                let width = 1 << (t - 0xd0);
                let raw = be(take(&mut b, width)?);
                let shift = 64 - 8 * width as u32;
                (((raw << shift) as i64) >> shift).to_string().into_bytes()
            }
            _ => return None,
        };
        items.push(Value::BulkString(item));
    }
    b.is_empty().then_some(items)
}

/// The time part of a stream entry id, in milliseconds.
fn entry_time(entry: &str) -> u64 {
    entry
        .split_once('-')
        .map_or(entry, |(ms, _)| ms)
        .parse()
        .unwrap_or(0)
}

fn utf8(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn number(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

fn bulk(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

pub(crate) fn into_array(v: Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}

/// A stream entry, `[entry id, [field, value, ...]]` as XRANGE and
/// XREADGROUP give it: its id and its fields.
fn entry_fields(v: Value) -> Option<(String, Vec<Value>)> {
    let mut parts = into_array(v).into_iter();
    let entry = into_string(parts.next()?)?;
    Some((entry, into_array(parts.next()?)))
}

/// An entry's fields as (name, value) pairs, skipping a value that is not a
/// string.
fn pairs(fields: Vec<Value>) -> impl Iterator<Item = (Value, Vec<u8>)> {
    let mut it = fields.into_iter();
    std::iter::from_fn(move || {
        loop {
            let (name, value) = (it.next()?, it.next()?);
            if let Some(value) = into_bytes(value) {
                return Some((name, value));
            }
        }
    })
}

pub(crate) fn into_bytes(v: Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        Value::Int(i) => Some(i.to_string().into_bytes()),
        _ => None,
    }
}

pub(crate) fn into_string(v: Value) -> Option<String> {
    into_bytes(v).map(utf8)
}

pub(crate) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

pub(crate) fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => text(other)?.parse().ok(),
    }
}

pub(crate) fn array(v: &Value) -> &[Value] {
    match v {
        Value::Array(items) => items,
        _ => &[],
    }
}

/// The stream entry id and delivery count a receipt stands for.
pub(crate) fn parse_receipt(receipt: &str) -> (&str, &str) {
    receipt.split_once(' ').unwrap_or((receipt, "1"))
}

/// Headers as the entry field `h`: JSON pairs, or empty when there are none.
pub(crate) fn encode_headers(headers: &[(String, String)]) -> String {
    crate::codec::encode_headers(headers).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &[u8]) -> Value {
        Value::BulkString(s.to_vec())
    }

    fn entry(id: &str, fields: &[(&str, &[u8])]) -> Value {
        let mut f = Vec::new();
        for (k, v) in fields {
            f.push(bulk(k.as_bytes()));
            f.push(bulk(v));
        }
        Value::Array(vec![bulk(id.as_bytes()), Value::Array(f)])
    }

    #[test]
    fn a_fresh_entry_takes_its_key_and_time_from_id_and_entry() {
        let v = entry("1700000000123-4", &[("i", b"m1"), ("p", b"body")]);
        let d = Entry::parse(v).unwrap().into_delivery("q", 1, 99);
        assert_eq!((d.id.as_str(), d.key.as_str()), ("m1", "m1"));
        assert_eq!(d.enqueued_at_us, 1_700_000_000_123_000);
        assert_eq!((d.attempt, d.payload.as_slice()), (1, &b"body"[..]));
        assert_eq!(d.receipt, "1700000000123-4 1");
        assert!(d.headers.is_empty() && d.last_error.is_none());
    }

    #[test]
    fn the_enqueue_time_is_read_to_the_microsecond_nearest_its_millisecond() {
        let at = |id: &str, t: Option<&[u8]>, u: &[u8]| {
            let mut fields = vec![("i", &b"m1"[..]), ("p", &b""[..]), ("u", u)];
            fields.extend(t.map(|t| ("t", t)));
            Entry::parse(entry(id, &fields))
                .unwrap()
                .into_delivery("q", 1, 0)
                .enqueued_at_us
        };
        // The same millisecond as the entry's id.
        assert_eq!(
            at("1700000000123-0", None, b"123456"),
            1_700_000_000_123_456
        );
        // `TIME` a millisecond behind the id `XADD *` gave.
        assert_eq!(
            at("1700000000124-0", None, b"123999"),
            1_700_000_000_123_999
        );
        // Across a second: the id in the next second, `u` late in this one.
        assert_eq!(
            at("1700000001000-0", None, b"999800"),
            1_700_000_000_999_800
        );
        assert_eq!(
            at("1700000000999-0", None, b"000200"),
            1_700_000_001_000_200
        );
        // A later entry with the enqueue millisecond in `t`.
        assert_eq!(
            at("1800000000000-0", Some(b"1700000000123"), b"123456"),
            1_700_000_000_123_456
        );
        // An entry written before `u` existed.
        let old = entry("1700000000123-0", &[("i", b"m1"), ("p", b"")]);
        assert_eq!(
            Entry::parse(old)
                .unwrap()
                .into_delivery("q", 1, 0)
                .enqueued_at_us,
            1_700_000_000_123_000
        );
    }

    #[test]
    fn a_requeued_entry_keeps_its_fields_and_counts_attempts() {
        let v = entry(
            "5-0",
            &[
                ("i", b"m1"),
                ("k", b"order-7"),
                ("p", b""),
                ("h", br#"[["a","b"]]"#),
                ("t", b"3"),
                ("a", b"2"),
                ("e", b"boom"),
            ],
        );
        let d = Entry::parse(v).unwrap().into_delivery("q", 1, 0);
        assert_eq!(d.key, "order-7");
        assert_eq!(d.headers, vec![("a".to_string(), "b".to_string())]);
        assert_eq!((d.enqueued_at_us, d.attempt), (3000, 3));
        assert_eq!(d.last_error.as_deref(), Some("boom"));
        let again = entry("5-0", &[("i", b"m1"), ("p", b""), ("a", b"2")]);
        let d = Entry::parse(again).unwrap().into_delivery("q", 2, 0);
        assert_eq!(d.attempt, 4);
        assert!(d.last_error.unwrap().contains("lease expired: attempt 3"));
    }

    #[test]
    fn a_packed_entry_reads_as_its_fields() {
        // What `cmsgpack.pack` writes for {'i', 'm1', 'p', <40 bytes>, 'g',
        // '7', 'a', '2'}: a fixarray of fixstrs and one str8.
        let mut packed = vec![0x98, 0xa1, b'i', 0xa2, b'm', b'1', 0xa1, b'p', 0xd9, 40];
        packed.extend([b'x'; 40]);
        packed.extend([0xa1, b'g', 0xa1, b'7', 0xa1, b'a', 0xa1, b'2']);
        let v = entry("9-1", &[("m", &packed)]);
        let d = Entry::parse(v).unwrap().into_delivery("q", 1, 0);
        assert_eq!(
            (d.id.as_str(), d.payload.as_slice()),
            ("m1", &[b'x'; 40][..])
        );
        assert_eq!((d.group.as_deref(), d.attempt), (Some("7"), 3));
        assert_eq!(d.enqueued_at_us, 9000);
        // Bytes left over, or a length past the end: not packed fields.
        for bad in [
            &[0x91, 0xa1, b'i', 0][..],
            &[0x91, 0xa5, b'i'],
            &[0x81, 0xa1, b'i'],
        ] {
            assert_eq!(unpack(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn packed_numbers_read_as_their_text() {
        let packed = [
            0x96, 0x05, 0xff, 0xcd, 0x01, 0x00, 0xd1, 0xff, 0x00, 0xcc, 200, 0xd0, 0x80,
        ];
        let texts: Vec<String> = unpack(&packed)
            .unwrap()
            .into_iter()
            .map(|v| into_string(v).unwrap())
            .collect();
        assert_eq!(texts, ["5", "-1", "256", "-256", "200", "-128"]);
    }

    #[test]
    fn an_entry_deleted_while_pending_is_skipped() {
        let v = Value::Array(vec![bulk(b"1-0"), Value::Nil]);
        assert!(Entry::parse(v).is_none());
    }
}

/// Bounded fuzzing: whatever Redis (or someone writing into its keys)
/// answers, parsing never panics, and what the broker writes reads back.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Nil),
            Just(Value::Okay),
            any::<i64>().prop_map(Value::Int),
            prop::collection::vec(any::<u8>(), 0..24).prop_map(Value::BulkString),
            prop::sample::select(vec![
                "i", "p", "k", "h", "t", "a", "e", "c", "r", "v", "n", "q", "d", "m", "1-0", "x"
            ])
            .prop_map(|s| Value::BulkString(s.as_bytes().to_vec())),
            "[a-z0-9-]{0,8}".prop_map(Value::SimpleString),
        ];
        leaf.prop_recursive(4, 64, 12, |inner| {
            prop::collection::vec(inner, 0..12).prop_map(Value::Array)
        })
    }

    /// The corpus kept in `tests/corpus/redis`: raw replies (RESP), one a
    /// file, that Redis or someone writing into its keys might give. Every
    /// one parses without a panic by every reader; an `ok-` one is a
    /// message, a `bad-` one is not. A reply that once broke a reader goes
    /// there, so it is tried on every run.
    #[test]
    fn the_corpus_of_replies_reads_as_each_name_says() {
        // The workspace keeps one corpus, at its root.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus/redis");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for path in &files {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(path).unwrap();
            let v = redis::parse_redis_value(&bytes)
                .unwrap_or_else(|e| panic!("{name} is not a RESP value: {e}"));
            let _ = Held::parse(v.clone());
            let _ = Entry::parse(v.clone()).map(|e| e.into_dead_letter("q"));
            let stream = Value::Array(vec![Value::Nil, Value::Array(vec![v.clone()])]);
            let read = read_reply(Value::Array(vec![stream]), "q", 10);
            let entry = Entry::parse(v);
            if name.starts_with("ok-") {
                let e = entry.unwrap_or_else(|| panic!("{name}: not read as a message"));
                assert_eq!(read.len(), 1, "{name}");
                let d = e.into_delivery("q", 2, 0);
                assert_eq!(d.queue, "q", "{name}");
            } else {
                assert!(name.starts_with("bad-"), "{name}: name it ok-* or bad-*");
                assert!(entry.is_none(), "{name}: read as a message");
                assert!(read.is_empty(), "{name}");
            }
        }
        assert!(
            files.len() >= 10,
            "the corpus is missing: {}",
            dir.display()
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn any_reply_parses_without_panicking(v in value()) {
            let _ = Entry::parse(v.clone()).map(|e| e.into_delivery("q", 2, 0));
            let _ = Entry::parse(v.clone()).map(|e| e.into_dead_letter("q"));
            let _ = Held::parse(v.clone());
            let _ = read_reply(Value::Array(vec![Value::Array(vec![Value::Nil, v])]), "q", 10);
        }

        #[test]
        fn an_entry_reads_back_as_written(
            id in "[0-9a-f]{1,32}",
            key in proptest::option::of("[^\u{0}]{1,40}"),
            payload in prop::collection::vec(any::<u8>(), 0..200),
            headers in prop::collection::vec(("[^\u{0}]{0,10}", "[^\u{0}]{0,10}"), 0..5),
            attempts in 0u64..1000,
        ) {
            let h = encode_headers(&headers);
            let mut fields: Vec<(&str, Vec<u8>)> = vec![("i", id.clone().into_bytes()), ("p", payload.clone())];
            if let Some(k) = &key {
                fields.push(("k", k.clone().into_bytes()));
            }
            fields.push(("h", h.into_bytes()));
            fields.push(("a", attempts.to_string().into_bytes()));
            let mut flat = Vec::new();
            for (name, v) in fields {
                flat.push(Value::BulkString(name.as_bytes().to_vec()));
                flat.push(Value::BulkString(v));
            }
            let packed = pack(&flat);
            let v = Value::Array(vec![Value::BulkString(b"7-0".to_vec()), Value::Array(flat)]);
            let d = Entry::parse(v).unwrap().into_delivery("q", 1, 0);
            prop_assert_eq!(&d.id, &id);
            prop_assert_eq!(&d.key, key.as_ref().unwrap_or(&id));
            prop_assert_eq!(&d.payload, &payload);
            prop_assert_eq!(&d.headers, &headers);
            prop_assert_eq!(u64::from(d.attempt), attempts + 1);
            // The same fields packed into `m`, as an ordered group's
            // waiting message is written when it becomes active.
            let m = vec![Value::BulkString(b"m".to_vec()), Value::BulkString(packed)];
            let v = Value::Array(vec![Value::BulkString(b"7-0".to_vec()), Value::Array(m)]);
            let p = Entry::parse(v).unwrap().into_delivery("q", 1, 0);
            prop_assert_eq!(
                (p.id, p.key, p.payload, p.headers, p.attempt),
                (d.id, d.key, d.payload, d.headers, d.attempt)
            );
        }

        #[test]
        fn any_bytes_unpack_without_panicking(b in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = unpack(&b);
        }
    }

    /// `items` packed as `cmsgpack.pack` packs a list of strings: each
    /// header and length in its shortest form.
    fn pack(items: &[Value]) -> Vec<u8> {
        // A length after its type byte: `codes` for 1, 2 and 4 bytes of it.
        fn sized(out: &mut Vec<u8>, codes: [u8; 3], n: usize) {
            let (code, width) = match n {
                0..0x100 => (codes[0], 1),
                0x100..0x10000 => (codes[1], 2),
                _ => (codes[2], 4),
            };
            out.push(code);
            out.extend(&(n as u32).to_be_bytes()[4 - width..]);
        }
        let mut out = Vec::new();
        match items.len() {
            n @ 0..16 => out.push(0x90 | n as u8),
            n @ 16..0x10000 => {
                out.push(0xdc);
                out.extend((n as u16).to_be_bytes());
            }
            n => sized(&mut out, [0xdd; 3], n),
        }
        for item in items {
            let Value::BulkString(b) = item else {
                panic!("only strings")
            };
            match b.len() {
                l @ 0..32 => out.push(0xa0 | l as u8),
                l => sized(&mut out, [0xd9, 0xda, 0xdb], l),
            }
            out.extend(b);
        }
        out
    }
}
