//! Real `redis-server` processes for tests of the Redis broker.
//!
//! Each test starts its own servers on free loopback ports, in its own
//! temporary directories, so tests can run in parallel, kill a server in the
//! middle of a run and bring it back with its data. The system Redis (if any)
//! is never used. Checks go through `redis-cli` as a subprocess so the harness
//! shares no client code with the broker it is testing.
//!
//! Every wait here has a deadline: a server that will not come up fails the
//! test with the tail of its log instead of hanging the suite.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::process::{reap, run_with_deadline};

/// How long a server gets to answer PING (and finish loading its AOF).
const START_DEADLINE: Duration = Duration::from_secs(10);
/// How long a server that answers `LOADING` may take to load its data.
const LOADING_DEADLINE: Duration = Duration::from_secs(300);
/// How long a cluster gets from the first node starting to `cluster_state:ok`.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(30);
/// How long one `redis-cli` command may take; a frozen server must not hang a test.
const CLI_DEADLINE: Duration = Duration::from_secs(30);
/// How long one readiness probe may take. Short, because a process that
/// holds the port but never answers (not ours) would otherwise eat the whole
/// start deadline in one probe.
const PROBE_DEADLINE: Duration = Duration::from_secs(1);
/// Attempts at starting on a fresh port when another process took ours first.
const START_ATTEMPTS: usize = 5;
/// Redis Cluster puts its node-to-node bus on the client port plus this.
const CLUSTER_BUS_OFFSET: u16 = 10000;

/// Fails the test with "redis-server not found: install it with `apt-get install redis-server` (scripts/test does this)" when missing.
///
/// A missing Redis is a broken test machine, not a reason to skip: a skipped
/// broker test would pass silently and hide regressions.
fn require_redis() -> PathBuf {
    let server = find_on_path("redis-server").unwrap_or_else(|| {
        panic!(
            "redis-server not found: install it with `apt-get install redis-server` (scripts/test does this)"
        )
    });
    redis_cli();
    server
}

/// `redis-cli`, which the harness needs for every readiness check.
fn redis_cli() -> PathBuf {
    find_on_path("redis-cli").unwrap_or_else(|| {
        panic!(
            "redis-cli not found: install it with `apt-get install redis-server` (scripts/test does this)"
        )
    })
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// One `redis-server` child process that the test owns.
///
/// The data directory lives as long as the struct, across kills and
/// restarts, so a restarted server finds its AOF and (for cluster nodes) its
/// `nodes.conf` again.
pub struct RedisServer {
    port: u16,
    // `Drop` kills the process before any field is dropped, so the directory
    // is never removed under a live server.
    dir: tempfile::TempDir,
    child: Option<Child>,
    args: Vec<String>,
}

impl RedisServer {
    /// Persistence off (`--save "" --appendonly no`).
    ///
    /// Most tests want a throwaway server; writing snapshots would only cost
    /// time and disk.
    pub fn start() -> Self {
        Self::start_with(&["--save", "", "--appendonly", "no"])
    }

    /// Extra `redis-server` arguments, e.g. &["--appendonly", "yes", "--appendfsync", "always"].
    ///
    /// The arguments replace the defaults of `start` rather than adding to
    /// them, so a test that wants durability states exactly which kind.
    /// With `--cluster-enabled yes` the port is also chosen so that the
    /// cluster bus port (port + 10000) is free and valid.
    pub fn start_with(args: &[&str]) -> Self {
        let server = require_redis();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let cluster = cluster_enabled(&args);
        let dir = tempfile::Builder::new()
            .prefix("sluice-redis-")
            .tempdir()
            .expect("temp dir for redis-server");

        // Free ports are found by binding port 0 and letting go, so another
        // process can take the port before redis-server binds it. Such a
        // server exits at once; try again on a new port. Any other failure
        // (a bad argument, say) would fail the same way again, so it ends
        // the test at once.
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port(cluster);
            let mut child = spawn(&server, port, dir.path(), &args);
            let pid = child.id();
            match wait_ready(&mut child, port, START_DEADLINE) {
                Ok(()) => {
                    return RedisServer {
                        port,
                        dir,
                        child: Some(child),
                        args,
                    };
                }
                Err(why) => {
                    reap(&mut child);
                    failures.push(format!("port {port}: {why}"));
                    if !port_clash(dir.path(), pid) {
                        break;
                    }
                }
            }
        }
        panic!(
            "redis-server {args:?} failed to start ({} attempts):\n{}\n{}",
            failures.len(),
            failures.join("\n"),
            log_tail(dir.path())
        );
    }

    /// Stays the same across `restart`, so it can be baked into configs.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// "redis://127.0.0.1:PORT", the form the broker's `--broker` flag takes.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A connection of the test's own, to look at or write into the keys
    /// sluice keeps.
    #[cfg(feature = "redis")]
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// SIGKILL and wait; idempotent.
    ///
    /// SIGKILL rather than SHUTDOWN, because the point is to lose the server
    /// the way a crash does: no final save, connections cut mid-command.
    /// Waiting reaps the process so it leaves no zombie and the port is free.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            reap(&mut child);
        }
    }

    /// Starts again on the same port, in the same directory, with the same
    /// arguments, so clients configured with `url()` reconnect to it and an
    /// AOF written before a kill is loaded back.
    ///
    /// A running server is killed first. Returns once PING answers PONG and
    /// `INFO persistence` shows `loading:0`, so the data is all there. The
    /// port cannot change, so if another process took it in the meantime this
    /// retries briefly and then fails the test.
    pub fn restart(&mut self) {
        self.kill();
        let server = require_redis();
        let mut failures = Vec::new();
        for attempt in 0..START_ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(500));
            }
            let mut child = spawn(&server, self.port, self.dir.path(), &self.args);
            match wait_ready(&mut child, self.port, START_DEADLINE) {
                Ok(()) => {
                    self.child = Some(child);
                    return;
                }
                Err(why) => {
                    reap(&mut child);
                    failures.push(why);
                }
            }
        }
        panic!(
            "redis-server on port {} failed to restart {START_ATTEMPTS} times:\n{}\n{}",
            self.port,
            failures.join("\n"),
            log_tail(self.dir.path())
        );
    }

    /// Runs `redis-cli -p PORT ARGS` and returns its trimmed stdout; fails the
    /// test with stderr when redis-cli exits non-zero (e.g. cannot connect).
    ///
    /// Options may come before the command, e.g. `&["-c", "SET", "k", "v"]`
    /// to follow cluster redirects. An error reply is not a failure to
    /// redis-cli: it comes back as text (`"ERR ..."`), so tests can assert on
    /// expected errors.
    pub fn cli(&self, args: &[&str]) -> String {
        match cli_at(self.port, args) {
            Ok(out) => out,
            Err(why) => panic!(
                "redis-cli -p {} {args:?} failed: {why}\n{}",
                self.port,
                log_tail(self.dir.path())
            ),
        }
    }

    /// `INFO SECTION`, with line endings made `\n` so tests can match lines.
    pub fn info(&self, section: &str) -> String {
        self.cli(&["INFO", section]).replace("\r\n", "\n")
    }
}

impl Drop for RedisServer {
    /// A test that panics still unwinds through here, so no server outlives
    /// its test or keeps its port.
    fn drop(&mut self) {
        self.kill();
    }
}

/// A three-master Redis Cluster of real processes, for the broker's cluster
/// mode (hash-tagged keys, MOVED redirects, a node going down).
pub struct RedisCluster {
    /// The nodes, in the order they were started; with replicas, which of
    /// them are masters changes with failovers ([`RedisCluster::role`]).
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Three masters, no replicas: each node with `--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 --save "" --appendonly no` in its own dir, joined with `redis-cli --cluster create 127.0.0.1:P1 127.0.0.1:P2 127.0.0.1:P3 --cluster-replicas 0 --cluster-yes`; waits until `CLUSTER INFO` on every node says cluster_state:ok (and all 16384 slots assigned), with a deadline of 30 s.
    ///
    /// Waiting on every node, not just the first, matters: a node that has
    /// not yet heard the slot map answers CLUSTERDOWN, which would make the
    /// first seconds of a test flaky.
    pub fn start() -> Self {
        Self::start_with(&["--save", "", "--appendonly", "no"], 0)
    }

    /// Three masters, each with one replica (six nodes), persistence off:
    /// for failovers.
    pub fn start_with_replicas() -> Self {
        Self::start_with(&["--save", "", "--appendonly", "no"], 1)
    }

    /// Like [`RedisCluster::start`], with every write on disk before it is
    /// acknowledged (`--appendonly yes --appendfsync always`), so a node
    /// killed and restarted keeps its data.
    pub fn start_persistent() -> Self {
        Self::start_with(
            &[
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ],
            0,
        )
    }

    fn start_with(persistence: &[&str], replicas: usize) -> Self {
        let started = Instant::now();
        let count = 3 * (1 + replicas);
        let nodes: Vec<RedisServer> = (0..count)
            .map(|_| {
                let mut args = vec![
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                    // A replica's first sync starts at once, not 5 s later.
                    "--repl-diskless-sync-delay",
                    "0",
                ];
                args.extend_from_slice(persistence);
                RedisServer::start_with(&args)
            })
            .collect();

        let mut create: Vec<String> = vec!["--cluster".into(), "create".into()];
        create.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        create.extend([
            "--cluster-replicas".into(),
            replicas.to_string(),
            "--cluster-yes".into(),
        ]);
        let remaining = CLUSTER_DEADLINE.saturating_sub(started.elapsed());
        let create_refs: Vec<&str> = create.iter().map(String::as_str).collect();
        let mut cmd = Command::new(redis_cli());
        cmd.args(&create_refs);
        match run_with_deadline(cmd, remaining) {
            Ok((status, _, _)) if status.success() => {}
            Ok((status, stdout, stderr)) => {
                panic!("redis-cli {create:?} failed ({status}):\n{stdout}\n{stderr}")
            }
            Err(why) => panic!("redis-cli {create:?}: {why}"),
        }

        let cluster = RedisCluster { nodes };
        cluster.wait_formed(started, count);
        cluster
    }

    /// Waits until every node says `cluster_state:ok` with all slots
    /// assigned and `count` nodes known, and every replica has synced; fails
    /// the test with each node's state and log at [`CLUSTER_DEADLINE`] after
    /// `started`.
    fn wait_formed(&self, started: Instant, count: usize) {
        loop {
            let states: Vec<String> = self
                .nodes
                .iter()
                .map(|n| {
                    probe(n.port, &["CLUSTER", "INFO"])
                        .unwrap_or_else(|why| why)
                        .replace("\r\n", "\n")
                })
                .collect();
            let ready = states.iter().all(|s| {
                has_line(s, "cluster_state:ok")
                    && has_line(s, "cluster_slots_assigned:16384")
                    && has_line(s, &format!("cluster_known_nodes:{count}"))
            }) && self.replicas_synced();
            if ready {
                return;
            }
            if started.elapsed() >= CLUSTER_DEADLINE {
                let report: Vec<String> = self
                    .nodes
                    .iter()
                    .zip(&states)
                    .map(|(n, s)| {
                        format!(
                            "--- node {}: CLUSTER INFO\n{s}\n{}",
                            n.port,
                            log_tail(n.dir.path())
                        )
                    })
                    .collect();
                panic!(
                    "cluster did not reach cluster_state:ok on every node within {CLUSTER_DEADLINE:?}\n{}",
                    report.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The nodes that are replicas now (`ROLE` says `slave`).
    pub fn replicas(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.role(i) == "slave")
            .collect()
    }

    /// Whether every replica has its first copy of its master's data (a
    /// manual failover waits for the replica to catch up, and times out
    /// while it is still making that copy).
    fn replicas_synced(&self) -> bool {
        self.nodes.iter().all(|n| {
            let info = probe(n.port, &["INFO", "replication"])
                .unwrap_or_default()
                .replace("\r\n", "\n");
            !has_line(&info, "role:slave") || has_line(&info, "master_link_status:up")
        })
    }

    /// Node `i`'s `ROLE` and the tail of its log, for a failure message.
    pub fn report(&self, i: usize) -> String {
        let n = &self.nodes[i];
        let role = n.cli(&["ROLE"]);
        // A replica's ROLE names its master's port on its third line.
        let master = role
            .lines()
            .nth(2)
            .and_then(|p| self.nodes.iter().find(|m| m.port.to_string() == p.trim()));
        let master = master.map_or_else(String::new, |m| {
            format!("--- its master {}:\n{}", m.port, log_tail(m.dir.path()))
        });
        format!(
            "--- node {}: ROLE\n{role}\n{}\n{master}",
            n.port,
            log_tail(n.dir.path())
        )
    }

    /// What node `i` says it is: `master` or `slave`.
    pub fn role(&self, i: usize) -> String {
        let out = self.nodes[i].cli(&["ROLE"]);
        out.lines().next().unwrap_or_default().trim().to_string()
    }

    /// "redis://127.0.0.1:P1": one seed node is enough for a cluster client.
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }

    /// Every node, for clients that take several seeds or tests that want to
    /// reach a node other than the first.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

fn cluster_enabled(args: &[String]) -> bool {
    args.windows(2)
        .any(|w| w[0] == "--cluster-enabled" && w[1].eq_ignore_ascii_case("yes"))
}

fn has_line(text: &str, line: &str) -> bool {
    text.lines().any(|l| l.trim() == line)
}

/// A loopback port nobody listens on right now; with `cluster`, one whose
/// bus port (port + 10000) is also free and at most 65535. Ephemeral ports
/// above 55535 have no valid bus port, so those are drawn again.
fn free_port(cluster: bool) -> u16 {
    for _ in 0..200 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
        let port = listener.local_addr().unwrap().port();
        if !cluster {
            return port;
        }
        let Some(bus) = port.checked_add(CLUSTER_BUS_OFFSET) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", bus)).is_ok() {
            return port;
        }
    }
    panic!("found no free loopback port with a free cluster bus port in 200 tries");
}

fn log_path(dir: &Path) -> PathBuf {
    dir.join("redis.log")
}

/// Whether process `pid` logged that its port (or cluster bus port) was taken.
fn port_clash(dir: &Path, pid: u32) -> bool {
    let prefix = format!("{pid}:");
    std::fs::read_to_string(log_path(dir)).is_ok_and(|log| {
        log.lines()
            .any(|l| l.starts_with(&prefix) && l.contains("Address already in use"))
    })
}

/// Where redis-server's own stdout and stderr go. Normally empty, but
/// errors in its arguments are reported there, before the log file is open.
fn stdio_path(dir: &Path) -> PathBuf {
    dir.join("redis-stdio.log")
}

/// The last 40 lines of a server's log and of its stdout/stderr: where
/// redis-server says why it would not start (port in use, bad argument, AOF
/// corrupt).
fn log_tail(dir: &Path) -> String {
    let tail = |path: &Path| match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(40)..].join("\n")
        }
        Err(e) => format!("(unreadable: {e})"),
    };
    let mut out = format!(
        "--- tail of {}:\n{}",
        log_path(dir).display(),
        tail(&log_path(dir))
    );
    let stdio = stdio_path(dir);
    if std::fs::metadata(&stdio).is_ok_and(|m| m.len() > 0) {
        out += &format!("\n--- tail of {}:\n{}", stdio.display(), tail(&stdio));
    }
    out
}

fn spawn(server: &Path, port: u16, dir: &Path, args: &[String]) -> Child {
    // A file, not a pipe: nobody reads a running server's output, and a full
    // pipe would stall it.
    let stdio = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(stdio_path(dir))
        .expect("opening redis-server's stdout/stderr file");
    Command::new(server)
        .arg("--port")
        .arg(port.to_string())
        .args([
            "--bind",
            "127.0.0.1",
            "--protected-mode",
            "no",
            "--daemonize",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(log_path(dir))
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdio.try_clone().expect("duplicating a file handle"))
        .stderr(stdio)
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {}: {e}", server.display()))
}

/// Waits until this child, not some other process that holds the port,
/// answers PING and has finished loading its data.
fn wait_ready(child: &mut Child, port: u16, limit: Duration) -> Result<(), String> {
    let started = Instant::now();
    let pid = child.id().to_string();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!(
                "redis-server exited with {status} before answering PING"
            ));
        }
        let answer = probe(port, &["PING"]);
        // A server loading a large data set answers LOADING until it is
        // done: it is making progress, so it gets longer (a long soak's AOF
        // takes more than `limit` to load on a busy machine).
        let loading = answer.as_deref().is_ok_and(|a| a.starts_with("LOADING"));
        if answer.as_deref() == Ok("PONG") {
            let server = probe(port, &["INFO", "server"]).unwrap_or_default();
            let ours = server
                .lines()
                .any(|l| l.trim() == format!("process_id:{pid}"));
            if ours {
                let persistence = probe(port, &["INFO", "persistence"]).unwrap_or_default();
                if has_line(&persistence.replace("\r\n", "\n"), "loading:0") {
                    return Ok(());
                }
            }
            // Another process answering: ours will fail to bind and exit,
            // which the `try_wait` above reports on the next round.
        }
        let limit_now = if loading { LOADING_DEADLINE } else { limit };
        if started.elapsed() >= limit_now {
            return Err(format!(
                "redis-server (pid {pid}) did not answer PING with PONG and loading:0 within {limit_now:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// `redis-cli -h 127.0.0.1 -p PORT ARGS`: trimmed stdout, or why it failed.
fn cli_at(port: u16, args: &[&str]) -> Result<String, String> {
    cli_within(port, args, CLI_DEADLINE)
}

fn probe(port: u16, args: &[&str]) -> Result<String, String> {
    cli_within(port, args, PROBE_DEADLINE)
}

fn cli_within(port: u16, args: &[&str], limit: Duration) -> Result<String, String> {
    let mut cmd = Command::new(redis_cli());
    cmd.args(["-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(args);
    let (status, stdout, stderr) = run_with_deadline(cmd, limit)?;
    if status.success() {
        Ok(stdout.trim().to_string())
    } else {
        Err(format!(
            "exit {status}; stderr: {}; stdout: {}",
            stderr.trim(),
            stdout.trim()
        ))
    }
}
