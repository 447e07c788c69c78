// Durations, as users write them: a whole number of milliseconds, or a
// string of one or more number-and-unit parts ("250ms", "1s", "1.5s",
// "2m", "1h30m", "1d"). The WIT side takes u64 milliseconds as BigInt;
// user code never sees one.
import { show } from './show.js';

/** @type {Record<string, number>} */
const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const DURATION = /^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+$/;
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/g;
const EXPECTED =
  'expected a whole number of milliseconds from 0 to 2^53 - 1, or a string like "250ms", "1s", "2m" or "1h30m"';

/**
 * The milliseconds `duration` stands for, rounded to the nearest whole one.
 * Throws a TypeError or RangeError naming the value when it is not a
 * duration.
 *
 * @param {number | string} duration
 * @param {string} [what] the call it is for, to name in the error
 * @returns {number}
 */
export function milliseconds(duration, what = 'duration') {
  if (typeof duration === 'number') {
    if (Number.isSafeInteger(duration) && duration >= 0) return duration;
    throw new RangeError(`${what}: bad duration ${show(duration)}: ${EXPECTED}`);
  }
  if (typeof duration === 'string') {
    const text = duration.trim();
    if (DURATION.test(text)) {
      let ms = 0;
      for (const [, amount, unit] of text.matchAll(PART)) ms += Number(amount) * UNIT_MS[unit];
      ms = Math.round(ms);
      if (Number.isSafeInteger(ms)) return ms;
    }
    throw new RangeError(`${what}: bad duration ${show(duration)}: ${EXPECTED}`);
  }
  throw new TypeError(`${what}: bad duration ${show(duration)}: ${EXPECTED}`);
}

/**
 * `duration` as the WIT's u64 milliseconds.
 *
 * @param {number | string} duration
 * @param {string} what
 * @returns {bigint}
 */
export function wireMs(duration, what) {
  return BigInt(milliseconds(duration, what));
}
