"""The decorators that make a function the component's export.

componentize-py 0.25.1 imports the app module while it builds the component
and takes from it the class named `WitWorld`, whose method `handle` (world
`handler`) or `handle_batch` (world `batch-handler`) it exports. The
decorators define that class in the decorated function's module, so an
app.py needs nothing but the decorated function.
"""
import os
import sys
import traceback
from typing import Callable, List, Sequence, TypeVar

import wit_world
from wit_world.imports import types

from . import log
from ._message import Message
from ._outcome import Outcome, to_wit

Handler = TypeVar("Handler", bound=Callable[[Message], Outcome])
BatchHandler = TypeVar("BatchHandler", bound=Callable[[List[Message]], Sequence[Outcome]])


def handler(fn: Handler) -> Handler:
    """Make `fn` the handler of the world `handler`: called once per message,
    it returns `sluice.done()`, `retry()`, `reject(reason)` or `snooze(after)`.

    An exception `fn` does not catch becomes `retry()` (after the backoff
    policy), with the exception's type and text logged at error. Decorate a
    function of the app module itself (app.py), once. Returns `fn` unchanged,
    so tests can call it directly.
    """
    _check_world("handler")

    class WitWorld:
        def handle(self, message: types.Message) -> types.Outcome:
            try:
                return to_wit(fn(Message._from_wit(message)))
            except Exception as e:
                _log_uncaught(e)
                return types.Outcome_Retry(None)

    _install(fn, WitWorld)
    return fn


def batch_handler(fn: BatchHandler) -> BatchHandler:
    """Make `fn` the handler of the world `batch-handler`: called with a list
    of messages, it returns one outcome per message, in the same order. The
    host fails the whole call (every message spends its attempt) when the
    list has any other length.

    An exception `fn` does not catch becomes `retry()` for every message of
    the batch, with the exception's type and text logged at error. Decorate
    a function of the app module itself (app.py), once. Returns `fn`
    unchanged, so tests can call it directly.
    """
    _check_world("batch-handler")

    class WitWorld:
        def handle_batch(self, messages: List[types.Message]) -> List[types.Outcome]:
            try:
                outcomes = fn([Message._from_wit(m) for m in messages])
                return [to_wit(outcome) for outcome in outcomes]
            except Exception as e:
                _log_uncaught(e)
                return [types.Outcome_Retry(None) for _ in messages]

    _install(fn, WitWorld)
    return fn


# Each world's export, as componentize-py names the method, and its decorator.
_WORLDS = {
    "handler": ("handle", "handler"),
    "batch-handler": ("handle_batch", "batch_handler"),
}


def _check_world(world: str) -> None:
    """Fails the build, saying what to do, when the decorator does not match
    the world the component is built for."""
    export, decorator = _WORLDS[world]
    if hasattr(wit_world.WitWorld, export):
        return
    other = next(w for w in _WORLDS if w != world)
    raise TypeError(
        f"@sluice.{decorator} needs the world `{world}`, but this component is "
        f"built for another: use @sluice.{_WORLDS[other][1]} for the world "
        f"`{other}`, or build with `-w {world}`"
    )


def _install(fn: Callable[..., object], cls: type) -> None:
    module = sys.modules[fn.__module__]
    if hasattr(module, "WitWorld"):
        raise TypeError(
            f"module {module.__name__} already has a WitWorld: decorate one "
            "function with @sluice.handler or @sluice.batch_handler, and "
            "define no WitWorld class of your own"
        )
    cls.__qualname__ = cls.__name__ = "WitWorld"
    cls.__module__ = module.__name__
    setattr(module, "WitWorld", cls)


def _log_uncaught(e: Exception) -> None:
    # The innermost frame; its file's folder inside a component says nothing.
    where = traceback.extract_tb(e.__traceback__)[-1]
    log.error(
        f"uncaught {type(e).__name__}: {e} "
        f"(at {os.path.basename(where.filename)}:{where.lineno}); retrying"
    )
