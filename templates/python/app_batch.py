"""The {{name}} batch handler for sluice: each call takes up to the
`batch_size` of {{name}}.toml messages and returns one outcome per message,
in the same order. Each message is settled by its own outcome.

`@sluice.batch_handler` makes `handle_batch` the component's export. An
exception it does not catch retries every message of the batch, logged at
error: `handle_one` catches them per message instead.
"""
from typing import List

import sluice


@sluice.batch_handler
def handle_batch(messages: List[sluice.Message]) -> List[sluice.Outcome]:
    sluice.log.info(f"{{name}}: {len(messages)} messages")
    # Exactly one outcome per message: a list of any other length fails the
    # whole call and every message spends an attempt. The timeout is for the
    # whole call too; work that may outlast it asks for more with
    # sluice.lease.extend(timedelta(...)).
    return [handle_one(msg) for msg in messages]


def handle_one(msg: sluice.Message) -> sluice.Outcome:
    """Handles one message of the batch, as a `handler` world's handler would."""
    try:
        return handle(msg)
    except Exception as e:
        # A bug or a surprise in one message should not fail the others:
        # retry this one alone, after the policy's backoff.
        sluice.log.error(f"{{name}}: message {msg.id}: {e!r}")
        return sluice.retry()


def handle(msg: sluice.Message) -> sluice.Outcome:
    sluice.log.info(f"{{name}}: message {msg.id} attempt {msg.attempt}")

    # The payload is bytes; reject what can never succeed (dead-lettered at once).
    try:
        text = msg.text()  # or msg.json()
    except UnicodeDecodeError:
        return sluice.reject("payload is not UTF-8")

    # Values from the [config] table of {{name}}.toml.
    target = sluice.config.get("forward_to")
    if target is not None:
        # Held until this call returns, then committed with the ack of the
        # batch's first `done` message, whichever message published: so
        # publish only once the message is sure to be done.
        try:
            sluice.publish(target, text)
        except sluice.PublishError as e:
            sluice.log.warn(f"publish to {target} failed: {e}")
            # A transient failure: retry this message after the policy's
            # backoff (or sluice.retry(after=timedelta(...)) to choose the delay).
            return sluice.retry()
    # Also possible: sluice.snooze(timedelta(...)) puts the message off
    # without spending an attempt.
    return sluice.done()
