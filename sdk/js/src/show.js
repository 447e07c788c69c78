// How the SDK names a value in an error message: strings quoted, BigInts
// with their `n`, objects as JSON where they can be.

/**
 * @param {unknown} value
 * @returns {string}
 */
export function show(value) {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'function') return 'a function';
  if (value instanceof Uint8Array) return `a Uint8Array of ${value.length} bytes`;
  if (value !== null && typeof value === 'object') {
    try {
      const json = JSON.stringify(value);
      if (json !== undefined) return json;
    } catch {
      // Cycles, BigInts inside: fall through to the generic name.
    }
    return `an object (${Object.prototype.toString.call(value)})`;
  }
  return String(value);
}

/**
 * Throws a TypeError naming any key of `options` not in `known`: a typo
 * (`{ afer: '1s' }`) fails loudly instead of being ignored.
 *
 * @param {string} what the call, for the message
 * @param {object} options
 * @param {readonly string[]} known
 */
export function checkKeys(what, options, known) {
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) {
      const expected = known.map((k) => `\`${k}\``).join(', ');
      throw new TypeError(`${what}: unknown option \`${key}\` (expected ${expected})`);
    }
  }
}

/**
 * @param {string} what
 * @param {unknown} options
 * @returns {asserts options is Record<string, unknown>}
 */
export function checkObject(what, options) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new TypeError(`${what}: expected an options object, got ${show(options)}`);
  }
}
