// The realistic example handler: validates an order and publishes a
// follow-up message for it. Behaviour: guests/spec/ORDERS.md ("orders"),
// mirroring guests/rust/orders/src/lib.rs.
//
// Input: a JSON object with `id` (string or number), optional `qty`
// (positive integer) and optional `region` (a word, default `default`). Test
// switches in the payload:
// - `"retry_until_attempt": N`: retry (after config `retry_delay_ms`,
//   default 10) while `attempt < N`;
// - `"always_retry": true`: always `retry(none)`.
// Config `work_ms` makes every call sleep that long first (simulated work).
// A forwarded order is announced on the topic named by config `events_topic`
// (if set) with routing key `orders.<region>.created`, and counted in the
// key-value store (key `forwarded`); without the key-value grant it logs a
// warning and forwards it all the same.
//
// Binding conventions (componentize-js 0.23):
// - WIT interface imports are named imports from 'pkg:ns/iface@version';
// - enums are strings ('info'), variants are { tag, val };
// - u64 is BigInt, u32 is Number, list<u8> is Uint8Array, option<T> is
//   T | undefined, record fields are lowerCamelCase (delay-ms -> delayMs);
// - an imported function returning result<T, E> (`publish`, `publishToTopic`,
//   whose u32 is a Number) returns the ok value and throws on err: a `ComponentError` (an Error subclass, not exported) with
//   the err value in `.payload` (and as `.message` when it is a string).
import { log } from 'sluice:handler/log@0.2.0';
import { publish, publishToTopic } from 'sluice:handler/publish@0.2.0';
import { get as configGet } from 'sluice:handler/config@0.2.0';
import { increment } from 'sluice:handler/kv@0.2.0';

const DEFAULT_RETRY_DELAY_MS = 10n;
const DEFAULT_FOLLOWUP_QUEUE = 'shipping';
// The key-value counter of forwarded orders.
const FORWARDED_KEY = 'forwarded';
const U64_MAX = 0xffff_ffff_ffff_ffffn;
// One word of a routing key: ASCII only, as the host's routing keys are.
const REGION = /^[A-Za-z0-9_-]{1,32}$/;
const DEFAULT_REGION = 'default';

const utf8 = new TextDecoder('utf-8', { fatal: true });
const encoder = new TextEncoder();

/** Parses a u64 the way Rust's `str::parse::<u64>` does; undefined if not one. */
function parseU64(s) {
  if (!/^\+?[0-9]+$/.test(s)) return undefined;
  const n = BigInt(s);
  return n <= U64_MAX ? n : undefined;
}

/** A JSON number that is a whole number >= 0 (serde_json's `as_u64`, within
 *  the range a JS number holds exactly). */
function isWholeNumber(v) {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

/** Rust's `{:?}` of a string, near enough: a double-quoted, escaped string. */
function quoted(s) {
  return JSON.stringify(s);
}

function malformed(why) {
  return { tag: 'reject', val: `malformed order: ${why}` };
}

/** Returns { order } or { outcome } when the order is malformed. */
function parseOrder(obj) {
  if (!Object.hasOwn(obj, 'id')) return { outcome: malformed('missing `id`') };
  const id = obj.id;
  let idText;
  if (typeof id === 'string') idText = id;
  else if (typeof id === 'number') idText = String(id);
  else return { outcome: malformed('`id` must be a string or a number') };

  let qty = 1;
  if (Object.hasOwn(obj, 'qty')) {
    const q = obj.qty;
    if (!(isWholeNumber(q) && q > 0)) {
      return {
        outcome: malformed(`\`qty\` must be a positive integer, got ${JSON.stringify(q)}`),
      };
    }
    qty = q;
  }

  let region = DEFAULT_REGION;
  if (Object.hasOwn(obj, 'region')) {
    const r = obj.region;
    if (!(typeof r === 'string' && REGION.test(r))) {
      return { outcome: malformed('`region` must be a word of letters, digits, - or _') };
    }
    region = r;
  }
  return { order: { id, idText, qty, region } };
}

function retryDelayMs() {
  const s = configGet('retry_delay_ms');
  if (s === undefined) return DEFAULT_RETRY_DELAY_MS;
  const n = parseU64(s.trim());
  if (n === undefined) {
    log(
      'warn',
      `config retry_delay_ms=${quoted(s)} is not a u64; using ${DEFAULT_RETRY_DELAY_MS}`,
    );
    return DEFAULT_RETRY_DELAY_MS;
  }
  return n;
}

/** Simulated work: a real (non-spinning) sleep. StarlingMonkey has no
 *  blocking sleep (no Atomics/SharedArrayBuffer), but its event loop waits
 *  for timers through wasi:io/poll, and the generated export awaits the
 *  promise `handle` returns, so this blocks the call like Rust's
 *  `thread::sleep` without burning CPU. */
function sleep(ms) {
  // Timer delays above 2^31-1 ms would fire at once; clamp (about 24 days).
  return new Promise((resolve) => setTimeout(resolve, Math.min(ms, 0x7fffffff)));
}

export function handle(message) {
  // Config `work_ms`: simulated processing time, for demos and for tests that
  // must catch a host in the middle of a drain.
  const workMs = configGet('work_ms');
  const ms = workMs === undefined ? undefined : parseU64(workMs);
  if (ms !== undefined) return sleep(Number(ms)).then(() => handleOrder(message));
  return handleOrder(message);
}

function handleOrder(message) {
  let text;
  try {
    text = utf8.decode(message.payload);
  } catch {
    return { tag: 'reject', val: 'payload is not UTF-8' };
  }

  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return malformed(e instanceof Error ? e.message : String(e));
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return malformed('not a JSON object');
  }
  const obj = value;

  const parsed = parseOrder(obj);
  if (parsed.outcome) return parsed.outcome;
  const order = parsed.order;

  const until = obj.retry_until_attempt;
  if (isWholeNumber(until) && message.attempt < until) {
    const delay = retryDelayMs();
    log(
      'info',
      `order ${order.idText}: attempt ${message.attempt} < ${until}, retrying in ${delay} ms`,
    );
    return { tag: 'retry', val: delay };
  }
  if (obj.always_retry === true) {
    log('info', `order ${order.idText}: always_retry set, retrying`);
    return { tag: 'retry', val: undefined };
  }

  const queue = configGet('followup_queue') ?? DEFAULT_FOLLOWUP_QUEUE;
  const payload = encoder.encode(
    JSON.stringify({ order: order.id, qty: order.qty, source: message.id }),
  );
  const options = {
    headers: [['order-id', order.idText]],
    key: undefined,
    delayMs: undefined,
  };
  try {
    publish(queue, payload, options);
  } catch (e) {
    log('error', `order ${order.idText}: publish to ${quoted(queue)} failed: ${errorText(e)}`);
    return { tag: 'retry', val: undefined };
  }
  const topic = configGet('events_topic');
  if (topic !== undefined) {
    const route = `orders.${order.region}.created`;
    let copies;
    try {
      copies = publishToTopic(topic, route, payload, options);
    } catch (e) {
      log('error', `order ${order.idText}: publish to topic ${quoted(topic)} failed: ${errorText(e)}`);
      // The held follow-up is dropped with the retry.
      return { tag: 'retry', val: undefined };
    }
    log('info', `order ${order.idText} announced on ${topic} as ${route} to ${copies} queue(s)`);
  }
  const line = `order ${order.idText} (qty ${order.qty}) from message ${message.id} forwarded to ${queue}`;
  // The count is a statistic: without it the order still goes through.
  let count;
  try {
    count = increment(FORWARDED_KEY, 1n); // s64 is a BigInt both ways
  } catch (e) {
    log('warn', `order ${order.idText}: not counted: ${errorText(e)}`);
    log('info', line);
    return { tag: 'done' };
  }
  log('info', `${line} (forwarded: ${count})`);
  return { tag: 'done' };
}

/** The `string` of a result error thrown by an import. */
function errorText(e) {
  if (e !== null && typeof e === 'object' && 'payload' in e) return String(e.payload);
  if (e instanceof Error) return e.message;
  return String(e);
}
