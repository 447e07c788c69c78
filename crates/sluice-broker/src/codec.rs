//! What every backend writes the same way: the text of a lost lease, headers
//! as stored, and handler statuses as JSON. Kept here once, so that a
//! delivery, a dead letter or a status report reads the same on every
//! backend.

use super::{HandlerStatus, Settlement};

/// The last error of a delivery whose previous attempt's lease ran out
/// before it was settled.
pub fn lease_expired(attempt: u32) -> String {
    format!("lease expired: attempt {attempt} was not settled in time (host stopped or lost)")
}

/// Headers as stored: JSON pairs, or `None` when there are none.
pub fn encode_headers(headers: &[(String, String)]) -> Option<String> {
    (!headers.is_empty())
        .then(|| serde_json::to_string(headers).expect("string pairs always serialize"))
}

/// Headers as [`encode_headers`] stored them. Anything else reads as none.
pub fn decode_headers(stored: &[u8]) -> Vec<(String, String)> {
    serde_json::from_slice(stored).unwrap_or_default()
}

/// One handler status as stored.
#[cfg(any(test, feature = "sqlite"))]
pub(crate) fn encode_status(status: &HandlerStatus) -> String {
    serde_json::to_string(status).expect("statuses serialize")
}

/// One handler status as [`encode_status`] stored it; `None` when it does
/// not parse (written by a sluice that reports other fields).
#[cfg(any(test, feature = "sqlite"))]
pub(crate) fn decode_status(stored: &[u8]) -> Option<HandlerStatus> {
    serde_json::from_slice(stored).ok()
}

/// One host's handler statuses as stored together.
#[cfg(any(test, feature = "redis", feature = "postgres"))]
pub(crate) fn encode_statuses(statuses: &[HandlerStatus]) -> String {
    serde_json::to_string(statuses).expect("statuses serialize")
}

/// A host's handler statuses as [`encode_statuses`] stored them; none when
/// they do not parse.
#[cfg(any(test, feature = "redis", feature = "postgres"))]
pub(crate) fn decode_statuses(stored: &[u8]) -> Vec<HandlerStatus> {
    serde_json::from_slice(stored).unwrap_or_default()
}

/// What names one settle write, so that the same write sent again (after
/// its reply was lost: the connection dropped after the broker applied it,
/// and the worker writes a batch again until the broker takes it) is known
/// for what it is and applied, and counted, once. It is the first 16 bytes
/// of the SHA-256 of each settlement's kind, message id and receipt, in
/// order, in hex: a receipt names one lease, so no other write has it.
pub(crate) fn settle_digest<'a>(settlements: impl IntoIterator<Item = &'a Settlement>) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for s in settlements {
        let d = s.delivery();
        let kind: &[u8] = match s {
            Settlement::Done { .. } => b"D",
            Settlement::Duplicate { .. } => b"U",
            Settlement::Retry { .. } => b"R",
            Settlement::Defer { .. } => b"F",
            Settlement::Snooze { .. } => b"S",
            Settlement::Dead { .. } => b"X",
        };
        for part in [kind, d.id.as_bytes(), d.receipt.as_bytes()] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part);
        }
    }
    hash.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Say that a settle write of `count` settlements to `queue` was found
/// among the writes applied before ([`settle_digest`]): it is not applied
/// twice.
pub(crate) fn written_again(queue: &str, count: usize) {
    tracing::info!(
        queue,
        count,
        "a settle batch was written again after it had been applied; it is not applied twice"
    );
}

/// How long a broker remembers the settle writes it applied
/// ([`settle_digest`]): a write sent again later than this, after an
/// outage that long, is refused as deliveries that lost their leases are.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) const SETTLED_KEPT: std::time::Duration = std::time::Duration::from_secs(600);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Delivery;

    #[test]
    fn headers_round_trip_and_none_is_stored_as_nothing() {
        assert_eq!(encode_headers(&[]), None);
        let h = vec![("a".to_string(), "b".to_string())];
        let stored = encode_headers(&h).unwrap();
        assert_eq!(decode_headers(stored.as_bytes()), h);
        assert!(decode_headers(b"not json").is_empty());
        assert!(decode_headers(b"").is_empty());
    }

    #[test]
    fn statuses_round_trip() {
        let s = HandlerStatus {
            host: "h-1".into(),
            handler: "hello".into(),
            queue: Some("hello".into()),
            version: Some("0123456789abcdef".into()),
            refusals: 2,
            last_refusal: Some("bad".into()),
            worker_restarts: 1,
            last_worker_failure: Some("panicked: oops".into()),
            dropped_log_lines: 3,
            max_in_flight: Some(4),
            rate: Some("200/s".into()),
            schedules: vec![crate::ScheduleSpec {
                name: "nightly".into(),
                cron: "0 3 * * *".into(),
                timezone: "Europe/Paris".into(),
                catch_up: "one".into(),
            }],
            world: Some("sluice:handler/handler@0.2.0".into()),
            instances: Some(crate::InstanceCounts {
                held: 2,
                floor: 1,
                cap: 16,
            }),
            pool: Some(crate::PoolCounts {
                in_use: 40,
                max_instances: 1000,
            }),
            updated_at_ms: 7,
        };
        assert_eq!(decode_status(encode_status(&s).as_bytes()), Some(s.clone()));
        let list = vec![s.clone(), s];
        assert_eq!(decode_statuses(encode_statuses(&list).as_bytes()), list);
        assert_eq!(decode_status(b"{}"), None);
        assert!(decode_statuses(b"[").is_empty());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// Bounded fuzzing of what every backend reads back from storage:
        /// stored headers and statuses in any state decode or are dropped,
        /// never a panic; headers as written come back as they were.
        #[test]
        fn stored_text_decodes_or_is_dropped(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = decode_headers(&bytes);
            let _ = decode_status(&bytes);
            let _ = decode_statuses(&bytes);
        }

        #[test]
        fn headers_round_trip_whatever_they_hold(
            headers in proptest::collection::vec(("\\PC{0,12}", "\\PC{0,12}"), 0..8)
        ) {
            let stored = encode_headers(&headers).unwrap_or_default();
            proptest::prop_assert_eq!(decode_headers(stored.as_bytes()), headers);
        }
    }

    fn delivery(id: &str, receipt: &str) -> Delivery {
        Delivery {
            receipt: receipt.into(),
            ..Delivery::for_test(id, "q")
        }
    }

    fn done(id: &str, receipt: &str) -> Settlement {
        Settlement::Done {
            delivery: delivery(id, receipt),
            key: None,
            publishes: vec![],
        }
    }

    /// The same settlements name the same write; another receipt, kind,
    /// order or count names another.
    #[test]
    fn a_settle_digest_names_its_settlements() {
        let batch = [done("a", "1-0 1"), done("b", "2-0 1")];
        let digest = settle_digest(&batch);
        assert_eq!(digest.len(), 32);
        assert_eq!(digest, settle_digest(&batch.clone()));
        let duplicate = Settlement::Duplicate {
            delivery: delivery("a", "1-0 1"),
        };
        for other in [
            vec![done("a", "1-0 2"), done("b", "2-0 1")],
            vec![duplicate, done("b", "2-0 1")],
            vec![done("b", "2-0 1"), done("a", "1-0 1")],
            vec![done("a", "1-0 1")],
            // The parts are kept apart: id "a" with receipt "b1-0 1" is
            // not id "ab" with receipt "1-0 1".
            vec![done("ab", "1-0 1"), done("b", "2-0 1")],
        ] {
            assert_ne!(digest, settle_digest(&other), "{other:?}");
        }
    }
}
