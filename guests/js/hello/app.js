// The minimal sluice handler: logs one line and acks.
// See guests/spec/ORDERS.md ("hello").
import { log } from 'sluice:handler/log@0.2.0';

export function handle(message) {
  log('info', `hello from sluice: message ${message.id} attempt ${message.attempt}`);
  return { tag: 'done' };
}
