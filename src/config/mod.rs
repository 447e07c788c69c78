//! Configuration files: `sluice.toml` for the host and `NAME.toml` sidecars
//! for handlers. Unknown fields are rejected by name; every error names the
//! file, the line and the field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};
use serde::Deserialize;

use crate::base::files::{DEFAULT_MAX_COMPONENT_SIZE, MAX_CONFIG_SIZE, read_text};
use crate::base::schedule::Schedule;
use crate::error::chain;
use crate::message::{DEFAULT_MAX_MESSAGE_SIZE, validate_queue_name};
use crate::policy::{Backoff, Flow, OrderedGroups, Rate, RedrivePolicy, RetryPolicy};
use crate::units::{Dur, Size};

pub(crate) mod bounds;
mod capabilities;
mod ordering;
mod redrive;
mod schedules;
mod subscriptions;
pub(crate) use capabilities::Capabilities;
pub(crate) use subscriptions::Subscription;

/// The default broker URL when neither the CLI nor `sluice.toml` names one.
pub(crate) const DEFAULT_BROKER: &str = "sqlite://sluice.db";

/// `sluice.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// `sqlite://PATH`, `redis://HOST:PORT` or `postgres://USER@HOST:PORT/DB`.
    pub(crate) broker: Option<String>,
    /// Directory of `NAME.wasm` handlers and `NAME.toml` sidecars.
    pub(crate) handlers: Option<PathBuf>,
    /// How long in-flight messages may run on after SIGINT/SIGTERM.
    pub(crate) shutdown_grace: Option<Dur>,
    /// The longest a worker waits for one broker call before giving it up
    /// with a log line and trying again (default 10 s; never longer than
    /// the queue's lease).
    pub(crate) broker_timeout: Option<Dur>,
    /// How long a queue whose work could move may stand still before the
    /// host reports it stalled (default 30 s), or `off`.
    pub(crate) stall_after: Option<StallAfter>,
    /// Exit non-zero when a queue stalls, for a supervisor to restart the
    /// host (default false).
    pub(crate) exit_on_stall: Option<bool>,
    /// Handler instances the host runs at once, over every handler
    /// (default: one per 16 MiB of memory, 1,000 to 4,096).
    pub(crate) max_instances: Option<usize>,
    /// Cap on payload plus headers of one message.
    pub(crate) max_message_size: Option<Size>,
    /// `text` (default) or `json`.
    pub(crate) log_format: Option<LogFormat>,
    /// Where compiled handlers are cached (default: `$XDG_CACHE_HOME/sluice`,
    /// else `~/.cache/sluice`). Never inside the handlers directory.
    pub(crate) cache_dir: Option<PathBuf>,
    /// The file of the secret that authenticates cache entries (default:
    /// `$XDG_CONFIG_HOME/sluice/cache.key`, else `~/.config/sluice/cache.key`).
    pub(crate) cache_key: Option<PathBuf>,
    /// The largest handler component loaded (default 128 MiB).
    pub(crate) max_component_size: Option<Size>,
    /// Where `sluice run` serves metrics, health, the admin API and the
    /// dashboard: `HOST:PORT` (default `127.0.0.1:9464`), or `off`.
    pub(crate) admin: Option<String>,
    /// The bearer token the admin endpoint asks for (else
    /// `SLUICE_ADMIN_TOKEN`); required off loopback.
    pub(crate) admin_token: Option<String>,
    /// Host names the admin endpoint answers to besides its own address,
    /// `localhost` and loopback: the names a proxy or a browser uses to
    /// reach it. Any other `Host` is refused (421), against DNS rebinding.
    pub(crate) admin_hosts: Option<Vec<String>>,
    /// An OTLP/HTTP collector's base URL, e.g. `http://127.0.0.1:4318`
    /// (else `OTEL_EXPORTER_OTLP_ENDPOINT`): attempt spans are exported
    /// there.
    pub(crate) otlp_endpoint: Option<String>,
}

/// `stall_after`: a duration, or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StallAfter {
    Off,
    After(Duration),
}

impl<'de> Deserialize<'de> for StallAfter {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text.trim().eq_ignore_ascii_case("off") {
            return Ok(StallAfter::Off);
        }
        crate::units::parse_duration(&text)
            .map(StallAfter::After)
            .map_err(|e| serde::de::Error::custom(format!("stall_after: {e}, or \"off\"")))
    }
}

/// How log lines are written: `text` for people, `json` for collectors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogFormat {
    #[default]
    Text,
    Json,
}

impl HostConfig {
    /// Read and check `sluice.toml` at `path`; the error names the file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = read_text(path, MAX_CONFIG_SIZE, "a config file is a few KiB")
            .map_err(|e| anyhow::anyhow!("config file {}", chain(&e)))?;
        let config: HostConfig = parse_toml(path, &text)?;
        config
            .validate()
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(config)
    }

    /// Check every number against what sluice can honour.
    pub fn validate(&self) -> Result<()> {
        if let Some(grace) = self.shutdown_grace {
            bounds::check_duration("shutdown_grace", grace.0, bounds::SHUTDOWN_GRACE)?;
        }
        if let Some(bound) = self.broker_timeout {
            bounds::check_duration("broker_timeout", bound.0, bounds::BROKER_TIMEOUT)?;
        }
        if let Some(StallAfter::After(after)) = self.stall_after {
            bounds::check_duration("stall_after", after, bounds::STALL_AFTER)?;
        }
        if self.exit_on_stall == Some(true) && self.stall_after == Some(StallAfter::Off) {
            bail!(
                "exit_on_stall = true needs the stall watchdog, but stall_after = \"off\"; set stall_after to a duration (1s to 1h) or drop exit_on_stall"
            );
        }
        if let Some(n) = self.max_instances {
            bounds::check("max_instances", n, bounds::MAX_INSTANCES)?;
        }
        if let Some(size) = self.max_message_size {
            bounds::check_size("max_message_size", size.0, bounds::MESSAGE_SIZE)?;
        }
        if let Some(size) = self.max_component_size {
            bounds::check_size("max_component_size", size.0, bounds::COMPONENT_SIZE)?;
        }
        if let Some(hosts) = &self.admin_hosts {
            validate_admin_hosts(hosts)?;
        }
        Ok(())
    }

    /// The largest handler component loaded.
    pub fn max_component_size(&self) -> u64 {
        self.max_component_size
            .map_or(DEFAULT_MAX_COMPONENT_SIZE, |s| s.0)
    }

    /// The largest message accepted (payload and headers).
    pub fn max_message_size(&self) -> u64 {
        self.max_message_size
            .map_or(DEFAULT_MAX_MESSAGE_SIZE, |s| s.0)
    }
}

/// Check `admin_hosts` as written: each a host name or address, without a
/// scheme or a port.
fn validate_admin_hosts(hosts: &[String]) -> Result<()> {
    for host in hosts {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let address = bare.parse::<std::net::IpAddr>().is_ok();
        let name = !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if !address && !name {
            bail!(
                "admin_hosts: {host:?} is not a host name or address; list names like \"sluice.internal\", without a scheme or a port"
            );
        }
    }
    Ok(())
}

/// Parse TOML into `T`, turning errors into one line: `FILE:LINE:COL: what`.
pub fn parse_toml<T: for<'de> Deserialize<'de>>(path: &Path, text: &str) -> Result<T> {
    toml::from_str(text).map_err(|e| {
        let at = e
            .span()
            .map(|span| {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!(":{line}:{col}")
            })
            .unwrap_or_default();
        anyhow::anyhow!("{}{at}: {}", path.display(), e.message().trim())
    })
}

/// How a handler's instances are managed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMode {
    /// A new instance for every message: nothing leaks between messages.
    #[default]
    Fresh,
    /// Warm instances, each reused for up to `max_messages_per_instance`
    /// messages and dropped after any failure.
    Reuse,
}

/// A handler sidecar, `NAME.toml`, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHandler {
    queue: Option<String>,
    instance_mode: Option<InstanceMode>,
    max_messages_per_instance: Option<u32>,
    concurrency: Option<usize>,
    min_concurrency: Option<usize>,
    prefetch: Option<usize>,
    max_in_flight: Option<u32>,
    rate: Option<String>,
    lease: Option<Dur>,
    batch_size: Option<usize>,
    batch_wait: Option<Dur>,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    retry: RawRetry,
    #[serde(default)]
    idempotency: RawIdempotency,
    #[serde(default)]
    config: BTreeMap<String, toml::Value>,
    #[serde(default)]
    capabilities: Capabilities,
    #[serde(default)]
    subscribe: Vec<subscriptions::RawSubscription>,
    #[serde(default)]
    schedule: Vec<schedules::RawSchedule>,
    ordering: Option<ordering::RawOrdering>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    timeout: Option<Dur>,
    memory: Option<Size>,
    call_budget: Option<Size>,
    log_rate: Option<u32>,
    max_extend: Option<Dur>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    max_attempts: Option<u32>,
    initial: Option<Dur>,
    max: Option<Dur>,
    factor: Option<f64>,
    jitter: Option<bool>,
    delays: Option<Vec<Dur>>,
    max_guest_delay: Option<Dur>,
    max_snoozes: Option<u32>,
    on_dead: Option<String>,
    redrive_every: Option<Dur>,
    max_redrives: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdempotency {
    enabled: Option<bool>,
    key_header: Option<String>,
    key_pointer: Option<String>,
    retention: Option<Dur>,
}

/// Where a handler's idempotency key comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum KeySource {
    /// The message's own key: `send --key`, or the message id.
    #[default]
    Message,
    /// The value of this header.
    Header(String),
    /// The string or number at this JSON pointer in the payload.
    Pointer(String),
}

/// How a handler takes idempotency keys (`[idempotency]` in its sidecar).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Idempotency {
    /// Whether a message whose key completed is acked without a call.
    pub enabled: bool,
    pub(crate) source: KeySource,
    /// How long a completed key is remembered.
    pub(crate) retention: Duration,
}

/// Everything the host needs to know to serve one handler.
#[derive(Clone, Debug, PartialEq)]
pub struct HandlerSpec {
    /// The file stem: `orders` for `orders.wasm`.
    pub(crate) name: String,
    /// The queue it serves: its name unless the sidecar says `queue`.
    pub queue: String,
    /// `fresh` or `reuse` instances.
    pub instance_mode: InstanceMode,
    /// Messages one warm instance handles before it is replaced (`reuse`).
    pub max_messages_per_instance: u32,
    /// Handler calls running at once, at most.
    pub concurrency: usize,
    /// Instances of the host's pool kept for this handler alone
    /// (`min_concurrency`, default 1): however busy the others are, it can
    /// always run this many calls at once.
    pub min_concurrency: usize,
    /// Messages leased ahead of the calls.
    pub prefetch: usize,
    /// Limits of the queue across every host (`max_in_flight`, `rate`).
    pub flow: Flow,
    /// Ordered groups of the queue's messages (`[ordering]`); none by default.
    pub ordering: Option<OrderedGroups>,
    /// How long a delivery stays invisible to other consumers.
    pub(crate) lease: Duration,
    /// How long one call may run, instantiation included.
    pub timeout: Duration,
    /// How much longer than `timeout` a call may run in all by asking for
    /// more time (`limits.max_extend`).
    pub max_extend: Duration,
    /// How a batch handler's calls gather messages (`batch_size`,
    /// `batch_wait`); unused by a handler of the single-message world.
    pub batch: Batch,
    /// All of one instance's memories together.
    pub(crate) memory: u64,
    /// Bytes one call may hand the host: held publishes and log lines.
    pub(crate) call_budget: u64,
    /// Log lines a second, for each version of the handler.
    pub(crate) log_rate: u32,
    /// How failed attempts are retried (`[retry]`).
    pub(crate) retry: RetryPolicy,
    /// Where a notice goes when a message dies (`[retry] on_dead`).
    pub(crate) on_dead: Option<String>,
    /// Scheduled redrive of dead letters (`[retry] redrive_every`,
    /// `max_redrives`); none by default.
    pub(crate) redrive: Option<RedrivePolicy>,
    /// Which key a message is deduplicated by, and for how long
    /// (`[idempotency]`).
    pub idempotency: Idempotency,
    /// The values the handler reads through its `config` import.
    pub(crate) config: BTreeMap<String, String>,
    /// What the handler is granted beyond WASI with nothing (`[capabilities]`).
    pub(crate) capabilities: Capabilities,
    /// The topics its queue is bound to (`[[subscribe]]`).
    pub(crate) subscriptions: Vec<Subscription>,
    /// Cron schedules publishing to its queue (`[[schedule]]`).
    pub(crate) schedules: Vec<Schedule>,
}

pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
pub(crate) const DEFAULT_MEMORY: u64 = 64 << 20;
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(60);
pub(crate) const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);
pub(crate) const DEFAULT_CALL_BUDGET: u64 = 8 << 20;
pub(crate) const DEFAULT_LOG_RATE: u32 = 10_000;
pub(crate) const DEFAULT_MAX_EXTEND: Duration = Duration::from_secs(300);
pub(crate) const DEFAULT_BATCH_SIZE: usize = 16;

/// How a batch handler's calls gather messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Most messages one call takes.
    pub size: usize,
    /// How long a call waits for a batch to fill once it has its first
    /// message; zero takes what is there.
    pub(crate) wait: Duration,
}

impl HandlerSpec {
    /// The spec for handler `name` with no sidecar.
    pub fn defaults(name: &str) -> Result<Self> {
        resolve(name, RawHandler::default()).map_err(|e| anyhow::anyhow!("handler {name}: {e}"))
    }

    /// Read the sidecar at `path` for handler `name`.
    pub fn load(name: &str, path: &Path) -> Result<Self> {
        let text = read_text(path, MAX_CONFIG_SIZE, "a sidecar is a few KiB")
            .map_err(|e| anyhow::anyhow!("handler config {}", chain(&e)))?;
        Self::parse(name, path, &text)
    }

    /// The sidecar `text` for handler `name`; `path` names it in errors.
    pub fn parse(name: &str, path: &Path, text: &str) -> Result<Self> {
        let raw: RawHandler = parse_toml(path, text)?;
        resolve(name, raw).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }
}

fn resolve(name: &str, raw: RawHandler) -> Result<HandlerSpec> {
    let queue = raw.queue.unwrap_or_else(|| name.to_string());
    validate_queue_name(&queue).map_err(|e| anyhow::anyhow!("field `queue`: {e}"))?;
    let concurrency = bounds::check(
        "concurrency",
        raw.concurrency.unwrap_or(16),
        bounds::CONCURRENCY,
    )?;
    let min_concurrency = resolve_min_concurrency(raw.min_concurrency, concurrency)?;
    let (prefetch, batch) =
        resolve_batch(raw.batch_size, raw.prefetch, raw.batch_wait, concurrency)?;
    let flow = resolve_flow(raw.max_in_flight, raw.rate.as_deref())?;
    let lease = bounds::check_duration(
        "lease",
        raw.lease.map_or(DEFAULT_LEASE, |d| d.0),
        bounds::LEASE,
    )?;
    let limits = resolve_limits(&raw.limits, lease)?;
    let max_messages_per_instance = bounds::check(
        "max_messages_per_instance",
        raw.max_messages_per_instance.unwrap_or(1000),
        bounds::MAX_MESSAGES_PER_INSTANCE,
    )?;
    let on_dead = resolve_on_dead(raw.retry.on_dead.clone(), &queue)?;
    let redrive = redrive::resolve(raw.retry.redrive_every, raw.retry.max_redrives)?;
    Ok(HandlerSpec {
        name: name.to_string(),
        on_dead,
        redrive,
        queue,
        instance_mode: raw.instance_mode.unwrap_or_default(),
        max_messages_per_instance,
        concurrency,
        min_concurrency,
        prefetch,
        flow,
        ordering: ordering::resolve(raw.ordering)?,
        lease,
        timeout: limits.timeout,
        max_extend: limits.max_extend,
        batch,
        memory: limits.memory,
        call_budget: limits.call_budget,
        log_rate: limits.log_rate,
        retry: resolve_retry(raw.retry)?,
        idempotency: resolve_idempotency(raw.idempotency)?,
        config: resolve_values(raw.config)?,
        capabilities: raw.capabilities,
        subscriptions: subscriptions::resolve(raw.subscribe)?,
        schedules: schedules::resolve(raw.schedule)?,
    })
}

/// `min_concurrency`, checked: at most `concurrency`.
fn resolve_min_concurrency(min: Option<usize>, concurrency: usize) -> Result<usize> {
    let Some(min) = min else {
        return Ok(1);
    };
    let min = bounds::check("min_concurrency", min, bounds::MIN_CONCURRENCY)?;
    if min > concurrency {
        bail!(
            "field `min_concurrency` ({min}) is more than `concurrency` ({concurrency}): a handler never keeps more instances than it runs calls; lower `min_concurrency` or raise `concurrency`"
        );
    }
    Ok(min)
}

/// `prefetch` and the batch's size and wait, checked against each other:
/// a batch holds only messages already prefetched.
fn resolve_batch(
    batch_size: Option<usize>,
    prefetch: Option<usize>,
    batch_wait: Option<Dur>,
    concurrency: usize,
) -> Result<(usize, Batch)> {
    let batch_size = batch_size
        .map(|n| bounds::check("batch_size", n, bounds::BATCH_SIZE))
        .transpose()?;
    let prefetch = match prefetch {
        Some(n) => bounds::check("prefetch", n, bounds::PREFETCH)?.max(concurrency),
        // A batch size set in the sidecar can fill from the prefetch.
        None => (concurrency * 4).max(batch_size.unwrap_or(0)),
    };
    let batch = Batch {
        size: match batch_size {
            Some(n) if n > prefetch => bail!(
                "field `batch_size` ({n}) is more than `prefetch` ({prefetch}): a batch holds only messages already prefetched; raise `prefetch` or lower `batch_size`"
            ),
            Some(n) => n,
            // The default never asks for more than is prefetched.
            None => DEFAULT_BATCH_SIZE.min(prefetch),
        },
        wait: bounds::check_duration(
            "batch_wait",
            batch_wait.map_or(Duration::ZERO, |d| d.0),
            bounds::BATCH_WAIT,
        )?,
    };
    Ok((prefetch, batch))
}

/// `retry.on_dead`: a valid queue name that is not the handler's own.
fn resolve_on_dead(on_dead: Option<String>, queue: &str) -> Result<Option<String>> {
    if let Some(q) = &on_dead {
        validate_queue_name(q).map_err(|e| anyhow::anyhow!("field `retry.on_dead`: {e}"))?;
        if q == queue {
            bail!(
                "field `retry.on_dead` names the handler's own queue {q:?}: a notice would be handled as a message of it"
            );
        }
    }
    Ok(on_dead)
}

/// `max_in_flight` and `rate`, checked.
fn resolve_flow(max_in_flight: Option<u32>, rate: Option<&str>) -> Result<Flow> {
    let max_in_flight = max_in_flight
        .map(|n| bounds::check("max_in_flight", n, bounds::MAX_IN_FLIGHT))
        .transpose()?;
    let rate = match rate {
        None => None,
        Some(text) => {
            let rate: Rate = text
                .parse()
                .map_err(|e| anyhow::anyhow!("field `rate`: {e}"))?;
            bounds::check("rate", rate.count, bounds::RATE_COUNT)?;
            Some(rate)
        }
    };
    Ok(Flow {
        max_in_flight,
        rate,
    })
}

/// The `[limits]` table, checked; the timeout against `lease`.
struct Limits {
    timeout: Duration,
    memory: u64,
    call_budget: u64,
    log_rate: u32,
    max_extend: Duration,
}

fn resolve_limits(raw: &RawLimits, lease: Duration) -> Result<Limits> {
    let timeout = bounds::check_duration(
        "limits.timeout",
        raw.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
        bounds::TIMEOUT,
    )?;
    if timeout + bounds::LEASE_MARGIN > lease {
        bail!(
            "field `limits.timeout` ({}) must be at least {} shorter than `lease` ({}): the margin lets a call that runs to its timeout settle before its lease ends, or a message could be handled twice at once",
            humantime::format_duration(timeout),
            humantime::format_duration(bounds::LEASE_MARGIN),
            humantime::format_duration(lease)
        );
    }
    Ok(Limits {
        timeout,
        memory: bounds::check_size(
            "limits.memory",
            raw.memory.map_or(DEFAULT_MEMORY, |s| s.0),
            bounds::MEMORY,
        )?,
        call_budget: bounds::check_size(
            "limits.call_budget",
            raw.call_budget.map_or(DEFAULT_CALL_BUDGET, |s| s.0),
            bounds::CALL_BUDGET,
        )?,
        log_rate: bounds::check(
            "limits.log_rate",
            raw.log_rate.unwrap_or(DEFAULT_LOG_RATE),
            bounds::LOG_RATE,
        )?,
        max_extend: bounds::check_duration(
            "limits.max_extend",
            raw.max_extend.map_or(DEFAULT_MAX_EXTEND, |d| d.0),
            bounds::MAX_EXTEND,
        )?,
    })
}

fn resolve_retry(raw: RawRetry) -> Result<RetryPolicy> {
    let defaults = RetryPolicy::default();
    let max_attempts = bounds::check(
        "retry.max_attempts",
        raw.max_attempts.unwrap_or(defaults.max_attempts),
        bounds::MAX_ATTEMPTS,
    )?;
    let delay = |field: &str, d: Option<Dur>, default: Duration| {
        bounds::check_duration(field, d.map_or(default, |d| d.0), bounds::DELAY)
    };
    let exponential_set =
        raw.initial.is_some() || raw.max.is_some() || raw.factor.is_some() || raw.jitter.is_some();
    let backoff = match raw.delays {
        Some(_) if exponential_set => bail!(
            "`retry.delays` cannot be combined with `retry.initial`, `max`, `factor` or `jitter`: choose delay levels or exponential backoff"
        ),
        Some(levels) => {
            let (min, max) = bounds::DELAY_LEVELS;
            if levels.len() < min || levels.len() > max {
                bail!(
                    "field `retry.delays` needs from {min} to {max} delays, not {}",
                    levels.len()
                );
            }
            let levels = levels
                .into_iter()
                .map(|d| delay("retry.delays", Some(d), Duration::ZERO))
                .collect::<Result<_>>()?;
            Backoff::Fixed(levels)
        }
        None => resolve_exponential(&raw, defaults.backoff.clone())?,
    };
    Ok(RetryPolicy {
        max_attempts,
        backoff,
        max_guest_delay: delay(
            "retry.max_guest_delay",
            raw.max_guest_delay,
            defaults.max_guest_delay,
        )?,
        max_snoozes: bounds::check(
            "retry.max_snoozes",
            raw.max_snoozes.unwrap_or(defaults.max_snoozes),
            bounds::MAX_SNOOZES,
        )?,
    })
}

/// Exponential backoff from `retry.initial`, `max`, `factor` and `jitter`,
/// each defaulting to `defaults`.
fn resolve_exponential(raw: &RawRetry, defaults: Backoff) -> Result<Backoff> {
    let Backoff::Exponential {
        initial,
        max,
        factor,
        jitter,
    } = defaults
    else {
        unreachable!("the default backoff is exponential")
    };
    let delay = |field: &str, d: Option<Dur>, default: Duration| {
        bounds::check_duration(field, d.map_or(default, |d| d.0), bounds::DELAY)
    };
    let initial = delay("retry.initial", raw.initial, initial)?;
    let max = delay("retry.max", raw.max, max)?;
    let factor = raw.factor.unwrap_or(factor);
    if !(1.0..=100.0).contains(&factor) {
        bail!("field `retry.factor` must be between 1.0 and 100.0, not {factor}");
    }
    if initial > max {
        bail!("field `retry.initial` must not be longer than `retry.max`");
    }
    Ok(Backoff::Exponential {
        initial,
        max,
        factor,
        jitter: raw.jitter.unwrap_or(jitter),
    })
}

fn resolve_idempotency(raw: RawIdempotency) -> Result<Idempotency> {
    let source = match (raw.key_header, raw.key_pointer) {
        (Some(_), Some(_)) => {
            bail!("set one of `idempotency.key_header` and `idempotency.key_pointer`, not both")
        }
        (Some(h), None) if h.is_empty() => bail!("field `idempotency.key_header` is empty"),
        (Some(h), None) => KeySource::Header(h),
        (None, Some(p)) if !p.starts_with('/') => {
            bail!(
                "field `idempotency.key_pointer` must be a JSON pointer starting with '/', like \"/order/id\"; got {p:?}"
            )
        }
        (None, Some(p)) => KeySource::Pointer(p),
        (None, None) => KeySource::Message,
    };
    Ok(Idempotency {
        enabled: raw.enabled.unwrap_or(true),
        source,
        retention: bounds::check_duration(
            "idempotency.retention",
            raw.retention.map_or(DEFAULT_RETENTION, |d| d.0),
            bounds::RETENTION,
        )?,
    })
}

fn resolve_values(raw: BTreeMap<String, toml::Value>) -> Result<BTreeMap<String, String>> {
    raw.into_iter()
        .map(|(k, v)| {
            let text = match v {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => bail!(
                    "field `config.{k}` must be a string, number or boolean, not a {}",
                    other.type_str()
                ),
            };
            Ok((k, text))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<HandlerSpec> {
        HandlerSpec::parse("orders", Path::new("handlers/orders.toml"), text)
    }

    #[test]
    fn admin_hosts_are_names_or_addresses() {
        let ok = ["sluice.internal", "10.1.2.3", "::1", "[::1]"].map(String::from);
        assert!(validate_admin_hosts(&ok).is_ok());
        for bad in ["", "http://x", "x:80", "a b", "sluice.internal:9464"] {
            let e = validate_admin_hosts(&[bad.to_string()])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("admin_hosts") && e.contains("without a scheme"),
                "{e}"
            );
        }
    }

    #[test]
    fn defaults_bind_queue_to_file_name() {
        let spec = parse("").unwrap();
        assert_eq!(spec.queue, "orders");
        assert_eq!(spec.instance_mode, InstanceMode::Fresh);
        assert_eq!(spec.timeout, DEFAULT_TIMEOUT);
        assert!(spec.idempotency.enabled);
    }

    #[test]
    fn full_sidecar() {
        let spec = parse(
            r#"
            queue = "orders-eu"
            instance_mode = "reuse"
            concurrency = 4
            [limits]
            timeout = "250ms"
            memory = "16MiB"
            [retry]
            max_attempts = 3
            delays = ["1m", "5m"]
            [idempotency]
            key_pointer = "/order/id"
            retention = "1h"
            [config]
            followup_queue = "shipping"
            retry_delay_ms = 10
            "#,
        )
        .unwrap();
        assert_eq!(spec.queue, "orders-eu");
        assert_eq!(spec.instance_mode, InstanceMode::Reuse);
        assert_eq!(spec.timeout, Duration::from_millis(250));
        assert_eq!(spec.memory, 16 << 20);
        assert_eq!(
            spec.retry.backoff,
            Backoff::Fixed(vec![Duration::from_secs(60), Duration::from_secs(300)])
        );
        assert_eq!(
            spec.idempotency.source,
            KeySource::Pointer("/order/id".into())
        );
        assert_eq!(spec.config["retry_delay_ms"], "10");
    }

    #[test]
    fn unknown_field_is_named_with_file_and_line() {
        let err = parse("queue = \"x\"\n[limits]\ntimeot = \"5s\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("handlers/orders.toml:3:"), "{err}");
        assert!(err.contains("timeot"), "{err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }

    #[test]
    fn bad_duration_is_named() {
        let err = parse("[limits]\ntimeout = \"5 parsecs\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("handlers/orders.toml:2:") && err.contains("5 parsecs"),
            "{err}"
        );
    }

    #[test]
    fn contradictions_are_refused() {
        assert!(
            parse("[retry]\ndelays = [\"1s\"]\nfactor = 3.0\n")
                .unwrap_err()
                .to_string()
                .contains("retry.delays")
        );
        assert!(
            parse("lease = \"1s\"\n[limits]\ntimeout = \"2s\"\n")
                .unwrap_err()
                .to_string()
                .contains("limits.timeout")
        );
        assert!(
            parse("[idempotency]\nkey_pointer = \"id\"\n")
                .unwrap_err()
                .to_string()
                .contains("key_pointer")
        );
        assert!(
            parse("queue = \"a/b\"\n")
                .unwrap_err()
                .to_string()
                .contains("`queue`")
        );
        let own = parse("[retry]\non_dead = \"orders\"\n")
            .unwrap_err()
            .to_string();
        assert!(own.contains("own queue"), "{own}");
        let bad = parse("[retry]\non_dead = \"a b\"\n")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("retry.on_dead"), "{bad}");
        assert_eq!(
            parse("[retry]\non_dead = \"alerts\"\n")
                .unwrap()
                .on_dead
                .as_deref(),
            Some("alerts")
        );
    }

    #[test]
    fn flow_limits_are_read_and_checked() {
        let spec = parse("max_in_flight = 4\nrate = \"30/m\"\n").unwrap();
        assert_eq!(spec.flow.max_in_flight, Some(4));
        let rate = spec.flow.rate.unwrap();
        assert_eq!((rate.count, rate.per), (30, Duration::from_secs(60)));
        assert_eq!(rate.to_string(), "30/m");
        assert_eq!(rate.burst(), 1.0, "at least one token");
        assert_eq!("200/s".parse::<Rate>().unwrap().burst(), 200.0);
        assert_eq!(parse("").unwrap().flow, Flow::default());
        for (text, field, says) in [
            ("max_in_flight = 0\n", "max_in_flight", "0"),
            ("max_in_flight = 100001\n", "max_in_flight", "100001"),
            ("rate = \"0/s\"\n", "rate", "pause the queue"),
            ("rate = \"5/d\"\n", "rate", "N/s, N/m or N/h"),
            ("rate = \"fast\"\n", "rate", "\"fast\" is not a rate"),
            ("rate = \"2000000/s\"\n", "rate", "2000000"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(field) && err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn capabilities_grant_nothing_unless_set() {
        assert!(!parse("").unwrap().capabilities.kv);
        assert!(
            parse("[capabilities]\nkv = true\n")
                .unwrap()
                .capabilities
                .kv
        );
        let err = parse("[capabilities]\nkv = \"yes\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("handlers/orders.toml:2:"), "{err}");
        let err = parse("[capabilities]\nkeyvalue = true\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("keyvalue"), "{err}");
    }

    #[test]
    fn host_config_rejects_unknown_fields() {
        let err = parse_toml::<HostConfig>(Path::new("sluice.toml"), "brokr = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("sluice.toml:1:1") && err.contains("brokr"),
            "{err}"
        );
    }
}
