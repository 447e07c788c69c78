//! Ordered groups on PostgreSQL. The schema keeps them (the ordered
//! groups' section of `migrations/0001_schema.sql`, called by the queue's
//! `enqueue` and `settle`): a
//! message's group is taken in SQL, by `group_of`, when it is enqueued, so
//! that a message published from SQL in the caller's transaction (the
//! schema's `publish`) is grouped exactly like one from a host. That
//! function reads a header or a JSON pointer as
//! [`OrderedGroups::group_of`] does; this side only stores the ordering,
//! with the pointer split into its tokens as serde_json reads them.
//!
//! Of a group's messages one is active at a time, the others wait past
//! every due time; a group's row in `groups` is what hosts publishing to
//! it and settling its active message take turns on, so a group never has
//! two active messages, whichever hosts publish and settle at once.

use super::{PgBroker, classify};
use crate::{GroupSource, OrderedGroups, Result};

impl PgBroker {
    /// Make `ordering` the ordering of `queue`, or stop ordering it.
    pub(super) async fn order(&self, queue: &str, ordering: Option<&OrderedGroups>) -> Result<()> {
        let context = format!("setting the ordering of queue {queue:?}");
        let spec = ordering.map(OrderedGroups::encode);
        let header = ordering.and_then(|o| match &o.group {
            GroupSource::Header(name) => Some(name.as_str()),
            GroupSource::Pointer(_) => None,
        });
        let pointer = ordering.and_then(|o| match &o.group {
            GroupSource::Pointer(pointer) => pointer_tokens(pointer),
            GroupSource::Header(_) => None,
        });
        let blocks = ordering.is_some_and(|o| o.block_on_dead);
        let conn = self.conn(&context).await?;
        conn.execute(
            "SELECT set_ordering($1, $2, $3, $4, $5)",
            &[&queue, &spec, &header, &pointer, &blocks],
        )
        .await
        .map_err(|e| classify(&context, e))?;
        Ok(())
    }
}

/// The tokens of a JSON pointer, unescaped, as serde_json's
/// `Value::pointer` walks them: none for "" (the whole document), and
/// `None` for a pointer that never finds anything (one not starting with
/// `/`).
fn pointer_tokens(pointer: &str) -> Option<Vec<String>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    let rest = pointer.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pointer_is_split_into_unescaped_tokens() {
        assert_eq!(pointer_tokens(""), Some(vec![]));
        assert_eq!(pointer_tokens("/"), Some(vec![String::new()]));
        assert_eq!(
            pointer_tokens("/customer/a~1b/~01"),
            Some(vec!["customer".into(), "a/b".into(), "~1".into()])
        );
        assert_eq!(pointer_tokens("customer"), None);
    }
}
