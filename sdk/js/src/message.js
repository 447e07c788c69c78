// One delivery of one message, as the handler sees it: the WIT record
// `message` with numbers instead of BigInt and helpers to read the payload.

const utf8 = /* @__PURE__ */ new TextDecoder('utf-8', { fatal: true });

/**
 * @typedef {object} WitMessage the WIT record as componentize-js lifts it
 * @property {string} id
 * @property {string} key
 * @property {string} queue
 * @property {Uint8Array} payload
 * @property {[string, string][]} headers
 * @property {number} attempt
 * @property {bigint} enqueuedAtMs
 */

export class Message {
  /** @param {WitMessage} raw */
  constructor(raw) {
    /** Unique id the broker gave the message. */
    this.id = raw.id;
    /** Idempotency key: the message id unless the sender or config set one. */
    this.key = raw.key;
    /** The queue the message was taken from. */
    this.queue = raw.queue;
    /** The body, as the sender gave it. */
    this.payload = raw.payload;
    /** Headers as the sender gave them, in order: [name, value] pairs. */
    this.headers = raw.headers;
    /** Which delivery this is: 1 on the first attempt, 2 on the first retry, ... */
    this.attempt = raw.attempt;
    /** When the message was first published, in milliseconds since the Unix epoch. */
    this.enqueuedAtMs = Number(raw.enqueuedAtMs);
  }

  /** When the message was first published. */
  get enqueuedAt() {
    return new Date(this.enqueuedAtMs);
  }

  /**
   * The value of the first header called `name` (compared ignoring ASCII
   * case), or undefined.
   *
   * @param {string} name
   * @returns {string | undefined}
   */
  header(name) {
    const wanted = name.toLowerCase();
    for (const [key, value] of this.headers) {
      if (key.toLowerCase() === wanted) return value;
    }
    return undefined;
  }

  /**
   * The payload as text. Throws a TypeError when it is not UTF-8.
   *
   * @returns {string}
   */
  text() {
    try {
      return utf8.decode(this.payload);
    } catch {
      throw new TypeError(`message ${this.id}: payload is not UTF-8`);
    }
  }

  /**
   * The payload parsed as JSON. Throws a TypeError when it is not UTF-8 and a
   * SyntaxError when it is not JSON.
   *
   * @returns {any}
   */
  json() {
    return JSON.parse(this.text());
  }
}
