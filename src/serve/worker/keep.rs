//! Keeping a call's leases while the guest works past what they were
//! granted for. A call's deadline starts within its messages' leases (the
//! caller hands back a delivery whose lease would end first); when the
//! guest moves it later (`extend`), the leases and the idempotency keys
//! the call holds are renewed in the broker, each time half a lease before
//! they would end, for as long as the deadline needs them.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use crate::broker::{Lease, Queue};
use crate::config::{HandlerSpec, bounds};
use crate::error::chain;
use crate::message::{Delivery, now_ms};
use crate::sandbox::runtime::Deadline;

/// How long to wait before trying again a renewal the broker failed.
const RETRY_RENEWAL: Duration = Duration::from_secs(1);

/// The leases of one call's deliveries, as the keeper renews them.
pub(super) struct Leases<'a> {
    deliveries: &'a [Delivery],
    keys: &'a [Option<String>],
    /// When each lease ends, in ms since the Unix epoch, `None` once lost;
    /// empty until the first renewal (each delivery says until then).
    until: Vec<Option<u64>>,
}

impl<'a> Leases<'a> {
    /// The leases of `deliveries`, which hold `keys` (one each).
    pub(crate) fn of(deliveries: &'a [Delivery], keys: &'a [Option<String>]) -> Self {
        Leases {
            deliveries,
            keys,
            until: Vec::new(),
        }
    }

    /// Run `call`, renewing the leases whenever `deadline` (plus the margin
    /// for settling) would outlast them, and say when each lease ends now
    /// (see [`renewed`]). Most calls end in their first poll, and cost
    /// nothing more.
    pub(crate) async fn keep<F: Future>(
        mut self,
        call: F,
        deadline: &Deadline,
        broker: &dyn Queue,
        spec: &HandlerSpec,
    ) -> (F::Output, Vec<Option<u64>>) {
        let mut call = std::pin::pin!(call);
        let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
        if let Poll::Ready(done) = first {
            return (done, self.until);
        }
        self.until = self
            .deliveries
            .iter()
            .map(|d| Some(d.lease_until_ms))
            .collect();
        let ahead = (spec.lease / 2).as_millis() as u64;
        let mut retry_at = None;
        loop {
            // Made before the deadline is read, so that no move is missed.
            let moved = deadline.moved();
            let renew_at = retry_at.or_else(|| self.renew_at(deadline, ahead));
            let sleep = async {
                match renew_at {
                    Some(at) => sleep_until_ms(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                done = call.as_mut() => return (done, self.until),
                () = moved => continue,
                () = sleep => {}
            }
            retry_at = match self.renew(broker, spec).await {
                Ok(()) => None,
                Err(e) => {
                    let queue = &spec.queue;
                    tracing::warn!(queue, error = %chain(&e), "cannot keep the leases of a call that asked for more time; trying again in {RETRY_RENEWAL:?}");
                    Some(now_ms() + RETRY_RENEWAL.as_millis() as u64)
                }
            };
        }
    }

    /// When to renew: half a lease before the first lease that the deadline
    /// outlasts ends; `None` while every lease outlasts the deadline.
    fn renew_at(&self, deadline: &Deadline, ahead: u64) -> Option<u64> {
        let needed = now_ms() + deadline.left().as_millis() as u64 + margin_ms();
        self.until
            .iter()
            .flatten()
            .filter(|&&until| until < needed)
            .min()
            .map(|until| until.saturating_sub(ahead))
    }

    /// Renew every lease still held for a full lease from now.
    async fn renew(&mut self, broker: &dyn Queue, spec: &HandlerSpec) -> crate::broker::Result<()> {
        let live: Vec<usize> = (0..self.deliveries.len())
            .filter(|&i| self.until[i].is_some())
            .collect();
        let leases: Vec<Lease> = live
            .iter()
            .map(|&i| Lease {
                id: self.deliveries[i].id.clone(),
                receipt: self.deliveries[i].receipt.clone(),
                key: self.keys.get(i).cloned().flatten(),
            })
            .collect();
        let from = now_ms();
        let held = broker.extend(&spec.queue, &leases, spec.lease).await?;
        let until = from + spec.lease.as_millis() as u64;
        for (&i, held) in live.iter().zip(held) {
            if held {
                self.until[i] = Some(until);
            } else {
                let (queue, id) = (&spec.queue, &self.deliveries[i].id);
                tracing::warn!(
                    queue,
                    id,
                    "a call that asked for more time lost its lease: the message may be delivered again meanwhile, and this call's outcome will be refused"
                );
                self.until[i] = None;
            }
        }
        Ok(())
    }
}

/// Write the leases' ends that [`Leases::keep`] returned into `deliveries`
/// (the same, in the same order), for the settler's checks.
pub(super) fn renewed(deliveries: &mut [Delivery], until: &[Option<u64>]) {
    for (d, until) in deliveries.iter_mut().zip(until) {
        if let Some(until) = until {
            d.lease_until_ms = (*until).max(d.lease_until_ms);
        }
    }
}

/// The margin a lease must leave after the deadline, for settling.
fn margin_ms() -> u64 {
    bounds::LEASE_MARGIN.as_millis() as u64
}

async fn sleep_until_ms(at: u64) {
    let wait = at.saturating_sub(now_ms());
    tokio::time::sleep(Duration::from_millis(wait)).await;
}
