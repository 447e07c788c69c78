//! Cron schedules through hosts run by
//! `sluice::testkit::app::run_with_clock`: on a clock the test moves on,
//! with a real guest handling what the ticks publish. On every broker.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::broker::Broker;
use sluice::testkit::redrive::Clock;

use crate::clock::{HOST_LOOPS, Host, TestClock};
use crate::support::Env;

const MINUTE: Duration = Duration::from_secs(60);

const MINUTELY: &str = r#"
[[schedule]]
name = "minutely"
cron = "* * * * *"
payload = "tick"
headers = { kind = "report" }
"#;

async fn start_host(env: &Env, clock: &Arc<TestClock>) -> Host {
    let broker = sluice::broker::connect(&env.broker_url()).await.unwrap();
    Host::start(env, broker, clock)
}

async fn stop_hosts(hosts: Vec<Host>) {
    for h in hosts {
        h.stop().await;
    }
}

/// Wait until `queue` has completed `n` messages and holds no other.
async fn done(broker: &dyn Broker, queue: &str, n: u64) {
    let start = Instant::now();
    loop {
        let stats = broker.queue_stats(queue).await.unwrap();
        if stats.done == n && stats.pending() == 0 {
            return;
        }
        assert!(
            stats.done <= n,
            "{} messages done, more than the {n} ticks",
            stats.done
        );
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "waiting for {n} messages done: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The last tick the broker has of `reports`' schedule.
async fn last_tick(broker: &dyn Broker) -> u64 {
    let ticks = broker.last_ticks().await.unwrap();
    let [t] = &ticks[..] else {
        panic!("one schedule: {ticks:?}")
    };
    assert_eq!(
        (t.queue.as_str(), t.schedule.as_str()),
        ("reports", "minutely")
    );
    t.at_ms
}

/// The last minute boundary at or before `ms`.
fn minute_of(ms: u64) -> u64 {
    ms / 60_000 * 60_000
}

/// Three hosts serve a handler with a schedule every minute; the clock
/// moves on 20 minutes, a minute at a time: 20 messages, each handled once.
/// Then every host stops, ten minutes pass, and one host starts again:
/// `catch_up = "one"` (the default) publishes one message for the missed
/// ticks. `sluice stats` shows the schedule with its last and next tick.
fn twenty_ticks_on_three_hosts_publish_twenty_messages(env: Env) {
    env.deploy("hello", "reports", Some(MINUTELY));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (last, stats) = rt.block_on(async {
        let broker = sluice::broker::connect(&env.broker_url()).await.unwrap();
        let clock = TestClock::starting_now(3 * HOST_LOOPS);
        let mut hosts = Vec::new();
        for _ in 0..3 {
            hosts.push(start_host(&env, &clock).await);
        }
        clock.slept(3 * HOST_LOOPS).await;
        // The first pass sees the schedule for the first time: it records
        // the time and publishes nothing.
        clock.tick(Duration::from_secs(1)).await;
        let seen = last_tick(&*broker).await;
        assert_eq!(seen, clock.now_ms(), "first seen now");
        let s = broker.queue_stats("reports").await.unwrap();
        assert_eq!(s.pending() + s.done, 0, "nothing published: {s:?}");
        for _ in 0..20 {
            clock.tick(MINUTE).await;
        }
        done(&*broker, "reports", 20).await;
        assert_eq!(last_tick(&*broker).await, minute_of(seen + 20 * 60_000));
        let now = sluice::broker::message::now_ms();
        let reported = sluice::broker::fresh_statuses(&*broker, now).await.unwrap();
        let views = sluice::testkit::schedule::overview(&*broker, &reported, now)
            .await
            .unwrap();
        let [view] = &views[..] else {
            panic!("one schedule: {views:?}")
        };
        assert_eq!(view.cron.as_deref(), Some("* * * * *"));
        assert_eq!(view.timezone.as_deref(), Some("UTC"));
        assert_eq!(view.last_tick_ms, Some(minute_of(seen + 20 * 60_000)));
        assert_eq!(
            view.next_tick_ms,
            Some(minute_of(seen + 21 * 60_000)),
            "the next tick follows the last (which is ahead of the system clock)"
        );
        stop_hosts(hosts).await;
        // Nothing more was published.
        done(&*broker, "reports", 20).await;

        // Ten minutes with no host.
        let clock = TestClock::starting_at(clock.now_ms() + 10 * 60_000, HOST_LOOPS);
        let host = start_host(&env, &clock).await;
        clock.slept(HOST_LOOPS).await;
        clock.tick(Duration::from_secs(1)).await;
        done(&*broker, "reports", 21).await;
        let last = last_tick(&*broker).await;
        assert_eq!(last, minute_of(clock.now_ms()), "the latest missed tick");
        let stats = tokio::task::block_in_place(|| env.sluice(&["stats"]));
        stop_hosts(vec![host]).await;
        (last, stats)
    });
    let row = stats
        .lines()
        .find(|l| l.starts_with("reports") && l.contains("minutely"))
        .unwrap_or_else(|| panic!("no schedule row in:\n{stats}"));
    assert!(
        row.contains("* * * * *") && row.contains(&sluice::testkit::schedule::rfc3339(last)),
        "{row}"
    );
    assert!(
        row.contains(&sluice::testkit::schedule::rfc3339(last + 60_000)),
        "next tick: {row}"
    );
}

on_every_backend!(env: twenty_ticks_on_three_hosts_publish_twenty_messages);
