//! Ordered groups on Redis, the host's side. The scripts keep the groups
//! (see `enqueue_grouped` and `advance` in the scripts' prelude); a message's
//! group is taken here, by the same code as on every backend, under the
//! queue's ordering as this host last saw it. Each script that enqueues
//! checks that ordering against the stored one and, when it changed,
//! answers with the new one: the groups are taken again and the script
//! runs again. So a message is never grouped by an ordering that is no
//! longer the queue's.

use std::collections::HashMap;
use std::sync::Mutex;

use redis::{ScriptInvocation, Value};

use super::conn::{Conn, classify};
use crate::{BrokerError, OrderedGroups, Result};

/// Each queue's ordering as last seen, as the broker stores it ("" for
/// none).
#[derive(Debug, Default)]
pub(super) struct Orderings(Mutex<HashMap<String, String>>);

impl Orderings {
    /// The ordering of `queue` as last seen; "" when none was seen.
    pub(crate) fn spec(&self, queue: &str) -> String {
        let seen = self.0.lock().expect("orderings lock");
        seen.get(queue).cloned().unwrap_or_default()
    }

    pub(crate) fn learn(&self, queue: &str, spec: String) {
        self.0
            .lock()
            .expect("orderings lock")
            .insert(queue.to_string(), spec);
    }
}

/// How often a script may answer that the ordering changed before the
/// call gives up (it changes when a host loads a new sidecar: rarely).
const MAX_STALE: usize = 5;

/// What an enqueuing script answered: its count, or the queue's ordering
/// when it was not the one the groups were taken with.
enum Enqueued {
    Count(i64),
    Stale(String),
}

impl Enqueued {
    fn parse(reply: Vec<Value>) -> Result<Self> {
        let bad = || BrokerError::Refused {
            context: format!("unexpected reply from an enqueuing script: {reply:?}"),
            source: None,
        };
        match reply.first() {
            Some(Value::Int(-1)) => match reply.get(1) {
                Some(Value::BulkString(b)) => Ok(Enqueued::Stale(
                    String::from_utf8(b.clone()).map_err(|_| bad())?,
                )),
                _ => Err(bad()),
            },
            Some(Value::Int(n)) => Ok(Enqueued::Count(*n)),
            _ => Err(bad()),
        }
    }
}

/// Run the enqueuing script `build` makes for the ordering it is given,
/// first the ordering of `queue` as last seen, then, while the script
/// answers that it changed, the stored one. Returns the script's count.
pub(super) async fn enqueue_under(
    conn: &mut Conn,
    orderings: &Orderings,
    queue: &str,
    mut build: impl FnMut(&str, Option<&OrderedGroups>) -> ScriptInvocation<'static>,
) -> Result<i64> {
    let mut spec = orderings.spec(queue);
    for _ in 0..MAX_STALE {
        let invocation = build(&spec, OrderedGroups::decode(&spec).as_ref());
        let reply: Vec<Value> = invocation.invoke_async(conn).await.map_err(classify)?;
        match Enqueued::parse(reply)? {
            Enqueued::Count(n) => return Ok(n),
            Enqueued::Stale(stored) => {
                orderings.learn(queue, stored.clone());
                spec = stored;
            }
        }
    }
    Err(unsettled(queue))
}

/// The error after [`MAX_STALE`] changes in a row.
fn unsettled(queue: &str) -> BrokerError {
    BrokerError::Unavailable {
        context: format!(
            "the ordering of queue {queue:?} changed {MAX_STALE} times while publishing; try again"
        ),
        source: None,
    }
}

/// A message's group argument under `ordering` ("" for none).
pub(super) fn group_arg(
    ordering: Option<&OrderedGroups>,
    headers: &[(String, String)],
    payload: &[u8],
) -> String {
    ordering
        .and_then(|o| o.group_of(headers, payload))
        .unwrap_or_default()
}
