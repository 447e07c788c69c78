"""@sluice.handler and @sluice.batch_handler: the export componentize-py takes."""
from datetime import timedelta
from types import ModuleType
from typing import Callable, List

import pytest
from fakehost import Host
from wit_world.imports import types

import sluice


def wit_message(id: str, payload: bytes = b"", attempt: int = 1) -> types.Message:
    return types.Message(id, id, "q", payload, [], attempt, 0)


def in_app(fn: Callable[..., object]) -> None:
    """Makes `fn` a function of the module `app`, as if written in app.py."""
    fn.__module__ = "app"


def test_handler_installs_wit_world_and_returns_fn(app_module: ModuleType) -> None:
    def handle(msg: sluice.Message) -> sluice.Outcome:
        return sluice.retry(after=timedelta(milliseconds=msg.attempt))

    in_app(handle)
    assert sluice.handler(handle) is handle
    world = app_module.WitWorld()
    assert world.handle(wit_message("m", attempt=4)) == types.Outcome_Retry(4)
    assert app_module.WitWorld.__module__ == "app"


def test_handler_passes_the_message(app_module: ModuleType) -> None:
    seen: List[sluice.Message] = []

    def handle(msg: sluice.Message) -> sluice.Outcome:
        seen.append(msg)
        return sluice.done()

    in_app(handle)
    sluice.handler(handle)
    app_module.WitWorld().handle(types.Message("i", "k", "q", b"p", [("h", "v")], 2, 1000))
    assert seen == [
        sluice.Message(
            id="i", key="k", queue="q", payload=b"p", headers=[("h", "v")], attempt=2,
            enqueued_at=sluice.Message(id="", payload=b"").enqueued_at + timedelta(seconds=1),
        )
    ]


def test_an_uncaught_exception_is_a_retry_logged_at_error(app_module: ModuleType, host: Host) -> None:
    def handle(msg: sluice.Message) -> sluice.Outcome:
        return {"a": 1}["missing"]  # type: ignore[return-value]

    in_app(handle)
    sluice.handler(handle)
    assert app_module.WitWorld().handle(wit_message("m")) == types.Outcome_Retry(None)
    [line] = host.lines("error")
    assert line.startswith("uncaught KeyError: 'missing' (at ")
    assert "(at test_handler.py:" in line


def test_returning_no_outcome_is_a_retry_logged_at_error(app_module: ModuleType, host: Host) -> None:
    def handle(msg: sluice.Message) -> sluice.Outcome:
        return None  # type: ignore[return-value]

    in_app(handle)
    sluice.handler(handle)
    assert app_module.WitWorld().handle(wit_message("m")) == types.Outcome_Retry(None)
    [line] = host.lines("error")
    assert "uncaught TypeError: a handler must return a sluice.Outcome" in line


def test_handler_refuses_the_batch_world(app_module: ModuleType, world: Callable[[str], None]) -> None:
    world("batch-handler")

    def handle(msg: sluice.Message) -> sluice.Outcome:
        return sluice.done()

    in_app(handle)
    with pytest.raises(TypeError, match="use @sluice.batch_handler"):
        sluice.handler(handle)
    assert not hasattr(app_module, "WitWorld")


def test_one_handler_per_module(app_module: ModuleType) -> None:
    def handle(msg: sluice.Message) -> sluice.Outcome:
        return sluice.done()

    in_app(handle)
    sluice.handler(handle)
    with pytest.raises(TypeError, match="already has a WitWorld"):
        sluice.handler(handle)


def test_batch_handler(app_module: ModuleType, world: Callable[[str], None]) -> None:
    world("batch-handler")

    def handle(messages: List[sluice.Message]) -> List[sluice.Outcome]:
        return [sluice.reject(m.id) for m in messages]

    in_app(handle)
    assert sluice.batch_handler(handle) is handle
    outcomes = app_module.WitWorld().handle_batch([wit_message("a"), wit_message("b")])
    assert outcomes == [types.Outcome_Reject("a"), types.Outcome_Reject("b")]


def test_batch_outcomes_of_the_wrong_length_go_to_the_host(
    app_module: ModuleType, world: Callable[[str], None]
) -> None:
    # The host, not the SDK, fails such a call (hello_batch tests it).
    world("batch-handler")

    def handle(messages: List[sluice.Message]) -> List[sluice.Outcome]:
        return []

    in_app(handle)
    sluice.batch_handler(handle)
    assert app_module.WitWorld().handle_batch([wit_message("a")]) == []


def test_an_uncaught_exception_retries_the_whole_batch(
    app_module: ModuleType, world: Callable[[str], None], host: Host
) -> None:
    world("batch-handler")

    def handle(messages: List[sluice.Message]) -> List[sluice.Outcome]:
        raise RuntimeError("store down")

    in_app(handle)
    sluice.batch_handler(handle)
    outcomes = app_module.WitWorld().handle_batch([wit_message("a"), wit_message("b")])
    assert outcomes == [types.Outcome_Retry(None), types.Outcome_Retry(None)]
    [line] = host.lines("error")
    assert line.startswith("uncaught RuntimeError: store down (at ")


def test_batch_handler_refuses_the_handler_world(app_module: ModuleType) -> None:
    def handle(messages: List[sluice.Message]) -> List[sluice.Outcome]:
        return []

    in_app(handle)
    with pytest.raises(TypeError, match="use @sluice.handler"):
        sluice.batch_handler(handle)
