"""sluice.kv, config, log and lease over the host's imports."""
from datetime import timedelta

import pytest
from fakehost import Host

import sluice


def test_kv_round_trip(host: Host) -> None:
    assert sluice.kv.get("k") is None
    sluice.kv.set("k", "v1")
    assert sluice.kv.get("k") == b"v1"
    assert host.kv_ttl_ms["k"] is None
    sluice.kv.set("k", b"v2", ttl=timedelta(minutes=1))
    assert (host.kv["k"], host.kv_ttl_ms["k"]) == (b"v2", 60_000)
    assert sluice.kv.delete("k") is True
    assert sluice.kv.delete("k") is False


def test_kv_increment(host: Host) -> None:
    assert sluice.kv.increment("n") == 1
    assert sluice.kv.increment("n", 5) == 6
    assert sluice.kv.increment("n", -10) == -4
    assert host.kv["n"] == b"-4"


@pytest.mark.parametrize(
    "call",
    [
        lambda: sluice.kv.get("k"),
        lambda: sluice.kv.set("k", b"v"),
        lambda: sluice.kv.delete("k"),
        lambda: sluice.kv.increment("k"),
    ],
)
def test_kv_failures_raise_kv_error(host: Host, call: object) -> None:
    host.kv_error = "the handler is not granted the store"
    with pytest.raises(sluice.KvError, match="not granted") as e:
        call()  # type: ignore[operator]
    assert e.value.reason == "the handler is not granted the store"


def test_config(host: Host) -> None:
    host.config.update({"a": "1", "empty": ""})
    assert sluice.config.get("a") == "1"
    assert sluice.config.get("missing") is None
    assert sluice.config.get("missing", "dflt") == "dflt"
    assert sluice.config.get("empty", "dflt") == ""
    assert sluice.config.get_all() == {"a": "1", "empty": ""}


def test_log_levels(host: Host) -> None:
    sluice.log.trace("t")
    sluice.log.debug("d")
    sluice.log.info("i")
    sluice.log.warn("w")
    sluice.log.error("e")
    assert host.logs == [("trace", "t"), ("debug", "d"), ("info", "i"), ("warn", "w"), ("error", "e")]


def test_lease(host: Host) -> None:
    host.time_left_ms, host.max_left_ms = 1500, 10_000
    assert sluice.lease.time_left() == timedelta(milliseconds=1500)
    assert sluice.lease.extend(timedelta(seconds=5)) == timedelta(seconds=5)
    assert sluice.lease.extend(timedelta(minutes=1)) == timedelta(seconds=10)
    assert sluice.lease.time_left() == timedelta(seconds=10)
