//! `limited`: what a receive with `max_in_flight` costs beside many delayed
//! messages of its queue, against the same receive without the limit, in
//! the same run, on SQLite and on PostgreSQL (a server of the harness's
//! own). Counting the queue's leases must read only the leased rows, not
//! the delayed ones (`messages_leased`), so the two should cost about the
//! same however many messages wait.

use sluice::broker::{Flow, Settlement};
use sluice_broker::testkit::PgServer;

use super::*;

/// Messages delayed by an hour beside the ready ones.
const DELAYED: usize = 200_000;
/// Receives timed for each of the two, each of [`TAKE`] messages, settled
/// before the next so that the limit never binds.
const RECEIVES: usize = 500;
const TAKE: usize = 5;

pub async fn bench() {
    report("sqlite", temp_sqlite()).await;
    let server = PgServer::start_durable();
    let pg: Arc<dyn Broker> = Arc::new(PgBroker::connect(&server.url()).await.unwrap());
    report("postgres", pg).await;
}

async fn report(name: &str, broker: Arc<dyn Broker>) {
    publish(&*broker, DELAYED, Duration::from_secs(3600)).await;
    publish(&*broker, 2 * RECEIVES * TAKE, Duration::ZERO).await;
    let limited = Flow {
        max_in_flight: Some(2 * TAKE as u32),
        rate: None,
    };
    let plain = receives(&*broker, Flow::default()).await;
    let capped = receives(&*broker, limited).await;
    for (what, times) in [("plain", &plain), ("max_in_flight", &capped)] {
        println!(
            "limited {name:<8} receive of {TAKE}, {what:<13} median {:>8.1} µs   p99 {:>8.1} µs   ({RECEIVES} receives beside {DELAYED} delayed messages)",
            percentile(times, 0.5),
            percentile(times, 0.99),
        );
    }
    println!(
        "limited {name:<8} a receive with max_in_flight costs {:.2} × one without (median)",
        percentile(&capped, 0.5) / percentile(&plain, 0.5)
    );
}

/// `n` messages to queue q, a thousand at a time, each due after `delay`.
async fn publish(broker: &dyn Broker, n: usize, delay: Duration) {
    for start in (0..n).step_by(1000) {
        let batch = (start..n.min(start + 1000))
            .map(|_| {
                let mut m = NewMessage::new("q", vec![b'x'; 100]);
                m.delay = delay;
                m
            })
            .collect();
        broker.publish(batch).await.unwrap();
    }
}

/// How long each of [`RECEIVES`] receives under `flow` took, sorted; each
/// leases [`TAKE`] messages, settled done before the next receive.
async fn receives(broker: &dyn Broker, flow: Flow) -> Vec<Duration> {
    let mut times = Vec::with_capacity(RECEIVES);
    for _ in 0..RECEIVES {
        let start = Instant::now();
        let got = broker
            .receive("q", TAKE, Duration::from_secs(60), flow)
            .await
            .unwrap();
        times.push(start.elapsed());
        assert_eq!(got.len(), TAKE, "the ready messages ran out");
        let done: Vec<Settlement> = got
            .into_iter()
            .map(|delivery| Settlement::Done {
                delivery,
                key: None,
                publishes: vec![],
            })
            .collect();
        broker.settle(&done).await.unwrap();
    }
    times.sort();
    times
}
