// The imports in JS terms: what the SDK hands the host for each call, and
// what comes back (numbers, never BigInt; PublishError and KvError).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { state, reset } from './fake-host.mjs';
import { KvError, PublishError, config, kv, lease, log, publish, publishToTopic } from '../src/index.js';

const NO_OPTIONS = { headers: [], key: undefined, delayMs: undefined };

test('publish: bytes, text and json payloads, options as the WIT record', () => {
  reset();
  publish('q', new Uint8Array([104, 105]));
  publish('q', 'text é');
  publish('q', { json: { order: 7, qty: 1 } });
  publish('q', 'x', { headers: [['a', '1'], ['b', '2']], key: 'k', delay: '1.5s' });
  publish('q', 'x', { headers: { 'order-id': 'A7' }, delay: 0 });
  assert.deepEqual(state.published, [
    { queue: 'q', payload: 'hi', options: NO_OPTIONS },
    { queue: 'q', payload: 'text é', options: NO_OPTIONS },
    { queue: 'q', payload: '{"order":7,"qty":1}', options: NO_OPTIONS },
    { queue: 'q', payload: 'x', options: { headers: [['a', '1'], ['b', '2']], key: 'k', delayMs: 1500n } },
    { queue: 'q', payload: 'x', options: { headers: [['order-id', 'A7']], key: undefined, delayMs: 0n } },
  ]);
});

test('publish: a refusal throws a PublishError with the host reason', () => {
  reset({ failPublish: 'queue name "a b" is invalid' });
  assert.throws(
    () => publish('a b', 'x'),
    (e) =>
      e instanceof PublishError &&
      e instanceof Error &&
      e.name === 'PublishError' &&
      e.message === 'queue name "a b" is invalid' &&
      e.reason === e.message &&
      e.target === 'queue "a b"',
  );
});

test('publish: bad arguments throw before calling the host', () => {
  reset();
  assert.throws(() => publish('q', 42), /publish: the payload must be a Uint8Array, a string or \{ json: value \}, got 42/);
  assert.throws(() => publish('q', { json: undefined }), /cannot be written as JSON/);
  assert.throws(() => publish('q', 'x', { delayMs: 5 }), /publish: unknown option `delayMs`/);
  assert.throws(() => publish('q', 'x', { delay: 'soon' }), /publish: delay: bad duration "soon"/);
  assert.throws(() => publish('q', 'x', { key: 7 }), /publish: key must be a string, got 7/);
  assert.throws(() => publish('q', 'x', { headers: [['a']] }), /a header must be a \[name, value\] pair of strings, got \["a"\]/);
  assert.throws(() => publish('q', 'x', { headers: { a: 1 } }), /got \["a",1\]/);
  assert.throws(() => publish('q', 'x', { headers: 'a: 1' }), /headers must be \[name, value\] pairs or an object/);
  assert.deepEqual(state.published, []);
});

test('publishToTopic returns the copies held, or throws PublishError', () => {
  reset({ bound: 3 });
  assert.equal(publishToTopic('events', 'orders.eu.created', { json: [1] }, { headers: { h: 'v' } }), 3);
  assert.deepEqual(state.published, [
    {
      topic: 'events',
      route: 'orders.eu.created',
      payload: '[1]',
      options: { headers: [['h', 'v']], key: undefined, delayMs: undefined },
    },
  ]);
  reset({ bound: 0 });
  assert.throws(
    () => publishToTopic('events', 'x.y', 'p'),
    (e) => e instanceof PublishError && e.target === 'topic "events"' && /no queue is bound/.test(e.reason),
  );
});

test('kv: get, set with ttl, delete, as bytes, text and json', () => {
  reset();
  assert.equal(kv.get('a'), undefined);
  assert.equal(kv.getText('a'), undefined);
  kv.set('a', 'hello');
  assert.deepEqual(kv.get('a'), new TextEncoder().encode('hello'));
  assert.equal(kv.getText('a'), 'hello');
  kv.set('j', { json: { n: 1 } }, { ttl: '1h' });
  assert.deepEqual(kv.getJson('j'), { n: 1 });
  assert.equal(state.ttls.get('j'), 3_600_000n);
  assert.equal(state.ttls.get('a'), undefined);
  kv.set('b', new Uint8Array([0xff]), { ttl: 1000 });
  assert.throws(() => kv.getText('b'), /kv.getText\("b"\): the value is not UTF-8/);
  assert.equal(kv.delete('a'), true);
  assert.equal(kv.delete('a'), false);
  assert.throws(() => kv.set('a', 'x', { ttl: 'forever' }), /kv.set: ttl: bad duration "forever"/);
  assert.throws(() => kv.set('a', 'x', { expiry: 5 }), /kv.set: unknown option `expiry`/);
});

test('kv: increment takes and returns numbers', () => {
  reset();
  assert.equal(kv.increment('n'), 1);
  assert.equal(kv.increment('n', 41), 42);
  assert.equal(kv.increment('n', -50), -8);
  assert.equal(kv.getText('n'), '-8');
  assert.throws(() => kv.increment('n', 1.5), /delta must be a whole number/);
  assert.throws(() => kv.increment('n', 2n), /delta must be a whole number within ±\(2\^53 - 1\), got 2n/);
});

test('kv: an increment beyond 2^53 - 1 is stored but throws with the exact value', () => {
  reset();
  kv.set('big', String(Number.MAX_SAFE_INTEGER));
  assert.throws(
    () => kv.increment('big', 1),
    (e) => e instanceof RangeError && e.value === '9007199254740992' && /beyond 2\^53 - 1/.test(e.message),
  );
  assert.equal(kv.getText('big'), '9007199254740992');
});

test('kv: a refusal throws a KvError with the host reason and key', () => {
  reset({ kv: undefined });
  for (const call of [() => kv.get('k'), () => kv.set('k', 'v'), () => kv.delete('k'), () => kv.increment('k')]) {
    assert.throws(
      call,
      (e) => e instanceof KvError && e.reason === 'handler is not granted the key-value store' && e.key === 'k',
    );
  }
});

test('config: get and getAll', () => {
  reset({ config: { a: '1', b: 'two' } });
  assert.equal(config.get('a'), '1');
  assert.equal(config.get('c'), undefined);
  assert.deepEqual(config.getAll(), { a: '1', b: 'two' });
});

test('log: one function per level', () => {
  reset();
  log.trace('t');
  log.debug('d');
  log.info('i');
  log.warn('w');
  log.error('e');
  assert.deepEqual(state.logs, [
    ['trace', 't'],
    ['debug', 'd'],
    ['info', 'i'],
    ['warn', 'w'],
    ['error', 'e'],
  ]);
});

test('lease: milliseconds as numbers, durations in', () => {
  reset({ timeLeftMs: 2500n });
  assert.equal(lease.timeLeft(), 2500);
  assert.equal(lease.extend('10s'), 10_000);
  assert.equal(lease.extend(3000), 10_000);
  assert.deepEqual(state.extendedTo, [10_000n, 3000n]);
  assert.equal(typeof lease.timeLeft(), 'number');
  assert.throws(() => lease.extend('a while'), /lease.extend: bad duration "a while"/);
});
