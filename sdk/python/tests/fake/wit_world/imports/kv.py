from typing import Optional

import fakehost
from componentize_py_types import Err


def _fail() -> None:
    if fakehost.HOST.kv_error is not None:
        raise Err(fakehost.HOST.kv_error)


def get(key: str) -> Optional[bytes]:
    _fail()
    return fakehost.HOST.kv.get(key)


def set(key: str, value: bytes, ttl_ms: Optional[int]) -> None:
    _fail()
    assert isinstance(value, bytes)
    fakehost.HOST.kv[key] = value
    fakehost.HOST.kv_ttl_ms[key] = ttl_ms


def delete(key: str) -> bool:
    _fail()
    return fakehost.HOST.kv.pop(key, None) is not None


def increment(key: str, delta: int) -> int:
    _fail()
    try:
        value = int(fakehost.HOST.kv.get(key, b"0")) + delta
    except ValueError:
        raise Err(f"the value of {key!r} is not an integer")
    fakehost.HOST.kv[key] = str(value).encode()
    return value
