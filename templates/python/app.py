"""The {{name}} handler for sluice.

`@sluice.handler` makes `handle` the component's export: it is called once
per message and returns what to do with it. An exception it does not catch
retries the message (after the backoff policy), logged at error.
"""
import sluice


@sluice.handler
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
        # Held until this call returns; committed together with the ack.
        try:
            sluice.publish(target, text)  # or json={...}, headers=, key=, delay=
        except sluice.PublishError as e:
            sluice.log.warn(f"publish to {target} failed: {e}")
            # A transient failure: retry after the policy's backoff
            # (or sluice.retry(after=timedelta(...)) to choose the delay).
            return sluice.retry()
    # Also possible: sluice.snooze(timedelta(...)) puts the message off
    # without spending an attempt (say, until a resource is free); work that
    # may outlast the timeout asks for more time with
    # sluice.lease.extend(timedelta(...)) (sluice.lease.time_left() says how
    # much is left); sluice.kv keeps state between messages.
    return sluice.done()
