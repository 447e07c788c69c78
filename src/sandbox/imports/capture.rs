//! What a one-off call (`sluice invoke`) records of what its handler did,
//! and how the call's outgoing HTTP requests are answered.
//!
//! A handler given a [`Capture`] runs in the same sandbox as one a host
//! serves: the same grants, limits and checks. The capture only watches:
//! each log line and each publish that the sandbox accepted is recorded in
//! the order the guest made them, and every HTTP request the sidecar allows
//! is sent, refused (`--no-network`) or answered from recorded responses.
//! Topic publishes are recorded as made, with their topic and routing key:
//! no broker resolves the bindings, so each counts as one copy.

use std::sync::Mutex;
use std::time::Duration;

use crate::sandbox::wit::sluice::handler::log::Level;

/// One line the guest logged, or wrote to its stdout or stderr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Line {
    pub(crate) level: Level,
    /// `log`, `stdout` or `stderr`.
    pub(crate) stream: &'static str,
    pub(crate) text: String,
}

/// Where a publish went: a queue, or a topic with a routing key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Queue(String),
    Topic { topic: String, route: String },
}

/// One publish the guest made, as it made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Publish {
    pub(crate) target: Target,
    pub(crate) key: Option<String>,
    pub(crate) delay: Duration,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) payload: Vec<u8>,
}

/// A recorded HTTP response, for the request with this method and URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fixture {
    /// Upper case, e.g. `GET`.
    pub(crate) method: String,
    /// The whole URL, as the guest sends it.
    pub(crate) url: String,
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

/// How the requests the sidecar allows are answered.
#[derive(Clone, Debug, Default)]
pub(crate) enum Network {
    /// Sent, as a host sends them.
    #[default]
    Live,
    /// Refused, every one.
    Off,
    /// Answered from these; a request with none is refused.
    Fixtures(Vec<Fixture>),
}

/// One HTTP request the guest made, and what came of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) url: String,
    /// `sent`, `fixture`, or why it was refused.
    pub(crate) answer: String,
}

/// The record of one call, and its network.
#[derive(Debug, Default)]
pub(crate) struct Capture {
    pub(crate) network: Network,
    lines: Mutex<Vec<Line>>,
    publishes: Mutex<Vec<Publish>>,
    requests: Mutex<Vec<Request>>,
}

impl Capture {
    /// A capture whose requests are answered as `network` says.
    pub(crate) fn new(network: Network) -> Self {
        Capture {
            network,
            ..Capture::default()
        }
    }

    pub(crate) fn line(&self, level: Level, stream: &'static str, text: &str) {
        self.lines.lock().expect("capture lock").push(Line {
            level,
            stream,
            text: text.to_string(),
        });
    }

    pub(crate) fn publish(&self, publish: Publish) {
        self.publishes.lock().expect("capture lock").push(publish);
    }

    pub(crate) fn request(&self, method: &str, url: &str, answer: &str) {
        self.requests.lock().expect("capture lock").push(Request {
            method: method.to_string(),
            url: url.to_string(),
            answer: answer.to_string(),
        });
    }

    /// The recorded response for `method` and `url`, if there is one.
    pub(crate) fn fixture(&self, method: &str, url: &str) -> Option<&Fixture> {
        match &self.network {
            Network::Fixtures(all) => all
                .iter()
                .find(|f| f.method.eq_ignore_ascii_case(method) && f.url == url),
            _ => None,
        }
    }

    /// Everything recorded so far, taken out.
    pub(crate) fn take(&self) -> (Vec<Line>, Vec<Publish>, Vec<Request>) {
        (
            std::mem::take(&mut *self.lines.lock().expect("capture lock")),
            std::mem::take(&mut *self.publishes.lock().expect("capture lock")),
            std::mem::take(&mut *self.requests.lock().expect("capture lock")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixtures_match_by_method_and_whole_url() {
        let f = |method: &str, url: &str| Fixture {
            method: method.into(),
            url: url.into(),
            status: 200,
            headers: Vec::new(),
            body: b"ok".to_vec(),
        };
        let capture = Capture::new(Network::Fixtures(vec![
            f("GET", "https://api.example.com/a"),
            f("POST", "https://api.example.com/a"),
        ]));
        assert_eq!(
            capture
                .fixture("get", "https://api.example.com/a")
                .map(|f| f.method.as_str()),
            Some("GET")
        );
        assert_eq!(
            capture
                .fixture("POST", "https://api.example.com/a")
                .map(|f| f.method.as_str()),
            Some("POST")
        );
        assert!(
            capture
                .fixture("GET", "https://api.example.com/a?x=1")
                .is_none()
        );
        assert!(
            Capture::new(Network::Live)
                .fixture("GET", "https://api.example.com/a")
                .is_none()
        );
    }

    #[test]
    fn what_is_recorded_comes_out_in_order_once() {
        let capture = Capture::default();
        capture.line(Level::Info, "log", "one");
        capture.line(Level::Warn, "stderr", "two");
        let (lines, publishes, requests) = capture.take();
        assert_eq!(
            lines.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(),
            ["one", "two"]
        );
        assert!(publishes.is_empty() && requests.is_empty());
        assert!(capture.take().0.is_empty());
    }
}
