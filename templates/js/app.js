// The {{name}} handler for sluice.
import { log } from 'sluice:handler/log@0.2.0';
import { get } from 'sluice:handler/config@0.2.0';
import { publish } from 'sluice:handler/publish@0.2.0';

export function handle(message) {
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
      // Held until this call returns; committed together with the ack.
      publish(target, new TextEncoder().encode(text), { headers: [], key: undefined, delayMs: undefined });
    } catch (e) {
      log('warn', `publish to ${target} failed: ${e.payload ?? e.message}`);
      // A transient failure: retry after the policy's backoff
      // (or { tag: 'retry', val: 1000n } to choose the delay; u64 is a BigInt).
      return { tag: 'retry', val: undefined };
    }
  }
  // Also possible: { tag: 'snooze', val: 1000n } puts the message off without
  // spending an attempt (say, until a resource is free); and work that may
  // outlast the timeout asks for more time with extend(1000n) (import
  // { extend, timeLeft } from 'sluice:handler/lease@0.2.0').
  return { tag: 'done' };
}
