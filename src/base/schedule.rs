//! Cron schedules: a handler's `[[schedule]]` publishes one message to its
//! queue at every tick of a cron expression. What a schedule is, which of
//! its ticks are due at a given time (a pure function of the schedule, the
//! last tick the broker recorded and the time), and the overview `sluice
//! stats` and the admin API show. The host's loop that fires the due ticks
//! is [`crate::serve::ticker`].
//!
//! Ticks are whole seconds in UTC milliseconds. Every host that serves the
//! handler plans the same ticks and tries to fire them; the broker fires
//! each once ([`crate::broker::Schedules`]).

use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use serde::{Deserialize, Serialize};

use crate::broker::{self, HandlerStatus, LastTick, Schedules, Tick};
use crate::message::NewMessage;

/// The header that names the schedule a message comes from.
pub(crate) const SCHEDULE_HEADER: &str = "sluice-schedule";
/// The header with the time the tick was due (RFC 3339, UTC).
pub(crate) const TICK_HEADER: &str = "sluice-tick";

/// What a schedule does with the ticks that passed while no host fired
/// them (every host down, or the broker away).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CatchUp {
    /// Skip them: only a tick fired within [`ON_TIME_MS`] of being due
    /// publishes.
    None,
    /// Publish one message, for the latest of them.
    #[default]
    One,
    /// Publish each of them, oldest first, up to [`MAX_CATCH_UP`] a pass.
    All,
}

impl CatchUp {
    /// The name a sidecar gives it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            CatchUp::None => "none",
            CatchUp::One => "one",
            CatchUp::All => "all",
        }
    }
}

/// How late a tick may fire and still publish under `catch_up = "none"`.
pub(crate) const ON_TIME_MS: u64 = 60_000;
/// The most ticks one pass fires under `catch_up = "all"`; the rest follow
/// in the next passes.
pub(crate) const MAX_CATCH_UP: usize = 1000;

/// One `[[schedule]]` of a handler, parsed.
#[derive(Clone, Debug)]
pub(crate) struct Schedule {
    /// Unique within the handler's queue: the broker keys ticks by it.
    pub(crate) name: String,
    /// The cron expression as written.
    pub(crate) cron_text: String,
    cron: Cron,
    pub(crate) timezone: Tz,
    pub(crate) payload: Vec<u8>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) catch_up: CatchUp,
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        // The parsed expression follows from the text.
        (
            &self.name,
            &self.cron_text,
            self.timezone,
            &self.payload,
            &self.headers,
            self.catch_up,
        ) == (
            &other.name,
            &other.cron_text,
            other.timezone,
            &other.payload,
            &other.headers,
            other.catch_up,
        )
    }
}

/// Parse a cron expression: five fields (minute to weekday), or six with
/// seconds first; the error is the parser's.
pub(crate) fn parse_cron(text: &str) -> Result<Cron, String> {
    Cron::from_str(text).map_err(|e| e.to_string())
}

/// Parse an IANA time zone name such as `Europe/Paris`.
pub(crate) fn parse_timezone(name: &str) -> Result<Tz, String> {
    Tz::from_str(name).map_err(|_| {
        format!("{name:?} is not an IANA time zone name (such as \"UTC\" or \"Europe/Paris\")")
    })
}

impl Schedule {
    /// A schedule of `cron` (checked) in `timezone`.
    pub(crate) fn new(name: &str, cron: &str, timezone: Tz) -> Result<Self, String> {
        Ok(Schedule {
            name: name.to_string(),
            cron_text: cron.to_string(),
            cron: parse_cron(cron)?,
            timezone,
            payload: Vec::new(),
            headers: Vec::new(),
            catch_up: CatchUp::default(),
        })
    }

    /// The first tick after `after_ms`; `None` if the expression has no
    /// more (a year in the past, a date that never comes).
    pub(crate) fn next_after(&self, after_ms: u64) -> Option<u64> {
        let at = self.at(after_ms)?;
        let next = self.cron.find_next_occurrence(&at, false).ok()?;
        Some(next.timestamp_millis() as u64)
    }

    /// The latest tick at or before `now_ms`.
    fn latest_by(&self, now_ms: u64) -> Option<u64> {
        let at = self.at(now_ms)?;
        let prev = self.cron.find_previous_occurrence(&at, true).ok()?;
        u64::try_from(prev.timestamp_millis()).ok()
    }

    fn at(&self, ms: u64) -> Option<DateTime<Tz>> {
        let ms = i64::try_from(ms).ok()?;
        Some(
            Utc.timestamp_millis_opt(ms)
                .single()?
                .with_timezone(&self.timezone),
        )
    }

    /// The ticks to fire on `queue` at `now_ms`, oldest first, given the
    /// last tick recorded. A schedule seen for the first time records `now`
    /// without publishing: its ticks start after it.
    pub(crate) fn due(&self, queue: &str, last_ms: Option<u64>, now_ms: u64) -> Vec<Tick> {
        let tick = |at_ms: u64, publish: bool| Tick {
            queue: queue.to_string(),
            schedule: self.name.clone(),
            at_ms,
            message: publish.then(|| self.message(queue, at_ms)),
        };
        let Some(last) = last_ms else {
            return vec![tick(now_ms, false)];
        };
        let Some(latest) = self.latest_by(now_ms).filter(|t| *t > last) else {
            return Vec::new();
        };
        match self.catch_up {
            CatchUp::One => vec![tick(latest, true)],
            CatchUp::None => vec![tick(latest, now_ms - latest <= ON_TIME_MS)],
            CatchUp::All => {
                let mut ticks = Vec::new();
                let mut after = last;
                while ticks.len() < MAX_CATCH_UP {
                    match self.next_after(after) {
                        Some(t) if t <= now_ms => {
                            ticks.push(tick(t, true));
                            after = t;
                        }
                        _ => break,
                    }
                }
                ticks
            }
        }
    }

    /// The message the tick at `at_ms` publishes to `queue`: the payload,
    /// the headers and two of sluice's, keyed by schedule and tick.
    pub(crate) fn message(&self, queue: &str, at_ms: u64) -> NewMessage {
        let mut headers = self.headers.clone();
        headers.push((SCHEDULE_HEADER.into(), self.name.clone()));
        headers.push((TICK_HEADER.into(), rfc3339(at_ms)));
        NewMessage {
            key: Some(format!("{SCHEDULE_HEADER}:{}:{at_ms}", self.name)),
            headers,
            ..NewMessage::new(queue, self.payload.clone())
        }
    }

    /// What a host reports of it.
    pub(crate) fn spec(&self) -> broker::ScheduleSpec {
        broker::ScheduleSpec {
            name: self.name.clone(),
            cron: self.cron_text.clone(),
            timezone: self.timezone.name().to_string(),
            catch_up: self.catch_up.name().to_string(),
        }
    }
}

/// `at_ms` as RFC 3339 in UTC, to the second.
pub fn rfc3339(at_ms: u64) -> String {
    i64::try_from(at_ms)
        .ok()
        .and_then(|ms| Utc.timestamp_millis_opt(ms).single())
        .map_or_else(
            || at_ms.to_string(),
            |t| t.to_rfc3339_opts(SecondsFormat::Secs, true),
        )
}

/// One schedule as `sluice stats` and the admin API show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleView {
    pub(crate) queue: String,
    pub(crate) schedule: String,
    /// `None` when no running host reports the schedule.
    pub cron: Option<String>,
    pub timezone: Option<String>,
    pub(crate) catch_up: Option<String>,
    pub last_tick_ms: Option<u64>,
    /// When the next tick is due, counted from now; `None` without a host.
    pub next_tick_ms: Option<u64>,
}

/// Every schedule the running hosts report (`handlers`, fresh reports
/// only) or the broker has a tick of, with its last and next tick, by
/// queue and name.
pub async fn overview(
    broker: &dyn Schedules,
    handlers: &[HandlerStatus],
    now_ms: u64,
) -> broker::Result<Vec<ScheduleView>> {
    let mut views: Vec<ScheduleView> = Vec::new();
    for LastTick {
        queue,
        schedule,
        at_ms,
    } in broker.last_ticks().await?
    {
        views.push(ScheduleView {
            queue,
            schedule,
            cron: None,
            timezone: None,
            catch_up: None,
            last_tick_ms: Some(at_ms),
            next_tick_ms: None,
        });
    }
    for h in handlers {
        let Some(queue) = &h.queue else { continue };
        for s in &h.schedules {
            let at = views
                .iter()
                .position(|v| v.queue == *queue && v.schedule == s.name);
            let view = match at {
                Some(i) if views[i].cron.is_some() => continue,
                Some(i) => &mut views[i],
                None => {
                    views.push(ScheduleView {
                        queue: queue.clone(),
                        schedule: s.name.clone(),
                        cron: None,
                        timezone: None,
                        catch_up: None,
                        last_tick_ms: None,
                        next_tick_ms: None,
                    });
                    views.last_mut().expect("just pushed")
                }
            };
            view.cron = Some(s.cron.clone());
            view.timezone = Some(s.timezone.clone());
            view.catch_up = Some(s.catch_up.clone());
            // After the last tick, should a clock ahead of this one have
            // fired it.
            let after = now_ms.max(view.last_tick_ms.unwrap_or(0));
            view.next_tick_ms = parse_timezone(&s.timezone)
                .and_then(|tz| Schedule::new(&s.name, &s.cron, tz))
                .ok()
                .and_then(|plan| plan.next_after(after));
        }
    }
    views.sort_by(|a, b| (&a.queue, &a.schedule).cmp(&(&b.queue, &b.schedule)));
    Ok(views)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: u64 = 60_000;
    /// 2026-01-01T00:00:00Z.
    const T0: u64 = 1_767_225_600_000;

    fn every_minute(catch_up: CatchUp) -> Schedule {
        Schedule {
            catch_up,
            payload: b"tick".to_vec(),
            ..Schedule::new("m", "* * * * *", Tz::UTC).unwrap()
        }
    }

    fn at(ticks: &[Tick]) -> Vec<(u64, bool)> {
        ticks
            .iter()
            .map(|t| (t.at_ms, t.message.is_some()))
            .collect()
    }

    #[test]
    fn a_schedule_seen_first_records_now_and_publishes_nothing() {
        let s = every_minute(CatchUp::All);
        assert_eq!(
            at(&s.due("q", None, T0 + 5 * MINUTE + 7)),
            [(T0 + 5 * MINUTE + 7, false)]
        );
    }

    #[test]
    fn nothing_is_due_until_the_next_tick() {
        let s = every_minute(CatchUp::One);
        assert!(s.due("q", Some(T0), T0 + MINUTE - 1).is_empty());
        assert_eq!(
            at(&s.due("q", Some(T0), T0 + MINUTE)),
            [(T0 + MINUTE, true)]
        );
        // A tick already recorded is not due again.
        assert!(s.due("q", Some(T0 + MINUTE), T0 + MINUTE + 500).is_empty());
    }

    #[test]
    fn catch_up_decides_what_missed_ticks_publish() {
        let now = T0 + 10 * MINUTE + 30_000;
        let one = every_minute(CatchUp::One);
        assert_eq!(at(&one.due("q", Some(T0), now)), [(T0 + 10 * MINUTE, true)]);
        let none = every_minute(CatchUp::None);
        assert_eq!(
            at(&none.due("q", Some(T0), now)),
            [(T0 + 10 * MINUTE, true)],
            "the latest tick is 30 s late: on time"
        );
        let late = now + ON_TIME_MS;
        assert_eq!(
            at(&none.due("q", Some(T0), late)),
            [(T0 + 11 * MINUTE, true)],
            "a new tick came due meanwhile"
        );
        let five = Schedule {
            catch_up: CatchUp::None,
            ..Schedule::new("five", "*/5 * * * *", Tz::UTC).unwrap()
        };
        assert_eq!(
            at(&five.due("q", Some(T0), T0 + 10 * MINUTE + ON_TIME_MS + 1)),
            [(T0 + 10 * MINUTE, false)],
            "over a minute late: recorded, not published"
        );
        let all = every_minute(CatchUp::All);
        let ticks = all.due("q", Some(T0), now);
        assert_eq!(
            at(&ticks),
            (1..=10)
                .map(|i| (T0 + i * MINUTE, true))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn catch_up_all_is_bounded_per_pass() {
        let all = every_minute(CatchUp::All);
        let ticks = all.due("q", Some(T0), T0 + 5000 * MINUTE);
        assert_eq!(ticks.len(), MAX_CATCH_UP);
        assert_eq!(
            ticks.last().unwrap().at_ms,
            T0 + MAX_CATCH_UP as u64 * MINUTE
        );
    }

    #[test]
    fn a_time_zone_moves_the_ticks() {
        let paris = parse_timezone("Europe/Paris").unwrap();
        let s = Schedule::new("daily", "0 9 * * *", paris).unwrap();
        // 09:00 in Paris on 2026-01-01 is 08:00 UTC (winter), on 2026-07-01
        // 07:00 UTC (summer).
        assert_eq!(s.next_after(T0), Some(T0 + 8 * 60 * MINUTE));
        let july = 1_782_864_000_000; // 2026-07-01T00:00:00Z
        assert_eq!(s.next_after(july), Some(july + 7 * 60 * MINUTE));
        assert!(parse_timezone("Mars/Olympus").unwrap_err().contains("IANA"));
    }

    #[test]
    fn seconds_are_an_optional_sixth_field() {
        let s = Schedule::new("s", "*/10 * * * * *", Tz::UTC).unwrap();
        assert_eq!(s.next_after(T0), Some(T0 + 10_000));
        assert!(parse_cron("61 * * * *").is_err());
        assert!(parse_cron("every minute").is_err());
    }

    #[test]
    fn a_tick_publishes_the_payload_with_its_schedule_and_time() {
        let mut s = every_minute(CatchUp::One);
        s.headers = vec![("kind".into(), "report".into())];
        let m = s.message("reports", T0 + MINUTE);
        assert_eq!(m.queue, "reports");
        assert_eq!(m.payload, b"tick");
        assert_eq!(
            m.headers,
            [
                ("kind".to_string(), "report".to_string()),
                (SCHEDULE_HEADER.to_string(), "m".to_string()),
                (TICK_HEADER.to_string(), "2026-01-01T00:01:00Z".to_string()),
            ]
        );
        assert_eq!(m.key.as_deref(), Some("sluice-schedule:m:1767225660000"));
    }
}
