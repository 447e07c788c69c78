//! Turning Redis replies into deliveries and dead letters.

use redis::Value;

use crate::broker::DeadLetter;
use crate::message::{Delivery, now_ms};

/// Field/value pairs of a stream entry.
pub struct Fields(pub Vec<(String, Vec<u8>)>);

impl Fields {
    pub fn parse(v: &Value) -> Option<Fields> {
        let items = match v {
            Value::Array(items) => items,
            _ => return None,
        };
        let mut out = Vec::with_capacity(items.len() / 2);
        for pair in items.chunks(2) {
            if let [k, v] = pair {
                out.push((text(k)?, bytes(v)?));
            }
        }
        Some(Fields(out))
    }

    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }

    pub fn text(&self, name: &str) -> String {
        self.get(name)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    }

    pub fn number(&self, name: &str) -> u64 {
        self.text(name).parse().unwrap_or(0)
    }

    /// A non-empty text field.
    pub fn optional(&self, name: &str) -> Option<String> {
        Some(self.text(name)).filter(|s| !s.is_empty())
    }

    pub fn headers(&self) -> Vec<(String, String)> {
        self.get("h")
            .filter(|h| !h.is_empty())
            .and_then(|h| serde_json::from_slice(h).ok())
            .unwrap_or_default()
    }
}

pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

pub fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        Value::Int(i) => Some(i.to_string().into_bytes()),
        _ => None,
    }
}

pub fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => text(other)?.parse().ok(),
    }
}

pub fn array(v: &Value) -> &[Value] {
    match v {
        Value::Array(items) => items,
        _ => &[],
    }
}

/// A delivery of stream entry `entry` on its `count`-th delivery.
pub fn delivery(queue: &str, entry: &str, fields: &Fields, count: u64, lease_ms: u64) -> Delivery {
    let before = fields.number("a");
    let attempt = (before + count) as u32;
    let last_error = if count > 1 {
        Some(format!(
            "lease expired: attempt {} was not settled in time (host stopped or lost)",
            attempt - 1
        ))
    } else {
        fields.optional("e")
    };
    Delivery {
        id: fields.text("i"),
        queue: queue.to_string(),
        key: fields.text("k"),
        payload: fields.get("p").map(<[u8]>::to_vec).unwrap_or_default(),
        headers: fields.headers(),
        attempt,
        enqueued_at_ms: fields.number("t"),
        last_error,
        receipt: format!("{entry} {count}"),
        lease_until_ms: now_ms() + lease_ms,
    }
}

/// The stream entry id and delivery count a receipt stands for.
pub fn parse_receipt(receipt: &str) -> (&str, &str) {
    receipt.split_once(' ').unwrap_or((receipt, "1"))
}

pub fn dead_letter(queue: &str, fields: &Fields) -> DeadLetter {
    DeadLetter {
        id: fields.text("i"),
        queue: queue.to_string(),
        key: fields.text("k"),
        payload: fields.get("p").map(<[u8]>::to_vec).unwrap_or_default(),
        headers: fields.headers(),
        attempts: fields.number("n") as u32,
        enqueued_at_ms: fields.number("t"),
        died_at_ms: fields.number("x"),
        reason: fields.text("r"),
        last_error: fields.optional("e"),
        handler_version: fields.optional("v"),
    }
}
