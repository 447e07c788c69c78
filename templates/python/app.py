"""The {{name}} handler for sluice.

componentize-py generates the `wit_world` package from wit/ at build time;
the app defines a class `WitWorld` that implements the world.
"""
import wit_world
from wit_world.imports import config, log, publish, types
from componentize_py_types import Err


class WitWorld(wit_world.WitWorld):
    def handle(self, message: types.Message) -> types.Outcome:
        log.log(log.Level.INFO, f"{{name}}: message {message.id} attempt {message.attempt}")

        # The payload is bytes; reject what can never succeed (dead-lettered at once).
        try:
            text = bytes(message.payload).decode("utf-8")
        except UnicodeDecodeError:
            return types.Outcome_Reject("payload is not UTF-8")

        # Values from the [config] table of {{name}}.toml.
        target = config.get("forward_to")
        if target is not None:
            # Held until this call returns; committed together with the ack.
            options = publish.PublishOptions(headers=[], key=None, delay_ms=None)
            try:
                publish.publish(target, text.encode("utf-8"), options)
            except Err as e:
                log.log(log.Level.WARN, f"publish to {target} failed: {e.value}")
                # A transient failure: retry after the policy's backoff
                # (or Outcome_Retry(milliseconds) to choose the delay).
                return types.Outcome_Retry(None)
        # Also possible: types.Outcome_Snooze(milliseconds) puts the message
        # off without spending an attempt (say, until a resource is free);
        # and work that may outlast the timeout asks for more time with
        # lease.extend(milliseconds) (`from wit_world.imports import lease`;
        # lease.time_left() says how much is left).
        return types.Outcome_Done()
