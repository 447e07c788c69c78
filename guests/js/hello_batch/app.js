// The batch twin of `hello` (world `batch-handler`), as guests/rust/hello_batch.
//
// Logs one line per call, `hello_batch: N messages`, and decides each
// message by its payload: `retry` -> retry(10), `reject` -> reject("rejected
// by hello_batch"), `snooze` -> snooze(50), anything else -> done. When any
// payload is exactly `wrong-length` it returns one outcome too many (an extra
// `done`), which the host must refuse, failing the whole batch.
import { log } from 'sluice:handler/log@0.2.0';

// The payloads compared with, as bytes (the payload is a Uint8Array).
const RETRY = new TextEncoder().encode('retry');
const REJECT = new TextEncoder().encode('reject');
const SNOOZE = new TextEncoder().encode('snooze');
const WRONG_LENGTH = new TextEncoder().encode('wrong-length');

function equal(payload, bytes) {
  if (payload.length !== bytes.length) return false;
  for (let i = 0; i < bytes.length; i++) {
    if (payload[i] !== bytes[i]) return false;
  }
  return true;
}

function outcome(payload) {
  if (equal(payload, RETRY)) return { tag: 'retry', val: 10n };
  if (equal(payload, REJECT)) return { tag: 'reject', val: 'rejected by hello_batch' };
  if (equal(payload, SNOOZE)) return { tag: 'snooze', val: 50n };
  return { tag: 'done' };
}

export function handleBatch(messages) {
  log('info', `hello_batch: ${messages.length} messages`);
  const outcomes = messages.map((m) => outcome(m.payload));
  if (messages.some((m) => equal(m.payload, WRONG_LENGTH))) outcomes.push({ tag: 'done' });
  return outcomes;
}
