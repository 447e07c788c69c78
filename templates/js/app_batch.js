// The {{name}} batch handler for sluice: each call takes up to the
// `batch_size` of {{name}}.toml messages and returns one outcome per message,
// in the same order. Each message is settled by its own outcome.
import { log } from 'sluice:handler/log@0.2.0';
import { get } from 'sluice:handler/config@0.2.0';
import { publish } from 'sluice:handler/publish@0.2.0';

export function handleBatch(messages) {
  log('info', `{{name}}: ${messages.length} messages`);
  // Exactly one outcome per message: a list of any other length fails the
  // whole call, as an uncaught exception would, and every message spends an
  // attempt. The timeout is for the whole call too; work that may outlast it
  // asks for more with extend(ms) (import { extend } from
  // 'sluice:handler/lease@0.2.0').
  return messages.map((message) => handleOne(message));
}

// Handles one message of the batch, as a `handler` world's `handle` would.
function handleOne(message) {
  try {
    return handle(message);
  } catch (e) {
    // A bug or a surprise in one message should not fail the others: retry
    // this one alone, after the policy's backoff.
    log('error', `{{name}}: message ${message.id}: ${e}`);
    return { tag: 'retry', val: undefined };
  }
}

function handle(message) {
  log('info', `{{name}}: message ${message.id} attempt ${message.attempt}`);

  // The payload is a Uint8Array; reject what can never succeed (dead-lettered at once).
  let text;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(message.payload);
  } catch {
    return { tag: 'reject', val: 'payload is not UTF-8' };
  }

  // Values from the [config] table of {{name}}.toml.
  const target = get('forward_to');
  if (target !== undefined) {
    try {
      // Held until this call returns, then committed with the ack of the
      // batch's first `done` message, whichever message published: so
      // publish only once the message is sure to be done.
      publish(target, new TextEncoder().encode(text), { headers: [], key: undefined, delayMs: undefined });
    } catch (e) {
      log('warn', `publish to ${target} failed: ${e.payload ?? e.message}`);
      // A transient failure: retry this message after the policy's backoff
      // (or { tag: 'retry', val: 1000n } to choose the delay; u64 is a BigInt).
      return { tag: 'retry', val: undefined };
    }
  }
  // Also possible: { tag: 'snooze', val: 1000n } puts the message off without
  // spending an attempt.
  return { tag: 'done' };
}
