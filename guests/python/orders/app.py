"""The realistic example handler: validates an order and publishes a
follow-up message for it. Exact behaviour: guests/spec/ORDERS.md.

Input: a JSON object with `id` (string or number), optional `qty`
(positive integer) and optional `region` (a word, default `default`). Test
switches in the payload:
- `"retry_until_attempt": N` -- retry (after config `retry_delay_ms`,
  default 10) while `attempt < N`;
- `"always_retry": true` -- always `retry()` (the backoff policy's delay).
Config `work_ms` makes every call sleep that long first (simulated work).
Otherwise publishes `{"order": id, "qty": qty, "source": message-id}` to the
queue named by config `followup_queue` (default `shipping`), announces it on
the topic named by config `events_topic` (if set) with routing key
`orders.<region>.created`, and counts the forward in the key-value store (key
`forwarded`); without the key-value grant it logs a warning and forwards the
order all the same.

The JSON checks mirror the Rust guest (serde_json), which `msg.json()`
already does for the syntax; note that in Python `bool` is a subclass of
`int`, so `true` must be excluded explicitly.
"""
import json
import re
import time
from datetime import timedelta
from typing import Any, Optional

import sluice

DEFAULT_RETRY_DELAY_MS = 10
DEFAULT_FOLLOWUP_QUEUE = "shipping"
# The key-value counter of forwarded orders.
FORWARDED_KEY = "forwarded"
U64_MAX = 2**64 - 1
# One word of a routing key. ASCII classes spelled out: `\w` would also take
# non-ASCII letters, which the host's routing keys refuse.
REGION = re.compile(r"[A-Za-z0-9_-]{1,32}")
DEFAULT_REGION = "default"


def parse_u64(text: str) -> Optional[int]:
    """Like Rust's `str::parse::<u64>()`: ASCII digits, optional `+`, no
    spaces or underscores (which Python's int() would accept). None if bad."""
    if re.fullmatch(r"\+?[0-9]+", text) is None:
        return None
    n = int(text)
    return n if n <= U64_MAX else None


def as_u64(value: Any) -> Optional[int]:
    """Like serde_json's `Value::as_u64`: a JSON integer in 0..=u64::MAX."""
    if type(value) is int and 0 <= value <= U64_MAX:
        return value
    return None


def quoted(text: str) -> str:
    """Rust's `{:?}` of a string, near enough: double-quoted and escaped."""
    return json.dumps(text, ensure_ascii=False)


def malformed(why: object) -> sluice.Outcome:
    return sluice.reject(f"malformed order: {why}")


def retry_delay_ms() -> int:
    text = sluice.config.get("retry_delay_ms")
    delay = DEFAULT_RETRY_DELAY_MS if text is None else parse_u64(text.strip())
    if delay is None:
        sluice.log.warn(
            f"config retry_delay_ms={json.dumps(text)} is not a u64; "
            f"using {DEFAULT_RETRY_DELAY_MS}"
        )
        delay = DEFAULT_RETRY_DELAY_MS
    return delay


@sluice.handler
def handle(msg: sluice.Message) -> sluice.Outcome:
    # Simulated processing time (config `work_ms`, a whole number; unset: none).
    work_ms = parse_u64(sluice.config.get("work_ms", ""))
    if work_ms:
        time.sleep(work_ms / 1000)

    try:
        order = msg.json()
    except UnicodeDecodeError:  # a ValueError too: caught first
        return sluice.reject("payload is not UTF-8")
    except ValueError as e:
        return malformed(e)
    if not isinstance(order, dict):
        return malformed("not a JSON object")

    if "id" not in order:
        return malformed("missing `id`")
    order_id = order["id"]
    if isinstance(order_id, str):
        id_text = order_id
    elif isinstance(order_id, (int, float)) and not isinstance(order_id, bool):
        id_text = json.dumps(order_id)  # 7 stays `7`, not `7.0`
    else:
        return malformed("`id` must be a string or a number")

    qty = as_u64(order.get("qty", 1))
    if not qty:  # None, or 0
        return malformed(
            f"`qty` must be a positive integer, got {sluice.to_json(order['qty'])}"
        )
    region = order.get("region", DEFAULT_REGION)
    if not (isinstance(region, str) and REGION.fullmatch(region)):
        return malformed("`region` must be a word of letters, digits, - or _")

    until = as_u64(order.get("retry_until_attempt"))
    if until is not None and msg.attempt < until:
        delay = retry_delay_ms()
        sluice.log.info(
            f"order {id_text}: attempt {msg.attempt} < {until}, "
            f"retrying in {delay} ms"
        )
        return sluice.retry(after=timedelta(milliseconds=delay))
    if order.get("always_retry") is True:
        sluice.log.info(f"order {id_text}: always_retry set, retrying")
        return sluice.retry()

    return forward(msg, order_id, id_text, qty, region)


def forward(
    msg: sluice.Message, order_id: Any, id_text: str, qty: int, region: str
) -> sluice.Outcome:
    """Publishes the follow-up (and the announcement), then counts it."""
    queue = sluice.config.get("followup_queue", DEFAULT_FOLLOWUP_QUEUE)
    # Keys in this order: order, qty, source.
    followup = {"order": order_id, "qty": qty, "source": msg.id}
    headers = [("order-id", id_text)]
    try:
        sluice.publish(queue, json=followup, headers=headers)
    except sluice.PublishError as e:
        sluice.log.error(f'order {id_text}: publish to "{queue}" failed: {e}')
        return sluice.retry()
    topic = sluice.config.get("events_topic")
    if topic is not None:
        route = f"orders.{region}.created"
        try:
            copies = sluice.publish_to_topic(topic, route, json=followup, headers=headers)
        except sluice.PublishError as e:
            sluice.log.error(
                f"order {id_text}: publish to topic {quoted(topic)} failed: {e}"
            )
            # The held follow-up is dropped with the retry.
            return sluice.retry()
        sluice.log.info(
            f"order {id_text} announced on {topic} as {route} to {copies} queue(s)"
        )
    line = f"order {id_text} (qty {qty}) from message {msg.id} forwarded to {queue}"
    # The count is a statistic: without it the order still goes through.
    try:
        count = sluice.kv.increment(FORWARDED_KEY)
    except sluice.KvError as e:
        sluice.log.warn(f"order {id_text}: not counted: {e}")
        sluice.log.info(line)
    else:
        sluice.log.info(f"{line} (forwarded: {count})")
    return sluice.done()
