//! Waking idle receivers the moment a message is committed, by this
//! process or by another one on the machine.
//!
//! A commit that may make a queue's messages due sooner than its receivers
//! think (a publish, a follow-up, a retry or snooze, a group's next
//! message, a redrive) rings the queue once it has committed: in this
//! process directly, and for every other process by touching the queue's
//! doorbell, an empty file in the directory `FILE-wake` beside the
//! database, named by a digest of the queue's name. One thread per process
//! watches each such directory with inotify and rings the queue whose
//! doorbell was touched. A worker whose receive found nothing waits
//! ([`SqliteBroker::idle`](super::SqliteBroker)) for its queue to ring,
//! for its next message's due time, or for [`WATCHED_WAIT`] at most.
//!
//! Where the directory cannot be made or watched (not Linux, a read-only
//! directory, no inotify instance left), or `SLUICE_SQLITE_WAKE=poll` is
//! set, receivers poll: the worker's doubling idle backoff, up to its own
//! limit.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;

/// The longest an idle worker of a watched file waits before it looks
/// again: the fallback for a ring lost some way this module does not know
/// of (an overflow of the watcher's queue rings every queue). Every commit
/// that makes a message due sooner rings, and a wait ends at the next due
/// time (a delayed message, a lease's end), so a host with a thousand idle
/// queues looks about 33 times a second in all.
pub(super) const WATCHED_WAIT: Duration = crate::IDLE_MOST;

/// The wake-ups of one database file, shared by every broker of this
/// process that opened it.
pub(super) struct Bells {
    /// Whether commits ring at all (see [`Bells::off`]).
    on: bool,
    /// The doorbells' directory, when it exists.
    dir: Option<PathBuf>,
    /// Whether this process watches it, once a receiver has waited.
    watched: std::sync::OnceLock<bool>,
    me: Weak<Bells>,
    /// Each queue's bell, by its doorbell's file name.
    queues: Mutex<HashMap<String, Arc<Bell>>>,
}

/// One queue's wake-up.
#[derive(Default)]
pub(super) struct Bell {
    /// How many times the queue has rung: a receiver that saw a count
    /// before it looked knows, when the count has moved, that something
    /// came after its look.
    rung: AtomicU64,
    notify: Notify,
}

impl Bell {
    /// How many times the queue has rung so far.
    pub(super) fn rung(&self) -> u64 {
        self.rung.load(Ordering::Acquire)
    }

    /// The wake-up a waiter waits on.
    pub(super) fn notify(&self) -> &Notify {
        &self.notify
    }

    fn ring(&self) {
        self.rung.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }
}

/// Every file's bells in this process, by the database's path.
static FILES: LazyLock<Mutex<HashMap<PathBuf, Weak<Bells>>>> = LazyLock::new(Mutex::default);

/// The bells of the database at `path`: those of this process when another
/// broker opened it already, otherwise new ones, watched when they can be.
pub(super) fn bells(path: &Path) -> Arc<Bells> {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut files = FILES.lock().expect("bells lock");
    files.retain(|_, bells| bells.strong_count() > 0);
    if let Some(bells) = files.get(&path).and_then(Weak::upgrade) {
        return bells;
    }
    let bells = Arc::new_cyclic(|me| Bells {
        on: true,
        dir: make(&doorbells(&path)),
        watched: std::sync::OnceLock::new(),
        me: me.clone(),
        queues: Mutex::default(),
    });
    files.insert(path, Arc::downgrade(&bells));
    bells
}

/// The doorbells' directory of the database at `path`: `FILE-wake`.
pub(super) fn doorbells(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push("-wake");
    path.with_file_name(name)
}

/// The file name of `queue`'s doorbell: the first 16 bytes of the SHA-256
/// of its name, in hex, the same in every build and process.
fn doorbell(queue: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(queue.as_bytes())[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Bells {
    /// No bells: nothing rings, and idle receivers poll, as they did before
    /// there were any (for comparisons, and for tests of the broker
    /// thread).
    pub(super) fn off() -> Bells {
        Bells {
            on: false,
            dir: None,
            watched: std::sync::OnceLock::from(false),
            me: Weak::new(),
            queues: Mutex::default(),
        }
    }

    /// Whether other processes' commits wake this file's receivers (if
    /// not, they poll): the doorbells are watched from the first time a
    /// receiver waits, so a process that only publishes watches nothing.
    pub(super) fn watched(&self) -> bool {
        self.on
            && *self.watched.get_or_init(|| match &self.dir {
                Some(dir) => watch(dir, self.me.clone()),
                None => false,
            })
    }

    /// Whether commits ring.
    pub(super) fn on(&self) -> bool {
        self.on
    }

    /// `queue`'s bell, made on first use.
    pub(super) fn of(&self, queue: &str) -> Arc<Bell> {
        let mut queues = self.queues.lock().expect("bells lock");
        queues.entry(doorbell(queue)).or_default().clone()
    }

    /// Ring each of `queues`, which a commit has just made due (or due
    /// sooner): here, and through their doorbells for other processes.
    pub(super) fn ring(&self, queues: &HashSet<String>) {
        if !self.on {
            return;
        }
        for queue in queues {
            let name = doorbell(queue);
            let here = self.queues.lock().expect("bells lock").get(&name).cloned();
            if let Some(bell) = here {
                bell.ring();
            }
            if let Some(dir) = &self.dir {
                touch(&dir.join(&name));
            }
        }
    }

    /// A doorbell was touched: ring its queue here, if anyone waits on it.
    fn rung_by(&self, name: &str) {
        let bell = self.queues.lock().expect("bells lock").get(name).cloned();
        if let Some(bell) = bell {
            bell.ring();
        }
    }

    /// Some doorbells may have gone unheard: ring every queue.
    fn ring_all(&self) {
        let bells: Vec<Arc<Bell>> = self
            .queues
            .lock()
            .expect("bells lock")
            .values()
            .cloned()
            .collect();
        for bell in bells {
            bell.ring();
        }
    }
}

/// Touch a doorbell: opening it for writing and closing it is what the
/// watchers hear (`IN_CLOSE_WRITE`; `touch FILE` from a shell, a change of
/// its times, rings it too). A doorbell that cannot be touched
/// (its directory was removed) is not heard; receivers then find the
/// message at their next look.
fn touch(path: &Path) {
    if let Err(e) = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
    {
        tracing::debug!(doorbell = %path.display(), error = %e, "a SQLite doorbell could not be touched");
    }
}

thread_local! {
    /// Queues rung by the jobs of the group transaction running on this
    /// thread, rung once it has committed.
    static RUNG: std::cell::RefCell<HashSet<String>> = std::cell::RefCell::default();
    /// Whether this thread's jobs ring at all (see [`rings_here`]).
    static RINGS: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Make the jobs run on this thread ring (`on`) or not: a broker thread's
/// first act.
pub(super) fn rings_here(on: bool) {
    RINGS.with(|r| r.set(on));
}

/// Ring `queue` once the transaction this job runs in commits.
pub(super) fn ring_later(queue: &str) {
    if !RINGS.with(std::cell::Cell::get) {
        return;
    }
    RUNG.with(|rung| {
        let mut rung = rung.borrow_mut();
        if !rung.contains(queue) {
            rung.insert(queue.to_string());
        }
    });
}

/// The queues rung by the transaction that has just ended, forgotten here.
pub(super) fn take_rung() -> HashSet<String> {
    RUNG.with(|rung| std::mem::take(&mut *rung.borrow_mut()))
}

/// Make the doorbells' directory `dir`, where doorbells can be watched;
/// `dir` when it is there.
fn make(dir: &Path) -> Option<PathBuf> {
    if !watcher::SUPPORTED || std::env::var_os("SLUICE_SQLITE_WAKE").is_some_and(|v| v == "poll") {
        return None;
    }
    match std::fs::create_dir_all(dir) {
        Ok(()) => Some(dir.to_path_buf()),
        Err(e) => {
            tracing::info!(dir = %dir.display(), error = %e, "the SQLite doorbells' directory cannot be made; idle receivers poll every 50 ms");
            None
        }
    }
}

/// Watch `dir` for `bells`; whether that worked.
fn watch(dir: &Path, bells: Weak<Bells>) -> bool {
    match watcher::add(dir, bells) {
        Ok(()) => true,
        Err(e) => {
            tracing::info!(dir = %dir.display(), error = %e, "the SQLite doorbells cannot be watched; idle receivers poll every 50 ms");
            false
        }
    }
}

impl Drop for Bells {
    fn drop(&mut self) {
        if let (Some(dir), Some(true)) = (&self.dir, self.watched.get()) {
            watcher::remove(dir);
        }
    }
}

#[cfg(target_os = "linux")]
mod watcher {
    //! One thread for the whole process reads the inotify instance that
    //! watches every doorbells' directory, and rings what it hears.

    use super::*;
    use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};

    pub(super) const SUPPORTED: bool = true;

    struct Watcher {
        watches: Mutex<Watches>,
        /// Each watched directory's descriptor and bells.
        dirs: Mutex<HashMap<WatchDescriptor, (PathBuf, Weak<Bells>)>>,
    }

    static WATCHER: LazyLock<std::io::Result<Arc<Watcher>>> = LazyLock::new(start);

    fn start() -> std::io::Result<Arc<Watcher>> {
        let inotify = Inotify::init()?;
        let watcher = Arc::new(Watcher {
            watches: Mutex::new(inotify.watches()),
            dirs: Mutex::default(),
        });
        let seen = watcher.clone();
        std::thread::Builder::new()
            .name("sluice-sqlite-wake".into())
            .spawn(move || listen(inotify, &seen))?;
        Ok(watcher)
    }

    pub(super) fn add(dir: &Path, bells: Weak<Bells>) -> std::io::Result<()> {
        let watcher = WATCHER
            .as_ref()
            .map_err(|e| std::io::Error::new(e.kind(), e.to_string()))?;
        let mut dirs = watcher.dirs.lock().expect("watcher lock");
        let wd = watcher
            .watches
            .lock()
            .expect("watcher lock")
            .add(dir, WatchMask::CLOSE_WRITE | WatchMask::ATTRIB)?;
        dirs.insert(wd, (dir.to_path_buf(), bells));
        Ok(())
    }

    pub(super) fn remove(dir: &Path) {
        let Ok(watcher) = WATCHER.as_ref() else {
            return;
        };
        let mut dirs = watcher.dirs.lock().expect("watcher lock");
        // Another broker may watch the same directory again already (the
        // same descriptor): only a directory no live bells use goes.
        let gone: Vec<WatchDescriptor> = dirs
            .iter()
            .filter(|(_, (d, bells))| d == dir && bells.strong_count() == 0)
            .map(|(wd, _)| wd.clone())
            .collect();
        for wd in gone {
            dirs.remove(&wd);
            let _ = watcher.watches.lock().expect("watcher lock").remove(wd);
        }
    }

    fn listen(mut inotify: Inotify, watcher: &Watcher) {
        let mut buffer = [0u8; 16 * 1024];
        loop {
            let events = match inotify.read_events_blocking(&mut buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "the SQLite doorbells' watcher stopped; idle receivers look every {}s", WATCHED_WAIT.as_secs());
                    return;
                }
            };
            let dirs = watcher.dirs.lock().expect("watcher lock");
            for event in events {
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    for (_, bells) in dirs.values() {
                        if let Some(bells) = bells.upgrade() {
                            bells.ring_all();
                        }
                    }
                    continue;
                }
                let (Some((_, bells)), Some(name)) = (dirs.get(&event.wd), event.name) else {
                    continue;
                };
                if let (Some(bells), Some(name)) = (bells.upgrade(), name.to_str()) {
                    bells.rung_by(name);
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod watcher {
    //! No inotify: doorbells are not watched, and receivers poll.

    use super::*;

    pub(super) const SUPPORTED: bool = false;

    pub(super) fn add(_dir: &Path, _bells: Weak<Bells>) -> std::io::Result<()> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "doorbells are watched on Linux only",
        ))
    }

    pub(super) fn remove(_dir: &Path) {}
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::message::NewMessage;
    use crate::{Flow, Queue, SqliteBroker};

    const LEASE: Duration = Duration::from_secs(30);

    /// A receiver of `queue` that has found it empty, waiting in `idle`
    /// at least `floor` (the worker's idle backoff; beyond the fallback,
    /// a due message not taken is looked at only after it); how long it
    /// waited.
    fn idle_receiver(
        broker: Arc<SqliteBroker>,
        queue: &str,
        floor: Duration,
    ) -> tokio::task::JoinHandle<Duration> {
        let queue = queue.to_string();
        tokio::spawn(async move {
            let found = broker
                .receive(&queue, 1, LEASE, Flow::default())
                .await
                .unwrap();
            assert!(found.is_empty());
            let started = Instant::now();
            broker.idle(&queue, floor).await;
            started.elapsed()
        })
    }

    /// Commit `m` on a connection of no broker, ringing nothing.
    fn insert_without_ringing(path: &Path, m: NewMessage) {
        let conn = super::super::connect(path).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        super::super::queue::insert_messages(&conn, &[m], crate::message::now_ms()).unwrap();
        conn.execute_batch("COMMIT").unwrap();
        take_rung();
    }

    /// Long enough for the receiver to be waiting, far shorter than the
    /// fallback it would otherwise wait for.
    async fn settle_in() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    #[tokio::test]
    async fn an_idle_receiver_wakes_when_the_process_publishes_through_another_broker() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let receiver = Arc::new(SqliteBroker::open(&path).unwrap());
        let publisher = SqliteBroker::open(&path).unwrap();
        let waited = idle_receiver(receiver.clone(), "q", Duration::from_secs(60));
        settle_in().await;
        publisher
            .publish(vec![NewMessage::new("q", b"x".to_vec())])
            .await
            .unwrap();
        let waited = waited.await.unwrap();
        assert!(waited < WATCHED_WAIT / 2, "woke after {waited:?}");
        let got = receiver
            .receive("q", 1, LEASE, Flow::default())
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
    }

    #[tokio::test]
    async fn an_idle_receiver_wakes_when_another_process_rings_the_doorbell() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let receiver = Arc::new(SqliteBroker::open(&path).unwrap());
        // The message comes from a connection of no broker (nothing rings),
        // and the ring from another process: `touch`, as a publisher's
        // open and close of the doorbell would.
        let waited = idle_receiver(receiver.clone(), "q", Duration::from_secs(60));
        settle_in().await;
        insert_without_ringing(&path, NewMessage::new("q", b"x".to_vec()));
        let bell = doorbells(&path).join(doorbell("q"));
        let touched = std::process::Command::new("touch")
            .arg(&bell)
            .status()
            .unwrap();
        assert!(touched.success());
        let waited = waited.await.unwrap();
        assert!(waited < WATCHED_WAIT / 2, "woke after {waited:?}");
        let got = receiver
            .receive("q", 1, LEASE, Flow::default())
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
    }

    #[tokio::test]
    async fn a_ring_between_a_receive_and_its_wait_is_not_missed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let broker = SqliteBroker::open(&path).unwrap();
        assert!(
            broker
                .receive("q", 1, LEASE, Flow::default())
                .await
                .unwrap()
                .is_empty()
        );
        broker
            .publish(vec![NewMessage::new("q", b"x".to_vec())])
            .await
            .unwrap();
        let started = Instant::now();
        broker.idle("q", Duration::from_secs(60)).await;
        assert!(
            started.elapsed() < WATCHED_WAIT / 2,
            "waited {:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn an_idle_receiver_wakes_when_a_delayed_message_falls_due() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let broker = Arc::new(SqliteBroker::open(&path).unwrap());
        let mut later = NewMessage::new("q", b"x".to_vec());
        later.delay = Duration::from_millis(300);
        let started = Instant::now();
        broker.publish(vec![later]).await.unwrap();
        // The publish's own ring may come after the first look: a look
        // more, not a poll.
        let mut looks = 0;
        while broker
            .receive("q", 1, LEASE, Flow::default())
            .await
            .unwrap()
            .is_empty()
        {
            looks += 1;
            broker.idle("q", Duration::from_millis(1)).await;
        }
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(300),
            "received after {waited:?}"
        );
        assert!(waited < WATCHED_WAIT / 2, "received after {waited:?}");
        assert!(looks <= 3, "{looks} looks");
    }

    #[test]
    fn a_doorbell_is_named_the_same_everywhere() {
        assert_eq!(doorbell("orders"), doorbell("orders"));
        assert_ne!(doorbell("orders"), doorbell("orders2"));
        assert_eq!(doorbell("orders").len(), 32);
        assert_eq!(
            doorbells(Path::new("/var/lib/sluice/jobs.db")),
            Path::new("/var/lib/sluice/jobs.db-wake")
        );
    }
}
