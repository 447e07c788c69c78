// Type declarations of sluice-sdk 0.2.0, the JavaScript SDK for sluice
// message handlers of the WIT world sluice:handler@0.2.0.

/**
 * A length of time: a whole number of milliseconds (0 to 2^53 - 1), or a
 * string of number-and-unit parts: `"250ms"`, `"1s"`, `"1.5s"`, `"2m"`,
 * `"1h30m"`, `"1d"` (units `ms`, `s`, `m`, `h`, `d`; rounded to the
 * millisecond). Anything else throws a TypeError or RangeError naming it.
 */
export type Duration = number | string;

/** One delivery of one message. */
export declare class Message {
  private constructor();
  /** Unique id the broker gave the message when it was published. */
  readonly id: string;
  /** Idempotency key: a key that has completed is never handled again. */
  readonly key: string;
  /** The queue the message was taken from. */
  readonly queue: string;
  /** The body, as the sender gave it. Not necessarily UTF-8. */
  readonly payload: Uint8Array;
  /** Headers as the sender gave them, in order: `[name, value]` pairs. */
  readonly headers: ReadonlyArray<readonly [string, string]>;
  /** Which delivery this is: 1 on the first attempt, 2 on the first retry, ... */
  readonly attempt: number;
  /** When the message was first published, in milliseconds since the Unix epoch. */
  readonly enqueuedAtMs: number;
  /** When the message was first published. */
  readonly enqueuedAt: Date;
  /** The first header called `name`, ignoring ASCII case; undefined when none is. */
  header(name: string): string | undefined;
  /** The payload as text. Throws a TypeError when it is not UTF-8. */
  text(): string;
  /** The payload parsed as JSON. Throws a TypeError when it is not UTF-8, a SyntaxError when it is not JSON. */
  json(): any;
}

/**
 * What the handler decided about a message. Make one with `done()`,
 * `retry()`, `reject()` or `snooze()`; compare two with a deep equality.
 */
export type Outcome =
  | { readonly tag: 'done' }
  | { readonly tag: 'retry'; readonly val: bigint | undefined }
  | { readonly tag: 'reject'; readonly val: string }
  | { readonly tag: 'snooze'; readonly val: bigint };

/** Handled: the host acks the message. */
export declare function done(): Outcome;
/**
 * A transient failure: deliver the message again after `after`, or after
 * the handler's backoff policy without it. Spends an attempt; dead-lettered
 * once the handler's `max_attempts` is reached.
 */
export declare function retry(options?: { after?: Duration }): Outcome;
/** A poison message: dead-letter it now with this reason, no retries. */
export declare function reject(reason: string): Outcome;
/**
 * Not now: deliver the message again after `for` without spending an
 * attempt (up to the handler's `retry.max_snoozes` times).
 */
export declare function snooze(options: { for: Duration }): Outcome;

/** What a handler may return: an outcome, or nothing for `done`, or a promise of either. */
export type HandlerResult = Outcome | void | Promise<Outcome | void>;

/** The function componentize-js calls for the WIT export `handle`. */
export type HandleExport = (message: any) => any;
/** The function componentize-js calls for the WIT export `handle-batch`. */
export type HandleBatchExport = (messages: any[]) => any;

/**
 * Makes the export `handle` of the world `handler`:
 *
 *     export const handle = handler((msg) => done());
 *
 * `fn` returns an outcome, or nothing for `done`, or a promise of either.
 * An error it throws (or a promise that rejects) is logged at error, with
 * its message, and the message retried after the backoff policy; so is a
 * return value that is not an outcome.
 */
export declare function handler(fn: (msg: Message) => HandlerResult): HandleExport;

/** What a batch handler may return: one outcome (or nothing, for done) per message, in order; nothing for all done. */
export type BatchResult =
  | ReadonlyArray<Outcome | void>
  | void
  | Promise<ReadonlyArray<Outcome | void> | void>;

/**
 * Makes the export `handleBatch` (WIT `handle-batch`) of the world
 * `batch-handler`:
 *
 *     export const handleBatch = batchHandler((msgs) => msgs.map(() => done()));
 *
 * Return exactly one outcome per message, in order: the host fails the whole
 * call on a list of another length. An error `fn` throws retries every
 * message of the batch.
 */
export declare function batchHandler(fn: (msgs: Message[]) => BatchResult): HandleBatchExport;

/** A payload: bytes, text (sent as UTF-8), or `{ json: value }` (sent as compact JSON). */
export type Body = Uint8Array | string | { json: unknown };

/** Optional settings of one publish. */
export interface PublishOptions {
  /** Headers of the new message: `[name, value]` pairs, or an object of them. */
  headers?: ReadonlyArray<readonly [string, string]> | Readonly<Record<string, string>>;
  /** Idempotency key of the new message; its id when absent. */
  key?: string;
  /** Deliver no earlier than this long after the commit. */
  delay?: Duration;
}

/** A publish the host refused (an invalid name, a message over the size limit, no queue bound). */
export declare class PublishError extends Error {
  readonly name: 'PublishError';
  /** The host's reason, also the error's `message`. */
  readonly reason: string;
  /** What was published to: `queue "q"` or `topic "t"`. */
  readonly target: string;
}

/**
 * Publish `body` to `queue`. Held until the handler returns: committed with
 * the ack on `done`, dropped on retry, reject or failure. Throws a
 * PublishError when the host refuses it.
 */
export declare function publish(queue: string, body: Body, options?: PublishOptions): void;

/**
 * Publish `body` to `topic` with the routing key `route` (dot-separated
 * words like `orders.eu.created`): a copy is held for every queue bound with
 * a matching pattern. Returns how many copies are held. Throws a
 * PublishError when the host refuses it, e.g. when no queue would take it.
 */
export declare function publishToTopic(topic: string, route: string, body: Body, options?: PublishOptions): number;

/** A key-value call the host refused (not granted, bad key, store unreachable, ...). */
export declare class KvError extends Error {
  readonly name: 'KvError';
  /** The host's reason, also the error's `message`. */
  readonly reason: string;
  /** The key of the call. */
  readonly key: string;
}

/**
 * The handler's own key-value store, granted by `kv = true` under
 * `[capabilities]` in its sidecar. Writes take effect at once (not with the
 * ack). Every call throws a KvError when the host refuses it.
 */
export declare const kv: {
  /** The value of `key`, or undefined when it is not set or has expired. */
  get(key: string): Uint8Array | undefined;
  /** The value of `key` as text; a TypeError when it is not UTF-8. */
  getText(key: string): string | undefined;
  /** The value of `key` parsed as JSON. */
  getJson(key: string): any;
  /** Set `key` to `value`, expiring `ttl` from now (never without one). */
  set(key: string, value: Body, options?: { ttl?: Duration }): void;
  /** Remove `key`; true when it was set. */
  delete(key: string): boolean;
  /**
   * Atomically add `delta` (default 1; negative subtracts; a safe integer)
   * to the integer stored at `key` and return the new value. A new value
   * beyond ±(2^53 - 1) is stored, but throws a RangeError whose `value` is it
   * as a decimal string, rather than come back rounded.
   */
  increment(key: string, delta?: number): number;
};

/** The handler's config: the `[config]` table of its sidecar `NAME.toml`. */
export declare const config: {
  /** The value of `key`, or undefined when it is not set. */
  get(key: string): string | undefined;
  /** Every key and value set. */
  getAll(): Record<string, string>;
};

/** Log lines into the host's log, tagged with the handler and message. */
export declare const log: {
  trace(message: string): void;
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
};

/** The call's deadline, and the lease that keeps its messages meanwhile. */
export declare const lease: {
  /** Milliseconds left before the call's deadline (0 once it has passed). */
  timeLeft(): number;
  /**
   * Move the deadline to `duration` from now, if that is later, up to the
   * handler's `limits.max_extend` beyond its timeout. Returns the
   * milliseconds left.
   */
  extend(duration: Duration): number;
};

/** The milliseconds `duration` stands for; throws on a bad one, naming it. */
export declare function milliseconds(duration: Duration): number;
