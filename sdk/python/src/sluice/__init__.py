"""The sluice handler SDK for Python, for the WIT world
`sluice:handler/handler@0.2.0` (and `batch-handler`).

    import sluice

    @sluice.handler
    def handle(msg: sluice.Message) -> sluice.Outcome:
        order = msg.json()
        sluice.publish("shipping", json={"order": order["id"]})
        return sluice.done()

Outcomes: `done()`, `retry(after=None)`, `reject(reason)`, `snooze(after)`.
Imports of the world: `publish`, `publish_to_topic` (raising
`PublishError`), and the modules `kv` (raising `KvError`), `config`, `log`
and `lease`. Durations are `datetime.timedelta`.

It runs inside a component built by componentize-py, over the `wit_world`
bindings that componentize-py generates at build time.
"""
from . import config, kv, lease, log
from ._errors import KvError, PublishError
from ._handler import batch_handler, handler
from ._message import Message
from ._outcome import Done, Outcome, Reject, Retry, Snooze, done, reject, retry, snooze
from ._publish import Headers, publish, publish_to_topic, to_json

__version__ = "0.2.0"
"""The SDK's version: that of the WIT package it targets."""

__all__ = [
    "Done",
    "Headers",
    "KvError",
    "Message",
    "Outcome",
    "PublishError",
    "Reject",
    "Retry",
    "Snooze",
    "batch_handler",
    "config",
    "done",
    "handler",
    "kv",
    "lease",
    "log",
    "publish",
    "publish_to_topic",
    "reject",
    "retry",
    "snooze",
    "to_json",
]
