// @ts-check
// The {{name}} handler for sluice, on sluice-sdk (sdk/README.md).
import { PublishError, config, done, handler, log, publish, reject, retry } from 'sluice-sdk';

export const handle = handler((msg) => {
  log.info(`{{name}}: message ${msg.id} attempt ${msg.attempt}`);

  // Reject what can never succeed: dead-lettered at once, no retries.
  let text;
  try {
    text = msg.text();
  } catch {
    return reject('payload is not UTF-8');
  }

  // Values from the [config] table of {{name}}.toml.
  const target = config.get('forward_to');
  if (target !== undefined) {
    try {
      // Held until this call returns; committed together with the ack.
      publish(target, text, { headers: { 'forwarded-from': msg.queue } });
    } catch (e) {
      if (!(e instanceof PublishError)) throw e;
      log.warn(`publish to ${target} failed: ${e.reason}`);
      // A transient failure: retry after the policy's backoff (or choose the
      // delay: retry({ after: '1s' })).
      return retry();
    }
  }
  // Also possible: snooze({ for: '30s' }) puts the message off without
  // spending an attempt; lease.extend('1m') asks for more time for long
  // work; kv.increment('seen') counts in the handler's own store (grant it
  // with `kv = true` under [capabilities] in {{name}}.toml). An error thrown
  // here is logged and the message retried after the backoff.
  return done(); // returning nothing is done() too
});
