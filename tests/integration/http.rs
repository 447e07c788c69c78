//! Outgoing HTTP (`wasi:http/outgoing-handler`): sent to the hosts a
//! handler's sidecar lists in `[capabilities] http_allow`, refused with an
//! error the guest sees everywhere else, and bounded by the handler's
//! timeout. The `http_probe` guest GETs the URL in its payload; a server on
//! loopback, started by each test, records what reaches it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::{Env, lines_with, wait_until};

/// How long a test server lives at most, should a test never drop it.
const SERVER_LIFETIME: Duration = Duration::from_secs(120);
/// How long a stalling server holds a request without answering.
const STALL: Duration = Duration::from_secs(60);

#[derive(Clone, Copy)]
enum Answer {
    /// `200 OK` with this body.
    Ok(&'static str),
    /// Read the request, then answer nothing until the client hangs up
    /// (or the server is dropped).
    Stall,
}

/// An HTTP/1.1 server on `127.0.0.1:0` with a thread of its own. It keeps
/// the head (request line and headers) of every request it reads and, when
/// it stalls, how long each client waited before it hung up.
struct TestServer {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
    hangups: Arc<Mutex<Vec<Duration>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    fn start(answer: Answer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let hangups = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Seen {
            heads: heads.clone(),
            hangups: hangups.clone(),
            stop: stop.clone(),
        };
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            while !seen.stop.load(Ordering::Relaxed) && started.elapsed() < SERVER_LIFETIME {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let seen = seen.clone();
                        std::thread::spawn(move || serve(stream, answer, &seen));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => panic!("test server accept failed: {e}"),
                }
            }
        });
        TestServer {
            port,
            heads,
            hangups,
            stop,
            thread: Some(thread),
        }
    }

    /// The heads of the requests that reached the server so far.
    fn requests(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }

    /// How long each stalled client waited before it hung up, so far.
    fn hangups(&self) -> Vec<Duration> {
        self.hangups.lock().unwrap().clone()
    }
}

/// What the connection threads of one server share.
#[derive(Clone)]
struct Seen {
    heads: Arc<Mutex<Vec<String>>>,
    hangups: Arc<Mutex<Vec<Duration>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One connection: read a request head, record it, answer or stall.
fn serve(mut stream: TcpStream, answer: Answer, seen: &Seen) {
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    if head.is_empty() {
        return;
    }
    seen.heads
        .lock()
        .unwrap()
        .push(String::from_utf8_lossy(&head).into_owned());
    match answer {
        Answer::Ok(body) => {
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
        Answer::Stall => {
            let started = Instant::now();
            stream
                .set_read_timeout(Some(Duration::from_millis(10)))
                .unwrap();
            while !seen.stop.load(Ordering::Relaxed) && started.elapsed() < STALL {
                let hung_up = match stream.read(&mut buf) {
                    Ok(n) => n == 0,
                    Err(e) => !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                };
                if hung_up {
                    seen.hangups.lock().unwrap().push(started.elapsed());
                    return;
                }
            }
        }
    }
}

/// A sidecar: the lines `extra`, then a grant of outgoing HTTP to `hosts`.
fn granting(hosts: &[String], extra: &str) -> String {
    let list: Vec<String> = hosts.iter().map(|h| format!("{h:?}")).collect();
    format!(
        "{extra}\n[capabilities]\nhttp_allow = [{}]\n",
        list.join(", ")
    )
}

fn allowed_host_is_reached(env: Env) {
    let server = TestServer::start(Answer::Ok("hello from the test server"));
    let port = server.port;
    let sidecar = granting(&[format!("127.0.0.1:{port}")], "[retry]\nmax_attempts = 1");
    env.deploy("http_probe", "fetch", Some(&sidecar));
    env.send("fetch", &format!("http://127.0.0.1:{port}/hello?n=1"), &[]);
    let log = env.run_until_idle();
    assert_eq!(
        env.count("fetch", "done"),
        1,
        "dead letters: {:?}\n{log}",
        env.dead("fetch")
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(
        requests[0].starts_with("GET /hello?n=1 HTTP/1.1\r\n"),
        "{}",
        requests[0]
    );
    assert!(
        requests[0]
            .to_ascii_lowercase()
            .contains(&format!("host: 127.0.0.1:{port}\r\n")),
        "{}",
        requests[0]
    );
    let got = lines_with(&log, "hello from the test server");
    assert_eq!(got.len(), 1, "{log}");
    assert!(
        got[0].contains("status 200") && got[0].contains("handler=\"fetch\""),
        "{}",
        got[0]
    );
}

fn other_hosts_are_refused(env: Env) {
    let granted = TestServer::start(Answer::Ok("granted"));
    let other = TestServer::start(Answer::Ok("other"));
    let (g, o) = (granted.port, other.port);
    let sidecar = granting(&[format!("127.0.0.1:{g}")], "[retry]\nmax_attempts = 1");
    env.deploy("http_probe", "fetch", Some(&sidecar));
    // No [capabilities] at all: nothing is granted.
    env.deploy("http_probe", "closed", None);
    let refused = [
        ("fetch", format!("localhost:{g}")),
        ("fetch", format!("127.0.0.1:{o}")),
        ("closed", format!("127.0.0.1:{g}")),
    ];
    for (queue, host) in &refused {
        env.send(queue, &format!("http://{host}/never"), &[]);
    }
    let log = env.run_until_idle();
    assert_eq!(env.count("fetch", "dead"), 2);
    assert_eq!(env.count("closed", "dead"), 1);
    assert_eq!(env.count("fetch", "done") + env.count("closed", "done"), 0);
    for queue in ["fetch", "closed"] {
        for dead in env.dead(queue) {
            let reason = dead["reason"].as_str().unwrap();
            assert!(
                reason.starts_with("rejected: GET http://") && reason.contains("HttpRequestDenied"),
                "the guest saw the refusal: {reason}"
            );
        }
    }
    assert!(granted.requests().is_empty(), "{:?}", granted.requests());
    assert!(other.requests().is_empty(), "{:?}", other.requests());
    for (queue, host) in &refused {
        let noted = lines_with(&log, "outgoing HTTP request refused");
        assert!(
            noted
                .iter()
                .any(|l| l.contains(&format!("handler=\"{queue}\"")) && l.contains(host.as_str())),
            "no refusal of {host} by {queue} in the log:\n{log}"
        );
    }
}

fn stalled_request_times_out(env: Env) {
    let stalled = TestServer::start(Answer::Stall);
    let sidecar = granting(
        &[format!("127.0.0.1:{}", stalled.port)],
        "[limits]\ntimeout = \"500ms\"\n[retry]\nmax_attempts = 2\ndelays = [\"10ms\"]",
    );
    env.deploy("http_probe", "fetch", Some(&sidecar));
    env.deploy("hello", "hello", None);
    let id = env.send(
        "fetch",
        &format!("http://127.0.0.1:{}/slow", stalled.port),
        &[],
    );
    for i in 0..5 {
        env.send("hello", &format!("{i}"), &[]);
    }
    let started = Instant::now();
    let log = env.run_until_idle();
    let took = started.elapsed();
    assert!(
        took < STALL / 2,
        "the attempts ended at the timeout, not when the server gave up: {took:?}"
    );
    let stats = env.stats();
    assert_eq!(stats["hello"]["done"], 5, "the host is unaffected");
    assert_eq!(stats["fetch"]["dead"], 1, "{log}");
    assert_eq!(
        stats["fetch"]["retried"], 1,
        "the timeout counted as a failed attempt"
    );
    let shown: serde_json::Value =
        serde_json::from_str(&env.sluice(&["--json", "dlq", "show", "fetch", &id])).unwrap();
    assert_eq!(shown["attempts"], 2);
    assert_eq!(shown["reason"], "gave up after 2 attempt(s)");
    assert_eq!(shown["last_error"], "timeout: timed out after 500ms");
    let requests = stalled.requests();
    assert_eq!(
        requests.len(),
        2,
        "each attempt's request reached the server and waited there: {requests:?}"
    );
    // The host hangs up when the call times out (500ms), well before the
    // request's own timeouts (what is left of the call plus a second).
    wait_until(Duration::from_secs(5), "the host to hang up twice", || {
        stalled.hangups().len() == 2
    });
    for held in stalled.hangups() {
        assert!(
            held >= Duration::from_millis(300) && held < Duration::from_millis(1400),
            "a request was held {held:?}, not until the 500ms timeout"
        );
    }
}

on_every_backend!(env:
    allowed_host_is_reached,
    other_hosts_are_refused,
    stalled_request_times_out,
);
