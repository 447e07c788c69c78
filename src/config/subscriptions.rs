//! `[[subscribe]]` in a handler sidecar: the topics whose publishes the
//! handler's queue takes, each with a routing-key pattern or as the topic's
//! catch-all.

use anyhow::{Result, bail};
use serde::Deserialize;

use crate::topic::{pattern_or_every, validate_topic_name};

/// One `[[subscribe]]` table, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSubscription {
    topic: String,
    route: Option<String>,
    #[serde(default)]
    unmatched: bool,
}

/// A queue's subscription to a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Subscription {
    pub(crate) topic: String,
    /// The routing-key pattern (`#`, every publish, when the sidecar gives
    /// none); `None` for the catch-all, which takes what no pattern matches.
    pub(crate) pattern: Option<String>,
}

pub(super) fn resolve(raw: Vec<RawSubscription>) -> Result<Vec<Subscription>> {
    let mut out: Vec<Subscription> = Vec::with_capacity(raw.len());
    for (i, s) in raw.into_iter().enumerate() {
        let at = format!("subscribe[{i}]");
        validate_topic_name(&s.topic).map_err(|e| anyhow::anyhow!("field `{at}.topic`: {e}"))?;
        let pattern = match (s.route, s.unmatched) {
            (Some(_), true) => bail!(
                "`{at}` (topic {:?}) has both `route` and `unmatched = true`: a catch-all takes what no route matches, so give one or the other",
                s.topic
            ),
            (None, true) => None,
            (route, false) => Some(
                pattern_or_every(route).map_err(|e| anyhow::anyhow!("field `{at}.route`: {e}"))?,
            ),
        };
        let sub = Subscription {
            topic: s.topic,
            pattern,
        };
        if !out.contains(&sub) {
            out.push(sub);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::HandlerSpec;

    fn parse(text: &str) -> anyhow::Result<HandlerSpec> {
        HandlerSpec::parse("audit", Path::new("handlers/audit.toml"), text)
    }

    #[test]
    fn subscriptions_default_to_every_route_and_may_be_catch_alls() {
        let spec = parse(
            "[[subscribe]]\ntopic = \"orders\"\n\n[[subscribe]]\ntopic = \"orders\"\nroute = \"orders.*.created\"\n\n[[subscribe]]\ntopic = \"refunds\"\nunmatched = true\n",
        )
        .unwrap();
        let got: Vec<(&str, Option<&str>)> = spec
            .subscriptions
            .iter()
            .map(|s| (s.topic.as_str(), s.pattern.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("orders", Some("#")),
                ("orders", Some("orders.*.created")),
                ("refunds", None)
            ]
        );
        assert!(parse("").unwrap().subscriptions.is_empty());
    }

    #[test]
    fn bad_subscriptions_name_the_field() {
        let err = parse("[[subscribe]]\ntopic = \"a/b\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("audit.toml") && err.contains("field `subscribe[0].topic`"),
            "{err}"
        );
        let err = parse("[[subscribe]]\ntopic = \"t\"\nroute = \"a.x*\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("field `subscribe[0].route`") && err.contains("a.x*"),
            "{err}"
        );
        let err = parse("[[subscribe]]\ntopic = \"t\"\nroute = \"a\"\nunmatched = true\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`subscribe[0]` (topic \"t\")") && err.contains("one or the other"),
            "{err}"
        );
        let err = parse("[[subscribe]]\ntopic = \"t\"\nrouting = \"a\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("routing"), "{err}");
    }
}
