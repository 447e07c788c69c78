//! What only the embedded broker has to get right: its single writer must
//! never wait for readers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sluice::broker::message::NewMessage;
use sluice::broker::{Broker, SqliteBroker};

/// Rows in the large file: large enough that a count over the table takes
/// a while, small enough to build in a few seconds.
const ROWS: i64 = 1_000_000;

/// `sluice stats`, `dlq list` and `--until-idle` read in read transactions
/// of their own: a writer started while they run on a large file does not
/// wait for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_does_not_wait_for_stats_on_a_large_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("large.db");
    drop(SqliteBroker::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "BEGIN;
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})
         INSERT INTO messages (id, queue, key, payload, enqueued_us, visible_at)
         SELECT 'm' || i, 'big', 'm' || i, x'00', 1, CASE WHEN i % 10 = 0 THEN 9e15 ELSE 1 END FROM n;
         INSERT INTO queues (queue) VALUES ('big');
         COMMIT;"
    ))
    .unwrap();
    drop(conn);
    let broker: Arc<dyn Broker> = Arc::new(SqliteBroker::open(&path).unwrap());
    let big = broker.queue_stats("big").await.unwrap();
    assert_eq!((big.ready, big.delayed), (900_000, 100_000));

    let reading = Arc::new(AtomicBool::new(true));
    let reads = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (broker, reading, reads) = (broker.clone(), reading.clone(), reads.clone());
        tokio::spawn(async move {
            let mut slowest = Duration::ZERO;
            while reading.load(Ordering::Relaxed) {
                let start = Instant::now();
                broker.stats().await.unwrap();
                broker.dead_letters("big", 100).await.unwrap();
                slowest = slowest.max(start.elapsed());
                reads.fetch_add(1, Ordering::Relaxed);
            }
            slowest
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Write for as long as five rounds of reads take.
    let mut waits = Vec::new();
    let mut i = 0;
    while reads.load(Ordering::Relaxed) < 5 {
        i += 1;
        let start = Instant::now();
        broker
            .publish(vec![NewMessage::new("small", i.to_string())])
            .await
            .unwrap();
        waits.push(start.elapsed());
    }
    reading.store(false, Ordering::Relaxed);
    let slowest_read = reader.await.unwrap();
    waits.sort();
    let (median, worst) = (waits[waits.len() / 2], waits[waits.len() - 1]);
    eprintln!(
        "writer waits with stats running: median {median:?}, worst {worst:?}; {} stats runs, the slowest {slowest_read:?}",
        reads.load(Ordering::Relaxed)
    );
    assert!(waits.len() >= 5, "{} writes", waits.len());
    assert!(
        median < Duration::from_millis(100),
        "median wait {median:?}"
    );
    assert!(worst < Duration::from_millis(500), "worst wait {worst:?}");
}

/// An idle host handles a message that another process commits (`sluice
/// send`) at once: the commit wakes it. Were it not woken, it would find
/// each message only at its next look, up to 5 s later, and some of the
/// five would take over a second.
#[test]
fn an_idle_host_handles_a_message_sent_by_another_process_at_once() {
    let env = crate::support::Env::new();
    env.deploy("hello", "hello", None);
    let (rt, broker) = env.broker();
    let log = env.dir.path().join("host.log");
    let _host = crate::support::Killed(env.spawn_run(&log));
    let done = || rt.block_on(broker.queue_stats("hello")).unwrap().done;
    env.send("hello", "first", &[]);
    crate::support::wait_until(Duration::from_secs(60), "the first message", || done() == 1);
    let mut took = Vec::new();
    for i in 2..=6 {
        // Idle for longer than any poll backoff before each.
        std::thread::sleep(Duration::from_millis(700));
        let sent = Instant::now();
        env.send("hello", "again", &[]);
        crate::support::wait_until(Duration::from_secs(30), "the message", || done() == i);
        took.push(sent.elapsed());
    }
    assert!(
        took.iter().all(|t| *t < Duration::from_secs(1)),
        "from send to done: {took:?}\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
}

/// Context switches of every thread of process `pid` so far.
fn switches(pid: u32) -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let status =
            std::fs::read_to_string(task.unwrap().path().join("status")).unwrap_or_default();
        total += status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
            .sum::<u64>();
    }
    total
}

/// An idle host sleeps: no thread of it wakes in a loop. Its worker waits
/// for a commit to wake it, and the engine's epoch ticker, which ticks
/// every 5 ms while guest code runs, parks while none does: a ticker that
/// kept ticking alone would switch 200 times a second.
#[test]
fn an_idle_host_is_not_woken_in_a_loop() {
    let env = crate::support::Env::new();
    env.deploy("hello", "hello", None);
    let (rt, broker) = env.broker();
    let log = env.dir.path().join("host.log");
    let host = crate::support::Killed(env.spawn_run(&log));
    env.send("hello", "first", &[]);
    crate::support::wait_until(Duration::from_secs(60), "the first message", || {
        rt.block_on(broker.queue_stats("hello")).unwrap().done == 1
    });
    std::thread::sleep(Duration::from_secs(1));
    let before = switches(host.0.id());
    std::thread::sleep(Duration::from_secs(3));
    let per_second = (switches(host.0.id()) - before) / 3;
    assert!(
        per_second < 60,
        "an idle host switched {per_second} times a second"
    );
}
