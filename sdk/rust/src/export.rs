//! The edge between the component's exports and the handler's function:
//! messages in, outcomes out, in the WIT's terms. The macros
//! [`handler!`](crate::handler) and [`batch_handler!`](crate::batch_handler)
//! call these.

use crate::__private::bindings;
use crate::log::{self, Level};
use crate::message::Message;
use crate::outcome::{Error, Outcome, millis};

/// What a handler may return: a [`crate::Result`] or an [`Outcome`].
pub trait IntoOutcome {
    /// The outcome. For an error that `?` converted into a retry, this logs
    /// `retrying after an error: <text>` at warn level first.
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

impl IntoOutcome for Result<(), Error> {
    fn into_outcome(self) -> Outcome {
        let Err(error) = self else {
            return Outcome::Done;
        };
        let (outcome, cause) = error.into_parts();
        if let Some(cause) = cause {
            log::log(Level::Warn, &format!("retrying after an error: {cause}"));
        }
        outcome
    }
}

/// The outcome as the host takes it.
fn to_wit(outcome: Outcome) -> bindings::Outcome {
    match outcome {
        Outcome::Done => bindings::Outcome::Done,
        Outcome::Retry(delay) => bindings::Outcome::Retry(delay.map(millis)),
        Outcome::Reject(reason) => bindings::Outcome::Reject(reason),
        Outcome::Snooze(delay) => bindings::Outcome::Snooze(millis(delay)),
    }
}

/// Calls `handle` with the message and returns its outcome to the host.
pub fn handle<O: IntoOutcome>(
    message: bindings::Message,
    handle: impl FnOnce(&Message) -> O,
) -> bindings::Outcome {
    to_wit(handle(&Message::from(message)).into_outcome())
}

/// Calls `handle_batch` with the messages and returns its outcomes to the
/// host, as many as it gave.
pub fn handle_batch<O: IntoOutcome>(
    messages: Vec<bindings::Message>,
    handle_batch: impl FnOnce(&[Message]) -> Vec<O>,
) -> Vec<bindings::Outcome> {
    let messages: Vec<Message> = messages.into_iter().map(Message::from).collect();
    handle_batch(&messages)
        .into_iter()
        .map(|o| to_wit(o.into_outcome()))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::testing::FakeHost;
    use crate::{Reject, Retry, Snooze};

    fn wit_message(payload: &str) -> bindings::Message {
        bindings::Message {
            id: "m-7".into(),
            key: "k-7".into(),
            queue: "orders".into(),
            payload: payload.as_bytes().to_vec(),
            headers: vec![("h".into(), "v".into())],
            attempt: 3,
            enqueued_at_ms: 1_000,
        }
    }

    /// The outcome's text: the generated type has `Debug` but not `PartialEq`.
    fn shown(o: bindings::Outcome) -> String {
        format!("{o:?}")
    }

    #[test]
    fn the_message_reaches_the_handler_whole() {
        let _host = FakeHost::new();
        let seen = std::cell::RefCell::new(None);
        let out = handle(wit_message("hi"), |m: &Message| {
            seen.replace(Some(m.clone()));
            Outcome::Done
        });
        assert_eq!(shown(out), "Outcome::Done");
        let m = seen.into_inner().unwrap();
        assert_eq!(
            (m.id(), m.key(), m.queue(), m.attempt()),
            ("m-7", "k-7", "orders", 3)
        );
        assert_eq!((m.text().unwrap(), m.header("h")), ("hi", Some("v")));
        assert_eq!(
            m.enqueued_at(),
            std::time::UNIX_EPOCH + Duration::from_secs(1)
        );
    }

    #[test]
    fn outcomes_reach_the_host_in_milliseconds() {
        let _host = FakeHost::new();
        let cases: [(crate::Result, &str); 5] = [
            (Ok(()), "Outcome::Done"),
            (
                Err(Retry::after(Duration::from_millis(10))),
                "Outcome::Retry(Some(10))",
            ),
            (Err(Retry::backoff()), "Outcome::Retry(None)"),
            (Err(Reject::new("why")), "Outcome::Reject(\"why\")"),
            (
                Err(Snooze::after(Duration::from_secs(2))),
                "Outcome::Snooze(2000)",
            ),
        ];
        for (result, want) in cases {
            assert_eq!(shown(handle(wit_message(""), |_: &Message| result)), want);
        }
    }

    #[test]
    fn an_error_that_question_mark_converted_is_logged() {
        let host = FakeHost::new();
        let out = handle(wit_message("x"), |m: &Message| -> crate::Result {
            let n: u32 = m.text()?.parse()?;
            Err(Reject::new(format!("{n}")))
        });
        assert_eq!(shown(out), "Outcome::Retry(None)");
        assert_eq!(
            host.logs(),
            [(
                Level::Warn,
                "retrying after an error: invalid digit found in string".to_string()
            )]
        );
        let out = handle(wit_message("x"), |_: &Message| Err(Reject::new("bad")));
        assert_eq!(shown(out), "Outcome::Reject(\"bad\")");
        assert_eq!(host.logs().len(), 1, "a reject is not logged");
    }

    #[test]
    fn a_batch_gets_its_outcomes_in_order_and_number() {
        let _host = FakeHost::new();
        let messages = vec![wit_message("a"), wit_message("reject"), wit_message("c")];
        let out = handle_batch(messages, |ms: &[Message]| {
            let mut outcomes: Vec<crate::Result> = ms
                .iter()
                .map(|m| match m.text()? {
                    "reject" => Err(Reject::new("no")),
                    _ => Ok(()),
                })
                .collect();
            outcomes.push(Ok(()));
            outcomes
        });
        let out: Vec<String> = out.into_iter().map(shown).collect();
        assert_eq!(
            out,
            [
                "Outcome::Done",
                "Outcome::Reject(\"no\")",
                "Outcome::Done",
                "Outcome::Done"
            ]
        );
    }
}
