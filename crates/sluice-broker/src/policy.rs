//! What happens to a message after an attempt: a pure function of the
//! outcome, the attempt number and the handler's policy.
//!
//! Nothing here touches a broker or a clock. Jitter comes in as a number in
//! `[0, 1)` so that the decision is reproducible in tests.

use std::time::Duration;

/// How a handler's failed attempts are retried.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first delivery included. At least 1.
    pub max_attempts: u32,
    /// The wait before each retry the guest did not time itself.
    pub backoff: Backoff,
    /// A guest's `retry(some(delay))` and `snooze(delay)` are cut down to
    /// this.
    pub max_guest_delay: Duration,
    /// Snoozes a message may have; the one past them dead-letters it.
    pub max_snoozes: u32,
}

/// The wait before the next attempt when the guest did not name one.
#[derive(Clone, Debug, PartialEq)]
pub enum Backoff {
    /// `initial * factor^(attempt-1)`, capped at `max`; with full jitter the
    /// wait is drawn uniformly from `[0, that]`.
    Exponential {
        /// The wait after the first attempt, before jitter.
        initial: Duration,
        /// The longest wait.
        max: Duration,
        /// What each further attempt multiplies the wait by.
        factor: f64,
        /// Draw the wait uniformly from `[0, ceiling]` (full jitter).
        jitter: bool,
    },
    /// Delay levels: the n-th retry waits `delays[n-1]`; past the end of the
    /// list the last level repeats.
    Fixed(Vec<Duration>),
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            backoff: Backoff::Exponential {
                initial: Duration::from_secs(1),
                max: Duration::from_secs(300),
                factor: 2.0,
                jitter: true,
            },
            max_guest_delay: Duration::from_secs(3600),
            max_snoozes: 1000,
        }
    }
}

/// How an attempt ended, as the policy sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The guest handled the message.
    Done,
    /// The guest asked for a retry, optionally after a delay of its choosing.
    Retry(Option<Duration>),
    /// The guest rejected the message as poison.
    Reject(String),
    /// The guest asked to see the message again after a delay, without
    /// spending an attempt.
    Snooze(Duration),
    /// The attempt failed: trap, timeout, memory limit or instantiation.
    Failed,
}

/// What the host does next.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Acknowledge: the message is done.
    Ack,
    /// Deliver again after `delay`, as the next attempt.
    Retry {
        /// How long the message waits.
        delay: Duration,
    },
    /// Deliver again after `delay`, the attempt given back.
    Snooze {
        /// How long the message waits.
        delay: Duration,
    },
    /// Move the message to the dead letters.
    Dead {
        /// Why, as the dead letter keeps it.
        reason: String,
    },
}

/// Decide what follows attempt number `attempt` (1-based) that ended in
/// `outcome`, of a message snoozed `snoozes` times before.
pub fn decide(
    outcome: &Outcome,
    attempt: u32,
    snoozes: u32,
    policy: &RetryPolicy,
    jitter: f64,
) -> Decision {
    let requested = match outcome {
        Outcome::Done => return Decision::Ack,
        Outcome::Snooze(delay) if snoozes >= policy.max_snoozes => {
            return Decision::Dead {
                reason: format!(
                    "snoozed {snoozes} time(s), the most `retry.max_snoozes` allows, and asked for {} more",
                    humantime::format_duration(*delay)
                ),
            };
        }
        Outcome::Snooze(delay) => {
            return Decision::Snooze {
                delay: (*delay).min(policy.max_guest_delay),
            };
        }
        Outcome::Reject(reason) => {
            return Decision::Dead {
                reason: format!("rejected: {reason}"),
            };
        }
        Outcome::Retry(requested) => *requested,
        Outcome::Failed => None,
    };
    if attempt >= policy.max_attempts {
        return Decision::Dead {
            reason: exhausted(policy.max_attempts),
        };
    }
    let delay = match requested {
        Some(d) => d.min(policy.max_guest_delay),
        None => backoff_delay(&policy.backoff, attempt, jitter),
    };
    Decision::Retry { delay }
}

/// A delivery that arrives with more attempts behind it than the policy
/// allows (leases that ran out, e.g. because the host was killed) goes
/// straight to the dead letters without calling the handler.
pub fn over_limit(attempt: u32, policy: &RetryPolicy) -> Option<Decision> {
    (attempt > policy.max_attempts).then(|| Decision::Dead {
        reason: exhausted(policy.max_attempts),
    })
}

fn exhausted(max_attempts: u32) -> String {
    format!("gave up after {max_attempts} attempt(s)")
}

/// The wait after failed attempt number `attempt` (1-based).
pub fn backoff_delay(backoff: &Backoff, attempt: u32, jitter: f64) -> Duration {
    let retry_index = attempt.max(1) - 1;
    match backoff {
        Backoff::Fixed(levels) => match levels.len() {
            0 => Duration::ZERO,
            n => levels[(retry_index as usize).min(n - 1)],
        },
        Backoff::Exponential {
            initial,
            max,
            factor,
            jitter: use_jitter,
        } => {
            // powi saturates to infinity for large exponents; `min` then caps it.
            let exponent = retry_index.min(i32::MAX as u32) as i32;
            let ceiling = (initial.as_secs_f64() * factor.powi(exponent)).min(max.as_secs_f64());
            let ceiling = if ceiling.is_finite() {
                ceiling
            } else {
                max.as_secs_f64()
            };
            let secs = if *use_jitter {
                ceiling * jitter.clamp(0.0, 1.0)
            } else {
                ceiling
            };
            Duration::from_secs_f64(secs).min(*max)
        }
    }
}

/// Scheduled redrive of a handler's dead letters (`[retry] redrive_every`
/// and `max_redrives`): a dead letter goes back to its queue, attempts
/// reset, once it has been dead for `every`, until it has been through
/// `max_redrives` redrives; after that it stays dead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedrivePolicy {
    /// How long a dead letter stays dead before it is redriven.
    pub every: Duration,
    /// Redrives a message may have; after them it stays dead.
    pub max_redrives: u32,
}

/// The shortest and longest pause between two looks for dead letters to
/// redrive. Every look is a broker call per queue and host, so not more
/// than once a second; and not less than once a minute, so a long
/// `redrive_every` is not overshot by much.
const REDRIVE_CHECK_MIN: Duration = Duration::from_secs(1);
const REDRIVE_CHECK_MAX: Duration = Duration::from_secs(60);

impl RedrivePolicy {
    /// How often a host looks: a tenth of `every`, between 1 s and 1 min. A
    /// dead letter is back at most that long after it has been dead `every`.
    pub fn check_every(&self) -> Duration {
        (self.every / 10).clamp(REDRIVE_CHECK_MIN, REDRIVE_CHECK_MAX)
    }

    /// At `now_ms`, the dead letters that died at or before this are due.
    pub fn due_if_died_by(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.every.as_millis() as u64)
    }
}

/// Limits on a queue that hold across every host serving it: the broker
/// enforces them when it leases, so adding hosts does not raise them. A
/// receive past a limit gets fewer messages, or none.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Flow {
    /// At most this many of the queue's messages leased at once (a lease
    /// that ran out no longer counts).
    pub max_in_flight: Option<u32>,
    /// At most this many leases a period, from a bucket that holds one
    /// second's worth (at least one): a burst no larger than that.
    pub rate: Option<Rate>,
}

/// `count` per `per`: `200/s`, `30/m`, `100/h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Leases a period, at least 1.
    pub count: u32,
    /// The period: a second, a minute or an hour.
    pub per: Duration,
}

impl Rate {
    /// Leases a millisecond.
    pub fn per_ms(&self) -> f64 {
        f64::from(self.count) / self.per.as_millis() as f64
    }

    /// What the bucket holds when full: one second's worth, at least one.
    pub fn burst(&self) -> f64 {
        (self.per_ms() * 1000.0).max(1.0)
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "s",
            60 => "m",
            _ => "h",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

impl std::str::FromStr for Rate {
    type Err = String;

    /// `N/s`, `N/m` or `N/h`, N a whole number from 1.
    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let bad = || format!("{text:?} is not a rate: write N/s, N/m or N/h, e.g. \"200/s\"");
        let (count, unit) = text.trim().split_once('/').ok_or_else(bad)?;
        let count: u32 = count.trim().parse().map_err(|_| bad())?;
        let per = match unit.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        if count == 0 {
            return Err(format!(
                "{text:?}: a rate of 0 would lease nothing, ever; pause the queue instead (sluice pause)"
            ));
        }
        Ok(Rate { count, per })
    }
}

/// How a queue's messages fall into ordered groups (`[ordering]` in its
/// handler's sidecar): the messages of one group are handled one at a
/// time, in the order they were published; a message without a group
/// value is unordered.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OrderedGroups {
    /// Where a message's group comes from.
    pub group: GroupSource,
    /// Keep a group waiting while a message of it is dead, until the dead
    /// letter is replayed or purged (`on_dead = "block"`); by default the
    /// group moves on to its next message.
    pub block_on_dead: bool,
}

/// Where a message's group value is read.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupSource {
    /// The value of this header.
    Header(String),
    /// The string or number at this JSON pointer in the payload.
    Pointer(String),
}

/// The longest group value; a longer one puts its message in no group.
pub const MAX_GROUP: usize = 256;

impl OrderedGroups {
    /// The group of a message with these headers and payload: `None` when
    /// the header is missing, the payload is not JSON, the pointer does not
    /// resolve to a string or a number, or the value is empty, longer than
    /// [`MAX_GROUP`] or holds a control character.
    pub fn group_of(&self, headers: &[(String, String)], payload: &[u8]) -> Option<String> {
        let value = match &self.group {
            GroupSource::Header(name) => headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone()),
            GroupSource::Pointer(pointer) => {
                let json: serde_json::Value = serde_json::from_slice(payload).ok()?;
                match json.pointer(pointer)? {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Number(n) => Some(n.to_string()),
                    _ => None,
                }
            }
        }?;
        let fits = !value.is_empty() && value.len() <= MAX_GROUP;
        (fits && !value.chars().any(char::is_control)).then_some(value)
    }

    /// The text the broker stores for the queue.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("an ordering serializes")
    }

    /// An ordering as [`OrderedGroups::encode`] wrote it; `None` for anything
    /// else (an empty text: the queue is not ordered).
    pub fn decode(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn redrive_looks_a_tenth_as_often_within_a_second_and_a_minute() {
        let every = |secs| RedrivePolicy {
            every: Duration::from_secs(secs),
            max_redrives: 3,
        };
        let checks: Vec<u64> = [1, 30, 600, 86_400]
            .map(|s| every(s).check_every().as_secs())
            .to_vec();
        assert_eq!(checks, [1, 3, 60, 60]);
        assert_eq!(every(600).due_if_died_by(1_000_000), 400_000);
        assert_eq!(every(600).due_if_died_by(5), 0, "no underflow");
    }

    fn expo(jitter: bool) -> RetryPolicy {
        RetryPolicy {
            max_attempts: 4,
            backoff: Backoff::Exponential {
                initial: Duration::from_millis(100),
                max: Duration::from_secs(1),
                factor: 2.0,
                jitter,
            },
            max_guest_delay: Duration::from_secs(10),
            max_snoozes: 1000,
        }
    }

    #[test]
    fn done_acks_and_reject_dies_at_once() {
        let p = expo(false);
        assert_eq!(decide(&Outcome::Done, 4, 0, &p, 0.5), Decision::Ack);
        assert_eq!(
            decide(&Outcome::Reject("bad json".into()), 1, 0, &p, 0.5),
            Decision::Dead {
                reason: "rejected: bad json".into()
            }
        );
    }

    #[test]
    fn exponential_without_jitter_doubles_then_caps() {
        let p = expo(false);
        let delays: Vec<_> = (1..4)
            .map(|a| match decide(&Outcome::Failed, a, 0, &p, 0.0) {
                Decision::Retry { delay } => delay,
                other => panic!("attempt {a}: {other:?}"),
            })
            .collect();
        assert_eq!(delays, [100, 200, 400].map(Duration::from_millis));
        assert_eq!(
            backoff_delay(&p.backoff, 10, 0.0),
            Duration::from_secs(1),
            "capped at max"
        );
    }

    #[test]
    fn full_jitter_scales_the_ceiling() {
        let p = expo(true);
        assert_eq!(
            backoff_delay(&p.backoff, 2, 0.5),
            Duration::from_millis(100)
        );
        assert_eq!(backoff_delay(&p.backoff, 2, 0.0), Duration::ZERO);
    }

    #[test]
    fn last_attempt_dies_with_reason() {
        let p = expo(false);
        assert_eq!(
            decide(&Outcome::Retry(None), 4, 0, &p, 0.0),
            Decision::Dead {
                reason: "gave up after 4 attempt(s)".into()
            }
        );
    }

    #[test]
    fn fixed_levels_repeat_the_last() {
        let p = RetryPolicy {
            backoff: Backoff::Fixed(vec![Duration::from_secs(60), Duration::from_secs(300)]),
            ..expo(false)
        };
        let d = |a| decide(&Outcome::Failed, a, 0, &p, 0.9);
        assert_eq!(
            d(1),
            Decision::Retry {
                delay: Duration::from_secs(60)
            }
        );
        assert_eq!(
            d(2),
            Decision::Retry {
                delay: Duration::from_secs(300)
            }
        );
        assert_eq!(
            d(3),
            Decision::Retry {
                delay: Duration::from_secs(300)
            }
        );
    }

    #[test]
    fn guest_delay_is_capped() {
        let p = expo(false);
        assert_eq!(
            decide(
                &Outcome::Retry(Some(Duration::from_secs(3600))),
                1,
                0,
                &p,
                0.0
            ),
            Decision::Retry {
                delay: Duration::from_secs(10)
            }
        );
        assert_eq!(
            decide(
                &Outcome::Retry(Some(Duration::from_millis(5))),
                1,
                0,
                &p,
                0.0
            ),
            Decision::Retry {
                delay: Duration::from_millis(5)
            }
        );
    }

    #[test]
    fn a_snooze_spends_no_attempt_until_the_snoozes_run_out() {
        let mut p = expo(false);
        p.max_snoozes = 3;
        let snooze = Outcome::Snooze(Duration::from_secs(2));
        for snoozes in 0..3 {
            // Even on the last attempt: a snooze is not a failure.
            assert_eq!(
                decide(&snooze, p.max_attempts, snoozes, &p, 0.0),
                Decision::Snooze {
                    delay: Duration::from_secs(2)
                }
            );
        }
        let Decision::Dead { reason } = decide(&snooze, 1, 3, &p, 0.0) else {
            panic!("a fourth snooze must dead-letter");
        };
        assert_eq!(
            reason,
            "snoozed 3 time(s), the most `retry.max_snoozes` allows, and asked for 2s more"
        );
        let long = Outcome::Snooze(Duration::from_secs(3600));
        assert_eq!(
            decide(&long, 1, 0, &p, 0.0),
            Decision::Snooze {
                delay: Duration::from_secs(10)
            },
            "capped like a guest's retry delay"
        );
    }

    #[test]
    fn over_limit_only_past_max() {
        let p = expo(false);
        assert_eq!(over_limit(4, &p), None);
        assert!(matches!(over_limit(5, &p), Some(Decision::Dead { .. })));
    }

    fn any_policy() -> impl Strategy<Value = RetryPolicy> {
        let expo = (1u64..10_000, 1u64..1_000_000, 1.0f64..10.0, any::<bool>()).prop_map(
            |(initial, max, factor, jitter)| Backoff::Exponential {
                initial: Duration::from_millis(initial),
                max: Duration::from_millis(max),
                factor,
                jitter,
            },
        );
        let fixed = prop::collection::vec(0u64..10_000_000, 0..6)
            .prop_map(|ms| Backoff::Fixed(ms.into_iter().map(Duration::from_millis).collect()));
        (1u32..20, prop_oneof![expo, fixed], 0u64..10_000_000).prop_map(
            |(max_attempts, backoff, cap)| RetryPolicy {
                max_attempts,
                backoff,
                max_guest_delay: Duration::from_millis(cap),
                max_snoozes: 10,
            },
        )
    }

    fn any_outcome() -> impl Strategy<Value = Outcome> {
        prop_oneof![
            Just(Outcome::Done),
            Just(Outcome::Failed),
            Just(Outcome::Retry(None)),
            (0u64..u64::MAX / 2).prop_map(|ms| Outcome::Retry(Some(Duration::from_millis(ms)))),
            "[a-z]{0,8}".prop_map(Outcome::Reject),
        ]
    }

    fn upper_bound(backoff: &Backoff) -> Duration {
        match backoff {
            Backoff::Exponential { max, .. } => *max,
            Backoff::Fixed(levels) => levels.iter().copied().max().unwrap_or_default(),
        }
    }

    proptest! {
        /// Retrying never goes past max_attempts: at or beyond it, only Ack or Dead.
        #[test]
        fn never_retries_past_max_attempts(p in any_policy(), o in any_outcome(), extra in 0u32..5, j in 0.0f64..1.0) {
            let d = decide(&o, p.max_attempts + extra, 0, &p, j);
            prop_assert!(!matches!(d, Decision::Retry { .. }), "{d:?}");
        }

        /// Below max_attempts a failure is always retried, never dropped.
        #[test]
        fn failures_below_max_are_retried(p in any_policy(), j in 0.0f64..1.0, a in 1u32..20) {
            prop_assume!(a < p.max_attempts);
            let retried = matches!(decide(&Outcome::Failed, a, 0, &p, j), Decision::Retry { .. });
            prop_assert!(retried);
        }

        /// Policy delays stay within [0, max] (or the largest fixed level), and a
        /// guest's delay never exceeds the cap.
        #[test]
        fn delays_stay_in_bounds(p in any_policy(), o in any_outcome(), a in 1u32..40, j in 0.0f64..1.0) {
            if let Decision::Retry { delay } = decide(&o, a, 0, &p, j) {
                match o {
                    Outcome::Retry(Some(asked)) => {
                        prop_assert!(delay <= p.max_guest_delay);
                        prop_assert!(delay <= asked);
                    }
                    _ => prop_assert!(delay <= upper_bound(&p.backoff), "{delay:?} > {:?}", upper_bound(&p.backoff)),
                }
            }
        }

        /// Without jitter, exponential backoff never shrinks from one attempt to the next.
        #[test]
        fn exponential_is_monotone(initial in 1u64..10_000, max in 1u64..1_000_000, factor in 1.0f64..10.0, a in 1u32..60) {
            let b = Backoff::Exponential {
                initial: Duration::from_millis(initial),
                max: Duration::from_millis(max),
                factor,
                jitter: false,
            };
            prop_assert!(backoff_delay(&b, a, 0.0) <= backoff_delay(&b, a + 1, 0.0));
        }
    }

    #[test]
    fn a_group_comes_from_a_header_or_a_pointer() {
        let by_header = OrderedGroups {
            group: GroupSource::Header("customer".into()),
            block_on_dead: false,
        };
        let headers = vec![("customer".to_string(), "c-7".to_string())];
        assert_eq!(by_header.group_of(&headers, b"x").as_deref(), Some("c-7"));
        assert_eq!(by_header.group_of(&[], b"x"), None, "no header");
        let by_pointer = OrderedGroups {
            group: GroupSource::Pointer("/customer/id".into()),
            block_on_dead: true,
        };
        let group = |payload: &str| by_pointer.group_of(&[], payload.as_bytes());
        assert_eq!(group(r#"{"customer": {"id": "a"}}"#).as_deref(), Some("a"));
        assert_eq!(
            group(r#"{"customer": {"id": 12345678901234567}}"#).as_deref(),
            Some("12345678901234567"),
            "an integer exactly"
        );
        assert_eq!(group(r#"{"customer": {"id": null}}"#), None);
        assert_eq!(group(r#"{"customer": {}}"#), None);
        assert_eq!(group("not json"), None);
        assert_eq!(group(r#"{"customer": {"id": ""}}"#), None, "empty");
        let long = format!(
            r#"{{"customer": {{"id": "{}"}}}}"#,
            "x".repeat(MAX_GROUP + 1)
        );
        assert_eq!(group(&long), None, "too long");
        assert_eq!(
            group(r#"{"customer": {"id": "a\u0000b"}}"#),
            None,
            "a control character"
        );
        assert_eq!(
            OrderedGroups::decode(&by_pointer.encode()),
            Some(by_pointer)
        );
        assert_eq!(OrderedGroups::decode(""), None);
    }
}
