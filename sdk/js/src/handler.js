// The exports: `handler` and `batchHandler` wrap the user's function into
// the function componentize-js calls for the WIT export `handle` or
// `handle-batch`, turning what it returns or throws into outcomes in one
// place.
import { log as hostLog } from 'sluice:handler/log@0.2.0';
import { Message } from './message.js';
import { DONE, RETRY_BY_POLICY, isOutcome } from './outcome.js';
import { show } from './show.js';

/**
 * @typedef {import('./message.js').WitMessage} WitMessage
 * @typedef {{ tag: string, val?: unknown }} WitOutcome
 */

/**
 * Wraps `fn` as the export `handle`: `export const handle = handler(fn)`.
 *
 * @param {(msg: Message) => unknown} fn
 * @returns {(raw: WitMessage) => WitOutcome | PromiseLike<WitOutcome>}
 */
export function handler(fn) {
  if (typeof fn !== 'function') {
    throw new TypeError(`handler: expected a function (msg) => outcome, got ${show(fn)}`);
  }
  return function handle(raw) {
    const msg = new Message(raw);
    let result;
    try {
      result = fn(msg);
    } catch (e) {
      return failed(e, `message ${msg.id}`);
    }
    // Only a promise pays for a promise: a sync handler returns at once.
    if (isThenable(result)) {
      return result.then(
        (r) => settle(r, msg),
        (e) => failed(e, `message ${msg.id}`),
      );
    }
    return settle(result, msg);
  };
}

/**
 * Wraps `fn` as the export `handleBatch` (WIT `handle-batch`):
 * `export const handleBatch = batchHandler(fn)`.
 *
 * @param {(msgs: Message[]) => unknown} fn
 * @returns {(raws: WitMessage[]) => WitOutcome[] | PromiseLike<WitOutcome[]>}
 */
export function batchHandler(fn) {
  if (typeof fn !== 'function') {
    throw new TypeError(`batchHandler: expected a function (msgs) => outcomes, got ${show(fn)}`);
  }
  return function handleBatch(raws) {
    const msgs = raws.map((raw) => new Message(raw));
    let result;
    try {
      result = fn(msgs);
    } catch (e) {
      return failedBatch(e, msgs);
    }
    if (isThenable(result)) {
      return result.then(
        (r) => settleBatch(r, msgs),
        (e) => failedBatch(e, msgs),
      );
    }
    return settleBatch(result, msgs);
  };
}

/**
 * @param {unknown} value
 * @returns {value is PromiseLike<unknown>}
 */
function isThenable(value) {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (/** @type {{ then?: unknown }} */ (value).then) === 'function'
  );
}

/**
 * What the handler returned, as the outcome the host takes.
 *
 * @param {unknown} result
 * @param {Message} msg
 * @returns {WitOutcome}
 */
function settle(result, msg) {
  if (result === undefined) return DONE;
  if (isOutcome(result)) return /** @type {WitOutcome} */ (result);
  return failed(notAnOutcome(result), `message ${msg.id}`);
}

/**
 * @param {unknown} result
 * @param {Message[]} msgs
 * @returns {WitOutcome[]}
 */
function settleBatch(result, msgs) {
  if (result === undefined) return msgs.map(() => DONE);
  if (!Array.isArray(result)) {
    return failedBatch(
      new TypeError(`batch handler returned ${show(result)}, not an array of outcomes`),
      msgs,
    );
  }
  // Every entry is kept, even past the batch's length: the host refuses a
  // list of the wrong length, and the SDK does not hide that bug.
  const outcomes = [];
  for (let i = 0; i < result.length; i++) {
    const out = result[i];
    if (out === undefined) outcomes.push(DONE);
    else if (isOutcome(out)) outcomes.push(/** @type {WitOutcome} */ (out));
    else outcomes.push(failed(notAnOutcome(out), `message ${msgs[i]?.id ?? `#${i + 1}`}`));
  }
  return outcomes;
}

/** @param {unknown} result */
function notAnOutcome(result) {
  return new TypeError(
    `the handler returned ${show(result)}, not an outcome: return done(), retry(), reject(reason), snooze({ for }) or nothing (done)`,
  );
}

/**
 * A thrown error (or a rejected promise) is a transient failure: it is
 * logged at error and the message retried after the backoff policy.
 *
 * @param {unknown} error
 * @param {string} what
 * @returns {WitOutcome}
 */
function failed(error, what) {
  hostLog('error', `${what}: handler failed, retrying: ${describe(error)}`);
  return RETRY_BY_POLICY;
}

/**
 * @param {unknown} error
 * @param {Message[]} msgs
 * @returns {WitOutcome[]}
 */
function failedBatch(error, msgs) {
  hostLog('error', `batch of ${msgs.length} messages: handler failed, retrying all: ${describe(error)}`);
  return msgs.map(() => RETRY_BY_POLICY);
}

/** @param {unknown} error */
function describe(error) {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return show(error);
}
