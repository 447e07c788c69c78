"""Durations: the SDK speaks `timedelta`, the WIT world whole milliseconds."""
from datetime import timedelta

_MS = timedelta(milliseconds=1)


def to_ms(duration: timedelta, what: str) -> int:
    """`duration` in whole milliseconds, rounded up so that a delay asked for
    is never shortened. `what` names the argument in the error."""
    if not isinstance(duration, timedelta):
        raise TypeError(
            f"{what} must be a datetime.timedelta, got {type(duration).__name__} "
            "(write timedelta(milliseconds=...))"
        )
    if duration < timedelta(0):
        raise ValueError(f"{what} must not be negative, got {duration}")
    return -(-duration // _MS)


def from_ms(ms: int) -> timedelta:
    return timedelta(milliseconds=ms)
