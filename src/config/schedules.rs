//! `[[schedule]]` in a handler sidecar: cron schedules, each publishing a
//! message to the handler's queue at every tick.

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use chrono_tz::Tz;
use serde::Deserialize;

use super::bounds;
use crate::base::schedule::{self, CatchUp, Schedule};
use crate::message::MAX_HEADERS;

/// One `[[schedule]]` table, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSchedule {
    name: Option<String>,
    cron: String,
    timezone: Option<String>,
    #[serde(default)]
    payload: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    catch_up: Option<CatchUp>,
}

/// The longest schedule name: it is part of broker keys and a header.
const MAX_NAME: usize = 128;
/// The prefix of the headers sluice sets.
const RESERVED: &str = "sluice-";

pub(super) fn resolve(raw: Vec<RawSchedule>) -> Result<Vec<Schedule>> {
    bounds::check(
        "schedule (the number of them)",
        raw.len(),
        bounds::SCHEDULES,
    )?;
    let mut out: Vec<Schedule> = Vec::with_capacity(raw.len());
    for (i, s) in raw.into_iter().enumerate() {
        let at = format!("schedule[{i}]");
        let name = s.name.clone().unwrap_or_else(|| s.cron.clone());
        check_name(&name).map_err(|e| anyhow::anyhow!("field `{at}.name`: {e}"))?;
        if let Some(j) = out.iter().position(|o| o.name == name) {
            bail!(
                "`{at}` has the name {name:?} of `schedule[{j}]` (a schedule without `name` is named by its cron expression): give each schedule a distinct `name`"
            );
        }
        let timezone = match &s.timezone {
            None => Tz::UTC,
            Some(tz) => schedule::parse_timezone(tz)
                .map_err(|e| anyhow::anyhow!("field `{at}.timezone`: {e}"))?,
        };
        let mut plan = Schedule::new(&name, &s.cron, timezone).map_err(|e| {
            anyhow::anyhow!(
                "field `{at}.cron`: {:?} does not parse: {e} (five fields, minute hour day-of-month month day-of-week, or six with seconds first)",
                s.cron
            )
        })?;
        if plan.next_after(crate::message::now_ms()).is_none() {
            bail!(
                "field `{at}.cron`: {:?} has no tick after now: it would never publish",
                s.cron
            );
        }
        plan.headers = headers(&at, s.headers)?;
        plan.payload = s.payload.into_bytes();
        plan.catch_up = s.catch_up.unwrap_or_default();
        out.push(plan);
    }
    Ok(out)
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!(
            "a schedule name is 1 to {MAX_NAME} bytes, not {}",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(format!("{name:?} has a control character"));
    }
    Ok(())
}

fn headers(at: &str, raw: BTreeMap<String, String>) -> Result<Vec<(String, String)>> {
    // Two more are sluice's: the schedule and the tick.
    let max = MAX_HEADERS - 2;
    if raw.len() > max {
        bail!(
            "field `{at}.headers` has {} headers; a schedule may set at most {max}",
            raw.len()
        );
    }
    for name in raw.keys() {
        if name.is_empty() {
            bail!("field `{at}.headers` has an empty header name");
        }
        if name.starts_with(RESERVED) {
            bail!(
                "field `{at}.headers` sets {name:?}: headers starting with {RESERVED:?} are sluice's own"
            );
        }
    }
    Ok(raw.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::base::schedule::CatchUp;
    use crate::config::HandlerSpec;

    fn parse(text: &str) -> anyhow::Result<HandlerSpec> {
        HandlerSpec::parse("reports", Path::new("handlers/reports.toml"), text)
    }

    fn error(text: &str) -> String {
        let e = parse(text).unwrap_err().to_string();
        assert!(
            e.starts_with("handlers/reports.toml"),
            "names the file: {e}"
        );
        assert!(!e.contains('\n'), "one line: {e}");
        e
    }

    #[test]
    fn no_schedules_unless_set() {
        assert!(parse("").unwrap().schedules.is_empty());
    }

    #[test]
    fn a_full_schedule_is_read() {
        let spec = parse(
            r#"
[[schedule]]
name = "nightly"
cron = "0 3 * * *"
timezone = "Europe/Paris"
payload = '{"report":"daily"}'
headers = { kind = "report" }
catch_up = "all"

[[schedule]]
cron = "*/5 * * * *"
"#,
        )
        .unwrap();
        let [nightly, five] = &spec.schedules[..] else {
            panic!("two schedules: {:?}", spec.schedules)
        };
        assert_eq!(nightly.name, "nightly");
        assert_eq!(nightly.timezone.name(), "Europe/Paris");
        assert_eq!(nightly.payload, br#"{"report":"daily"}"#);
        assert_eq!(
            nightly.headers,
            [("kind".to_string(), "report".to_string())]
        );
        assert_eq!(nightly.catch_up, CatchUp::All);
        assert_eq!(five.name, "*/5 * * * *", "named by its expression");
        assert_eq!(five.timezone.name(), "UTC");
        assert_eq!(five.catch_up, CatchUp::One, "the default");
        assert!(five.payload.is_empty());
    }

    #[test]
    fn bad_schedules_are_refused_with_the_field() {
        let e = error("[[schedule]]\ncron = \"61 * * * *\"\n");
        assert!(
            e.contains("field `schedule[0].cron`: \"61 * * * *\" does not parse:"),
            "{e}"
        );
        let e = error("[[schedule]]\ncron = \"* * * * *\"\ntimezone = \"Paris\"\n");
        assert!(
            e.contains("field `schedule[0].timezone`") && e.contains("IANA"),
            "{e}"
        );
        let e = error("[[schedule]]\ncron = \"* * * * *\"\ncatch_up = \"some\"\n");
        assert!(e.contains("some") && e.contains("none"), "{e}");
        let e = error("[[schedule]]\ncron = \"* * * * *\"\n[[schedule]]\ncron = \"* * * * *\"\n");
        assert!(
            e.contains("`schedule[1]` has the name \"* * * * *\" of `schedule[0]`"),
            "{e}"
        );
        let e = error("[[schedule]]\ncron = \"* * * * *\"\nheaders = { sluice-topic = \"x\" }\n");
        assert!(
            e.contains("`schedule[0].headers` sets \"sluice-topic\""),
            "{e}"
        );
        let e = error("[[schedule]]\ncron = \"* * * * *\"\nname = \"\"\n");
        assert!(e.contains("`schedule[0].name`"), "{e}");
        let e = error("[[schedule]]\ncron = \"0 0 0 1 1 * 2020\"\n");
        assert!(e.contains("no tick after now"), "{e}");
        let e = error("[[schedule]]\nname = \"x\"\n");
        assert!(e.contains("cron"), "{e}");
    }
}
