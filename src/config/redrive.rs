//! `[retry] redrive_every` and `max_redrives`: scheduled redrive of a
//! handler's dead letters. Both or neither; neither is the default.

use anyhow::{Result, bail};

use super::bounds;
use crate::policy::RedrivePolicy;
use crate::units::Dur;

pub(super) fn resolve(every: Option<Dur>, max: Option<u32>) -> Result<Option<RedrivePolicy>> {
    let (every, max_redrives) = match (every, max) {
        (None, None) => return Ok(None),
        (Some(every), Some(max)) => (every.0, max),
        (None, Some(_)) => bail!(
            "field `retry.max_redrives` needs `retry.redrive_every`: add `redrive_every = \"10m\"` (how long a message stays dead before it is queued again) under [retry], or remove `max_redrives`"
        ),
        (Some(_), None) => bail!(
            "field `retry.redrive_every` needs `retry.max_redrives`: add `max_redrives = 3` (how many times a dead letter is queued again before it stays dead) under [retry], or remove `redrive_every`"
        ),
    };
    let every = bounds::check_duration("retry.redrive_every", every, bounds::REDRIVE_EVERY)?;
    if max_redrives == 0 {
        bail!(
            "field `retry.max_redrives` must be at least 1; to turn redrive off, remove both `redrive_every` and `max_redrives`"
        );
    }
    let max_redrives = bounds::check("retry.max_redrives", max_redrives, bounds::MAX_REDRIVES)?;
    Ok(Some(RedrivePolicy {
        every,
        max_redrives,
    }))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use std::path::Path;

    use super::*;
    use crate::config::HandlerSpec;

    fn parse(text: &str) -> Result<HandlerSpec> {
        HandlerSpec::parse("orders", Path::new("handlers/orders.toml"), text)
    }

    fn error(text: &str) -> String {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.starts_with("handlers/orders.toml"), "names the file: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
        e
    }

    #[test]
    fn no_redrive_unless_set() {
        assert_eq!(parse("").unwrap().redrive, None);
        assert_eq!(parse("[retry]\nmax_attempts = 3\n").unwrap().redrive, None);
    }

    #[test]
    fn both_fields_set_the_policy() {
        let spec = parse("[retry]\nredrive_every = \"10m\"\nmax_redrives = 3\n").unwrap();
        assert_eq!(
            spec.redrive,
            Some(RedrivePolicy {
                every: Duration::from_secs(600),
                max_redrives: 3
            })
        );
        // The rest of the retry policy is unaffected.
        assert_eq!(spec.retry.max_attempts, 5);
    }

    #[test]
    fn one_without_the_other_says_what_to_add() {
        let e = error("[retry]\nmax_redrives = 3\n");
        assert!(
            e.contains("`retry.max_redrives` needs `retry.redrive_every`")
                && e.contains("add `redrive_every = \"10m\"`"),
            "{e}"
        );
        let e = error("[retry]\nredrive_every = \"10m\"\n");
        assert!(
            e.contains("`retry.redrive_every` needs `retry.max_redrives`")
                && e.contains("add `max_redrives = 3`"),
            "{e}"
        );
    }

    #[test]
    fn ranges_are_checked() {
        let e = error("[retry]\nredrive_every = \"500ms\"\nmax_redrives = 3\n");
        assert!(
            e.contains("`retry.redrive_every` must be from 1s to 1year, not 500ms"),
            "{e}"
        );
        let e = error("[retry]\nredrive_every = \"1m\"\nmax_redrives = 0\n");
        assert!(e.contains("`retry.max_redrives` must be at least 1"), "{e}");
        assert_eq!(
            parse("[retry]\nredrive_every = \"1s\"\nmax_redrives = 1\n")
                .unwrap()
                .redrive
                .map(|r| r.every),
            Some(Duration::from_secs(1)),
            "the minimum is allowed"
        );
    }

    #[test]
    fn bad_values_name_the_line_and_field() {
        let e = error("[retry]\nredrive_every = \"soon\"\nmax_redrives = 3\n");
        assert!(
            e.starts_with("handlers/orders.toml:2:") && e.contains("soon"),
            "{e}"
        );
        let e = error("[retry]\nredrive_every = \"1m\"\nmax_redrives = -1\n");
        assert!(e.starts_with("handlers/orders.toml:3:"), "{e}");
        let e = error("[retry]\nredrive_evry = \"1m\"\n");
        assert!(e.contains("redrive_evry"), "{e}");
    }
}
