"""The realistic example handler: validates an order and publishes a
follow-up message for it. Exact behaviour: guests/spec/ORDERS.md.

Input: a JSON object with `id` (string or number), optional `qty`
(positive integer) and optional `region` (a word, default `default`). Test
switches in the payload:
- `"retry_until_attempt": N` -- retry (after config `retry_delay_ms`,
  default 10) while `attempt < N`;
- `"always_retry": true` -- always `retry(none)`.
Config `work_ms` makes every call sleep that long first (simulated work).
Otherwise publishes `{"order": id, "qty": qty, "source": message-id}` to the
queue named by config `followup_queue` (default `shipping`), announces it on
the topic named by config `events_topic` (if set) with routing key
`orders.<region>.created`, and counts the forward in the key-value store (key
`forwarded`); without the key-value grant it logs a warning and forwards the
order all the same.

The JSON checks mirror the Rust guest (serde_json): note that in Python
`bool` is a subclass of `int`, so `true` must be excluded explicitly.
"""
import json
import math
import re
import time

import wit_world
from componentize_py_types import Err
from wit_world.imports import config, kv, log, publish, types

DEFAULT_RETRY_DELAY_MS = 10
DEFAULT_FOLLOWUP_QUEUE = "shipping"
# The key-value counter of forwarded orders.
FORWARDED_KEY = "forwarded"
U64_MAX = 2**64 - 1
# serde_json's nesting limit: the 128th open bracket is an error. It also
# keeps json.loads from exhausting the wasm stack (a trap, not a reject).
MAX_DEPTH = 128
# Strings (skipped whole) and runs of anything but brackets and quotes.
NOT_BRACKETS = re.compile(r'"(?:\\.|[^"\\])*"|[^\[\]{}"]+|"')
# One word of a routing key. ASCII classes spelled out: `\w` would also take
# non-ASCII letters, which the host's routing keys refuse.
REGION = re.compile(r"[A-Za-z0-9_-]{1,32}")
DEFAULT_REGION = "default"


def parse_u64(text):
    """Like Rust's `str::parse::<u64>()`: ASCII digits, optional `+`, no
    spaces or underscores (which Python's int() would accept). None if bad."""
    if re.fullmatch(r"\+?[0-9]+", text) is None:
        return None
    n = int(text)
    return n if n <= U64_MAX else None


def as_u64(value):
    """Like serde_json's `Value::as_u64`: a JSON integer in 0..=u64::MAX."""
    if type(value) is int and 0 <= value <= U64_MAX:
        return value
    return None


def too_deep(text):
    depth = 0
    for c in NOT_BRACKETS.sub("", text):
        depth += 1 if c in "[{" else -1
        if depth >= MAX_DEPTH:
            return True
    return False


def reject_constant(name):
    # json.loads accepts NaN/Infinity by default; JSON (and serde_json) don't.
    raise ValueError(f"invalid JSON constant {name}")


def parse_float(text):
    value = float(text)
    if not math.isfinite(value):  # e.g. 1e400
        raise ValueError("number out of range")
    return value


def compact(value):
    """JSON as serde_json writes it: no spaces, non-ASCII kept as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def quoted(text):
    """Rust's `{:?}` of a string, near enough: double-quoted and escaped."""
    return json.dumps(text, ensure_ascii=False)


def malformed(why):
    return types.Outcome_Reject(f"malformed order: {why}")


def retry_delay_ms():
    text = config.get("retry_delay_ms")
    if text is None:
        return DEFAULT_RETRY_DELAY_MS
    delay = parse_u64(text.strip())
    if delay is None:
        log.log(
            log.Level.WARN,
            f"config retry_delay_ms={json.dumps(text)} is not a u64; "
            f"using {DEFAULT_RETRY_DELAY_MS}",
        )
        return DEFAULT_RETRY_DELAY_MS
    return delay


def handle(message):
    try:
        text = message.payload.decode("utf-8")
    except UnicodeDecodeError:
        return types.Outcome_Reject("payload is not UTF-8")
    if too_deep(text):
        return malformed("recursion limit exceeded")
    try:
        obj = json.loads(
            text, parse_constant=reject_constant, parse_float=parse_float
        )
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        return malformed(e)
    if not isinstance(obj, dict):
        return malformed("not a JSON object")

    if "id" not in obj:
        return malformed("missing `id`")
    order_id = obj["id"]
    if isinstance(order_id, str):
        id_text = order_id
    elif isinstance(order_id, (int, float)) and not isinstance(order_id, bool):
        id_text = json.dumps(order_id)  # 7 stays `7`, not `7.0`
    else:
        return malformed("`id` must be a string or a number")

    qty = 1
    if "qty" in obj:
        qty = as_u64(obj["qty"])
        if not qty:  # None, or 0
            return malformed(
                f"`qty` must be a positive integer, got {compact(obj['qty'])}"
            )
    region = obj.get("region", DEFAULT_REGION)
    if not (isinstance(region, str) and REGION.fullmatch(region)):
        return malformed("`region` must be a word of letters, digits, - or _")

    until = as_u64(obj.get("retry_until_attempt"))
    if until is not None and message.attempt < until:
        delay = retry_delay_ms()
        log.log(
            log.Level.INFO,
            f"order {id_text}: attempt {message.attempt} < {until}, "
            f"retrying in {delay} ms",
        )
        return types.Outcome_Retry(delay)
    if obj.get("always_retry") is True:
        log.log(log.Level.INFO, f"order {id_text}: always_retry set, retrying")
        return types.Outcome_Retry(None)

    queue = config.get("followup_queue")
    if queue is None:
        queue = DEFAULT_FOLLOWUP_QUEUE
    # Keys in this order: order, qty, source.
    payload = compact({"order": order_id, "qty": qty, "source": message.id})
    options = publish.PublishOptions(
        headers=[("order-id", id_text)], key=None, delay_ms=None
    )
    try:
        # A WIT `result<_, string>` error arrives as a raised `Err(reason)`.
        publish.publish(queue, payload.encode("utf-8"), options)
    except Err as e:
        log.log(
            log.Level.ERROR,
            f'order {id_text}: publish to "{queue}" failed: {e.value}',
        )
        return types.Outcome_Retry(None)
    topic = config.get("events_topic")
    if topic is not None:
        route = f"orders.{region}.created"
        try:
            # `result<u32, string>`: the number of copies, or a raised Err.
            copies = publish.publish_to_topic(
                topic, route, payload.encode("utf-8"), options
            )
        except Err as e:
            log.log(
                log.Level.ERROR,
                f"order {id_text}: publish to topic {quoted(topic)} failed: "
                f"{e.value}",
            )
            # The held follow-up is dropped with the retry.
            return types.Outcome_Retry(None)
        log.log(
            log.Level.INFO,
            f"order {id_text} announced on {topic} as {route} "
            f"to {copies} queue(s)",
        )
    line = (
        f"order {id_text} (qty {qty}) from message {message.id} "
        f"forwarded to {queue}"
    )
    # The count is a statistic: without it the order still goes through.
    try:
        count = kv.increment(FORWARDED_KEY, 1)
    except Err as e:
        log.log(log.Level.WARN, f"order {id_text}: not counted: {e.value}")
        log.log(log.Level.INFO, line)
    else:
        log.log(log.Level.INFO, f"{line} (forwarded: {count})")
    return types.Outcome_Done()


class WitWorld(wit_world.WitWorld):
    def handle(self, message: types.Message) -> types.Outcome:
        # Simulated processing time (config `work_ms`, a whole number).
        work = config.get("work_ms")
        ms = parse_u64(work) if work is not None else None
        if ms:
            time.sleep(ms / 1000)
        return handle(message)
