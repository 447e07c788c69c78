// @ts-check
// The {{name}} batch handler for sluice, on sluice-sdk (sdk/README.md): each
// call takes up to the `batch_size` of {{name}}.toml messages and returns one
// outcome per message, in the same order. Each message is settled by its own
// outcome.
import { PublishError, batchHandler, config, done, log, publish, reject, retry } from 'sluice-sdk';

/** @typedef {import('sluice-sdk').Message} Message */

export const handleBatch = batchHandler((msgs) => {
  log.info(`{{name}}: ${msgs.length} messages`);
  // Exactly one outcome per message: a list of any other length fails the
  // whole call, as an uncaught error does (every message is retried). The
  // timeout is for the whole call too; work that may outlast it asks for
  // more with lease.extend('1m').
  return msgs.map((msg) => handleOne(msg));
});

// Handles one message of the batch, as a `handler` world's function would.
/** @param {Message} msg */
function handleOne(msg) {
  try {
    return handle(msg);
  } catch (e) {
    // A bug or a surprise in one message should not fail the others: retry
    // this one alone, after the policy's backoff.
    log.error(`{{name}}: message ${msg.id}: ${e}`);
    return retry();
  }
}

/** @param {Message} msg */
function handle(msg) {
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
      // Held until this call returns, then committed with the ack of the
      // batch's first `done` message, whichever message published: so
      // publish only once the message is sure to be done.
      publish(target, text, { headers: { 'forwarded-from': msg.queue } });
    } catch (e) {
      if (!(e instanceof PublishError)) throw e;
      log.warn(`publish to ${target} failed: ${e.reason}`);
      // A transient failure: retry this message after the policy's backoff
      // (or choose the delay: retry({ after: '1s' })).
      return retry();
    }
  }
  // Also possible: snooze({ for: '30s' }) puts the message off without
  // spending an attempt.
  return done();
}
