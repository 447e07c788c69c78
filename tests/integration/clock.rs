//! Hosts in the test process on a clock that stands still until the test
//! moves it on (`sluice::testkit::app::run_with_clock`). Every loop of a
//! host that runs on the clock (the redrive scheduler and the schedules'
//! ticker) sleeps on it between passes, and the clock counts those sleeps:
//! once every loop has gone to sleep again after a move, the passes the
//! move woke are over.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sluice::broker::Broker;
use sluice::broker::message::{DEFAULT_MAX_MESSAGE_SIZE, now_ms};
use sluice::testkit::redrive::Clock;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::support::Env;

/// The loops of one host that sleep on its clock.
pub const HOST_LOOPS: u64 = 2;

pub struct TestClock {
    now: watch::Sender<u64>,
    sleeps: AtomicU64,
    /// How many loops sleep on it: each move wakes all of them.
    loops: u64,
}

impl TestClock {
    /// A clock at the system's time, for `loops` loops.
    pub fn starting_now(loops: u64) -> Arc<Self> {
        Self::starting_at(now_ms(), loops)
    }

    /// A clock at `ms` since the Unix epoch, for `loops` loops.
    pub fn starting_at(ms: u64, loops: u64) -> Arc<Self> {
        Arc::new(TestClock {
            now: watch::Sender::new(ms),
            sleeps: AtomicU64::new(0),
            loops,
        })
    }

    /// Wait until the loops have gone to sleep `n` times in all.
    pub async fn slept(&self, n: u64) {
        let start = Instant::now();
        while self.sleeps.load(Ordering::SeqCst) < n {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the host's loops did not come round again ({} of {n} sleeps)",
                self.sleeps.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Move the clock on by `by` (at least the loops' one-second wake) and
    /// wait until every loop has made the pass that wakes it.
    pub async fn tick(&self, by: Duration) {
        let before = self.sleeps.load(Ordering::SeqCst);
        self.now.send_modify(|now| *now += by.as_millis() as u64);
        self.slept(before + self.loops).await;
    }
}

#[async_trait]
impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        *self.now.borrow()
    }

    async fn sleep(&self, duration: Duration) {
        let until = self.now_ms() + duration.as_millis() as u64;
        let mut now = self.now.subscribe();
        self.sleeps.fetch_add(1, Ordering::SeqCst);
        let _ = now.wait_for(|now| *now >= until).await;
    }
}

/// A host serving `env`'s handlers in this process, and what stops it.
pub struct Host {
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Host {
    /// Serve `env`'s handlers through `broker` on `clock`, without a
    /// compiled cache, a watcher or the admin endpoint.
    pub fn start(env: &Env, broker: Arc<dyn Broker>, clock: &Arc<TestClock>) -> Host {
        let options = sluice::RunOptions {
            handlers: env.handlers.clone(),
            until_idle: false,
            grace: Duration::from_secs(5),
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            max_component_size: sluice::testkit::files::DEFAULT_MAX_COMPONENT_SIZE,
            cache: None,
            watch: false,
            admin: None,
            otlp_endpoint: None,
            broker_timeout: None,
            stall_after: None,
            exit_on_stall: false,
            max_instances: None,
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(sluice::testkit::app::run_with_clock(
            broker,
            options,
            async move {
                let _ = stopped.await;
            },
            clock.clone(),
        ));
        Host { stop, task }
    }

    /// Stop it and wait until it has; it must end without an error.
    pub async fn stop(self) {
        self.stop.send(()).unwrap();
        self.task.await.unwrap().unwrap();
    }
}
