"""The batch twin of `hello` (world `batch-handler`), as guests/rust/hello_batch.

Logs one line per call, `hello_batch: N messages`, and decides each message
by its payload: `retry` -> retry after 10 ms, `reject` -> reject("rejected
by hello_batch"), `snooze` -> snooze 50 ms, anything else -> done. When any
payload is exactly `wrong-length` it returns one outcome too many (an extra
`done`), which the host must refuse, failing the whole batch.
"""
from datetime import timedelta
from typing import List

import sluice


def outcome(payload: bytes) -> sluice.Outcome:
    if payload == b"retry":
        return sluice.retry(after=timedelta(milliseconds=10))
    if payload == b"reject":
        return sluice.reject("rejected by hello_batch")
    if payload == b"snooze":
        return sluice.snooze(timedelta(milliseconds=50))
    return sluice.done()


@sluice.batch_handler
def handle_batch(messages: List[sluice.Message]) -> List[sluice.Outcome]:
    sluice.log.info(f"hello_batch: {len(messages)} messages")
    outcomes = [outcome(m.payload) for m in messages]
    if any(m.payload == b"wrong-length" for m in messages):
        outcomes.append(sluice.done())
    return outcomes
