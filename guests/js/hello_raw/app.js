// The minimal sluice handler: logs one line and acks.
// See guests/spec/ORDERS.md ("hello").
import { log } from 'sluice:handler/log@0.2.0';

// Calls of this instance: a fresh instance starts clean (`call 1`).
let calls = 0;

export function handle(message) {
  calls += 1;
  log('info', `hello from sluice: message ${message.id} attempt ${message.attempt}, call ${calls} of this instance`);
  return { tag: 'done' };
}
