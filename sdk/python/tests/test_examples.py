"""The example handlers (guests/python) and the scaffold templates
(templates/python), run on the fake host: the behaviour of
guests/spec/ORDERS.md, short of a component (tests/integration checks that)."""
import json
from pathlib import Path
from types import ModuleType
from typing import Callable, List, Optional

import pytest
from fakehost import Host, Published
from wit_world.imports import types

from conftest import REPO

GUESTS = REPO / "guests" / "python"
TEMPLATES = REPO / "templates" / "python"
Load = Callable[..., ModuleType]


def message(payload: bytes, id: str = "m-1", attempt: int = 1) -> types.Message:
    return types.Message(id, id, "orders", payload, [], attempt, 0)


def render(template: Path, tmp_path: Path, world: str) -> Path:
    """A template as `sluice new demo` writes it."""
    out = tmp_path / "app.py"
    text = template.read_text().replace("{{name}}", "demo").replace("{{world}}", world)
    out.write_text(text)
    return out


def test_hello_counts_the_calls_of_its_instance(load_app: Load, host: Host) -> None:
    app = load_app(GUESTS / "hello" / "app.py")
    world = app.WitWorld()
    assert world.handle(message(b"", "a", 1)) == types.Outcome_Done()
    assert world.handle(message(b"", "b", 3)) == types.Outcome_Done()
    assert host.lines("info") == [
        "hello from sluice: message a attempt 1, call 1 of this instance",
        "hello from sluice: message b attempt 3, call 2 of this instance",
    ]


def test_hello_raw_is_the_same_handler_on_raw_bindings(load_app: Load, host: Host) -> None:
    app = load_app(GUESTS / "hello_raw" / "app.py")
    assert app.WitWorld().handle(message(b"", "a", 2)) == types.Outcome_Done()
    assert host.lines("info") == ["hello from sluice: message a attempt 2, call 1 of this instance"]


def test_hello_batch(load_app: Load, host: Host) -> None:
    app = load_app(GUESTS / "hello_batch" / "app.py", "batch-handler")
    payloads = [b"retry", b"reject", b"snooze", b"other"]
    assert app.WitWorld().handle_batch([message(p) for p in payloads]) == [
        types.Outcome_Retry(10),
        types.Outcome_Reject("rejected by hello_batch"),
        types.Outcome_Snooze(50),
        types.Outcome_Done(),
    ]
    wrong = app.WitWorld().handle_batch([message(b"wrong-length")])
    assert wrong == [types.Outcome_Done(), types.Outcome_Done()]
    assert host.lines("info") == ["hello_batch: 4 messages", "hello_batch: 1 messages"]


REJECTS = [
    (b"\xff", "payload is not UTF-8"),
    (b"not json", "malformed order: Expecting value"),
    (b"NaN", "malformed order: "),
    (b'{"id": 1e400}', "malformed order: "),
    (b"[" * 200, "malformed order: recursion limit exceeded"),
    (b"[1]", "malformed order: not a JSON object"),
    (b"{}", "malformed order: missing `id`"),
    (b'{"id": true}', "malformed order: `id` must be a string or a number"),
    (b'{"id": null}', "malformed order: `id` must be a string or a number"),
    (b'{"id": 1, "qty": 0}', "malformed order: `qty` must be a positive integer, got 0"),
    (b'{"id": 1, "qty": true}', "malformed order: `qty` must be a positive integer, got true"),
    (b'{"id": 1, "qty": 1.5}', "malformed order: `qty` must be a positive integer, got 1.5"),
    (b'{"id": 1, "qty": "2"}', 'malformed order: `qty` must be a positive integer, got "2"'),
    (b'{"id": 1, "region": "e u"}', "malformed order: `region` must be a word of letters, digits, - or _"),
    (b'{"id": 1, "region": "' + b"x" * 33 + b'"}', "malformed order: `region` must be a word"),
    ('{"id": 1, "region": "é"}'.encode(), "malformed order: `region` must be a word"),
]


@pytest.mark.parametrize("payload,reason", REJECTS)
def test_orders_rejects(load_app: Load, host: Host, payload: bytes, reason: str) -> None:
    outcome = load_app(GUESTS / "orders" / "app.py").WitWorld().handle(message(payload))
    assert isinstance(outcome, types.Outcome_Reject)
    assert outcome.value.startswith(reason)
    assert host.published == []


def orders(load_app: Load, payload: object, attempt: int = 1) -> types.Outcome:
    app = load_app(GUESTS / "orders" / "app.py")
    outcome: types.Outcome = app.WitWorld().handle(message(json.dumps(payload).encode(), attempt=attempt))
    return outcome


def test_orders_forwards_and_counts(load_app: Load, host: Host) -> None:
    assert orders(load_app, {"id": 7, "qty": 2}) == types.Outcome_Done()
    assert host.published == [
        Published(None, "shipping", b'{"order":7,"qty":2,"source":"m-1"}', [("order-id", "7")], None, None)
    ]
    assert host.kv["forwarded"] == b"1"
    assert host.lines("info") == ["order 7 (qty 2) from message m-1 forwarded to shipping (forwarded: 1)"]


def test_orders_announces_on_the_events_topic(load_app: Load, host: Host) -> None:
    host.config.update({"followup_queue": "ship", "events_topic": "events"})
    assert orders(load_app, {"id": "A-1", "region": "eu"}) == types.Outcome_Done()
    payload = b'{"order":"A-1","qty":1,"source":"m-1"}'
    assert host.published == [
        Published(None, "ship", payload, [("order-id", "A-1")], None, None),
        Published("events", "orders.eu.created", payload, [("order-id", "A-1")], None, None),
    ]
    assert host.lines("info")[0] == "order A-1 announced on events as orders.eu.created to 2 queue(s)"


def test_orders_without_kv_warns_and_forwards(load_app: Load, host: Host) -> None:
    host.kv_error = "kv is not granted"
    assert orders(load_app, {"id": 1.0}) == types.Outcome_Done()
    assert host.lines("warn") == ["order 1.0: not counted: kv is not granted"]
    assert host.lines("info") == ["order 1.0 (qty 1) from message m-1 forwarded to shipping"]


def test_orders_retries_when_publish_fails(load_app: Load, host: Host) -> None:
    host.publish_error = "queue name invalid"
    host.config["followup_queue"] = "bad queue"
    assert orders(load_app, {"id": 1}) == types.Outcome_Retry(None)
    assert host.lines("error") == ['order 1: publish to "bad queue" failed: queue name invalid']


@pytest.mark.parametrize(
    "config,delay,warning",
    [({}, 10, None), ({"retry_delay_ms": " 25 "}, 25, None), ({"retry_delay_ms": "-1"}, 10, "-1")],
)
def test_orders_retry_until_attempt(
    load_app: Load, host: Host, config: dict[str, str], delay: int, warning: Optional[str]
) -> None:
    host.config.update(config)
    assert orders(load_app, {"id": 1, "retry_until_attempt": 3}, attempt=2) == types.Outcome_Retry(delay)
    assert host.lines("info") == [f"order 1: attempt 2 < 3, retrying in {delay} ms"]
    assert [w for w in host.lines("warn") if warning and warning in w] == (
        [] if warning is None else [f'config retry_delay_ms="{warning}" is not a u64; using 10']
    )
    assert orders(load_app, {"id": 1, "retry_until_attempt": 3}, attempt=3) == types.Outcome_Done()


def test_orders_always_retry(load_app: Load, host: Host) -> None:
    assert orders(load_app, {"id": 1, "always_retry": True}) == types.Outcome_Retry(None)
    assert host.published == []


@pytest.mark.parametrize("template", ["app.py"])
def test_template_handler(load_app: Load, host: Host, tmp_path: Path, template: str) -> None:
    app = load_app(render(TEMPLATES / template, tmp_path, "handler"))
    host.config["forward_to"] = "next"
    assert app.WitWorld().handle(message(b"hi")) == types.Outcome_Done()
    assert app.WitWorld().handle(message(b"\xff")) == types.Outcome_Reject("payload is not UTF-8")
    assert [(p.target, p.payload) for p in host.published] == [("next", b"hi")]


def test_template_batch_handler(load_app: Load, host: Host, tmp_path: Path) -> None:
    app = load_app(render(TEMPLATES / "app_batch.py", tmp_path, "batch-handler"), "batch-handler")
    host.config["forward_to"] = "next"
    outcomes: List[types.Outcome] = app.WitWorld().handle_batch([message(b"hi"), message(b"\xff")])
    assert outcomes == [types.Outcome_Done(), types.Outcome_Reject("payload is not UTF-8")]
    assert [(p.target, p.payload) for p in host.published] == [("next", b"hi")]
