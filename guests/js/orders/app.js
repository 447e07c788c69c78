// @ts-check
// The realistic example handler: validates an order and publishes a
// follow-up message for it. Behaviour: guests/spec/ORDERS.md ("orders"),
// mirroring guests/rust/orders/src/lib.rs.
//
// Input: a JSON object with `id` (string or number), optional `qty`
// (positive integer) and optional `region` (a word, default `default`). Test
// switches in the payload:
// - `"retry_until_attempt": N`: retry (after config `retry_delay_ms`,
//   default 10) while `attempt < N`;
// - `"always_retry": true`: always retry after the backoff policy.
// Config `work_ms` makes every call sleep that long first (simulated work).
// A forwarded order is announced on the topic named by config `events_topic`
// (if set) with routing key `orders.<region>.created`, and counted in the
// key-value store (key `forwarded`); without the key-value grant it logs a
// warning and forwards it all the same.
import { PublishError, config, done, handler, kv, log, publish, publishToTopic, reject, retry } from 'sluice-sdk';

const DEFAULT_RETRY_DELAY_MS = 10;
const DEFAULT_FOLLOWUP_QUEUE = 'shipping';
// The key-value counter of forwarded orders.
const FORWARDED_KEY = 'forwarded';
// One word of a routing key: ASCII only, as the host's routing keys are.
const REGION = /^[A-Za-z0-9_-]{1,32}$/;
const DEFAULT_REGION = 'default';

/** An order that cannot be handled, ever: rejected with this reason. */
class Malformed extends Error {}

/**
 * A whole number of milliseconds from config text, as Rust's
 * `str::parse::<u64>` reads one (within the numbers JS holds exactly);
 * undefined if it is not one.
 *
 * @param {string} s
 */
function parseMs(s) {
  if (!/^\+?[0-9]+$/.test(s)) return undefined;
  const n = Number(s);
  return Number.isSafeInteger(n) ? n : undefined;
}

/** A JSON number that is a whole number >= 0 (serde_json's `as_u64`). */
function isWholeNumber(v) {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

/** The order in a parsed payload; throws Malformed when it is not one. */
function parseOrder(value) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new Malformed('not a JSON object');
  }
  if (!Object.hasOwn(value, 'id')) throw new Malformed('missing `id`');
  const id = value.id;
  if (typeof id !== 'string' && typeof id !== 'number') {
    throw new Malformed('`id` must be a string or a number');
  }
  const qty = Object.hasOwn(value, 'qty') ? value.qty : 1;
  if (!(isWholeNumber(qty) && qty > 0)) {
    throw new Malformed(`\`qty\` must be a positive integer, got ${JSON.stringify(qty)}`);
  }
  const region = Object.hasOwn(value, 'region') ? value.region : DEFAULT_REGION;
  if (!(typeof region === 'string' && REGION.test(region))) {
    throw new Malformed('`region` must be a word of letters, digits, - or _');
  }
  return {
    id,
    // A numeric id is written as JSON writes it: `7`, not `7.0`.
    idText: String(id),
    qty,
    region,
    retryUntilAttempt: value.retry_until_attempt,
    alwaysRetry: value.always_retry === true,
  };
}

function retryDelayMs() {
  const s = config.get('retry_delay_ms');
  if (s === undefined) return DEFAULT_RETRY_DELAY_MS;
  const ms = parseMs(s.trim());
  if (ms === undefined) {
    log.warn(`config retry_delay_ms=${JSON.stringify(s)} is not a u64; using ${DEFAULT_RETRY_DELAY_MS}`);
    return DEFAULT_RETRY_DELAY_MS;
  }
  return ms;
}

/** @param {unknown} e */
function errorText(e) {
  return e instanceof Error ? e.message : String(e);
}

export const handle = handler((msg) => {
  // Config `work_ms`: simulated processing time, for demos and for tests that
  // must catch a host in the middle of a drain. A handler may return a
  // promise: the timer waits through wasi:io/poll, without spinning.
  const workMs = parseMs(config.get('work_ms') ?? '');
  if (workMs !== undefined) return sleep(workMs).then(() => handleOrder(msg));
  return handleOrder(msg);
});

/** @param {number} ms */
function sleep(ms) {
  // Timer delays above 2^31-1 ms would fire at once; clamp (about 24 days).
  return new Promise((resolve) => setTimeout(resolve, Math.min(ms, 0x7fffffff)));
}

/** @param {import('sluice-sdk').Message} msg */
function handleOrder(msg) {
  let text;
  try {
    text = msg.text();
  } catch {
    return reject('payload is not UTF-8');
  }
  let order;
  try {
    order = parseOrder(JSON.parse(text));
  } catch (e) {
    if (e instanceof Malformed || e instanceof SyntaxError) return reject(`malformed order: ${e.message}`);
    throw e;
  }

  const until = order.retryUntilAttempt;
  if (isWholeNumber(until) && msg.attempt < until) {
    const delay = retryDelayMs();
    log.info(`order ${order.idText}: attempt ${msg.attempt} < ${until}, retrying in ${delay} ms`);
    return retry({ after: delay });
  }
  if (order.alwaysRetry) {
    log.info(`order ${order.idText}: always_retry set, retrying`);
    return retry();
  }

  const queue = config.get('followup_queue') ?? DEFAULT_FOLLOWUP_QUEUE;
  const body = { json: { order: order.id, qty: order.qty, source: msg.id } };
  const options = { headers: { 'order-id': order.idText } };
  try {
    publish(queue, body, options);
  } catch (e) {
    if (!(e instanceof PublishError)) throw e;
    log.error(`order ${order.idText}: publish to ${JSON.stringify(queue)} failed: ${e.reason}`);
    return retry();
  }
  const topic = config.get('events_topic');
  if (topic !== undefined) {
    const route = `orders.${order.region}.created`;
    let copies;
    try {
      copies = publishToTopic(topic, route, body, options);
    } catch (e) {
      if (!(e instanceof PublishError)) throw e;
      log.error(`order ${order.idText}: publish to topic ${JSON.stringify(topic)} failed: ${e.reason}`);
      // The held follow-up is dropped with the retry.
      return retry();
    }
    log.info(`order ${order.idText} announced on ${topic} as ${route} to ${copies} queue(s)`);
  }

  const line = `order ${order.idText} (qty ${order.qty}) from message ${msg.id} forwarded to ${queue}`;
  // The count is a statistic: without it the order still goes through.
  let count;
  try {
    count = kv.increment(FORWARDED_KEY, 1);
  } catch (e) {
    log.warn(`order ${order.idText}: not counted: ${errorText(e)}`);
    log.info(line);
    return done();
  }
  log.info(`${line} (forwarded: ${count})`);
  return done();
}
