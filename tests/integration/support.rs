//! Helpers shared by the integration tests: a temporary sluice environment,
//! running the binary with a deadline, and reading results back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_broker::testkit::{PgServer, RedisCluster, RedisServer};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A first delivery of `payload` on `queue`, with message number `n` as its
/// id and key, as a host hands it to a handler (for tests that call a
/// handler directly).
pub fn delivery(queue: &str, n: usize, payload: &str) -> sluice::broker::message::Delivery {
    sluice::broker::message::Delivery {
        id: format!("{n:032x}"),
        queue: queue.into(),
        key: format!("{n:032x}"),
        payload: payload.as_bytes().to_vec(),
        headers: Vec::new(),
        attempt: 1,
        enqueued_at_us: 0,
        last_error: None,
        receipt: String::new(),
        lease_until_ms: u64::MAX,
        group: None,
        snoozes: 0,
    }
}

/// A built guest component; fails the test when it has not been built.
pub fn guest(name: &str) -> PathBuf {
    let path = repo_root()
        .join("guests/out/rust")
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "guest {name} is not built ({} is missing): run scripts/build-guests",
        path.display()
    );
    path
}

/// The backend an [`Env`] runs on.
pub enum Backend {
    Sqlite,
    Redis(RedisServer),
    Cluster(RedisCluster),
    Postgres(PgServer),
}

/// A scratch directory with a broker and a handlers directory.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub handlers: PathBuf,
    pub db: PathBuf,
    pub backend: Backend,
}

impl Env {
    /// On the embedded SQLite broker.
    pub fn new() -> Self {
        Self::on(Backend::Sqlite)
    }

    /// On a `redis-server` of its own.
    pub fn redis() -> Self {
        Self::on(Backend::Redis(RedisServer::start()))
    }

    /// On a PostgreSQL server of its own.
    pub fn postgres() -> Self {
        Self::on(Backend::Postgres(PgServer::start()))
    }

    pub fn on(backend: Backend) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let handlers = dir.path().join("handlers");
        std::fs::create_dir(&handlers).unwrap();
        let db = dir.path().join("sluice.db");
        Env {
            dir,
            handlers,
            db,
            backend,
        }
    }

    pub fn broker_url(&self) -> String {
        match &self.backend {
            Backend::Sqlite => format!("sqlite://{}", self.db.display()),
            Backend::Redis(server) => server.url(),
            Backend::Cluster(cluster) => cluster.url(),
            Backend::Postgres(server) => server.url(),
        }
    }

    pub fn redis_server(&mut self) -> &mut RedisServer {
        match &mut self.backend {
            Backend::Redis(server) => server,
            _ => panic!("this environment has no single redis-server"),
        }
    }

    pub fn pg_server(&self) -> &PgServer {
        match &self.backend {
            Backend::Postgres(server) => server,
            _ => panic!("this environment has no PostgreSQL server"),
        }
    }

    /// Deploy guest `guest_name` as handler `name`, with an optional sidecar.
    pub fn deploy(&self, guest_name: &str, name: &str, sidecar: Option<&str>) {
        std::fs::copy(
            guest(guest_name),
            self.handlers.join(format!("{name}.wasm")),
        )
        .unwrap();
        if let Some(text) = sidecar {
            std::fs::write(self.handlers.join(format!("{name}.toml")), text).unwrap();
        }
    }

    /// A `sluice` command with this environment's broker, run in its directory.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        if !args.contains(&"--broker") {
            cmd.arg("--broker").arg(self.broker_url());
        }
        cmd.args(args).current_dir(self.dir.path());
        // Hosts run side by side: each serves its admin endpoint on a port
        // of its own, unless the test chooses one.
        if args.first() == Some(&"run") && !args.contains(&"--admin") {
            cmd.args(["--admin", "127.0.0.1:0"]);
        }
        // SLUICE_TEST_LOG sets the hosts' log filter instead, e.g.
        // `info,sluice_broker=debug` to follow a failure in the broker.
        let filter = std::env::var("SLUICE_TEST_LOG").unwrap_or_else(|_| "info".into());
        cmd.env("SLUICE_LOG", filter).env("NO_COLOR", "1");
        // The compiled cache and its key are the environment's own: no test
        // sees another's entries, and none writes to the user's home.
        cmd.env("XDG_CACHE_HOME", self.dir.path().join("xdg-cache"))
            .env("XDG_CONFIG_HOME", self.dir.path().join("xdg-config"));
        cmd
    }

    /// Run `sluice ARGS`, fail the test unless it exits 0, return stdout.
    pub fn sluice(&self, args: &[&str]) -> String {
        let out = run_with_deadline(self.command(args), Duration::from_secs(60));
        assert!(
            out.status.success(),
            "sluice {args:?} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Run `sluice ARGS` and return its output whatever the exit status.
    pub fn sluice_raw(&self, args: &[&str]) -> Output {
        run_with_deadline(self.command(args), Duration::from_secs(60))
    }

    /// `sluice send`; returns the new id.
    pub fn send(&self, queue: &str, payload: &str, extra: &[&str]) -> String {
        let mut args = vec!["send", queue, payload];
        args.extend_from_slice(extra);
        self.sluice(&args).trim().to_string()
    }

    /// `sluice run --until-idle` on the handlers directory; returns stderr (the log).
    pub fn run_until_idle(&self) -> String {
        self.run_until_idle_with(&[])
    }

    /// [`Env::run_until_idle`] with the environment variables `vars` set.
    pub fn run_until_idle_with(&self, vars: &[(&str, &str)]) -> String {
        let handlers = self.handlers.to_str().unwrap().to_string();
        let mut cmd = self.command(&["run", "--handlers", &handlers, "--until-idle"]);
        cmd.envs(vars.iter().copied());
        let out = run_with_deadline(cmd, Duration::from_secs(120));
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "sluice run failed ({}):\n{log}",
            out.status
        );
        log
    }

    /// The directory of this environment's compiled cache.
    pub fn cache_dir(&self) -> PathBuf {
        self.dir.path().join("xdg-cache/sluice")
    }

    /// Start `sluice run` (not until idle) in the background.
    pub fn spawn_run(&self, log: &Path) -> Child {
        let handlers = self.handlers.to_str().unwrap().to_string();
        let mut cmd = self.command(&["run", "--handlers", &handlers]);
        cmd.stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap());
        cmd.spawn().expect("spawning sluice run")
    }

    /// `sluice stats --json`, by queue.
    pub fn stats(&self) -> BTreeMap<String, Value> {
        by_queue(&self.sluice(&["--json", "stats"]))
    }

    /// One counter of one queue; 0 for a queue the broker does not know.
    pub fn count(&self, queue: &str, field: &str) -> u64 {
        self.stats()
            .get(queue)
            .map_or(0, |q| q[field].as_u64().unwrap())
    }

    /// `sluice stats --json` by queue, or `None` when it could not reach
    /// the broker: for polls that run while the broker is being faulted (a
    /// node restarting or loading, or blocked on a slow fsync).
    pub fn stats_if_reachable(&self) -> Option<BTreeMap<String, Value>> {
        let out = self.sluice_raw(&["--json", "stats"]);
        if !out.status.success() {
            return None;
        }
        Some(by_queue(&String::from_utf8(out.stdout).unwrap()))
    }

    /// One counter of one queue, or `None` when the broker could not be
    /// reached (see `stats_if_reachable`).
    pub fn count_if_reachable(&self, queue: &str, field: &str) -> Option<u64> {
        let stats = self.stats_if_reachable()?;
        Some(stats.get(queue).map_or(0, |q| q[field].as_u64().unwrap()))
    }

    /// `sluice dlq list QUEUE --json`.
    pub fn dead(&self, queue: &str) -> Vec<Value> {
        self.sluice(&["--json", "dlq", "list", queue])
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The library's broker for this environment, with a runtime to drive it.
    pub fn broker(
        &self,
    ) -> (
        tokio::runtime::Runtime,
        std::sync::Arc<dyn sluice::broker::Broker>,
    ) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let broker = rt
            .block_on(sluice::broker::connect(&self.broker_url()))
            .unwrap();
        (rt, broker)
    }

    /// Every ready message of `queue`, leased for a minute.
    pub fn drain(&self, queue: &str) -> Vec<sluice::broker::message::Delivery> {
        let (rt, broker) = self.broker();
        rt.block_on(async {
            let mut all = Vec::new();
            let mut empty_rounds = 0;
            // Two empty reads in a row: a broker may hand out due messages a
            // moment after they are due.
            while empty_rounds < 2 {
                let batch = broker
                    .receive(
                        queue,
                        1000,
                        Duration::from_secs(60),
                        sluice::broker::Flow::default(),
                    )
                    .await
                    .unwrap();
                empty_rounds = if batch.is_empty() {
                    empty_rounds + 1
                } else {
                    0
                };
                if batch.is_empty() {
                    tokio::time::sleep(Duration::from_millis(120)).await;
                }
                all.extend(batch);
            }
            all
        })
    }

    /// Publish `messages` through the library.
    pub fn publish(&self, messages: Vec<sluice::broker::message::NewMessage>) {
        let (rt, broker) = self.broker();
        rt.block_on(broker.publish(messages)).unwrap();
    }
}

/// A child killed when dropped, a failed assertion too.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Wait for `cmd` with a deadline; kill it and fail the test past it.
pub fn run_with_deadline(mut cmd: Command, deadline: Duration) -> Output {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    let child = cmd.spawn().expect("spawning sluice");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(deadline) {
        Ok(out) => out.expect("waiting for sluice"),
        Err(_) => {
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{cmd:?} did not finish within {deadline:?}");
        }
    }
}

/// The lines of `sluice --json stats`, by queue.
fn by_queue(stdout: &str) -> BTreeMap<String, Value> {
    stdout
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["queue"].as_str().unwrap().to_string(), v)
        })
        .collect()
}

/// Poll `check` every 20 ms until it holds, or fail after `limit`.
pub fn wait_until(limit: Duration, what: &str, check: impl FnMut() -> bool) {
    wait_until_or(limit, check, || {
        format!("timed out after {limit:?} waiting for {what}")
    });
}

/// [`wait_until`], failing with `why()` (which may gather what a reader
/// needs to tell a slow wait from a stuck one) when `limit` passes.
pub fn wait_until_or(
    limit: Duration,
    mut check: impl FnMut() -> bool,
    why: impl FnOnce() -> String,
) {
    let start = Instant::now();
    while !check() {
        if start.elapsed() >= limit {
            panic!("{}", why());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every file under `dir` (its folders too) whose name ends in `.{ext}`,
/// sorted.
pub fn files_under(dir: &std::path::Path, ext: &str) -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, ext: &str, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, ext, out);
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, ext, &mut out);
    out.sort();
    out
}

/// Lines of a log that mention `needle`.
pub fn lines_with<'a>(log: &'a str, needle: &str) -> Vec<&'a str> {
    log.lines().filter(|l| l.contains(needle)).collect()
}
