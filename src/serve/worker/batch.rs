//! The callers of a batch handler: each takes up to `batch_size` admitted
//! deliveries (waiting up to `batch_wait` for the batch to fill once it has
//! the first), handles them in one call, and settles each by its own
//! outcome. The call's publishes go with the first delivery that is done.

use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;

use super::call::{Caller, back, settlement_for, span_outcome, too_late};
use super::keep::{self, Leases};
use super::{InCall, Job};
use crate::base::trace::{Attempt, AttemptFields};
use crate::message::{Delivery, now_us};
use crate::policy::Outcome;
use crate::sandbox::runtime::{Deadline, Failure, Invocation};

/// One of a batch handler's callers: see the module.
pub(super) async fn batch_loop(caller: Caller) {
    loop {
        let Some(jobs) = take_batch(&caller).await else {
            return;
        };
        if caller.stopping() {
            hand_back(&caller, jobs);
            continue;
        }
        let _in_call = InCall::new(&caller.stats, jobs.len());
        run_batch(&caller, jobs).await;
    }
}

/// Hand `jobs` back untouched, their attempts not spent.
fn hand_back(caller: &Caller, jobs: Vec<Job>) {
    for (delivery, key, permit) in jobs {
        caller.settled(back(delivery, key), permit);
    }
}

/// The next batch: the first job, what else is there, and what comes
/// within `batch_wait`, up to `batch_size`. `None` once the job queue closes.
async fn take_batch(caller: &Caller) -> Option<Vec<Job>> {
    let batch = caller.spec.batch;
    let mut jobs = caller.jobs.lock().await;
    let mut taken = Vec::with_capacity(batch.size);
    taken.push(jobs.recv().await?);
    while taken.len() < batch.size {
        match jobs.try_recv() {
            Ok(job) => taken.push(job),
            Err(_) => break,
        }
    }
    if taken.len() < batch.size && batch.wait > Duration::ZERO {
        let until = tokio::time::Instant::now() + batch.wait;
        while taken.len() < batch.size {
            match tokio::time::timeout_at(until, jobs.recv()).await {
                Ok(Some(job)) => taken.push(job),
                Ok(None) | Err(_) => break,
            }
        }
    }
    Some(taken)
}

/// Handle a batch in one call and settle each delivery: one attempt each,
/// with its own span.
async fn run_batch(caller: &Caller, jobs: Vec<Job>) {
    let spec = &*caller.spec;
    let Some(ready) = caller.ready().await else {
        return hand_back(caller, jobs);
    };
    let mut batch = Batch::default();
    for (delivery, key, permit) in jobs {
        if too_late(&delivery, spec) {
            caller.settled(back(delivery, key), permit);
            continue;
        }
        batch.deliveries.push(delivery);
        batch.keys.push(key);
        batch.permits.push(permit);
    }
    if batch.deliveries.is_empty() {
        return;
    }
    let attempts = begin_attempts(caller, &mut batch.deliveries);
    let started = std::time::Instant::now();
    let deadline = Deadline::new(spec.timeout, spec.max_extend);
    let leases = Leases::of(&batch.deliveries, &batch.keys);
    let call = caller
        .dispatch
        .invoke_batch(ready, &batch.deliveries, &deadline);
    let (called, until) = leases.keep(call, &deadline, &*caller.broker, spec).await;
    keep::renewed(&mut batch.deliveries, &until);
    let took = started.elapsed();
    let results: Vec<Result<Outcome, Failure>> = match called.result {
        Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
        Err(f) => vec![Err(f); batch.deliveries.len()],
    };
    let first_done = results.iter().position(|r| matches!(r, Ok(Outcome::Done)));
    let mut publishes = Some(called.publishes);
    let mut instantiate = called.instantiate;
    let each = batch
        .deliveries
        .into_iter()
        .zip(batch.keys)
        .zip(batch.permits);
    for (i, ((result, attempt), ((delivery, key), permit))) in
        results.into_iter().zip(attempts).zip(each).enumerate()
    {
        if let Some(m) = &caller.observe.metrics {
            m.called(took, &result, instantiate.take());
        }
        let mut held = match first_done == Some(i) {
            true => publishes.take().unwrap_or_default(),
            false => Vec::new(),
        };
        attempt.stamp(&mut held);
        let (outcome, error) = span_outcome(&result);
        attempt.end(outcome, error.as_deref());
        let invocation = Invocation::ended(result, held);
        let version = caller.dispatch.version();
        let settlement = settlement_for(delivery, invocation, spec, key, version, rand::random());
        caller.settled(settlement, permit);
    }
    caller.dispatch.tidy().await;
}

/// The deliveries of one call, with the keys and prefetch permits they hold.
#[derive(Default)]
struct Batch {
    deliveries: Vec<Delivery>,
    keys: Vec<Option<String>>,
    permits: Vec<OwnedSemaphorePermit>,
}

/// Begin each delivery's attempt (its span, its wait in the metrics).
fn begin_attempts(caller: &Caller, deliveries: &mut [Delivery]) -> Vec<Attempt> {
    let spec = &*caller.spec;
    let version = caller.dispatch.version();
    let exporter = caller.observe.exporter.as_deref();
    if let Some(m) = &caller.observe.metrics {
        let now = now_us();
        deliveries.iter().for_each(|d| m.waited(d, now));
    }
    deliveries
        .iter_mut()
        .map(|d| {
            let fields = AttemptFields {
                queue: &spec.queue,
                handler: &spec.name,
                version,
                attempt: d.attempt,
                message_id: &d.id,
            };
            Attempt::begin(&mut d.headers, exporter, fields)
        })
        .collect()
}
