//! Waking receivers without polling: one connection per broker `LISTEN`s
//! on the schema's channel, where `enqueue` and `settle` notify the queues
//! that got due messages (on commit). A worker whose receive found nothing
//! waits (`Queue::idle`) for its queue's notification, or for the next
//! message's due time (a delayed message, a lease's end), or for
//! [`LISTENING_WAIT`] at most while the listening connection is up. While
//! it is down, notifications are missed: idle workers look every
//! [`MAX_WAIT`], and when it is back every queue is woken once.
//!
//! A retry or snooze with a delay is not notified (it is not due yet); the
//! broker that settles it wakes its own receivers of the queue, which wait
//! for its due time. Another host's idle receivers take it at their next
//! look: by its former lease's end, or [`LISTENING_WAIT`], whichever first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The longest an idle worker waits before it looks again while the
/// listening connection is down.
pub(super) const MAX_WAIT: Duration = Duration::from_millis(500);
/// The longest an idle worker waits before it looks again while the
/// listening connection is up.
pub(super) const LISTENING_WAIT: Duration = crate::IDLE_MOST;
/// The longest the listener waits before it connects again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Each queue's wake-up, by name.
#[derive(Default)]
pub(super) struct Wakes {
    queues: Mutex<HashMap<String, Arc<Notify>>>,
    /// Whether the listening connection is up and listening.
    listening: AtomicBool,
}

impl Wakes {
    /// The longest an idle worker waits now: [`LISTENING_WAIT`] while
    /// notifications are heard, else [`MAX_WAIT`].
    pub(super) fn most(&self) -> Duration {
        if self.listening.load(Ordering::SeqCst) {
            LISTENING_WAIT
        } else {
            MAX_WAIT
        }
    }

    /// Note whether notifications are heard. When they are again, every
    /// queue is woken: one may have been missed meanwhile.
    fn set_listening(&self, listening: bool) {
        let was = self.listening.swap(listening, Ordering::SeqCst);
        if listening && !was {
            let all: Vec<Arc<Notify>> = (self.queues.lock().expect("wakes lock").values())
                .cloned()
                .collect();
            for n in all {
                n.notify_waiters();
            }
        }
    }

    /// The wake-up of `queue`, made on first use.
    pub(super) fn of(&self, queue: &str) -> Arc<Notify> {
        let mut queues = self.queues.lock().expect("wakes lock");
        queues.entry(queue.to_string()).or_default().clone()
    }

    /// Wake this process's idle receivers of `queue`.
    pub(super) fn wake(&self, queue: &str) {
        let waiting = self.queues.lock().expect("wakes lock").get(queue).cloned();
        if let Some(n) = waiting {
            n.notify_waiters();
        }
    }
}

/// Listen on `channel` for as long as `wakes` is alive (the broker holds
/// it), connecting again after a lost connection.
pub(super) async fn listen(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    channel: String,
    wakes: Weak<Wakes>,
) {
    let mut backoff = Duration::from_millis(100);
    while wakes.strong_count() > 0 {
        let started = std::time::Instant::now();
        if let Err(e) = listen_once(&config, &tls, &channel, &wakes).await {
            tracing::debug!(error = %e, "the PostgreSQL broker's listening connection ended; receivers poll until it is back");
        }
        if let Some(wakes) = wakes.upgrade() {
            wakes.set_listening(false);
        }
        if started.elapsed() > MAX_BACKOFF {
            backoff = Duration::from_millis(100);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One listening connection's life, until the broker is gone or the
/// server closes it.
async fn listen_once(
    config: &tokio_postgres::Config,
    tls: &MakeRustlsConnect,
    channel: &str,
    wakes: &Weak<Wakes>,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(tls.clone()).await?;
    let listen = format!("LISTEN {channel}");
    let listening = client.batch_execute(&listen);
    tokio::pin!(listening);
    let mut listened = false;
    loop {
        tokio::select! {
            done = &mut listening, if !listened => {
                done?;
                listened = true;
                if let Some(wakes) = wakes.upgrade() {
                    wakes.set_listening(true);
                }
            }
            message = std::future::poll_fn(|cx| connection.poll_message(cx)) => match message {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    let Some(wakes) = wakes.upgrade() else { return Ok(()) };
                    wakes.wake(n.payload());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                // The server closed it: connect again.
                None => return Ok(()),
            },
            () = tokio::time::sleep(MAX_BACKOFF) => {
                if wakes.strong_count() == 0 {
                    return Ok(());
                }
            }
        }
    }
}
