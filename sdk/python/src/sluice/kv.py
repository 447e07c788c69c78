"""The handler's own key-value store (granted by `kv = true` under
`[capabilities]` in its sidecar NAME.toml).

Writes take effect at once: they are not held until the call returns, and
not undone by a retry. Every call raises `sluice.KvError` with the host's
reason when it fails (not granted, a bad key or value, the store down).
"""
from datetime import timedelta
from typing import Optional, Union

from componentize_py_types import Err
from wit_world.imports import kv as _wit

from ._errors import KvError
from ._time import to_ms


def get(key: str) -> Optional[bytes]:
    """The value of `key`, or None when it is not set or has expired."""
    try:
        return _wit.get(key)
    except Err as e:
        raise KvError(str(e.value)) from None


def set(key: str, value: Union[bytes, str], *, ttl: Optional[timedelta] = None) -> None:
    """Set `key` to `value` (a str is stored as UTF-8). With `ttl` the key
    expires that long from now; without, never."""
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    ttl_ms = None if ttl is None else to_ms(ttl, "kv.set(ttl=...)")
    try:
        _wit.set(key, data, ttl_ms)
    except Err as e:
        raise KvError(str(e.value)) from None


def delete(key: str) -> bool:
    """Remove `key`; True when it was set (and had not expired)."""
    try:
        return _wit.delete(key)
    except Err as e:
        raise KvError(str(e.value)) from None


def increment(key: str, delta: int = 1) -> int:
    """Atomically add `delta` (negative to subtract) to the integer at `key`
    (0 when not set) and return the new value."""
    try:
        return _wit.increment(key, delta)
    except Err as e:
        raise KvError(str(e.value)) from None
