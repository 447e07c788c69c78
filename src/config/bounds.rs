//! The range of every number a sidecar or `sluice.toml` may set: what the
//! brokers and the runtime can honour. A value outside its range is refused
//! when the file is read, with the field named, rather than wedging a queue
//! or panicking a worker later. The README's "Handler configuration" lists
//! the same bounds.

use std::fmt::Display;
use std::time::Duration;

use anyhow::{Result, bail};

use crate::message::MAX_DELAY;

const MS: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);
/// A year as durations are written (`1year`: 365.25 days).
const YEAR: Duration = Duration::from_secs(31_557_600);

/// Handler calls at once.
pub(crate) const CONCURRENCY: (usize, usize) = (1, 1000);
/// Instances a handler keeps for itself out of the host's pool
/// (`min_concurrency`); never more than its `concurrency`.
pub(crate) const MIN_CONCURRENCY: (usize, usize) = (1, 1000);
/// Handler instances in the host's pool (`max_instances`): each reserves
/// about 8 GiB of address space, so 4,096 take 32 of a process's 128 TiB.
pub(crate) const MAX_INSTANCES: (usize, usize) = (16, 4096);
/// Messages leased ahead of the calls.
pub(crate) const PREFETCH: (usize, usize) = (1, 100_000);
/// A queue's messages leased at once across every host (`max_in_flight`).
pub(crate) const MAX_IN_FLIGHT: (u32, u32) = (1, 100_000);
/// Leases a period (the N of `rate = "N/s"`, `"N/m"` or `"N/h"`).
pub(crate) const RATE_COUNT: (u32, u32) = (1, 1_000_000);
/// `[[schedule]]` tables in one sidecar.
pub(crate) const SCHEDULES: (usize, usize) = (0, 100);
/// How long a delivery is leased: at least [`LEASE_MARGIN`] beyond the
/// timeout, at most a week.
pub(crate) const LEASE: (Duration, Duration) = (SECOND, Duration::from_secs(7 * 24 * 3600));
/// How much longer than `limits.timeout` the lease must be: the margin for
/// settling the call, the timer's granularity and clocks that disagree.
pub(crate) const LEASE_MARGIN: Duration = SECOND;
/// One instance's memory, all of its memories together (`limits.memory`).
pub(crate) const MEMORY: (u64, u64) = (64 << 10, 4 << 30);
/// Bytes one call may hand the host (`limits.call_budget`).
pub(crate) const CALL_BUDGET: (u64, u64) = (64 << 10, 1 << 30);
/// Log lines a second per handler version (`limits.log_rate`).
pub(crate) const LOG_RATE: (u32, u32) = (1, 1_000_000);
/// One call's wall-clock limit.
pub(crate) const TIMEOUT: (Duration, Duration) = (MS, HOUR);
/// How much longer than its timeout a call may run by asking
/// (`limits.max_extend`): its messages' leases are kept meanwhile.
pub(crate) const MAX_EXTEND: (Duration, Duration) = (Duration::ZERO, DAY);
/// Messages one call of a batch handler takes (`batch_size`).
pub(crate) const BATCH_SIZE: (usize, usize) = (1, 1000);
/// How long a batch handler's call waits for its batch to fill.
pub(crate) const BATCH_WAIT: (Duration, Duration) = (Duration::ZERO, Duration::from_secs(60));
/// Snoozes of one message (`retry.max_snoozes`).
pub(crate) const MAX_SNOOZES: (u32, u32) = (1, 1_000_000);
/// Messages one warm instance handles before it is replaced.
pub(crate) const MAX_MESSAGES_PER_INSTANCE: (u32, u32) = (1, 1_000_000);
/// Attempts in all.
pub(crate) const MAX_ATTEMPTS: (u32, u32) = (1, 1000);
/// Any one retry delay, backoff bound or guest delay cap: up to
/// [`MAX_DELAY`], the longest delay sluice accepts anywhere (a publish's
/// delay too).
pub(crate) const DELAY: (Duration, Duration) = (Duration::ZERO, MAX_DELAY);
/// Delay levels in `retry.delays`.
pub(crate) const DELAY_LEVELS: (usize, usize) = (1, 100);
/// How long a completed idempotency key is remembered.
pub(crate) const RETENTION: (Duration, Duration) = (SECOND, YEAR);
/// Scheduled redrives of a dead letter.
pub(crate) const MAX_REDRIVES: (u32, u32) = (1, 1000);
/// How long a message stays dead before a scheduled redrive.
pub(crate) const REDRIVE_EVERY: (Duration, Duration) = (SECOND, YEAR);
/// How long calls in flight may finish after a stop (`shutdown_grace`).
pub(crate) const SHUTDOWN_GRACE: (Duration, Duration) = (Duration::ZERO, DAY);
/// How long a queue that could move may stand still before it is
/// reported stalled (`stall_after`).
pub(crate) const STALL_AFTER: (Duration, Duration) = (SECOND, HOUR);
/// The longest a worker waits for one broker call (`broker_timeout`).
pub(crate) const BROKER_TIMEOUT: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(600));
/// One message's payload, headers and key (`max_message_size`).
pub(crate) const MESSAGE_SIZE: (u64, u64) = (1, 64 << 20);
/// One component file (`max_component_size`).
pub(crate) const COMPONENT_SIZE: (u64, u64) = (1 << 10, 4 << 30);

/// `value` of `field` if it is within `(min, max)`, both included.
pub(crate) fn check<T: PartialOrd + Display + Copy>(
    field: &str,
    value: T,
    range: (T, T),
) -> Result<T> {
    check_as(field, value, range, |v| v.to_string())
}

/// [`check`] for a duration, written the way the file writes durations.
pub(crate) fn check_duration(
    field: &str,
    value: Duration,
    range: (Duration, Duration),
) -> Result<Duration> {
    check_as(field, value, range, |d| {
        humantime::format_duration(d).to_string()
    })
}

/// [`check`] for a size, written the way the file writes sizes.
pub(crate) fn check_size(field: &str, value: u64, range: (u64, u64)) -> Result<u64> {
    check_as(field, value, range, crate::units::format_size)
}

/// [`check`], with the numbers in the error written by `show`.
fn check_as<T: PartialOrd + Copy>(
    field: &str,
    value: T,
    (min, max): (T, T),
    show: impl Fn(T) -> String,
) -> Result<T> {
    if value < min || value > max {
        bail!(
            "field `{field}` must be from {} to {}, not {}",
            show(min),
            show(max),
            show(value)
        );
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{DELAY_LEVELS, SCHEDULES};
    use crate::config::{HandlerSpec, HostConfig};

    fn sidecar(text: &str) -> Result<HandlerSpec, String> {
        HandlerSpec::parse("h", Path::new("h.toml"), text).map_err(|e| format!("{e:#}"))
    }

    /// Every numeric sidecar field, at its bounds (accepted) and just past
    /// them (refused, naming the field). Each line: the TOML, and the field
    /// the error names, or "" when it is accepted.
    const SIDECARS: &[(&str, &str)] = &[
        ("concurrency = 1", ""),
        ("concurrency = 1000", ""),
        ("concurrency = 0", "concurrency"),
        ("concurrency = 1001", "concurrency"),
        ("concurrency = 2305843009213693952", "concurrency"),
        ("prefetch = 1\nconcurrency = 1", ""),
        ("prefetch = 0", "prefetch"),
        ("prefetch = 100000", ""),
        ("prefetch = 100001", "prefetch"),
        ("prefetch = 2305843009213693952", "prefetch"),
        ("lease = \"7days\"", ""),
        ("lease = \"8days\"", "lease"),
        ("lease = \"999us\"", "lease"),
        ("lease = \"6s\"", ""),
        ("lease = \"5999ms\"", "limits.timeout"),
        ("[limits]\ntimeout = \"1ms\"", ""),
        ("[limits]\ntimeout = \"0s\"", "limits.timeout"),
        ("lease = \"2h\"\n[limits]\ntimeout = \"1h\"", ""),
        (
            "lease = \"3h\"\n[limits]\ntimeout = \"61m\"",
            "limits.timeout",
        ),
        ("[limits]\nmemory = \"64KiB\"", ""),
        ("[limits]\nmemory = \"63KiB\"", "limits.memory"),
        ("[limits]\nmemory = \"4GiB\"", ""),
        ("[limits]\nmemory = \"5GiB\"", "limits.memory"),
        ("[limits]\ncall_budget = \"64KiB\"", ""),
        ("[limits]\ncall_budget = \"63KiB\"", "limits.call_budget"),
        ("[limits]\ncall_budget = \"2GiB\"", "limits.call_budget"),
        ("[limits]\nlog_rate = 1", ""),
        ("[limits]\nlog_rate = 0", "limits.log_rate"),
        ("[limits]\nlog_rate = 1000001", "limits.log_rate"),
        ("max_messages_per_instance = 1", ""),
        ("max_messages_per_instance = 0", "max_messages_per_instance"),
        (
            "max_messages_per_instance = 1000001",
            "max_messages_per_instance",
        ),
        ("[retry]\nmax_attempts = 1000", ""),
        ("[retry]\nmax_attempts = 0", "retry.max_attempts"),
        ("[retry]\nmax_attempts = 1001", "retry.max_attempts"),
        ("[retry]\ninitial = \"0s\"", ""),
        ("[retry]\nmax = \"30days\"", ""),
        ("[retry]\nmax = \"31days\"", "retry.max"),
        (
            "[retry]\ninitial = \"31days\"\nmax = \"32days\"",
            "retry.initial",
        ),
        ("[retry]\nfactor = 1.0", ""),
        ("[retry]\nfactor = 0.99", "retry.factor"),
        ("[retry]\nfactor = 100.0", ""),
        ("[retry]\nfactor = 100.5", "retry.factor"),
        ("[retry]\nfactor = 0.5", "retry.factor"),
        ("[retry]\ndelays = [\"30days\"]", ""),
        ("[retry]\ndelays = [\"1s\", \"31days\"]", "retry.delays"),
        ("[retry]\ndelays = []", "retry.delays"),
        ("[retry]\ndelays = [\"0s\"]", ""),
        ("[retry]\nmax_guest_delay = \"0s\"", ""),
        ("[retry]\nmax_guest_delay = \"30days\"", ""),
        (
            "[retry]\nmax_guest_delay = \"31days\"",
            "retry.max_guest_delay",
        ),
        ("[retry]\nredrive_every = \"1s\"\nmax_redrives = 1000", ""),
        (
            "[retry]\nredrive_every = \"999ms\"\nmax_redrives = 1",
            "retry.redrive_every",
        ),
        (
            "[retry]\nredrive_every = \"366days\"\nmax_redrives = 1",
            "retry.redrive_every",
        ),
        (
            "[retry]\nredrive_every = \"1m\"\nmax_redrives = 0",
            "retry.max_redrives",
        ),
        (
            "[retry]\nredrive_every = \"1m\"\nmax_redrives = 1001",
            "retry.max_redrives",
        ),
        ("batch_size = 1000\nprefetch = 1000", ""),
        ("batch_size = 0", "batch_size"),
        ("batch_size = 1001", "batch_size"),
        ("batch_size = 64\nprefetch = 32", "batch_size"),
        ("batch_wait = \"1m\"", ""),
        ("batch_wait = \"61s\"", "batch_wait"),
        ("[limits]\nmax_extend = \"0s\"", ""),
        ("[limits]\nmax_extend = \"1day\"", ""),
        ("[limits]\nmax_extend = \"25h\"", "limits.max_extend"),
        ("[retry]\nmax_snoozes = 1", ""),
        ("[retry]\nmax_snoozes = 0", "retry.max_snoozes"),
        ("[retry]\nmax_snoozes = 1000001", "retry.max_snoozes"),
        ("max_in_flight = 1", ""),
        ("max_in_flight = 100000", ""),
        ("max_in_flight = 0", "max_in_flight"),
        ("max_in_flight = 100001", "max_in_flight"),
        ("rate = \"1/s\"", ""),
        ("rate = \"1000000/h\"", ""),
        ("rate = \"0/m\"", "rate"),
        ("rate = \"1000001/s\"", "rate"),
        ("[idempotency]\nretention = \"1s\"", ""),
        ("[idempotency]\nretention = \"0s\"", "idempotency.retention"),
        (
            "[idempotency]\nretention = \"999ms\"",
            "idempotency.retention",
        ),
        (
            "[idempotency]\nretention = \"366days\"",
            "idempotency.retention",
        ),
    ];

    #[test]
    fn every_numeric_sidecar_field_is_checked_at_and_past_its_bounds() {
        for (text, field) in SIDECARS {
            let got = sidecar(text);
            if field.is_empty() {
                assert!(got.is_ok(), "{text:?} was refused: {}", got.unwrap_err());
            } else {
                let err = got.err().unwrap_or_else(|| panic!("{text:?} was accepted"));
                assert!(
                    err.contains(&format!("field `{field}`")) && err.starts_with("h.toml"),
                    "{text:?}: {err}"
                );
            }
        }
    }

    /// The counted lists: delay levels and schedules, at their most and
    /// one past it.
    #[test]
    fn the_counted_lists_are_checked_at_and_past_their_bounds() {
        let delays = |n: usize| format!("[retry]\ndelays = [{}]", vec!["\"1s\""; n].join(", "));
        let schedules = |n: usize| {
            (0..n)
                .map(|i| format!("[[schedule]]\nname = \"s{i}\"\ncron = \"0 * * * *\"\n"))
                .collect::<String>()
        };
        assert!(sidecar(&delays(DELAY_LEVELS.1)).is_ok());
        let err = sidecar(&delays(DELAY_LEVELS.1 + 1)).unwrap_err();
        assert!(err.contains("field `retry.delays`"), "{err}");
        assert!(sidecar(&schedules(SCHEDULES.1)).is_ok());
        let err = sidecar(&schedules(SCHEDULES.1 + 1)).unwrap_err();
        assert!(
            err.contains("field `schedule (the number of them)`"),
            "{err}"
        );
    }

    #[test]
    fn the_host_config_numbers_are_checked_too() {
        let parse = |text: &str| {
            crate::config::parse_toml::<HostConfig>(Path::new("sluice.toml"), text)
                .and_then(|c| c.validate().map(|()| c))
                .map_err(|e| format!("{e:#}"))
        };
        for (text, field) in [
            ("shutdown_grace = \"1day\"", ""),
            ("shutdown_grace = \"2days\"", "shutdown_grace"),
            ("max_message_size = \"64MiB\"", ""),
            ("max_message_size = \"65MiB\"", "max_message_size"),
            ("max_message_size = \"0B\"", "max_message_size"),
            ("max_component_size = \"1KiB\"", ""),
            ("max_component_size = \"1023B\"", "max_component_size"),
            ("max_component_size = \"5GiB\"", "max_component_size"),
        ] {
            let got = parse(text);
            if field.is_empty() {
                assert!(got.is_ok(), "{text:?}: {}", got.unwrap_err());
            } else {
                let err = got.err().unwrap_or_else(|| panic!("{text:?} was accepted"));
                assert!(err.contains(&format!("field `{field}`")), "{text:?}: {err}");
            }
        }
    }
}

/// Bounded fuzzing of the sidecar and `sluice.toml` parsers: any text is a
/// spec or one clear error naming the file, never a panic; numbers and
/// durations anywhere in range or out of it likewise.
#[cfg(test)]
mod fuzz {
    use std::path::Path;

    use proptest::prelude::*;

    use crate::config::{HandlerSpec, HostConfig, parse_toml};

    const FIELDS: &[&str] = &[
        "concurrency",
        "prefetch",
        "lease",
        "max_messages_per_instance",
        "[limits]\ntimeout",
        "[limits]\nmemory",
        "[limits]\ncall_budget",
        "[limits]\nlog_rate",
        "[limits]\nmax_extend",
        "batch_size",
        "batch_wait",
        "[retry]\nmax_snoozes",
        "[retry]\nmax_attempts",
        "[retry]\ninitial",
        "[retry]\nmax",
        "[retry]\nfactor",
        "[retry]\nmax_guest_delay",
        "[retry]\ndelays",
        "[idempotency]\nretention",
    ];

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<f64>().prop_map(|f| format!("{f:?}")),
            (
                any::<u32>(),
                prop::sample::select(vec![
                    "ns", "ms", "s", "m", "h", "days", "B", "KiB", "GiB", ""
                ])
            )
                .prop_map(|(n, u)| format!("\"{n}{u}\"")),
            Just("[]".to_string()),
            "\"[ -~]{0,12}\"",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn any_text_is_a_sidecar_or_one_clear_error(text in "[ -~\n]{0,200}") {
            if let Err(e) = HandlerSpec::parse("h", Path::new("h.toml"), &text) {
                let e = format!("{e:#}");
                prop_assert!(e.starts_with("h.toml"), "{}", e);
            }
            if let Ok(c) = parse_toml::<HostConfig>(Path::new("sluice.toml"), &text) {
                let _ = c.validate();
            }
        }

        #[test]
        fn any_number_in_any_field_is_taken_or_refused_by_name(
            field in prop::sample::select(FIELDS),
            value in value(),
        ) {
            let text = format!("{field} = {value}\n");
            if let Err(e) = HandlerSpec::parse("h", Path::new("h.toml"), &text) {
                let e = format!("{e:#}");
                prop_assert!(e.starts_with("h.toml") && !e.contains('\n'), "{}", e);
            }
        }
    }
}
