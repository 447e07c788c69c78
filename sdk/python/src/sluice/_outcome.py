"""What a handler decides about a message, and its WIT form."""
from dataclasses import dataclass
from datetime import timedelta
from typing import Optional, Union

from wit_world.imports import types

from ._time import to_ms


@dataclass(frozen=True)
class Done:
    """Handled: the host acks the message and commits what it published."""


@dataclass(frozen=True)
class Retry:
    """A transient failure: deliver again after `after`, or after the
    handler's backoff policy when None. Publishes are discarded."""

    after: Optional[timedelta] = None


@dataclass(frozen=True)
class Reject:
    """A poison message: dead-letter it now with `reason`, no retries."""

    reason: str


@dataclass(frozen=True)
class Snooze:
    """Not now: deliver again after `after` without spending an attempt."""

    after: timedelta


Outcome = Union[Done, Retry, Reject, Snooze]
"""What a handler returns: `done()`, `retry()`, `reject(...)` or `snooze(...)`."""


def done() -> Outcome:
    """The message is handled."""
    return Done()


def retry(after: Optional[timedelta] = None) -> Outcome:
    """Try the message again after `after` (rounded up to whole
    milliseconds), or after the handler's backoff policy when None."""
    if after is not None:
        to_ms(after, "sluice.retry(after=...)")
    return Retry(after)


def reject(reason: str) -> Outcome:
    """Dead-letter the message at once with `reason`; it is never retried."""
    return Reject(reason)


def snooze(after: timedelta) -> Outcome:
    """Deliver the message again after `after` without spending an attempt
    (the handler's `retry.max_snoozes` bounds how often)."""
    to_ms(after, "sluice.snooze(after)")
    return Snooze(after)


def to_wit(outcome: Outcome) -> types.Outcome:
    if isinstance(outcome, Done):
        return types.Outcome_Done()
    if isinstance(outcome, Retry):
        delay = None if outcome.after is None else to_ms(outcome.after, "retry")
        return types.Outcome_Retry(delay)
    if isinstance(outcome, Reject):
        return types.Outcome_Reject(outcome.reason)
    if isinstance(outcome, Snooze):
        return types.Outcome_Snooze(to_ms(outcome.after, "snooze"))
    raise TypeError(
        f"a handler must return a sluice.Outcome (sluice.done(), retry(), "
        f"reject() or snooze()), not {outcome!r}"
    )
