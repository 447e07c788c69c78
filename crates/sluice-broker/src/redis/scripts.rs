//! The Lua scripts of the Redis broker. Each runs atomically on the node
//! that owns the queue's hash slot; every key a script touches carries the
//! queue's hash tag, so nothing crosses slots on Redis Cluster.
//!
//! The Lua is in files of its own under `scripts/`, one a script (named
//! as the script in lower case) and three of helpers the scripts share
//! (`base.lua`, `group_core.lua`, `rest.lua`), joined at compile time:
//! this file says what each script takes and returns.
//!
//! Times come from the server's clock (`TIME`), so hosts with skewed clocks
//! agree on when a delayed message is due.
//!
//! A message lives in exactly one place at a time: an entry of the queue's
//! stream (ready or leased), a packed body in the `bodies` hash plus a score
//! in the `delayed` sorted set (or in the `waiting` set, for a message
//! waiting for its ordered group), or an entry of the `dead` stream.
//!
//! Entry fields are short and written only when they say something, because
//! every field is stored, sent and parsed once per delivery: `i` id and `p`
//! payload always, and `u` the microseconds of the second the message was
//! published in (from `TIME`, with the enqueue millisecond: the enqueue
//! time to the microsecond); `k` key (when it is not the id), `h` headers (JSON, when
//! there are any), `t` enqueued at in ms (when the entry was written later
//! than the message was enqueued; otherwise the entry id's time), `a`
//! attempts before this entry (when not 0), `e` last error, `c` scheduled
//! redrives the message has been through (when not 0; written by `REPLAY`,
//! then carried along like every other field, into the dead letter too),
//! `g` the message's ordered group (when it has one), `s` the times the
//! handler snoozed it (when not 0; a replay starts again from 0). A waiting
//! message of an ordered group that becomes active is written as one field
//! instead, `m`, all of its fields packed (msgpack) as it waited: the
//! cheapest way to move it (see `activate`); whatever reads an entry reads
//! both forms.
//! Dead letters add `r` reason, `v` handler version and `n` attempts; the
//! time of death is the dead entry's id, so `REPLAY`'s cut-off is the end of
//! an `XRANGE` and agrees with what `dlq list` shows. (A field written from
//! `TIME` at the start of the script can be a millisecond behind the id
//! that `XADD *` gives; `u` is read as the microseconds nearest the
//! entry's millisecond, which that cannot upset.)
//!
//! Every settle runs in `SETTLE`, because each op must be fenced by its
//! delivery before it is applied, which plain commands cannot do.

use std::sync::LazyLock;

use redis::Script;

/// A script's source: the helpers every script shares (`base.lua`, what
/// all of them need; `group_core.lua`, moving an ordered group on; and
/// `rest.lua`), then the script's own file.
macro_rules! with_prelude {
    ($file:literal) => {
        concat!(
            include_str!("scripts/base.lua"),
            include_str!("scripts/group_core.lua"),
            include_str!("scripts/rest.lua"),
            include_str!(concat!("scripts/", $file)),
        )
    };
}

/// KEYS: stream, delayed, bodies, groups, waiting, counters, then with a
/// marker TTL one marker key per message. ARGV: marker TTL ms (0 = no
/// markers), the queue's ordering the groups were taken with ("" = none),
/// then six per message: id, key ("" = the id), payload, headers ("" =
/// none), delay ms, group ("" = none). A message with a marker is enqueued
/// only if its marker was not set yet: the outbox relay's idempotency.
/// Returns {enqueued}, or {-1, the queue's ordering} when it is not the one
/// the groups were taken with: the caller takes them again and retries.
pub(crate) static PUBLISH: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_prelude!("publish.lua")));

/// KEYS: stream, delayed, bodies, groups, waiting. ARGV: the queue's
/// ordering ("" = none). Stores it; with none, every waiting message goes
/// to the queue (in order) and the groups are forgotten; with one whose
/// dead letters do not block, blocked groups move on. Returns 1 if it
/// changed, else 0.
pub(crate) static ORDER: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_prelude!("order.lua")));

/// KEYS: stream, delayed, bodies, leases, wake. ARGV: group, consumer, lease ms,
/// max, cursor. Moves due delayed messages into the stream, then claims
/// entries whose lease (idle time) ran out. A lease is the longest that any
/// live consumer of the queue leases for: each says its own in `leases`
/// (as `lease expiry`, kept fresh by every call and dropped 30 s after its
/// consumer's last one), so that a host with a short lease never takes a
/// message from one that leased it for longer. Returns {next cursor,
/// {entry id, fields, delivery count}..., ms until the next delayed
/// message is due (-1 for none), entries leased, the group's last
/// delivered entry id, the wake stream's last entry id (`0-0` for none)}.
pub(crate) static MAINTAIN: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_prelude!("maintain.lua")));

/// KEYS: stream, flow. ARGV: group, consumer, count, max in flight (0 for
/// none), leases a millisecond (0 for no rate), bucket size, deliveries the
/// batch already has (reclaimed by `MAINTAIN`, which spend tokens too).
/// Reads up to `count` new entries, as `XREADGROUP` without `BLOCK` does,
/// but no more than leave `max in flight` entries pending in the group
/// (leased, or waiting to be reclaimed) and no more than the whole tokens
/// in the queue's rate bucket, refilled by the server's clock. In one step,
/// so that hosts reading at once cannot both take the last place. For a
/// queue with `max_in_flight` (a rate alone goes through `TOKENS`, because
/// a reply passed through Lua costs the server about 1.5 µs a message).
/// Returns the `XREADGROUP` reply, or nil.
pub(crate) static TAKE: LazyLock<Script> = LazyLock::new(|| Script::new(with_prelude!("take.lua")));

/// KEYS: flow. ARGV: count wanted, leases a millisecond, bucket size,
/// tokens to give back first (negative: to take, for deliveries reclaimed
/// outside the bucket). Refills the queue's rate bucket by the server's
/// clock and grants up to `count` whole tokens, taken at once. A queue with
/// a rate and no `max in flight` reads with a plain `XREADGROUP` only what
/// it holds tokens for: see `read_rated`. Returns the tokens granted. Short
/// and self-contained, because it is also sent whole (`EVAL`) in the
/// pipeline of a read, where a script missing from the server's cache
/// would fail the read beside it.
pub(crate) const TOKENS_SOURCE: &str = include_str!("scripts/tokens.lua");

/// [`TOKENS_SOURCE`] as a script, for the calls outside a read's pipeline.
pub(crate) static TOKENS: LazyLock<Script> = LazyLock::new(|| Script::new(TOKENS_SOURCE));

/// KEYS: stream, delayed, bodies, groups, waiting, schedules. ARGV:
/// schedule, tick ms, the queue's ordering the group was taken with, then,
/// to publish, the message's six as in `PUBLISH`. Fires the tick unless the
/// schedule's last tick (a field of `schedules`) is at or after it: records
/// it, and enqueues the message when there is one. Returns {1} if it fired,
/// {0} if not, or {-1, the queue's ordering} as `PUBLISH` does.
pub(crate) static FIRE: LazyLock<Script> = LazyLock::new(|| Script::new(with_prelude!("fire.lua")));

/// KEYS: stream, then the idempotency keys the leases hold. ARGV: group,
/// consumer, lease ms, then per lease its entry, delivery count, key index
/// (0 = none) and holder (the delivery's receipt). Each lease that is still
/// this consumer's at this delivery count starts again (`XCLAIM JUSTID`
/// resets the entry's idle time without counting a delivery), and so does
/// its key's lease if the key still holds it. Returns 1 per lease kept, 0
/// per lease lost.
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/extend.lua")));

/// KEYS: idempotency keys whose `SET NX GET` found the claiming delivery's
/// own lease (it claimed again). ARGV: lease ms, then one holder (the
/// delivery's receipt) per key. Checks and renews in one step, because in
/// between the key may run out: renews a key that still holds the
/// delivery's lease, takes one that ran out, and leaves any other value
/// alone. Returns per key 0 (acquired), 1 (already done) or
/// 2 (busy).
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/renew.lua")));

/// KEYS: stream, delayed, bodies, dead, counters, outbox, dead index (a
/// hash of dead letters' stream entries by message id), groups, waiting,
/// this consumer's last settle writes (see [`SETTLED`]), then the
/// idempotency keys the ops refer to. ARGV: group, consumer, the write's
/// digest, how long to keep it (ms), then ops, each `kind, entry,
/// delivery count, key index (0 = none), message id, attempt, ordered
/// group ("" = none)` followed by:
///   D (done):      retention ms, publish count, then 6 per publish:
///                  queue, id, key, payload, headers, delay ms
///   U (duplicate): nothing
///   R (retry):     delay ms, error
///   F (defer):     delay ms
///   Z (snooze):    delay ms; a defer that also counts one more snooze
///   X (dead):      reason, error, version, notice count (0 or 1), then 6
///                  per notice as for D; the notice is written to the outbox
///                  with the dead letter
/// Every op is fenced by its delivery (entry and delivery count: the
/// receipt, and the holder of its idempotency key): an op whose delivery
/// lost its lease is applied in no part and counted as `lost`. A done with
/// a key is fenced by the key: it holds this delivery's lease, or none (no
/// other delivery took it); one whose key another message finished is a
/// duplicate, one whose key another delivery of it finished is lost.
/// Every other op is fenced by the pending entry: still this consumer's,
/// at this delivery count. A done, duplicate or dead message of an ordered
/// group hands its group on to the next (a dead one blocks it instead when
/// the ordering says so). Returns the ids of the refused ops; nil, having
/// applied nothing, when the write's digest is among the consumer's last
/// writes (it was applied, and is sent again because its reply was lost).
pub(crate) static SETTLE: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_prelude!("settle.lua")));

/// Each consumer's last settle writes of a queue are a list (`settled:`
/// and the consumer's name, with the queue's hash tag) of their digests
/// (`codec::settle_digest`), the last 16, kept for ten minutes after the
/// last write. A write is sent again only after its reply was lost, by the
/// host that sent it, before it writes more than one other (a worker has at
/// most two settle writes out), so the list finds it. `SETTLE` applies
/// nothing for a write it finds there; a plain ack's transaction (see
/// `settle_plain`) has this script count it:
///
/// KEYS: the consumer's last writes, counters. ARGV: the write's digest,
/// how long to keep it (ms), then pairs of a counter's name and how much
/// to add. Returns 1, having counted nothing, when the write was written
/// before; else counts, remembers the write, and returns 0.
pub(crate) const SETTLED: &str = concat!(
    include_str!("scripts/base.lua"),
    include_str!("scripts/settled.lua"),
);

/// KEYS: stream, delayed, bodies, groups. ARGV: the prefix of the waiting
/// lists, the consumer group, then for each message of an ordered group
/// that a plain ack (see `settle_plain`) removes, its entry and its group.
/// The entries are acked here, and a group moves on (as in `SETTLE`) only
/// if the ack took its entry out of the pending list: an ack written again
/// after its reply was lost finds it gone and moves nothing on, so a group
/// never has two messages out. One `XACK` takes them all; when it took
/// fewer than there are, the ones it took are those still in the stream,
/// as every ack of this broker deletes its entry in the same step (here the
/// `XDEL` after this in the `MULTI`). Sent whole (`EVAL`) inside the ack's
/// `MULTI`, so that both happen or neither even on a server that lost its
/// script cache.
pub(crate) const ADVANCE: &str = concat!(
    include_str!("scripts/base.lua"),
    include_str!("scripts/group_core.lua"),
    include_str!("scripts/advance.lua"),
);

/// KEYS: stream, delayed, bodies, dead, counters, outbox, groups. ARGV:
/// group. Returns {ready + in flight, in flight, delayed, dead, in outbox,
/// counters, waiting in ordered groups}.
pub(crate) static STATS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/stats.lua")));

/// KEYS: dead, dead index, stream, delayed, bodies, groups, waiting. ARGV: after (an exclusive start like `(1-0`, or
/// `-`), until (the last death time in ms, or `+`), scan (entries to look
/// at, at most), limit (most to move; 0 = no limit), max redrives (-1 = any),
/// redrive (1 = count one more redrive), then the ids to take (any when
/// none). Moves the matching dead letters among the next `scan` entries back
/// to the stream with attempts reset, oldest first, keeping their redrive
/// count (plus one for a redrive). A dead letter of an ordered group leads
/// it again if it blocked it, and otherwise rejoins it behind its waiting
/// messages. Returns {moved, the last entry looked at,
/// or "" when nothing is left to look at}: the caller goes on from there, so
/// no one call holds Redis for a long dead-letter stream.
pub(crate) static REPLAY: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_prelude!("replay.lua")));

/// KEYS: dead, dead index, stream, delayed, bodies, groups, waiting.
/// Deletes the queue's dead letters, and the groups they blocked move on;
/// returns how many.
pub(crate) static PURGE: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_prelude!("purge.lua")));

/// KEYS: dead, dead index, outbox. ARGV: outbox entry, id, payload,
/// reason. Moves an outbox entry the relay cannot read to the queue's dead
/// letters (its fields as the payload), so that it no longer stops the
/// relay of the entries behind it.
pub(crate) static BURY_HELD: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/bury_held.lua")));
