//! `[ordering]` in a handler sidecar: ordered groups, each handled one
//! message at a time in the order its messages were published.

use anyhow::{Result, bail};
use serde::Deserialize;

use crate::policy::{GroupSource, OrderedGroups};

/// The `[ordering]` table, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOrdering {
    group_header: Option<String>,
    group_pointer: Option<String>,
    on_dead: Option<OnDead>,
}

/// What a dead message does to its group.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
enum OnDead {
    /// The group moves on to its next message.
    #[default]
    Skip,
    /// The group waits until the dead letter is replayed or purged.
    Block,
}

pub(super) fn resolve(raw: Option<RawOrdering>) -> Result<Option<OrderedGroups>> {
    let Some(raw) = raw else { return Ok(None) };
    let group = match (raw.group_header, raw.group_pointer) {
        (Some(_), Some(_)) => {
            bail!("set one of `ordering.group_header` and `ordering.group_pointer`, not both")
        }
        (None, None) => bail!(
            "`[ordering]` needs `group_header = \"customer\"` (the header whose value is the group) or `group_pointer = \"/customer/id\"` (a JSON pointer into the payload)"
        ),
        (Some(h), None) if h.is_empty() => bail!("field `ordering.group_header` is empty"),
        (Some(h), None) => GroupSource::Header(h),
        (None, Some(p)) if !p.starts_with('/') => bail!(
            "field `ordering.group_pointer` must be a JSON pointer starting with '/', like \"/customer/id\"; got {p:?}"
        ),
        (None, Some(p)) => GroupSource::Pointer(p),
    };
    Ok(Some(OrderedGroups {
        group,
        block_on_dead: matches!(raw.on_dead.unwrap_or_default(), OnDead::Block),
    }))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::HandlerSpec;
    use crate::policy::{GroupSource, OrderedGroups};

    fn parse(text: &str) -> anyhow::Result<HandlerSpec> {
        HandlerSpec::parse("orders", Path::new("handlers/orders.toml"), text)
    }

    fn error(text: &str) -> String {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.starts_with("handlers/orders.toml"), "names the file: {e}");
        e
    }

    #[test]
    fn ordering_is_read_and_checked() {
        assert_eq!(parse("").unwrap().ordering, None);
        assert_eq!(
            parse("[ordering]\ngroup_header = \"customer\"\n")
                .unwrap()
                .ordering,
            Some(OrderedGroups {
                group: GroupSource::Header("customer".into()),
                block_on_dead: false
            })
        );
        assert_eq!(
            parse("[ordering]\ngroup_pointer = \"/customer/id\"\non_dead = \"block\"\n")
                .unwrap()
                .ordering,
            Some(OrderedGroups {
                group: GroupSource::Pointer("/customer/id".into()),
                block_on_dead: true
            })
        );
        let e = error("[ordering]\n");
        assert!(e.contains("needs `group_header"), "{e}");
        let e = error("[ordering]\ngroup_header = \"a\"\ngroup_pointer = \"/a\"\n");
        assert!(e.contains("not both"), "{e}");
        let e = error("[ordering]\ngroup_pointer = \"customer\"\n");
        assert!(
            e.contains("`ordering.group_pointer` must be a JSON pointer"),
            "{e}"
        );
        let e = error("[ordering]\ngroup_header = \"a\"\non_dead = \"later\"\n");
        assert!(e.contains("later"), "{e}");
    }
}
