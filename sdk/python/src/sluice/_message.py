"""One delivery of one message, as a handler sees it."""
import json as _json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, List, Optional, Tuple

from wit_world.imports import types

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

# Nesting that `json()` refuses before parsing: deeper input would exhaust
# the WebAssembly stack inside `json.loads`, a trap rather than an
# exception. 128 is serde_json's limit, so Rust handlers agree.
MAX_JSON_DEPTH = 128
# Strings (skipped whole) and runs of anything but brackets and quotes.
_NOT_BRACKETS = re.compile(r'"(?:\\.|[^"\\])*"|[^\[\]{}"]+|"')


@dataclass(frozen=True, kw_only=True)
class Message:
    """One delivery of one message. Construct one by hand to test a handler."""

    id: str
    """Unique id the broker gave the message when it was published."""
    payload: bytes
    """The body, as the sender gave it. Not necessarily UTF-8."""
    key: str = ""
    """Idempotency key: the message id unless the sender or config set one."""
    queue: str = ""
    """The queue the message was taken from."""
    headers: List[Tuple[str, str]] = field(default_factory=list)
    """Headers as the sender gave them, in order."""
    attempt: int = 1
    """Which delivery this is: 1 on the first attempt, 2 on the first retry, ..."""
    enqueued_at: datetime = _EPOCH
    """When the message was first published (UTC)."""

    @classmethod
    def _from_wit(cls, message: types.Message) -> "Message":
        return cls(
            id=message.id,
            key=message.key,
            queue=message.queue,
            payload=bytes(message.payload),
            headers=list(message.headers),
            attempt=message.attempt,
            enqueued_at=_EPOCH + timedelta(milliseconds=message.enqueued_at_ms),
        )

    def text(self) -> str:
        """The payload decoded as UTF-8; raises `UnicodeDecodeError` if it is not."""
        return self.payload.decode("utf-8")

    def json(self) -> Any:
        """The payload parsed as strict JSON (RFC 8259) from UTF-8.

        Raises `UnicodeDecodeError` when the payload is not UTF-8 (catch it
        first: it is a `ValueError` too) and `ValueError` when it is not
        JSON: unlike `json.loads`, `NaN`, `Infinity` and numbers beyond a
        float's range are refused, and so is nesting 128 levels deep.
        """
        text = self.text()
        if _too_deep(text):
            raise ValueError("recursion limit exceeded")
        try:
            return _json.loads(
                text, parse_constant=_refuse_constant, parse_float=_finite_float
            )
        except RecursionError:
            raise ValueError("recursion limit exceeded") from None

    def header(self, name: str) -> Optional[str]:
        """The value of the first header named exactly `name`, or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


def _too_deep(text: str) -> bool:
    depth = 0
    for c in _NOT_BRACKETS.sub("", text):
        depth += 1 if c in "[{" else -1
        if depth >= MAX_JSON_DEPTH:
            return True
    return False


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):  # e.g. 1e400
        raise ValueError(f"number out of range: {text}")
    return value
