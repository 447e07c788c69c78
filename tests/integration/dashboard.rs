//! The dashboard in a real headless Chromium, driven over WebDriver
//! (chromedriver): it shows a dead letter; replay, pressed in the page,
//! puts it back and the queue handles it. And a page of another site, in
//! the same browser, can change nothing.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::admin::{AdminHost, free_port};
use crate::support::{Env, wait_until};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// The W3C WebDriver key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver on a free port, and one browser session in it; both end
/// when dropped.
struct Browser {
    driver: Child,
    base: String,
    session: String,
    agent: ureq::Agent,
}

impl Browser {
    fn start(scratch: &std::path::Path) -> Browser {
        Browser::start_with(scratch, &[])
    }

    /// As [`Browser::start`], with more Chromium arguments.
    fn start_with(scratch: &std::path::Path, extra: &[&str]) -> Browser {
        for tool in [CHROMEDRIVER, CHROMIUM] {
            assert!(
                std::path::Path::new(tool).exists(),
                "{tool} is missing: install it with apt-get install -y chromium chromium-driver (scripts/test does)"
            );
        }
        let port = free_port();
        use std::os::unix::process::CommandExt as _;
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            // Its own process group, so the browsers it starts end with it.
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver");
        // From here on, dropping it (a failed assertion too) ends the
        // driver and any browser it started.
        let mut b = Browser {
            driver,
            base: format!("http://127.0.0.1:{port}"),
            session: String::new(),
            // A first start of Chromium on a cold machine takes a while.
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(90)))
                .build()
                .into(),
        };
        wait_until(Duration::from_secs(30), "chromedriver is ready", || {
            b.agent
                .get(format!("{}/status", b.base))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_json::<Value>().ok())
                .is_some_and(|v| v["value"]["ready"] == true)
        });
        let profile = scratch.join("chromium-profile");
        // Chromium's own background traffic is turned off: the page under
        // test is all it loads.
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1400,1100",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain(extra.iter().map(|a| a.to_string()))
        .chain([format!("--user-data-dir={}", profile.display())])
        .collect::<Vec<_>>();
        let created = b.call(
            "POST",
            "/session",
            json!({ "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": { "binary": CHROMIUM, "args": args },
            }}}),
        );
        b.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_string();
        b
    }

    /// One WebDriver command; its `value`.
    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.base);
        let resp = match method {
            "POST" => self.agent.post(&url).send_json(&body),
            "GET" => self.agent.get(&url).call(),
            "DELETE" => self.agent.delete(&url).call(),
            _ => unreachable!(),
        };
        let mut resp = resp.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let v: Value = resp.body_mut().read_json().unwrap();
        v["value"].clone()
    }

    fn session_call(&self, method: &str, path: &str, body: Value) -> Value {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    fn open(&self, url: &str) {
        self.session_call("POST", "/url", json!({ "url": url }));
    }

    /// The first element `css` selects, once there is one.
    fn find(&self, css: &str) -> String {
        let start = Instant::now();
        loop {
            let v = self.session_call(
                "POST",
                "/element",
                json!({ "using": "css selector", "value": css }),
            );
            if let Some(id) = v[ELEMENT].as_str() {
                return id.to_string();
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no element {css:?} in the page: {v}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn text(&self, css: &str) -> String {
        let id = self.find(css);
        let v = self.session_call("GET", &format!("/element/{id}/text"), json!({}));
        v.as_str().unwrap_or_default().to_string()
    }

    /// Wait until the element's text is `expected` (the page refreshes
    /// itself every few seconds).
    fn wait_text(&self, css: &str, expected: &str) {
        let start = Instant::now();
        loop {
            let text = self.text(css);
            if text == expected {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "{css:?} shows {text:?}, not {expected:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn click(&self, css: &str) {
        let id = self.find(css);
        self.session_call("POST", &format!("/element/{id}/click"), json!({}));
    }

    /// Run `script` (a function body) in the page; what it returns.
    fn eval(&self, script: &str) -> Value {
        self.session_call(
            "POST",
            "/execute/sync",
            json!({ "script": script, "args": [] }),
        )
    }

    /// A PNG of the window.
    fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let v = self.session_call("GET", "/screenshot", json!({}));
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("a screenshot"))
            .unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self
                .agent
                .delete(format!("{}/session/{}", self.base, self.session))
                .call();
        }
        // The driver and every browser it started.
        unsafe { libc::kill(-(self.driver.id() as i32), libc::SIGKILL) };
        let _ = self.driver.wait();
    }
}

#[test]
fn a_dead_letter_replayed_from_the_dashboard_is_handled() {
    let env = Env::new();
    // A handler that traps on every message: the message dies.
    env.deploy("hostile_trap", "work", Some("[retry]\nmax_attempts = 1\n"));
    env.deploy(
        "orders",
        "orders",
        Some("[config]\nfollowup_queue = \"shipping\"\n"),
    );
    env.send("work", r#"{"order": 7}"#, &[]);
    let host = AdminHost::start(&env, "host");
    wait_until(Duration::from_secs(30), "a dead letter", || {
        env.count("work", "dead") == 1
    });
    // The fix is deployed: hello takes the trapping handler's place.
    env.deploy(
        "hello",
        "work",
        Some(
            "max_in_flight = 8\nrate = \"50/s\"\n[retry]\nmax_attempts = 1\n\
             [[schedule]]\nname = \"nightly\"\ncron = \"0 3 * * *\"\n",
        ),
    );
    let fixed = hello_version();
    wait_until(Duration::from_secs(30), "the new version serves", || {
        host.json("/api/handlers").to_string().contains(&fixed)
    });

    let browser = Browser::start(env.dir.path());
    browser.open(&format!("{}/", host.base));
    // The queue is listed with its dead letter, and the browser shows it.
    assert_eq!(browser.text("tr[data-queue=\"work\"] td.dead"), "1");
    let row = browser.text("tr.dead-letter");
    assert!(row.contains("trap") || row.contains("attempt"), "{row}");
    // The handler's limits, and its schedule (the sidecar may reach the
    // host after the component).
    browser.wait_text("tr[data-handler=\"work\"] td.limits", "max 8, 50/s");
    browser.wait_text("tr[data-schedule=\"nightly\"] td.cron", "0 3 * * *");
    browser.click("tr.dead-letter button.show");
    let shown = browser.text("#dead-shown");
    assert!(shown.contains(r#"payload: {"order": 7}"#), "{shown}");
    if let Ok(path) = std::env::var("SLUICE_DASHBOARD_SCREENSHOT") {
        std::fs::write(&path, browser.screenshot()).unwrap();
    }
    let png = browser.screenshot();
    assert_eq!(&png[1..4], b"PNG", "a PNG screenshot");

    // Replay, pressed in the page: the queue handles it this time.
    browser.click("tr.dead-letter button.replay");
    wait_until(
        Duration::from_secs(30),
        "the replayed message is handled",
        || env.count("work", "done") == 1,
    );
    assert_eq!(env.count("work", "dead"), 0);
    browser.wait_text("tr[data-queue=\"work\"] td.done", "1");
    assert!(browser.text("#message").contains("replayed 1"));
    assert_eq!(browser.text("tr[data-queue=\"work\"] td.dead"), "0");
}

/// The content hash of the hello guest, as the host names its version.
fn hello_version() -> String {
    let bytes = std::fs::read(crate::support::guest("hello")).unwrap();
    sluice::testkit::loader::content_hash(&bytes)
}

/// A page served from another origin (another loopback port) tries what
/// any web page can do without a preflight: a `no-cors` fetch and a form
/// POST against the admin endpoint. Both reach it; neither changes anything.
#[test]
fn another_sites_page_cannot_change_anything_through_the_browser() {
    let env = Env::new();
    env.deploy("hostile_trap", "work", Some("[retry]\nmax_attempts = 1\n"));
    env.send("work", r#"{"order": 7}"#, &[]);
    let host = AdminHost::start(&env, "host");
    wait_until(Duration::from_secs(30), "a dead letter", || {
        env.count("work", "dead") == 1
    });
    let target = host.base.clone();
    let page = format!(
        r#"<!doctype html><title>loading</title>
<iframe name="sink"></iframe>
<form id="f" method="POST" action="{target}/api/queues/work/pause" target="sink" enctype="text/plain">
<input name="x" value="y"></form>
<script>
const hit = (path) => fetch("{target}" + path, {{
  method: "POST", mode: "no-cors", body: "x",
  headers: {{ "X-Sluice-Request": "1", "Content-Type": "text/plain" }},
}}).then(() => "sent", (e) => "failed: " + e);
Promise.all([hit("/api/queues/work/dead/replay"), hit("/api/queues/work/pause")])
  .then((r) => {{ document.title = r.join(","); }});
document.querySelector("iframe").addEventListener("load", () => {{ window.formDone = true; }});
document.getElementById("f").submit();
</script>"#
    );
    let attacker = Site::serve(page);
    let browser = Browser::start(env.dir.path());
    browser.open(&attacker.url);
    // The fetches went out and were answered (opaquely), and the form was
    // posted into the frame: the requests reached the endpoint.
    wait_until(
        Duration::from_secs(30),
        "the page's requests are done",
        || {
            browser.eval("return document.title;") == json!("sent,sent")
                && browser.eval("return window.formDone === true;") == json!(true)
        },
    );
    assert!(attacker.requests() >= 1);
    let row = host.json("/api/queues/work");
    assert_eq!(row["paused"], false, "another site's page paused the queue");
    assert_eq!(
        env.count("work", "dead"),
        1,
        "another site's page moved the dead letter"
    );

    // The dashboard itself, in the same browser, still acts.
    browser.open(&format!("{}/", host.base));
    browser.find("tr.dead-letter button.replay");
    browser.click("tr.dead-letter button.replay");
    wait_until(Duration::from_secs(30), "the dashboard's replay", || {
        browser.text("#message").contains("replayed 1")
    });
}

/// A name rebound to loopback, as a DNS rebinding page would use it: the
/// browser reaches the endpoint's socket, and is refused.
#[test]
fn a_rebound_host_name_is_refused_in_the_browser() {
    let env = Env::new();
    env.deploy("hello", "hello", None);
    env.send("hello", "secret payload", &[]);
    let host = AdminHost::start(&env, "host");
    let port = host.base.rsplit(':').next().unwrap().to_string();
    let browser = Browser::start_with(
        env.dir.path(),
        &["--host-resolver-rules=MAP rebound.example 127.0.0.1"],
    );
    browser.open(&format!("http://rebound.example:{port}/api/queues"));
    let text = browser.eval("return document.body.innerText;");
    let text = text.as_str().unwrap_or_default();
    assert!(
        text.contains("does not name this admin endpoint") && text.contains("rebound.example"),
        "{text}"
    );
    assert!(!text.contains("\"hello\""), "{text}");
    // The same page by the endpoint's own name works.
    browser.open(&format!("http://localhost:{port}/api/queues"));
    let text = browser.eval("return document.body.innerText;");
    assert!(
        text.as_str().unwrap_or_default().contains("hello"),
        "{text}"
    );
}

/// A web server on a loopback port of its own that answers every request
/// with one page: another origin, as far as the browser is concerned.
struct Site {
    url: String,
    served: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Site {
    fn serve(page: String) -> Site {
        use std::io::{Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "http://127.0.0.1:{}/",
            listener.local_addr().unwrap().port()
        );
        let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = served.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                    page.len()
                );
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        Site { url, served }
    }

    fn requests(&self) -> usize {
        self.served.load(std::sync::atomic::Ordering::Relaxed)
    }
}
