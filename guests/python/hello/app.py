"""Minimal handler: logs one line and acks (see guests/spec/ORDERS.md)."""
import sluice

# Calls of this instance: a fresh instance starts clean (`call 1`).
calls = 0


@sluice.handler
def handle(msg: sluice.Message) -> sluice.Outcome:
    global calls
    calls += 1
    sluice.log.info(
        f"hello from sluice: message {msg.id} attempt {msg.attempt}, "
        f"call {calls} of this instance"
    )
    return sluice.done()
