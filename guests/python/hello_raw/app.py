"""Minimal handler: logs one line and acks (see guests/spec/ORDERS.md).

componentize-py generates the `wit_world` package from wit/handler.wit at
build time; the app must define a class named `WitWorld` that implements it.
"""
import wit_world
from wit_world.imports import log, types

# Calls of this instance: a fresh instance starts clean (`call 1`).
calls = 0


class WitWorld(wit_world.WitWorld):
    def handle(self, message: types.Message) -> types.Outcome:
        global calls
        calls += 1
        log.log(
            log.Level.INFO,
            f"hello from sluice: message {message.id} attempt {message.attempt}, "
            f"call {calls} of this instance",
        )
        return types.Outcome_Done()
