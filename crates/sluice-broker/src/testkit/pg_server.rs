//! Real PostgreSQL servers for tests of the PostgreSQL broker.
//!
//! Each test gets a cluster of its own: `initdb` into a temporary directory
//! and a postmaster on a free loopback port with its Unix socket in that
//! directory, so tests can run in parallel and never meet the system
//! PostgreSQL (port 5432, /var/run/postgresql). Set-up and checks go through
//! `psql` as a subprocess, so the harness shares no client code with the
//! broker it is testing.
//!
//! PostgreSQL refuses to run as root, and CI runs the tests as root. Then
//! `initdb`, `pg_ctl` and the server run as the `postgres` system user
//! through `runuser`, in a temporary directory handed over to that user.
//!
//! Every wait here has a deadline: a server that will not come up fails the
//! test with the tail of its log instead of hanging the suite.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::process::run_with_deadline;

/// `pg_ctl -t`: how long a server gets to start or stop.
const CTL_WAIT_SECS: &str = "30";
/// How long one `initdb` or `pg_ctl` run may take: longer than `pg_ctl -t`,
/// so that pg_ctl's own report of a slow server comes first.
const CTL_DEADLINE: Duration = Duration::from_secs(45);
/// How long one `psql` run may take; a frozen server must not hang a test.
const PSQL_DEADLINE: Duration = Duration::from_secs(30);
/// How long a quick helper (`id`, `pg_config`, `useradd`) may take.
const TOOL_DEADLINE: Duration = Duration::from_secs(10);
/// Attempts at starting on a fresh port when another process took ours first.
const START_ATTEMPTS: usize = 5;
/// The system user the server runs as when the tests run as root.
const SERVER_USER: &str = "postgres";
/// `openssl` runs that make a CA and a server certificate for 127.0.0.1
/// signed by it (`PgServer::enable_tls`).
const OPENSSL: [&str; 3] = [
    "req -x509 -nodes -days 2 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
     -keyout ca.key -out ca.pem -subj /CN=sluice-test-ca",
    "req -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
     -keyout server.key -out server.csr -subj /CN=127.0.0.1",
    "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
     -extfile server.ext -out server.crt",
];
/// The programs the harness needs from the server's bin directory.
const PROGRAMS: [&str; 4] = ["initdb", "pg_ctl", "postgres", "psql"];

/// The directory holding `initdb`, `pg_ctl`, `postgres` and `psql`.
///
/// Debian keeps them off PATH, under /usr/lib/postgresql/VERSION/bin, so
/// this asks `pg_config --bindir` and then takes the newest version there.
/// A missing PostgreSQL is a broken test machine, not a reason to skip: a
/// skipped broker test would pass silently and hide regressions.
fn require_postgres() -> PathBuf {
    let from_pg_config = run_with_deadline(tool("pg_config", &["--bindir"]), TOOL_DEADLINE)
        .ok()
        .filter(|(status, _, _)| status.success())
        .map(|(_, stdout, _)| PathBuf::from(stdout.trim()));
    from_pg_config
        .into_iter()
        .chain(debian_bin_dirs())
        .find(|dir| PROGRAMS.iter().all(|p| is_executable(&dir.join(p))))
        .unwrap_or_else(|| {
            panic!(
                "PostgreSQL server not found: install it with `apt-get install postgresql` (scripts/test does this)"
            )
        })
}

/// /usr/lib/postgresql/*/bin, newest version first.
fn debian_bin_dirs() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") else {
        return Vec::new();
    };
    let mut versions: Vec<(Vec<u32>, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let version = name.split('.').map(str::parse).collect::<Result<_, _>>();
            Some((version.ok()?, e.path().join("bin")))
        })
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0));
    versions.into_iter().map(|(_, dir)| dir).collect()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `None` to run the server programs as ourselves; the uid of `postgres`
/// when we are root, creating that system user if it is missing.
fn server_uid() -> Option<u32> {
    if uid_of(None) != Some(0) {
        return None;
    }
    if run_with_deadline(tool("runuser", &["--version"]), TOOL_DEADLINE).is_err() {
        panic!(
            "runuser not found: the tests run as root, and PostgreSQL must run as `{SERVER_USER}`; install util-linux"
        );
    }
    if let Some(uid) = uid_of(Some(SERVER_USER)) {
        return Some(uid);
    }
    // Tests starting servers in parallel may race to create the user; only
    // a user still missing afterwards is a failure.
    let useradd = tool("useradd", &["--system", "--no-create-home", SERVER_USER]);
    let why = match run_with_deadline(useradd, TOOL_DEADLINE) {
        Ok((status, _, stderr)) => format!("{status}: {}", stderr.trim()),
        Err(why) => why,
    };
    let uid = uid_of(Some(SERVER_USER)).unwrap_or_else(|| {
        panic!(
            "PostgreSQL refuses to run as root, and there is no `{SERVER_USER}` user to run it as: \
             `useradd --system --no-create-home {SERVER_USER}` failed ({why}); create that user"
        )
    });
    Some(uid)
}

/// `id -u [USER]`: our own uid, or that of a user (`None` if there is none).
fn uid_of(user: Option<&str>) -> Option<u32> {
    let mut id = tool("id", &["-u"]);
    id.args(user);
    let (status, stdout, _) =
        run_with_deadline(id, TOOL_DEADLINE).unwrap_or_else(|why| panic!("{why}"));
    if !status.success() {
        return None;
    }
    stdout.trim().parse().ok()
}

/// A PostgreSQL cluster and its postmaster that the test owns, with a login
/// role `sluice` owning a database `sluice`.
///
/// The data directory lives as long as the struct, across restarts, stops
/// and starts, so a server started again finds its data again.
pub struct PgServer {
    port: u16,
    bin: PathBuf,
    /// Whether the server programs run as `postgres` through `runuser`.
    as_server_user: bool,
    /// Whether commits wait for the disk (`fsync`, full page writes).
    durable: bool,
    // `Drop` stops the server before any field is dropped, so the directory
    // is never removed under a live server.
    dir: tempfile::TempDir,
}

impl PgServer {
    /// A fresh cluster on a free loopback port: `initdb` with trust
    /// authentication, then `pg_ctl start`, then the `sluice` role and
    /// database. Durability is off (`fsync=off`): a test cluster is thrown
    /// away, and a crash of the machine is not what the tests exercise.
    pub fn start() -> Self {
        Self::start_as(false)
    }

    /// A cluster as durable as a production one (`fsync`, full page writes
    /// and `synchronous_commit` on, the defaults): for the benchmarks.
    pub fn start_durable() -> Self {
        Self::start_as(true)
    }

    fn start_as(durable: bool) -> Self {
        let bin = require_postgres();
        let uid = server_uid();
        let dir = tempfile::Builder::new()
            .prefix("sluice-pg-")
            .tempdir()
            .expect("temp dir for PostgreSQL");
        if let Some(uid) = uid {
            std::os::unix::fs::chown(dir.path(), Some(uid), None).unwrap_or_else(|e| {
                panic!(
                    "handing {} to the `{SERVER_USER}` user: {e}",
                    dir.path().display()
                )
            });
        }
        let mut server = PgServer {
            port: 0,
            bin,
            as_server_user: uid.is_some(),
            durable,
            dir,
        };
        server.initdb();

        // Free ports are found by binding port 0 and letting go, so another
        // process can take the port before the postmaster binds it. Then it
        // exits at once: try again on a new port. Any other failure would
        // fail the same way again, so it ends the test at once.
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            server.port = free_port();
            let logged = server.log_len();
            match server.pg_ctl_up(&["start"]) {
                Ok(()) => {
                    server.create_sluice_database();
                    return server;
                }
                Err(why) => {
                    failures.push(format!("port {}: {why}", server.port));
                    if !server.logged_since(logged, "Address already in use") {
                        break;
                    }
                }
            }
        }
        panic!(
            "PostgreSQL failed to start ({} attempts):\n{}\n{}",
            failures.len(),
            failures.join("\n"),
            server.log_tail()
        );
    }

    /// Stays the same across restarts, so it can be baked into configs.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// "postgres://sluice@127.0.0.1:PORT/sluice": what the broker is given.
    pub fn url(&self) -> String {
        format!("postgres://sluice@127.0.0.1:{}/sluice", self.port)
    }

    /// "postgres://postgres@127.0.0.1:PORT/postgres": the superuser, for
    /// tests that look behind the broker's back (sessions, locks, roles).
    pub fn admin_url(&self) -> String {
        format!("postgres://{SERVER_USER}@127.0.0.1:{}/postgres", self.port)
    }

    /// The postmaster's pid, from `postmaster.pid` in the data directory.
    pub fn pid(&self) -> u32 {
        let path = self.data_dir().join("postmaster.pid");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e} (is the server up?)", path.display()));
        let first = text.lines().next().unwrap_or_default();
        first
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{} starts with {first:?}: {e}", path.display()))
    }

    /// Runs SQL as the superuser in the database `sluice` and returns the
    /// rows `psql -At` prints (unaligned, `|` between columns, one row a
    /// line); fails the test with psql's stderr when the SQL fails.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_in("sluice", &[sql])
            .unwrap_or_else(|why| panic!("psql {sql:?} on port {}: {why}", self.port))
    }

    /// Runs SQL that must fail, as [`PgServer::psql`] does; psql's error.
    pub fn psql_err(&self, sql: &str) -> String {
        match self.psql_in("sluice", &[sql]) {
            Ok(rows) => panic!("psql {sql:?} on port {} succeeded: {rows}", self.port),
            Err(why) => why,
        }
    }

    /// `pg_ctl restart -m fast`: open sessions are ended, committed data
    /// stays. Returns once the server accepts connections again.
    pub fn restart(&self) {
        self.pg_ctl_up(&["restart", "-m", "fast"])
            .unwrap_or_else(|why| {
                panic!("PostgreSQL failed to restart: {why}\n{}", self.log_tail())
            });
    }

    /// `pg_ctl stop -m fast`, for tests that keep the server down a while;
    /// `start_again` brings it back.
    pub fn stop(&self) {
        self.pg_ctl(&["stop", "-m", "fast", "-w", "-t", CTL_WAIT_SECS])
            .unwrap_or_else(|why| panic!("PostgreSQL failed to stop: {why}\n{}", self.log_tail()));
    }

    /// Starts a stopped server again on the same port, with its data.
    ///
    /// The port cannot change (clients hold `url()`), so if another process
    /// took it in the meantime this retries briefly and then fails the test.
    pub fn start_again(&self) {
        let mut failures = Vec::new();
        for attempt in 0..START_ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(500));
            }
            match self.pg_ctl_up(&["start"]) {
                Ok(()) => return,
                Err(why) => failures.push(why),
            }
        }
        panic!(
            "PostgreSQL on port {} failed to start again {START_ATTEMPTS} times:\n{}\n{}",
            self.port,
            failures.join("\n"),
            self.log_tail()
        );
    }

    /// Turn TLS on: a new CA and a server certificate for 127.0.0.1 signed
    /// by it (made with `openssl`), then `ssl = on` and a reload. Returns
    /// the CA certificate's path, for `sslrootcert`.
    pub fn enable_tls(&self) -> PathBuf {
        let tls = self.dir.path().join("tls");
        std::fs::create_dir_all(&tls).unwrap();
        std::fs::write(
            tls.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        for args in OPENSSL {
            let mut cmd = Command::new("openssl");
            cmd.args(args.split_whitespace()).current_dir(&tls);
            match run_with_deadline(cmd, TOOL_DEADLINE) {
                Ok((status, _, _)) if status.success() => {}
                Ok((status, _, stderr)) => panic!("openssl {args}: {status}: {stderr}"),
                Err(why) => {
                    panic!("openssl {args}: {why}: install it with `apt-get install openssl`")
                }
            }
        }
        // The server reads its key only when it is its own and private.
        for file in ["server.key", "server.crt"] {
            let path = tls.join(file);
            std::os::unix::fs::chown(&path, server_uid(), None).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
        }
        std::os::unix::fs::chown(&tls, server_uid(), None).unwrap();
        let cert = tls.join("server.crt").display().to_string();
        let key = tls.join("server.key").display().to_string();
        self.psql_in(
            "postgres",
            &[
                &format!("ALTER SYSTEM SET ssl_cert_file = '{cert}'"),
                &format!("ALTER SYSTEM SET ssl_key_file = '{key}'"),
                "ALTER SYSTEM SET ssl = on",
                "SELECT pg_reload_conf()",
            ],
        )
        .unwrap_or_else(|why| panic!("turning TLS on: {why}\n{}", self.log_tail()));
        // New sessions see the reloaded settings once the postmaster has.
        let started = std::time::Instant::now();
        while self.psql("SHOW ssl") != "on" {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "ssl still off 10 s after the reload\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        tls.join("ca.pem")
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// The postmaster's settings, passed on every start so a restarted
    /// server is the same server: loopback only, its own port and socket
    /// directory (never /var/run/postgresql), no waiting on the disk, and
    /// room for a broker's pool plus a test's own connections.
    fn options(&self) -> String {
        let durability = if self.durable {
            "-c synchronous_commit=on"
        } else {
            "-c fsync=off -c full_page_writes=off"
        };
        format!(
            "-c listen_addresses=127.0.0.1 -p {} -c unix_socket_directories='{}' \
             {durability} -c max_connections=200",
            self.port,
            self.dir.path().display()
        )
    }

    fn initdb(&self) {
        let mut cmd = self.server_program("initdb");
        cmd.arg("-D").arg(self.data_dir());
        cmd.args(["-A", "trust", "-U", SERVER_USER, "--no-sync"]);
        cmd.args(["-E", "UTF8", "--locale=C"]);
        match run_with_deadline(cmd, CTL_DEADLINE) {
            Ok((status, _, _)) if status.success() => {}
            Ok((status, stdout, stderr)) => {
                panic!("initdb failed ({status}):\n{stdout}\n{stderr}")
            }
            Err(why) => panic!("{why}"),
        }
    }

    /// `pg_ctl ACTION`, waiting until the server accepts connections, with
    /// its log file and settings.
    fn pg_ctl_up(&self, action: &[&str]) -> Result<(), String> {
        let log = self.log_path().display().to_string();
        let options = self.options();
        let wait = ["-w", "-t", CTL_WAIT_SECS];
        self.pg_ctl(&[action, &wait, &["-l", &log, "-o", &options]].concat())
    }

    /// `pg_ctl -D DATA ARGS`, or what it printed when it failed.
    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let mut cmd = self.server_program("pg_ctl");
        cmd.arg("-D").arg(self.data_dir()).args(args);
        match run_with_deadline(cmd, CTL_DEADLINE)? {
            (status, _, _) if status.success() => Ok(()),
            (status, stdout, stderr) => Err(format!(
                "pg_ctl {args:?} exited with {status}:\n{}\n{}",
                stdout.trim(),
                stderr.trim()
            )),
        }
    }

    /// The role the broker logs in as, and its database. Not a superuser,
    /// so the broker's tests catch any need for more privileges than a
    /// production database would grant.
    fn create_sluice_database(&self) {
        self.psql_in(
            "postgres",
            &[
                "CREATE ROLE sluice LOGIN",
                "CREATE DATABASE sluice OWNER sluice",
            ],
        )
        .unwrap_or_else(|why| {
            panic!(
                "creating the sluice role and database: {why}\n{}",
                self.log_tail()
            )
        });
    }

    /// Each statement in its own `-c`, so `CREATE DATABASE` runs outside a
    /// transaction. `-X` skips any ~/.psqlrc and `-q` the command tags, so
    /// the output is the rows alone.
    fn psql_in(&self, database: &str, statements: &[&str]) -> Result<String, String> {
        let mut cmd = Command::new(self.bin.join("psql"));
        clean_env(&mut cmd);
        let port = self.port.to_string();
        cmd.args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &port])
            .args(["-U", SERVER_USER, "-d", database]);
        for sql in statements {
            cmd.args(["-c", sql]);
        }
        match run_with_deadline(cmd, PSQL_DEADLINE)? {
            (status, stdout, _) if status.success() => {
                Ok(stdout.trim_end_matches('\n').to_string())
            }
            (status, _, stderr) => Err(format!("exit {status}: {}", stderr.trim())),
        }
    }

    /// `initdb` or `pg_ctl`, run as `postgres` when we are root.
    fn server_program(&self, name: &str) -> Command {
        let program = self.bin.join(name);
        let mut cmd = if self.as_server_user {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", SERVER_USER, "--"]).arg(program);
            cmd
        } else {
            Command::new(program)
        };
        // Our working directory may be closed to the server user.
        cmd.current_dir(self.dir.path());
        clean_env(&mut cmd);
        cmd
    }

    /// The server log's length now: an offset for [`PgServer::log_since`].
    pub fn log_len(&self) -> usize {
        std::fs::read(self.log_path()).map_or(0, |log| log.len())
    }

    /// What the server logged after the log's first `offset` bytes.
    pub fn log_since(&self, offset: usize) -> String {
        std::fs::read(self.log_path()).map_or_else(
            |_| String::new(),
            |log| String::from_utf8_lossy(log.get(offset..).unwrap_or_default()).into_owned(),
        )
    }

    /// Whether the log got a line containing `needle` after its first
    /// `offset` bytes.
    fn logged_since(&self, offset: usize, needle: &str) -> bool {
        self.log_since(offset).contains(needle)
    }

    /// The last 40 lines of the server log: where PostgreSQL says why it
    /// would not start (port in use, bad setting, shared memory).
    fn log_tail(&self) -> String {
        let path = self.log_path();
        let tail = match std::fs::read_to_string(&path) {
            Ok(text) => {
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(40)..].join("\n")
            }
            Err(e) => format!("(unreadable: {e})"),
        };
        format!("--- tail of {}:\n{tail}", path.display())
    }
}

impl Drop for PgServer {
    /// `pg_ctl stop -m immediate`, errors ignored (the server may be down
    /// already). A test that panics still unwinds through here, so no
    /// server outlives its test or keeps its port.
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w", "-t", CTL_WAIT_SECS]);
    }
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
    listener.local_addr().unwrap().port()
}

/// The same programs whatever the environment: libpq variables (PGHOST,
/// PGPORT, PGDATA, ...) would redirect psql and pg_ctl, and a non-English
/// locale would change the log lines this harness looks for.
fn clean_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            cmd.env_remove(key);
        }
    }
    cmd.env("LC_ALL", "C");
}

fn tool(program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args);
    cmd
}
