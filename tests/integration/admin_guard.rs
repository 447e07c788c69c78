//! The admin endpoint refuses what a web page of another site could make
//! the operator's browser send: forged requests that change state (403) and
//! requests by a rebound name (421). Raw HTTP over a socket, so every header
//! is exactly what a browser or an attacker would send.

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

use crate::admin::{AdminHost, free_port};
use crate::support::{Env, wait_until};

/// One HTTP/1.1 request to `addr` with exactly `headers`: status and body.
fn raw(addr: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = if method == "POST" { "x" } else { "" };
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"));
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

/// The JSON error of a refusal.
fn why(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
    v["error"].as_str().unwrap_or_default().to_string()
}

fn paused(host: &AdminHost, queue: &str) -> bool {
    let row = host.json(&format!("/api/queues/{queue}"));
    row["paused"] == true
}

/// A host whose `work` queue holds one dead letter.
fn host_with_a_dead_letter(env: &Env) -> AdminHost {
    env.deploy("hostile_trap", "work", Some("[retry]\nmax_attempts = 1\n"));
    env.send("work", r#"{"order": 7}"#, &[]);
    let host = AdminHost::start(env, "host");
    wait_until(Duration::from_secs(30), "a dead letter", || {
        env.count("work", "dead") == 1
    });
    host
}

#[test]
fn forged_requests_change_nothing() {
    let env = Env::new();
    let host = host_with_a_dead_letter(&env);
    let addr = host.base.trim_start_matches("http://").to_string();
    let own = [("Host", addr.as_str())];
    // What any page can send without a preflight: a text/plain POST.
    let forged = [
        ("Host", addr.as_str()),
        ("Origin", "http://evil.example"),
        ("Content-Type", "text/plain"),
    ];
    for path in [
        "/api/queues/work/dead/replay",
        "/api/queues/work/pause",
        "/api/queues/work/dead/purge",
    ] {
        let (status, body) = raw(&addr, "POST", path, &forged);
        assert_eq!(status, 403, "POST {path}: {body}");
        assert!(why(&body).contains("X-Sluice-Request: 1"), "{body}");
        // Without an Origin (a form of an old browser, a script) too.
        let (status, body) = raw(&addr, "POST", path, &own);
        assert_eq!(status, 403, "POST {path}: {body}");
    }
    // The custom header with a foreign Origin is refused as well.
    let vouched_foreign = [
        ("Host", addr.as_str()),
        ("Origin", "http://evil.example"),
        ("X-Sluice-Request", "1"),
    ];
    let (status, body) = raw(&addr, "POST", "/api/queues/work/pause", &vouched_foreign);
    assert_eq!(status, 403, "{body}");
    assert!(why(&body).contains("http://evil.example"), "{body}");
    // No preflight is granted: OPTIONS carries no CORS allowance.
    let (_, body) = raw(&addr, "OPTIONS", "/api/queues/work/pause", &forged);
    assert!(!body.to_ascii_lowercase().contains("access-control-allow"));
    assert!(!paused(&host, "work"), "a forged request paused the queue");
    assert_eq!(
        env.count("work", "dead"),
        1,
        "a forged request moved the dead letter"
    );

    // The endpoint's own page, and a script that says so, still act.
    let own_page = format!("http://{addr}");
    let vouched = [
        ("Host", addr.as_str()),
        ("Origin", own_page.as_str()),
        ("X-Sluice-Request", "1"),
    ];
    let (status, body) = raw(&addr, "POST", "/api/queues/work/pause", &vouched);
    assert_eq!(status, 200, "{body}");
    assert!(paused(&host, "work"));
    let (status, body) = raw(&addr, "POST", "/api/queues/work/resume", &vouched[..1]);
    assert_eq!(status, 403, "{body}");
    let script = [("Host", addr.as_str()), ("X-Sluice-Request", "1")];
    let (status, body) = raw(&addr, "POST", "/api/queues/work/resume", &script);
    assert_eq!(status, 200, "{body}");
    assert!(!paused(&host, "work"));
}

#[test]
fn a_rebound_host_name_is_refused_on_every_route() {
    let env = Env::new();
    let host = host_with_a_dead_letter(&env);
    let addr = host.base.trim_start_matches("http://").to_string();
    let port = addr.rsplit(':').next().unwrap().to_string();
    let rebound = format!("attacker.example:{port}");
    for path in [
        "/api/queues",
        "/api/queues/work/dead",
        "/metrics",
        "/",
        "/healthz",
        "/nowhere",
    ] {
        let (status, body) = raw(&addr, "GET", path, &[("Host", &rebound)]);
        assert_eq!(status, 421, "GET {path}: {body}");
        let e = why(&body);
        assert!(
            e.contains("attacker.example") && e.contains("admin_hosts"),
            "{e}"
        );
        assert!(!body.contains("order"), "{body}");
    }
    let (status, _) = raw(&addr, "GET", "/api/queues", &[]);
    assert_eq!(status, 421, "a request without Host");
    // By address, and by localhost, everything works.
    for name in [
        addr.clone(),
        format!("localhost:{port}"),
        "127.0.0.1".into(),
    ] {
        let (status, body) = raw(&addr, "GET", "/api/queues", &[("Host", &name)]);
        assert_eq!(status, 200, "Host {name}: {body}");
    }
}

#[test]
fn admin_hosts_adds_names_and_is_checked() {
    let env = Env::new();
    env.deploy("hello", "hello", None);
    std::fs::write(
        env.dir.path().join("sluice.toml"),
        "admin_hosts = [\"sluice.internal\"]\n",
    )
    .unwrap();
    let host = AdminHost::start(&env, "host");
    let addr = host.base.trim_start_matches("http://").to_string();
    let (status, body) = raw(&addr, "GET", "/metrics", &[("Host", "sluice.internal:80")]);
    assert_eq!(status, 200, "{body}");
    let (status, _) = raw(&addr, "GET", "/metrics", &[("Host", "other.internal")]);
    assert_eq!(status, 421);
    drop(host);

    std::fs::write(
        env.dir.path().join("sluice.toml"),
        "admin_hosts = [\"http://sluice.internal:9464\"]\n",
    )
    .unwrap();
    let handlers = env.handlers.to_str().unwrap().to_string();
    let out = env.sluice_raw(&["run", "--handlers", &handlers, "--until-idle"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("sluice.toml")
            && stderr.contains("admin_hosts")
            && stderr.contains("http://sluice.internal:9464"),
        "{stderr}"
    );
}

/// Bound to every address, the endpoint answers a probe that names the
/// address it came in on, and no other.
#[test]
fn a_probe_by_the_machines_own_address_is_let_through() {
    let env = Env::new();
    env.deploy("hello", "hello", None);
    let ip = own_address().expect(
        "this test needs a network address other than loopback (a default route); configure one",
    );
    let port = free_port();
    let host = AdminHost::start_on(
        &env,
        "host",
        &format!("0.0.0.0:{port}"),
        &[("SLUICE_ADMIN_TOKEN", "s3cret")],
    );
    let at = match ip {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    };
    let (status, body) = raw(&at, "GET", "/healthz", &[("Host", &at)]);
    assert_eq!(status, 200, "{body}");
    let (status, _) = raw(&at, "GET", "/healthz", &[("Host", "198.51.100.7")]);
    assert_eq!(status, 421);
    drop(host);
}

/// The address this machine would use to reach another: a UDP socket
/// "connected" sends nothing.
fn own_address() -> Option<IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.253:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}
