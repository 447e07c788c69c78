//! The admin endpoint of a real `sluice run`: health, the JSON API, pause
//! and resume across hosts, metrics, the token, and its bad input. On every
//! broker.

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Env, wait_until};

/// A `sluice run` serving its admin endpoint on a port of its own; killed
/// when dropped.
pub struct AdminHost {
    pub child: Child,
    pub base: String,
    /// Its log (stderr).
    pub log: PathBuf,
    agent: ureq::Agent,
    token: Option<String>,
}

impl AdminHost {
    /// Start `sluice run` on `env`'s handlers with the admin endpoint on a
    /// free loopback port, and wait until it answers `/healthz`.
    pub fn start(env: &Env, name: &str) -> AdminHost {
        let port = free_port();
        AdminHost::start_on(env, name, &format!("127.0.0.1:{port}"), &[])
    }

    /// As [`AdminHost::start`], on `addr`, with more environment variables.
    pub fn start_on(env: &Env, name: &str, addr: &str, vars: &[(&str, &str)]) -> AdminHost {
        let log = env.dir.path().join(format!("{name}.log"));
        let handlers = env.handlers.to_str().unwrap().to_string();
        let mut cmd = env.command(&["run", "--handlers", &handlers, "--admin", addr]);
        cmd.envs(vars.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = cmd.spawn().expect("spawning sluice run");
        let port = addr.rsplit(':').next().unwrap();
        let host = AdminHost {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
            agent: agent(),
            token: vars
                .iter()
                .find(|(k, _)| *k == "SLUICE_ADMIN_TOKEN")
                .map(|(_, v)| v.to_string()),
        };
        wait_until(
            Duration::from_secs(60),
            "the admin endpoint answers",
            || host.get("/healthz").0 == 200,
        );
        host
    }

    /// `GET path`, with the token if there is one: status and body.
    pub fn get(&self, path: &str) -> (u16, String) {
        self.request("GET", path, self.token.as_deref())
    }

    /// `POST path` (no body), with the token if there is one.
    pub fn post(&self, path: &str) -> (u16, String) {
        self.request("POST", path, self.token.as_deref())
    }

    /// `GET path` expecting 200 and JSON.
    pub fn json(&self, path: &str) -> Value {
        let (status, body) = self.get(path);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    pub fn request(&self, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
        let url = format!("{}{path}", self.base);
        let with = |r: ureq::RequestBuilder<ureq::typestate::WithoutBody>| match token {
            Some(t) => r.header("Authorization", format!("Bearer {t}")),
            None => r,
        };
        let result = match method {
            "GET" => with(self.agent.get(&url)).call(),
            "POST" => {
                // The header every request that changes state carries.
                let r = self.agent.post(&url).header("X-Sluice-Request", "1");
                let r = match token {
                    Some(t) => r.header("Authorization", format!("Bearer {t}")),
                    None => r,
                };
                r.send_empty()
            }
            _ => unreachable!(),
        };
        match result {
            Ok(mut resp) => (
                resp.status().as_u16(),
                resp.body_mut().read_to_string().unwrap_or_default(),
            ),
            // Not up yet, or gone.
            Err(_) => (0, String::new()),
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for AdminHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP client that returns 4xx and 5xx answers rather than failing.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// An answer's status and its body as JSON.
fn json((status, body): (u16, String)) -> (u16, Value) {
    let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (status, v)
}

/// A loopback port free right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

const ORDERS: &str = r#"
[retry]
max_attempts = 1
[config]
followup_queue = "shipping"
"#;

/// Queues, handlers, topics and dead letters through the API, as the CLI
/// shows them; replay and purge; health and readiness.
fn the_api_shows_and_steers_what_the_cli_does(env: Env) {
    env.deploy(
        "hello",
        "hello",
        Some("[[schedule]]\nname = \"hourly\"\ncron = \"0 * * * *\"\n"),
    );
    env.deploy("orders", "orders", Some(ORDERS));
    for i in 0..3 {
        env.send("orders", &format!("not json {i}"), &[]);
    }
    env.send("hello", "hi", &[]);
    let host = AdminHost::start(&env, "host");
    assert_eq!(host.json("/healthz")["status"], "ok");
    wait_until(Duration::from_secs(30), "three dead letters", || {
        host.json("/api/queues/orders")["dead"] == 3
    });
    wait_until(Duration::from_secs(30), "ready", || {
        host.get("/readyz").0 == 200
    });
    assert_eq!(host.json("/readyz")["ready"], true);

    let queues = host.json("/api/queues");
    let names: Vec<&str> = queues
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["queue"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"orders") && names.contains(&"hello"),
        "{queues}"
    );
    wait_until(Duration::from_secs(30), "both handlers reported", || {
        host.json("/api/handlers").as_array().unwrap().len() == 2
    });
    let handlers = host.json("/api/handlers");
    let orders = handlers
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["handler"] == "orders")
        .unwrap();
    assert_eq!(orders["queue"], "orders");
    assert_eq!(orders["version"].as_str().unwrap().len(), 16, "{orders}");
    assert!(host.json("/api/topics").is_array());
    // The schedule, once the host has seen it (its first tick is recorded
    // then), with the next hour as its next tick.
    wait_until(Duration::from_secs(30), "the schedule seen", || {
        host.json("/api/schedules")[0]["last_tick_ms"].is_u64()
    });
    let schedules = host.json("/api/schedules");
    let [hourly] = &schedules.as_array().unwrap()[..] else {
        panic!("one schedule: {schedules}")
    };
    assert_eq!(
        (&hourly["queue"], &hourly["schedule"], &hourly["cron"]),
        (&json!("hello"), &json!("hourly"), &json!("0 * * * *")),
        "{hourly}"
    );
    let next = hourly["next_tick_ms"].as_u64().unwrap();
    let last = hourly["last_tick_ms"].as_u64().unwrap();
    assert!(
        next % 3_600_000 == 0 && next > last && next - last <= 3_600_000,
        "{hourly}"
    );

    // A page of dead letters, then the next; one shown in full.
    let page = host.json("/api/queues/orders/dead?limit=2");
    assert_eq!(page["total"], 3);
    assert_eq!(page["dead_letters"].as_array().unwrap().len(), 2, "{page}");
    let rest = host.json("/api/queues/orders/dead?limit=2&offset=2");
    assert_eq!(rest["dead_letters"].as_array().unwrap().len(), 1, "{rest}");
    let id = rest["dead_letters"][0]["id"].as_str().unwrap().to_string();
    let shown = host.json(&format!("/api/queues/orders/dead/{id}"));
    assert_eq!(shown["payload"], "not json 2");
    assert!(
        shown["reason"].as_str().unwrap().contains("reject"),
        "{shown}"
    );

    // Replay one: it is handled (and dies) again, as the CLI's replay would.
    let answer = host.post(&format!("/api/queues/orders/dead/replay?id={id}"));
    assert_eq!(
        json(answer),
        (200, json!({"queue": "orders", "replayed": 1}))
    );
    wait_until(
        Duration::from_secs(30),
        "the replayed letter dies again",
        || {
            let (status, body) = host.get(&format!("/api/queues/orders/dead/{id}"));
            status == 200 && body.contains("\"attempts\":1")
        },
    );
    assert_eq!(host.json("/api/queues/orders")["dead"], 3);
    // Purge, then replaying from an empty store is a count of 0.
    let answer = host.post("/api/queues/orders/dead/purge");
    assert_eq!(json(answer), (200, json!({"queue": "orders", "purged": 3})));
    let answer = host.post("/api/queues/orders/dead/replay");
    assert_eq!(
        json(answer),
        (200, json!({"queue": "orders", "replayed": 0}))
    );
    assert_eq!(env.count("orders", "dead"), 0);
}

/// Unknown routes, bad parameters and missing dead letters: JSON errors
/// that name what is wrong.
fn bad_requests_get_json_errors_that_name_the_parameter(env: Env) {
    env.deploy("hello", "hello", None);
    let host = AdminHost::start(&env, "host");
    let error = |(status, body): (u16, String)| -> (u16, String) {
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {body}"));
        (status, v["error"].as_str().unwrap_or_default().to_string())
    };
    let (s, e) = error(host.get("/nope"));
    assert_eq!(s, 404);
    assert!(e.contains("GET /nope"), "{e}");
    let (s, e) = error(host.get("/api/queues/hello/dead?limit=many"));
    assert_eq!(s, 400);
    assert!(e.starts_with("limit: bad number \"many\""), "{e}");
    let (s, e) = error(host.get("/api/queues/hello/dead?limit=0"));
    assert!(s == 400 && e.starts_with("limit:"), "{s} {e}");
    let (s, e) = error(host.get("/api/queues/hello/dead?offset=-1"));
    assert!(s == 400 && e.starts_with("offset:"), "{s} {e}");
    let (s, e) = error(host.get("/api/queues/hello/dead?colour=red"));
    assert!(
        s == 400 && e.starts_with("colour: unknown parameter"),
        "{s} {e}"
    );
    let (s, e) = error(host.post("/api/queues/hello/dead/replay?older_than=soon"));
    assert!(
        s == 400 && e.starts_with("older_than: bad duration"),
        "{s} {e}"
    );
    let (s, e) = error(host.post("/api/queues/hello/dead/replay?limit=x"));
    assert!(s == 400 && e.starts_with("limit: bad number"), "{s} {e}");
    let (s, e) = error(host.get("/api/queues/hello/dead/nosuchid"));
    assert!(s == 404 && e.contains("nosuchid"), "{s} {e}");
    // Names no queue can have, and a NUL (which PostgreSQL's text cannot
    // hold), are refused before any broker sees them, the same on each.
    for path in [
        "/api/queues/a%00b",
        "/api/queues/a%2Fb/dead",
        "/api/queues/a%00b/dead/x",
    ] {
        let (s, e) = error(host.get(path));
        assert!(
            s == 400 && e.starts_with("bad queue name"),
            "{path}: {s} {e}"
        );
    }
    let (s, e) = error(host.post("/api/queues/a%00b/pause"));
    assert!(s == 400 && e.starts_with("bad queue name"), "{s} {e}");
    let (s, e) = error(host.get("/api/queues/hello/dead/x%00y"));
    assert!(s == 404 && e.contains(r#""x\0y""#), "{s} {e}");
    let (s, e) = error(host.post("/api/queues/hello/dead/replay?id=x%00y"));
    assert!(
        s == 400 && e.starts_with("id: no dead letter id holds a NUL"),
        "{s} {e}"
    );
    // Known routes with the wrong method are not found either.
    assert_eq!(host.get("/api/queues/hello/pause").0, 405);
}

/// A pause is stored in the broker and every host honours it: messages
/// wait with their attempts as they were; a resume lets them through.
fn a_paused_queue_waits_on_every_host_until_resumed(env: Env) {
    env.deploy("hello", "hello", None);
    let a = AdminHost::start(&env, "a");
    let b = AdminHost::start(&env, "b");
    env.send("hello", "before", &[]);
    wait_until(Duration::from_secs(30), "the first message", || {
        env.count("hello", "done") == 1
    });
    // Paused from the CLI; stats say so.
    let out = env.sluice(&["pause", "hello"]);
    assert!(out.contains("paused queue hello"), "{out}");
    assert_eq!(env.stats()["hello"]["paused"], true);
    // Within a second every host has it.
    std::thread::sleep(Duration::from_millis(1200));
    for host in [&a, &b] {
        let log = host.log_text();
        assert!(log.contains("queue paused"), "{log}");
    }
    for i in 0..10 {
        env.send("hello", &format!("while paused {i}"), &[]);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let q = a.json("/api/queues/hello");
    assert_eq!(
        (q["ready"].as_u64(), q["in_flight"].as_u64()),
        (Some(10), Some(0)),
        "{q}"
    );
    assert_eq!(q["done"], 1);
    assert_eq!(q["paused"], true);
    // Resumed through the other host's API: all of them are handled, each
    // on its first attempt (none retried, none dead).
    let answer = b.post("/api/queues/hello/resume");
    assert_eq!(
        json(answer),
        (200, json!({"queue": "hello", "paused": false}))
    );
    wait_until(
        Duration::from_secs(30),
        "all handled after the resume",
        || env.count("hello", "done") == 11,
    );
    let stats = env.stats();
    assert_eq!(stats["hello"]["retried"], 0);
    assert_eq!(stats["hello"]["dead"], 0);
    assert_eq!(stats["hello"]["paused"], false);
    // Paused through the API, the queue's dashboard state follows.
    let (status, _) = a.post("/api/queues/hello/pause");
    assert_eq!(status, 200);
    assert_eq!(b.json("/api/queues/hello")["paused"], true);
    let out = env.sluice(&["stats"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("hello") && l.ends_with("paused")),
        "{out}"
    );
    env.sluice(&["resume", "hello"]);
    assert_eq!(env.stats()["hello"]["paused"], false);
}

/// `/metrics` counts outcomes per handler and version, and reads the queue
/// gauges from the broker; no label holds a message id.
fn metrics_count_outcomes_and_read_queue_gauges(env: Env) {
    // Warm instances stay alive between messages: the pool gauge sees them.
    env.deploy("hello", "hello", Some("instance_mode = \"reuse\"\n"));
    env.deploy("orders", "orders", Some(ORDERS));
    let ids: Vec<String> = (0..5)
        .map(|i| env.send("hello", &format!("m{i}"), &[]))
        .collect();
    env.send("orders", "not json", &[]);
    let host = AdminHost::start(&env, "host");
    wait_until(Duration::from_secs(30), "all handled", || {
        env.count("hello", "done") == 5 && env.count("orders", "dead") == 1
    });
    let (status, text) = host.get("/metrics");
    assert_eq!(status, 200, "{text}");
    let value = |prefix: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(value("sluice_messages_done_total{handler=\"hello\""), 5.0);
    assert_eq!(value("sluice_messages_dead_total{handler=\"orders\""), 1.0);
    assert_eq!(
        value("sluice_messages_rejected_total{handler=\"orders\""),
        1.0
    );
    assert_eq!(
        value("sluice_handle_duration_seconds_count{handler=\"hello\""),
        5.0
    );
    assert_eq!(
        value("sluice_queue_wait_seconds_count{handler=\"hello\""),
        5.0
    );
    assert_eq!(value("sluice_queue_dead{queue=\"orders\"}"), 1.0);
    assert_eq!(value("sluice_queue_ready{queue=\"hello\"}"), 0.0);
    assert_eq!(value("sluice_reloads_total"), 2.0);
    assert!(value("sluice_broker_request_duration_seconds_count{op=\"settle\"}") >= 1.0);
    assert!(value("sluice_pool_instances_in_use") >= 1.0);
    // orders runs fresh: it keeps spare instances made ahead of its messages.
    assert!(value("sluice_pool_spare_instances") >= 1.0);
    assert!(text.ends_with("# EOF\n"), "not OpenMetrics:\n{text}");
    for id in &ids {
        assert!(
            !text.contains(id.as_str()),
            "message id {id} in the metrics"
        );
    }
}

/// Off loopback the endpoint needs a token, and refuses to start without
/// one; a wrong token and a missing one get the same 401. Health stays open.
#[test]
fn a_token_guards_the_endpoint_off_loopback() {
    let env = Env::new();
    env.deploy("hello", "hello", None);
    let handlers = env.handlers.to_str().unwrap().to_string();
    let out = env.sluice_raw(&["run", "--handlers", &handlers, "--admin", "0.0.0.0:0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("0.0.0.0:0") && stderr.contains("SLUICE_ADMIN_TOKEN"),
        "{stderr}"
    );

    let port = free_port();
    let host = AdminHost::start_on(
        &env,
        "guarded",
        &format!("0.0.0.0:{port}"),
        &[("SLUICE_ADMIN_TOKEN", "s3cret")],
    );
    let missing = host.request("GET", "/api/queues", None);
    let wrong = host.request("GET", "/api/queues", Some("guess"));
    assert_eq!(missing.0, 401);
    assert_eq!(missing, wrong, "a wrong token must look like a missing one");
    assert_eq!(host.request("GET", "/metrics", None).0, 401);
    assert_eq!(host.request("POST", "/api/queues/hello/pause", None).0, 401);
    assert_eq!(host.get("/api/queues").0, 200);
    assert_eq!(host.request("GET", "/healthz", None).0, 200);
    // The dashboard's page holds no data; it asks for the token.
    let (status, page) = host.request("GET", "/", None);
    assert_eq!(status, 200);
    assert!(page.contains("Admin token"), "{page}");
}

/// An address that is taken stops the host at start, naming it.
#[test]
fn a_taken_admin_address_is_a_clear_start_up_error() {
    let env = Env::new();
    env.deploy("hello", "hello", None);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let handlers = env.handlers.to_str().unwrap().to_string();
    let out = env.sluice_raw(&["run", "--handlers", &handlers, "--admin", &addr]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("cannot bind the admin endpoint to {addr}"))
            && stderr.contains("--admin off"),
        "{stderr}"
    );
    // Off, nothing binds: the same host starts and drains.
    env.send("hello", "x", &[]);
    let out = env.sluice_raw(&[
        "run",
        "--handlers",
        &handlers,
        "--admin",
        "off",
        "--until-idle",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(env.count("hello", "done"), 1);
}

on_every_backend!(env:
    the_api_shows_and_steers_what_the_cli_does,
    bad_requests_get_json_errors_that_name_the_parameter,
    a_paused_queue_waits_on_every_host_until_resumed,
    metrics_count_outcomes_and_read_queue_gauges,
);
