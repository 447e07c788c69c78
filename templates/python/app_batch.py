"""The {{name}} batch handler for sluice: each call takes up to the
`batch_size` of {{name}}.toml messages and returns one outcome per message,
in the same order. Each message is settled by its own outcome.

componentize-py generates the `wit_world` package from wit/ at build time;
the app defines a class `WitWorld` that implements the world.
"""
from typing import List

import wit_world
from wit_world.imports import config, log, publish, types
from componentize_py_types import Err


class WitWorld(wit_world.WitWorld):
    def handle_batch(self, messages: List[types.Message]) -> List[types.Outcome]:
        log.log(log.Level.INFO, f"{{name}}: {len(messages)} messages")
        # Exactly one outcome per message: a list of any other length fails
        # the whole call, as an uncaught exception would, and every message
        # spends an attempt. The timeout is for the whole call too; work that
        # may outlast it asks for more with lease.extend(milliseconds)
        # (`from wit_world.imports import lease`).
        return [handle_one(message) for message in messages]


def handle_one(message: types.Message) -> types.Outcome:
    """Handles one message of the batch, as a `handler` world's `handle` would."""
    try:
        return handle(message)
    except Exception as e:
        # A bug or a surprise in one message should not fail the others:
        # retry this one alone, after the policy's backoff.
        log.log(log.Level.ERROR, f"{{name}}: message {message.id}: {e!r}")
        return types.Outcome_Retry(None)


def handle(message: types.Message) -> types.Outcome:
    log.log(log.Level.INFO, f"{{name}}: message {message.id} attempt {message.attempt}")

    # The payload is bytes; reject what can never succeed (dead-lettered at once).
    try:
        text = bytes(message.payload).decode("utf-8")
    except UnicodeDecodeError:
        return types.Outcome_Reject("payload is not UTF-8")

    # Values from the [config] table of {{name}}.toml.
    target = config.get("forward_to")
    if target is not None:
        # Held until this call returns, then committed with the ack of the
        # batch's first `done` message, whichever message published: so
        # publish only once the message is sure to be done.
        options = publish.PublishOptions(headers=[], key=None, delay_ms=None)
        try:
            publish.publish(target, text.encode("utf-8"), options)
        except Err as e:
            log.log(log.Level.WARN, f"publish to {target} failed: {e.value}")
            # A transient failure: retry this message after the policy's
            # backoff (or Outcome_Retry(milliseconds) to choose the delay).
            return types.Outcome_Retry(None)
    # Also possible: types.Outcome_Snooze(milliseconds) puts the message off
    # without spending an attempt.
    return types.Outcome_Done()
