// Outcomes: what a handler decides about a message. Each is the WIT variant
// `outcome` exactly as componentize-js lowers it ({ tag, val }, delays as
// BigInt), so returning one costs no conversion.
import { wireMs } from './duration.js';
import { checkKeys, checkObject, show } from './show.js';

const DONE = Object.freeze({ tag: 'done' });
const RETRY_BY_POLICY = Object.freeze({ tag: 'retry', val: undefined });

/** Handled: ack the message. */
export function done() {
  return DONE;
}

/**
 * A transient failure: deliver the message again, after `after` or, without
 * it, after the handler's backoff policy. Spends an attempt.
 *
 * @param {{ after?: number | string }} [options]
 */
export function retry(options) {
  if (options === undefined) return RETRY_BY_POLICY;
  checkObject('retry', options);
  checkKeys('retry', options, ['after']);
  if (options.after === undefined) return RETRY_BY_POLICY;
  return { tag: 'retry', val: wireMs(options.after, 'retry({ after })') };
}

/**
 * A poison message: dead-letter it now, with this reason, no retries.
 *
 * @param {string} reason
 */
export function reject(reason) {
  if (typeof reason !== 'string') {
    throw new TypeError(`reject: the reason must be a string, got ${show(reason)}`);
  }
  return { tag: 'reject', val: reason };
}

/**
 * Not now: deliver the message again after `for`, without spending an
 * attempt.
 *
 * @param {{ for: number | string }} options
 */
export function snooze(options) {
  checkObject('snooze', options);
  checkKeys('snooze', options, ['for']);
  if (options.for === undefined) {
    throw new TypeError('snooze: missing `for`, the delay (e.g. snooze({ for: "30s" }))');
  }
  return { tag: 'snooze', val: wireMs(options.for, 'snooze({ for })') };
}

/**
 * Whether `value` is an outcome the host takes: one made above, or the raw
 * WIT shape.
 *
 * @param {unknown} value
 */
export function isOutcome(value) {
  if (value === null || typeof value !== 'object') return false;
  const { tag, val } = /** @type {{ tag?: unknown, val?: unknown }} */ (value);
  switch (tag) {
    case 'done':
      return true;
    case 'retry':
      return val === undefined || typeof val === 'bigint';
    case 'reject':
      return typeof val === 'string';
    case 'snooze':
      return typeof val === 'bigint';
    default:
      return false;
  }
}

export { DONE, RETRY_BY_POLICY };
