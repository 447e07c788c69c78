// The imports of the 0.2.0 world, in JS terms: numbers and duration strings
// in, numbers out (never BigInt), a thrown PublishError or KvError where the
// WIT returns `result<_, string>`.
import { get as configGet, getAll as configGetAll } from 'sluice:handler/config@0.2.0';
import { delete as kvDelete, get as kvGet, increment as kvIncrement, set as kvSet } from 'sluice:handler/kv@0.2.0';
import { extend as leaseExtend, timeLeft as leaseTimeLeft } from 'sluice:handler/lease@0.2.0';
import { log as hostLog } from 'sluice:handler/log@0.2.0';
import { publish as hostPublish, publishToTopic as hostPublishToTopic } from 'sluice:handler/publish@0.2.0';
import { wireMs } from './duration.js';
import { checkKeys, checkObject, show } from './show.js';

const encoder = /* @__PURE__ */ new TextEncoder();
const utf8 = /* @__PURE__ */ new TextDecoder('utf-8', { fatal: true });

/**
 * A payload as the user gives it: bytes, text (sent as UTF-8) or
 * `{ json: value }` (sent as compact JSON).
 *
 * @typedef {Uint8Array | string | { json: unknown }} Body
 */

/**
 * @param {Body} body
 * @param {string} what
 * @returns {Uint8Array}
 */
function bytesOf(body, what) {
  if (body instanceof Uint8Array) return body;
  if (typeof body === 'string') return encoder.encode(body);
  if (body !== null && typeof body === 'object' && 'json' in body) {
    const json = JSON.stringify(body.json);
    if (json === undefined) throw new TypeError(`${what}: ${show(body.json)} cannot be written as JSON`);
    return encoder.encode(json);
  }
  throw new TypeError(`${what}: the payload must be a Uint8Array, a string or { json: value }, got ${show(body)}`);
}

/**
 * The host's reason for a failed import call, or undefined when `error` is
 * not one (a bug in the call itself, which is rethrown as it is).
 * componentize-js throws the `string` of a `result` error as a
 * ComponentError (not exported) with the string in `.payload`.
 *
 * @param {unknown} error
 * @returns {string | undefined}
 */
function hostReason(error) {
  if (error !== null && typeof error === 'object' && 'payload' in error) return String(error.payload);
  return undefined;
}

// --- publish -----------------------------------------------------------------

/** A publish the host refused; `reason` is the host's words. */
export class PublishError extends Error {
  /**
   * @param {string} reason
   * @param {string} target `queue "q"` or `topic "t"`
   */
  constructor(reason, target) {
    super(reason);
    this.name = 'PublishError';
    /** The host's reason. */
    this.reason = reason;
    /** What was published to: `queue "q"` or `topic "t"`. */
    this.target = target;
  }
}

/**
 * @typedef {object} PublishOptions
 * @property {[string, string][] | Record<string, string>} [headers]
 * @property {string} [key]
 * @property {number | string} [delay]
 */

const PUBLISH_KEYS = ['headers', 'key', 'delay'];

/**
 * @param {[string, string][] | Record<string, string> | undefined} headers
 * @param {string} what
 * @returns {[string, string][]}
 */
function headerList(headers, what) {
  if (headers === undefined) return [];
  if (headers === null || typeof headers !== 'object') {
    throw new TypeError(`${what}: headers must be [name, value] pairs or an object, got ${show(headers)}`);
  }
  const pairs = Array.isArray(headers) ? headers : Object.entries(headers);
  for (const pair of pairs) {
    if (!Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== 'string' || typeof pair[1] !== 'string') {
      throw new TypeError(`${what}: a header must be a [name, value] pair of strings, got ${show(pair)}`);
    }
  }
  return pairs;
}

/**
 * @param {PublishOptions | undefined} options
 * @param {string} what
 */
function wireOptions(options, what) {
  if (options === undefined) return { headers: [], key: undefined, delayMs: undefined };
  checkObject(what, options);
  checkKeys(what, options, PUBLISH_KEYS);
  const { headers, key, delay } = options;
  if (key !== undefined && typeof key !== 'string') {
    throw new TypeError(`${what}: key must be a string, got ${show(key)}`);
  }
  return {
    headers: headerList(headers, what),
    key,
    delayMs: delay === undefined ? undefined : wireMs(delay, `${what}: delay`),
  };
}

/**
 * Publish `body` to `queue`, committed with the ack of this message (and
 * dropped on retry, reject or failure). Throws a PublishError when the host
 * refuses it.
 *
 * @param {string} queue
 * @param {Body} body
 * @param {PublishOptions} [options]
 */
export function publish(queue, body, options) {
  const payload = bytesOf(body, 'publish');
  const wire = wireOptions(options, 'publish');
  try {
    hostPublish(queue, payload, wire);
  } catch (e) {
    const reason = hostReason(e);
    if (reason === undefined) throw e;
    throw new PublishError(reason, `queue ${JSON.stringify(queue)}`);
  }
}

/**
 * Publish `body` to `topic` with the routing key `route`: a copy for every
 * queue bound to it with a matching pattern. Returns how many copies are
 * held. Throws a PublishError when the host refuses it, e.g. when no queue
 * would take it.
 *
 * @param {string} topic
 * @param {string} route
 * @param {Body} body
 * @param {PublishOptions} [options]
 * @returns {number}
 */
export function publishToTopic(topic, route, body, options) {
  const payload = bytesOf(body, 'publishToTopic');
  const wire = wireOptions(options, 'publishToTopic');
  try {
    return hostPublishToTopic(topic, route, payload, wire);
  } catch (e) {
    const reason = hostReason(e);
    if (reason === undefined) throw e;
    throw new PublishError(reason, `topic ${JSON.stringify(topic)}`);
  }
}

// --- kv ----------------------------------------------------------------------

/** A key-value call the host refused; `reason` is the host's words. */
export class KvError extends Error {
  /**
   * @param {string} reason
   * @param {string} key
   */
  constructor(reason, key) {
    super(reason);
    this.name = 'KvError';
    /** The host's reason. */
    this.reason = reason;
    /** The key of the call. */
    this.key = key;
  }
}

/**
 * Runs one kv import, turning the host's refusal into a KvError.
 *
 * @template T
 * @param {string} key
 * @param {() => T} call
 * @returns {T}
 */
function kvCall(key, call) {
  try {
    return call();
  } catch (e) {
    const reason = hostReason(e);
    if (reason === undefined) throw e;
    throw new KvError(reason, key);
  }
}

/** The handler's own key-value store (granted by `kv = true` in its sidecar). */
export const kv = {
  /**
   * The value of `key` as bytes, or undefined when it is not set or expired.
   *
   * @param {string} key
   * @returns {Uint8Array | undefined}
   */
  get(key) {
    return kvCall(key, () => kvGet(key));
  },

  /**
   * The value of `key` as text. Throws a TypeError when it is not UTF-8.
   *
   * @param {string} key
   * @returns {string | undefined}
   */
  getText(key) {
    const bytes = kv.get(key);
    if (bytes === undefined) return undefined;
    try {
      return utf8.decode(bytes);
    } catch {
      throw new TypeError(`kv.getText(${JSON.stringify(key)}): the value is not UTF-8`);
    }
  },

  /**
   * The value of `key` parsed as JSON.
   *
   * @param {string} key
   * @returns {any}
   */
  getJson(key) {
    const text = kv.getText(key);
    return text === undefined ? undefined : JSON.parse(text);
  },

  /**
   * Set `key` to `value` (bytes, text or `{ json }`), expiring after `ttl`
   * when given, else never.
   *
   * @param {string} key
   * @param {Body} value
   * @param {{ ttl?: number | string }} [options]
   */
  set(key, value, options) {
    const bytes = bytesOf(value, 'kv.set');
    /** @type {bigint | undefined} */
    let ttlMs;
    if (options !== undefined) {
      checkObject('kv.set', options);
      checkKeys('kv.set', options, ['ttl']);
      if (options.ttl !== undefined) ttlMs = wireMs(options.ttl, 'kv.set: ttl');
    }
    kvCall(key, () => kvSet(key, bytes, ttlMs));
  },

  /**
   * Remove `key`; true when it was set.
   *
   * @param {string} key
   * @returns {boolean}
   */
  delete(key) {
    return kvCall(key, () => kvDelete(key));
  },

  /**
   * Atomically add `delta` (default 1, negative to subtract) to the integer
   * at `key` and return the new value. `delta` must be a safe integer; a new
   * value beyond ±(2^53 - 1) is stored all the same, but throws a RangeError
   * (its `value` holds it as a decimal string) rather than come back rounded.
   *
   * @param {string} key
   * @param {number} [delta]
   * @returns {number}
   */
  increment(key, delta = 1) {
    if (!Number.isSafeInteger(delta)) {
      throw new RangeError(`kv.increment: delta must be a whole number within ±(2^53 - 1), got ${show(delta)}`);
    }
    const value = kvCall(key, () => kvIncrement(key, BigInt(delta)));
    const n = Number(value);
    if (!Number.isSafeInteger(n)) {
      const e = new RangeError(
        `kv.increment(${JSON.stringify(key)}): the new value ${value} is beyond 2^53 - 1, too large for a JS number (the store holds it)`,
      );
      throw Object.assign(e, { value: String(value) });
    }
    return n;
  },
};

// --- config, log, lease ------------------------------------------------------

/** The handler's config: the [config] table of its sidecar NAME.toml. */
export const config = {
  /**
   * @param {string} key
   * @returns {string | undefined}
   */
  get(key) {
    return configGet(key);
  },

  /** @returns {Record<string, string>} */
  getAll() {
    return Object.fromEntries(configGetAll());
  },
};

/** Log lines into the host's log, tagged with the handler and message. */
export const log = {
  /** @param {string} message */
  trace: (message) => hostLog('trace', String(message)),
  /** @param {string} message */
  debug: (message) => hostLog('debug', String(message)),
  /** @param {string} message */
  info: (message) => hostLog('info', String(message)),
  /** @param {string} message */
  warn: (message) => hostLog('warn', String(message)),
  /** @param {string} message */
  error: (message) => hostLog('error', String(message)),
};

/** The call's deadline, in milliseconds. */
export const lease = {
  /**
   * Milliseconds left before the call's deadline (0 once it has passed).
   *
   * @returns {number}
   */
  timeLeft() {
    return Number(leaseTimeLeft());
  },

  /**
   * Ask for the deadline to be `duration` from now (up to the handler's
   * `limits.max_extend`); returns the milliseconds left.
   *
   * @param {number | string} duration
   * @returns {number}
   */
  extend(duration) {
    return Number(leaseExtend(wireMs(duration, 'lease.extend')));
  },
};
