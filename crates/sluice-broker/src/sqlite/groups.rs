//! Ordered groups on SQLite. A queue's ordering is a row of `orderings`. A
//! message with a group has it in `messages.grp`; of a group's rows, only
//! one is active (ready, delayed or leased) at a time, and the others wait
//! with `visible_at` at [`WAITING`] (past the end of the due index, so a
//! receive never reads them) and their own due time in `held_due`. When
//! the active one leaves (done, duplicate, dead), the oldest waiting one
//! becomes active; a group whose dead message blocks it has a row in
//! `blocked` until the dead letter is replayed or purged. The tables and
//! the `messages_group` index are `migrations/0006_groups.sql`'s.

use rusqlite::{Connection, OptionalExtension, params};

use super::{classify, wake};
use crate::{OrderedGroups, Result};

/// `visible_at` of a waiting message.
pub(super) const WAITING: i64 = i64::MAX;

/// A new row's `visible_at` and `held_due`: due at `due`, or waiting with
/// `due` kept for when its turn comes.
pub(super) fn placement(waits: bool, due: i64) -> (i64, Option<i64>) {
    if waits {
        (WAITING, Some(due))
    } else {
        (due, None)
    }
}

/// The ordering of `queue`, if it has one.
pub(super) fn ordering_of(conn: &Connection, queue: &str) -> Result<Option<OrderedGroups>> {
    let spec: Option<String> = conn
        .prepare_cached("SELECT spec FROM orderings WHERE queue = ?1")
        .and_then(|mut s| s.query_row([queue], |r| r.get(0)).optional())
        .map_err(classify)?;
    Ok(spec.as_deref().and_then(OrderedGroups::decode))
}

/// Store `queue`'s ordering; releasing the waiting messages when there is
/// none any more, and the blocked groups when dead ones no longer block.
pub(super) fn set_ordering(
    conn: &Connection,
    queue: &str,
    ordering: Option<&OrderedGroups>,
    now: i64,
) -> Result<()> {
    let before = ordering_of(conn, queue)?;
    if before.as_ref() == ordering {
        return Ok(());
    }
    match ordering {
        Some(o) => conn
            .prepare_cached(
                "INSERT INTO orderings (queue, spec) VALUES (?1, ?2)
                 ON CONFLICT (queue) DO UPDATE SET spec = ?2",
            )
            .and_then(|mut s| s.execute(params![queue, o.encode()])),
        None => conn
            .prepare_cached("DELETE FROM orderings WHERE queue = ?1")
            .and_then(|mut s| s.execute([queue])),
    }
    .map_err(classify)?;
    match ordering {
        None => {
            conn.prepare_cached(
                "UPDATE messages SET visible_at = COALESCE(held_due, ?2), held_due = NULL
                 WHERE queue = ?1 AND visible_at = ?3",
            )
            .and_then(|mut s| s.execute(params![queue, now, WAITING]))
            .map_err(classify)?;
            wake::ring_later(queue);
            conn.prepare_cached("DELETE FROM blocked WHERE queue = ?1")
                .and_then(|mut s| s.execute([queue]))
                .map_err(classify)?;
        }
        Some(o) if !o.block_on_dead => unblock_all(conn, queue, now)?,
        Some(_) => {}
    }
    Ok(())
}

/// Whether a new message of group `grp` must wait: the group has a message
/// already, or is blocked.
pub(super) fn must_wait(conn: &Connection, queue: &str, grp: &str) -> Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM messages WHERE queue = ?1 AND grp = ?2)
             OR EXISTS (SELECT 1 FROM blocked WHERE queue = ?1 AND grp = ?2)",
    )
    .and_then(|mut s| s.query_row(params![queue, grp], |r| r.get(0)))
    .map_err(classify)
}

/// A message of `grp` left: make the oldest waiting one active, unless the
/// group is blocked or has an active message still (a replayed one).
pub(super) fn advance(conn: &Connection, queue: &str, grp: &str, now: i64) -> Result<()> {
    let held: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE queue = ?1 AND grp = ?2 AND visible_at < ?3)
                 OR EXISTS (SELECT 1 FROM blocked WHERE queue = ?1 AND grp = ?2)",
        )
        .and_then(|mut s| s.query_row(params![queue, grp, WAITING], |r| r.get(0)))
        .map_err(classify)?;
    if held {
        return Ok(());
    }
    let released = conn
        .prepare_cached(
            "UPDATE messages SET visible_at = COALESCE(held_due, ?3), held_due = NULL
             WHERE seq = (SELECT seq FROM messages WHERE queue = ?1 AND grp = ?2 AND visible_at = ?4
                          ORDER BY seq LIMIT 1)",
        )
        .and_then(|mut s| s.execute(params![queue, grp, now, WAITING]))
        .map_err(classify)?;
    if released > 0 {
        wake::ring_later(queue);
    }
    Ok(())
}

/// A message of `grp` died: block the group if the ordering says so, else
/// move on.
pub(super) fn died(conn: &Connection, queue: &str, grp: &str, id: &str, now: i64) -> Result<()> {
    if ordering_of(conn, queue)?.is_some_and(|o| o.block_on_dead) {
        conn.prepare_cached(
            "INSERT OR REPLACE INTO blocked (queue, grp, dead_id) VALUES (?1, ?2, ?3)",
        )
        .and_then(|mut s| s.execute(params![queue, grp, id]))
        .map_err(classify)?;
        return Ok(());
    }
    advance(conn, queue, grp, now)
}

/// A dead letter of `grp` is going back to the queue: true if it goes in
/// at once (it blocked its group, which it now leads again, or its group
/// is empty), false if it waits behind the group's messages.
pub(super) fn replayed(conn: &Connection, queue: &str, grp: &str, id: &str) -> Result<bool> {
    let unblocked = conn
        .prepare_cached("DELETE FROM blocked WHERE queue = ?1 AND grp = ?2 AND dead_id = ?3")
        .and_then(|mut s| s.execute(params![queue, grp, id]))
        .map_err(classify)?;
    Ok(unblocked == 1 || !must_wait(conn, queue, grp)?)
}

/// Every blocked group of `queue` moves on (its dead letters were purged,
/// or dead ones no longer block).
pub(super) fn unblock_all(conn: &Connection, queue: &str, now: i64) -> Result<()> {
    let groups: Vec<String> = conn
        .prepare_cached("DELETE FROM blocked WHERE queue = ?1 RETURNING grp")
        .and_then(|mut s| {
            s.query_map([queue], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()
        })
        .map_err(classify)?;
    for grp in groups {
        advance(conn, queue, &grp, now)?;
    }
    Ok(())
}
