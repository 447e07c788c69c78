"""Publishing further messages, held until the call returns and committed
with the ack on `done` (discarded on retry, reject or a failure)."""
import json as _json
from datetime import timedelta
from typing import Iterable, Mapping, Optional, Tuple, Union

from componentize_py_types import Err
from wit_world.imports import publish as _wit

from ._errors import PublishError
from ._time import to_ms

Headers = Union[Iterable[Tuple[str, str]], Mapping[str, str]]
"""Headers as pairs (in order, names may repeat) or a mapping."""

# Tells "no json= given" from `json=None`, which publishes `null`.
_NO_JSON: object = object()


def publish(
    queue: str,
    payload: Union[bytes, str, None] = None,
    *,
    json: object = _NO_JSON,
    headers: Headers = (),
    key: Optional[str] = None,
    delay: Optional[timedelta] = None,
) -> None:
    """Publish a message to `queue`: `payload` (bytes, or a str sent as
    UTF-8) or `json=` a value sent as compact JSON. `key` is its idempotency
    key (its id when None); `delay` holds it back that long after the commit.

    Raises `PublishError` when the host refuses (an invalid queue name, a
    message over the size limit).
    """
    body = _body(payload, json)
    options = _options(headers, key, delay)
    try:
        _wit.publish(queue, body, options)
    except Err as e:
        raise PublishError(str(e.value)) from None


def publish_to_topic(
    topic: str,
    route: str,
    payload: Union[bytes, str, None] = None,
    *,
    json: object = _NO_JSON,
    headers: Headers = (),
    key: Optional[str] = None,
    delay: Optional[timedelta] = None,
) -> int:
    """Publish a message to `topic` with the routing key `route` (words
    separated by dots, like `orders.eu.created`): a copy for every queue
    bound with a matching pattern. Returns how many copies are held. The
    other arguments are as for `publish`.

    Raises `PublishError` when the names are invalid or no queue would take
    the message.
    """
    body = _body(payload, json)
    options = _options(headers, key, delay)
    try:
        return _wit.publish_to_topic(topic, route, body, options)
    except Err as e:
        raise PublishError(str(e.value)) from None


def to_json(value: object) -> str:
    """`value` as the compact JSON that `publish(json=...)` sends: no spaces,
    non-ASCII kept as is, keys in the dict's order, no NaN or Infinity."""
    return _json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _body(payload: Union[bytes, str, None], value: object) -> bytes:
    if value is not _NO_JSON:
        if payload is not None:
            raise TypeError("publish takes a payload or json=, not both")
        return to_json(value).encode("utf-8")
    if isinstance(payload, str):
        return payload.encode("utf-8")
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload)
    raise TypeError(
        f"publish needs a payload (bytes or str) or json=, got {type(payload).__name__}"
    )


def _options(
    headers: Headers, key: Optional[str], delay: Optional[timedelta]
) -> _wit.PublishOptions:
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    delay_ms = None if delay is None else to_ms(delay, "publish(delay=...)")
    return _wit.PublishOptions(headers=pairs, key=key, delay_ms=delay_ms)
