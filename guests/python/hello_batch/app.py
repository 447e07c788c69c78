"""The batch twin of `hello` (world `batch-handler`), as guests/rust/hello_batch.

Logs one line per call, `hello_batch: N messages`, and decides each message
by its payload: `retry` -> retry(10), `reject` -> reject("rejected by
hello_batch"), `snooze` -> snooze(50), anything else -> done. When any
payload is exactly `wrong-length` it returns one outcome too many (an extra
`done`), which the host must refuse, failing the whole batch.

componentize-py generates the `wit_world` package from wit/handler.wit at
build time (`-w batch-handler`); the app must define a class named `WitWorld`
that implements it.
"""
from typing import List

import wit_world
from wit_world.imports import log, types


def outcome(payload: bytes) -> types.Outcome:
    if payload == b"retry":
        return types.Outcome_Retry(10)
    if payload == b"reject":
        return types.Outcome_Reject("rejected by hello_batch")
    if payload == b"snooze":
        return types.Outcome_Snooze(50)
    return types.Outcome_Done()


class WitWorld(wit_world.WitWorld):
    def handle_batch(self, messages: List[types.Message]) -> List[types.Outcome]:
        log.log(log.Level.INFO, f"hello_batch: {len(messages)} messages")
        outcomes = [outcome(m.payload) for m in messages]
        if any(m.payload == b"wrong-length" for m in messages):
            outcomes.append(types.Outcome_Done())
        return outcomes
