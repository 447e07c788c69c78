"""sluice.publish and publish_to_topic."""
from datetime import timedelta

import pytest
from fakehost import Host, Published

import sluice


def test_publish_bytes_with_every_option(host: Host) -> None:
    sluice.publish(
        "shipping", b"\x00raw", headers=[("a", "1"), ("a", "2")], key="k",
        delay=timedelta(seconds=2),
    )
    assert host.published == [
        Published(None, "shipping", b"\x00raw", [("a", "1"), ("a", "2")], "k", 2000)
    ]


def test_publish_str_is_utf8_and_options_default_to_none(host: Host) -> None:
    sluice.publish("q", "grüß")
    assert host.published == [Published(None, "q", "grüß".encode(), [], None, None)]


def test_publish_json_is_compact_in_key_order(host: Host) -> None:
    sluice.publish("q", json={"order": 7, "name": "ä", "qty": 1.5}, headers={"h": "v"})
    assert host.published[0].payload == '{"order":7,"name":"ä","qty":1.5}'.encode()
    assert host.published[0].headers == [("h", "v")]


def test_publish_json_none_is_null(host: Host) -> None:
    sluice.publish("q", json=None)
    assert host.published[0].payload == b"null"


def test_publish_takes_one_body() -> None:
    with pytest.raises(TypeError, match="not both"):
        sluice.publish("q", b"x", json={})
    with pytest.raises(TypeError, match="needs a payload"):
        sluice.publish("q")


def test_publish_failure_raises_with_the_reason(host: Host) -> None:
    host.publish_error = "invalid queue name"
    with pytest.raises(sluice.PublishError) as e:
        sluice.publish("bad name", b"x")
    assert e.value.reason == "invalid queue name"
    assert str(e.value) == "invalid queue name"


def test_publish_to_topic_returns_the_copies(host: Host) -> None:
    host.topic_copies = 3
    assert sluice.publish_to_topic("events", "orders.eu.created", json=[1], key="k") == 3
    assert host.published == [Published("events", "orders.eu.created", b"[1]", [], "k", None)]


def test_publish_to_topic_failure_raises(host: Host) -> None:
    host.publish_error = "no queue bound"
    with pytest.raises(sluice.PublishError, match="no queue bound"):
        sluice.publish_to_topic("events", "a.b", b"x")


def test_to_json_refuses_nan() -> None:
    with pytest.raises(ValueError):
        sluice.to_json(float("nan"))
