"""The call's deadline. A call may take up to the handler's `limits.timeout`;
work that runs longer asks for more while it works, up to
`limits.max_extend` beyond the timeout in all."""
from datetime import timedelta

from wit_world.imports import lease as _wit

from ._time import from_ms, to_ms


def time_left() -> timedelta:
    """Time left before the call's deadline (zero once it has passed)."""
    return from_ms(_wit.time_left())


def extend(duration: timedelta) -> timedelta:
    """Move the deadline to `duration` from now, if that is later, and keep
    the messages' leases as long; the host caps it at the timeout plus
    `limits.max_extend`. Returns the time left, as `time_left()` would."""
    return from_ms(_wit.extend(to_ms(duration, "lease.extend(duration)")))
