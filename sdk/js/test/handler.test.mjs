// Durations, outcomes, Message and the handler wrappers: what a user's
// function returns or throws, as the host receives it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { state, reset } from './fake-host.mjs';
import {
  Message,
  batchHandler,
  done,
  handler,
  milliseconds,
  reject,
  retry,
  snooze,
} from '../src/index.js';

/** A message as componentize-js lifts the WIT record. */
function raw(payload = 'x', fields = {}) {
  return {
    id: 'm-1',
    key: 'k-1',
    queue: 'orders',
    payload: typeof payload === 'string' ? new TextEncoder().encode(payload) : payload,
    headers: [['Content-Type', 'application/json'], ['trace', 'a'], ['TRACE', 'b']],
    attempt: 2,
    enqueuedAtMs: 1_700_000_000_123n,
    ...fields,
  };
}

test('durations: numbers are milliseconds, strings have units', () => {
  assert.equal(milliseconds(0), 0);
  assert.equal(milliseconds(1500), 1500);
  assert.equal(milliseconds('250ms'), 250);
  assert.equal(milliseconds('1s'), 1000);
  assert.equal(milliseconds('1.5s'), 1500);
  assert.equal(milliseconds('2m'), 120_000);
  assert.equal(milliseconds('1h30m'), 5_400_000);
  assert.equal(milliseconds('1d'), 86_400_000);
  assert.equal(milliseconds(' 10s '), 10_000);
  assert.equal(milliseconds('0.0004s'), 0, 'rounded to the millisecond');
});

test('durations: a bad one throws, naming the value', () => {
  for (const bad of [-1, 1.5, NaN, Infinity, 2 ** 53]) {
    assert.throws(() => milliseconds(bad), (e) => e instanceof RangeError && e.message.includes(`bad duration ${bad}`));
  }
  for (const bad of ['', '1', 'soon', '1 s', '-1s', '1sec', '1e3ms', '1s2', '99999999999999d']) {
    assert.throws(() => milliseconds(bad), (e) => e instanceof RangeError && e.message.includes(JSON.stringify(bad)), bad);
  }
  for (const bad of [1n, null, undefined, {}, ['1s']]) {
    assert.throws(() => milliseconds(bad), TypeError);
  }
  assert.throws(() => retry({ after: '5 parsecs' }), /retry\(\{ after \}\): bad duration "5 parsecs"/);
});

test('outcomes are the WIT variant, delays as BigInt milliseconds', () => {
  assert.deepEqual(done(), { tag: 'done' });
  assert.deepEqual(retry(), { tag: 'retry', val: undefined });
  assert.deepEqual(retry({}), { tag: 'retry', val: undefined });
  assert.deepEqual(retry({ after: 1000 }), { tag: 'retry', val: 1000n });
  assert.deepEqual(retry({ after: '1s' }), { tag: 'retry', val: 1000n });
  assert.deepEqual(retry({ after: '250ms' }), { tag: 'retry', val: 250n });
  assert.deepEqual(retry({ after: '2m' }), { tag: 'retry', val: 120_000n });
  assert.deepEqual(reject('why'), { tag: 'reject', val: 'why' });
  assert.deepEqual(snooze({ for: '30s' }), { tag: 'snooze', val: 30_000n });
  assert.deepEqual(snooze({ for: 0 }), { tag: 'snooze', val: 0n });
});

test('outcomes refuse what they cannot mean', () => {
  assert.throws(() => retry(1000), /retry: expected an options object, got 1000/);
  assert.throws(() => retry({ afer: '1s' }), /retry: unknown option `afer` \(expected `after`\)/);
  assert.throws(() => reject(), /reject: the reason must be a string, got undefined/);
  assert.throws(() => reject(new Error('x')), TypeError);
  assert.throws(() => snooze({}), /snooze: missing `for`/);
  assert.throws(() => snooze('1s'), /snooze: expected an options object/);
  assert.throws(() => snooze({ for: -5 }), /snooze\(\{ for \}\): bad duration -5/);
});

test('Message: fields as numbers, text, json and headers', () => {
  const msg = new Message(raw('{"a":[1,2]}'));
  assert.equal(msg.id, 'm-1');
  assert.equal(msg.key, 'k-1');
  assert.equal(msg.queue, 'orders');
  assert.equal(msg.attempt, 2);
  assert.equal(msg.enqueuedAtMs, 1_700_000_000_123);
  assert.equal(msg.enqueuedAt.toISOString(), '2023-11-14T22:13:20.123Z');
  assert.equal(msg.text(), '{"a":[1,2]}');
  assert.deepEqual(msg.json(), { a: [1, 2] });
  assert.ok(msg.payload instanceof Uint8Array);
  assert.equal(msg.header('content-type'), 'application/json');
  assert.equal(msg.header('Trace'), 'a', 'the first of two');
  assert.equal(msg.header('missing'), undefined);
  assert.equal(msg.headers.length, 3);
});

test('Message: a payload that is not UTF-8 or not JSON throws', () => {
  const bytes = new Message(raw(new Uint8Array([0xff, 0xfe])));
  assert.throws(() => bytes.text(), { name: 'TypeError', message: 'message m-1: payload is not UTF-8' });
  assert.throws(() => bytes.json(), TypeError);
  assert.throws(() => new Message(raw('{nope')).json(), SyntaxError);
});

test('handler: returns the outcome, or done for nothing', () => {
  reset();
  let seen;
  const handle = handler((msg) => {
    seen = msg;
    return retry({ after: '1s' });
  });
  assert.deepEqual(handle(raw()), { tag: 'retry', val: 1000n });
  assert.ok(seen instanceof Message);
  assert.equal(seen.attempt, 2);
  assert.deepEqual(handler(() => {})(raw()), { tag: 'done' });
  assert.deepEqual(handler(() => reject('bad'))(raw()), { tag: 'reject', val: 'bad' });
  assert.deepEqual(handler(() => ({ tag: 'snooze', val: 5n }))(raw()), { tag: 'snooze', val: 5n }, 'a raw WIT outcome');
  assert.deepEqual(state.logs, []);
});

test('handler: a thrown error retries by policy and is logged at error', () => {
  reset();
  const handle = handler((msg) => {
    throw new Error(`cannot reach the database for ${msg.id}`);
  });
  assert.deepEqual(handle(raw()), { tag: 'retry', val: undefined });
  assert.deepEqual(state.logs, [
    ['error', 'message m-1: handler failed, retrying: Error: cannot reach the database for m-1'],
  ]);
  reset();
  assert.deepEqual(handler((msg) => msg.json())(raw('{}')), { tag: 'retry', val: undefined });
  assert.match(state.logs[0][1], /^message m-1: handler failed, retrying: TypeError: the handler returned \{\}, not an outcome/);
  reset();
  assert.deepEqual(handler(() => { throw 'a string'; })(raw()), { tag: 'retry', val: undefined });
  assert.deepEqual(state.logs, [['error', 'message m-1: handler failed, retrying: "a string"']]);
});

test('handler: async functions resolve to outcomes; a rejection retries', async () => {
  reset();
  const later = handler(async () => {
    await new Promise((resolve) => setTimeout(resolve, 5));
    return snooze({ for: '1m' });
  });
  const pending = later(raw());
  assert.ok(pending instanceof Promise);
  assert.deepEqual(await pending, { tag: 'snooze', val: 60_000n });
  assert.deepEqual(await handler(async () => {})(raw()), { tag: 'done' });
  const failing = handler(async () => {
    throw new RangeError('late');
  });
  assert.deepEqual(await failing(raw()), { tag: 'retry', val: undefined });
  assert.deepEqual(state.logs, [['error', 'message m-1: handler failed, retrying: RangeError: late']]);
});

test('handler: only a function is taken', () => {
  assert.throws(() => handler(done()), /handler: expected a function/);
  assert.throws(() => batchHandler(undefined), /batchHandler: expected a function/);
});

test('batchHandler: one outcome per message, in order', async () => {
  reset();
  const handleBatch = batchHandler((msgs) =>
    msgs.map((m) => (m.text() === 'bad' ? reject('bad') : m.text() === 'skip' ? undefined : retry({ after: 10 }))),
  );
  const raws = [raw('bad'), raw('skip', { id: 'm-2' }), raw('x', { id: 'm-3' })];
  assert.deepEqual(handleBatch(raws), [
    { tag: 'reject', val: 'bad' },
    { tag: 'done' },
    { tag: 'retry', val: 10n },
  ]);
  assert.deepEqual(batchHandler(() => {})(raws), [{ tag: 'done' }, { tag: 'done' }, { tag: 'done' }]);
  assert.deepEqual(await batchHandler(async (msgs) => msgs.map(() => done()))(raws.slice(1)), [
    { tag: 'done' },
    { tag: 'done' },
  ]);
  // A list of the wrong length goes to the host as it is, which refuses it.
  assert.equal(batchHandler((msgs) => [...msgs.map(() => done()), done()])(raws).length, 4);
  assert.deepEqual(state.logs, []);
});

test('batchHandler: a throw retries the whole batch; a bad entry retries its message', async () => {
  reset();
  const raws = [raw('a'), raw('b', { id: 'm-2' })];
  assert.deepEqual(batchHandler(() => { throw new Error('boom'); })(raws), [
    { tag: 'retry', val: undefined },
    { tag: 'retry', val: undefined },
  ]);
  assert.deepEqual(await batchHandler(async () => { throw new Error('later'); })(raws), [
    { tag: 'retry', val: undefined },
    { tag: 'retry', val: undefined },
  ]);
  assert.deepEqual(batchHandler(() => [done(), 'oops'])(raws), [{ tag: 'done' }, { tag: 'retry', val: undefined }]);
  assert.deepEqual(batchHandler(() => done())(raws), [
    { tag: 'retry', val: undefined },
    { tag: 'retry', val: undefined },
  ]);
  assert.deepEqual(state.logs.map(([level, m]) => [level, m.replace(/: handler failed.*/, '')]), [
    ['error', 'batch of 2 messages'],
    ['error', 'batch of 2 messages'],
    ['error', 'message m-2'],
    ['error', 'batch of 2 messages'],
  ]);
  assert.match(state.logs[0][1], /retrying all: Error: boom$/);
  assert.match(state.logs[2][1], /the handler returned "oops", not an outcome/);
  assert.match(state.logs[3][1], /batch handler returned \{"tag":"done"\}, not an array of outcomes/);
});
