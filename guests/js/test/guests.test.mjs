// Unit tests of the JS handlers' logic, run natively under node against the
// fake host (no component build needed): `npm test` in guests/js.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { state, reset } from './fake-host.mjs';
import { handle as hello } from '../hello/app.js';
import { handle as helloRaw } from '../hello_raw/app.js';
import { handle as orders } from '../orders/app.js';

function msg(payload, attempt = 1) {
  return {
    id: 'm-1',
    key: 'm-1',
    queue: 'orders',
    payload: typeof payload === 'string' ? new TextEncoder().encode(payload) : payload,
    headers: [],
    attempt,
    enqueuedAtMs: 0n,
  };
}

test('hello logs and acks', () => {
  reset();
  assert.deepEqual(hello(msg('x', 3)), { tag: 'done' });
  assert.deepEqual(state.logs, [['info', 'hello from sluice: message m-1 attempt 3, call 1 of this instance']]);
});

test('hello_raw, on the raw bindings, does as hello does', () => {
  reset();
  assert.deepEqual(helloRaw(msg('x', 3)), { tag: 'done' });
  assert.deepEqual(helloRaw(msg('x', 4)), { tag: 'done' });
  assert.deepEqual(state.logs, [
    ['info', 'hello from sluice: message m-1 attempt 3, call 1 of this instance'],
    ['info', 'hello from sluice: message m-1 attempt 4, call 2 of this instance'],
  ]);
});

test('orders rejects bad input', () => {
  reset();
  assert.deepEqual(orders(msg(new Uint8Array([0xff, 0xfe]))), {
    tag: 'reject',
    val: 'payload is not UTF-8',
  });
  const reject = (p) => {
    const r = orders(msg(p));
    assert.equal(r.tag, 'reject', p);
    return r.val;
  };
  assert.match(reject('nope'), /^malformed order: ./);
  assert.equal(reject('[1]'), 'malformed order: not a JSON object');
  assert.equal(reject('null'), 'malformed order: not a JSON object');
  assert.equal(reject('{}'), 'malformed order: missing `id`');
  assert.equal(reject('{"id":true}'), 'malformed order: `id` must be a string or a number');
  assert.equal(reject('{"id":null}'), 'malformed order: `id` must be a string or a number');
  assert.equal(reject('{"id":1,"qty":0}'), 'malformed order: `qty` must be a positive integer, got 0');
  assert.equal(reject('{"id":1,"qty":-2}'), 'malformed order: `qty` must be a positive integer, got -2');
  assert.equal(reject('{"id":1,"qty":1.5}'), 'malformed order: `qty` must be a positive integer, got 1.5');
  assert.equal(reject('{"id":1,"qty":"3"}'), 'malformed order: `qty` must be a positive integer, got "3"');
  assert.equal(reject('{"id":1,"qty":null}'), 'malformed order: `qty` must be a positive integer, got null');
  const badRegion = 'malformed order: `region` must be a word of letters, digits, - or _';
  for (const region of ['"e u"', '7', '""', 'null', '"eu.west"', '"é"', JSON.stringify('x'.repeat(33))]) {
    assert.equal(reject(`{"id":1,"region":${region}}`), badRegion, region);
  }
  assert.deepEqual(state.published, []);
});

test('orders publishes the follow-up', () => {
  reset();
  assert.deepEqual(orders(msg('{"id":"A7","qty":3}')), { tag: 'done' });
  assert.deepEqual(orders(msg('{"id": 42}')), { tag: 'done' });
  assert.deepEqual(state.published, [
    {
      queue: 'shipping',
      payload: '{"order":"A7","qty":3,"source":"m-1"}',
      options: { headers: [['order-id', 'A7']], key: undefined, delayMs: undefined },
    },
    {
      queue: 'shipping',
      payload: '{"order":42,"qty":1,"source":"m-1"}',
      options: { headers: [['order-id', '42']], key: undefined, delayMs: undefined },
    },
  ]);
  const notGranted =
    'not counted: handler orders is not granted the key-value store: add `kv = true` under [capabilities] in orders.toml';
  assert.deepEqual(state.logs, [
    ['warn', `order A7: ${notGranted}`],
    ['info', 'order A7 (qty 3) from message m-1 forwarded to shipping'],
    ['warn', `order 42: ${notGranted}`],
    ['info', 'order 42 (qty 1) from message m-1 forwarded to shipping'],
  ]);
});

test('orders counts forwards in the key-value store', () => {
  const kv = new Map();
  reset({}, kv);
  assert.deepEqual(orders(msg('{"id":"A7","qty":3}')), { tag: 'done' });
  assert.deepEqual(orders(msg('{"id":1,"retry_until_attempt":2}')), { tag: 'retry', val: 10n });
  assert.deepEqual(orders(msg('{"id":42}')), { tag: 'done' });
  assert.equal(new TextDecoder().decode(kv.get('forwarded')), '2', 'only forwards count');
  assert.deepEqual(state.logs, [
    ['info', 'order A7 (qty 3) from message m-1 forwarded to shipping (forwarded: 1)'],
    ['info', 'order 1: attempt 1 < 2, retrying in 10 ms'],
    ['info', 'order 42 (qty 1) from message m-1 forwarded to shipping (forwarded: 2)'],
  ]);
});

test('orders: followup_queue from config', () => {
  reset({ followup_queue: 'ship2' });
  assert.deepEqual(orders(msg('{"id":1}')), { tag: 'done' });
  assert.equal(state.published[0].queue, 'ship2');
});

test('orders retries', () => {
  const p = '{"id":1,"retry_until_attempt":3}';
  reset();
  assert.deepEqual(orders(msg(p, 1)), { tag: 'retry', val: 10n });
  assert.deepEqual(orders(msg(p, 2)), { tag: 'retry', val: 10n });
  assert.deepEqual(orders(msg(p, 3)), { tag: 'done' });
  assert.deepEqual(state.logs[0], ['info', 'order 1: attempt 1 < 3, retrying in 10 ms']);
  reset({ retry_delay_ms: '250' });
  assert.deepEqual(orders(msg(p, 1)), { tag: 'retry', val: 250n });
  assert.deepEqual(orders(msg('{"id":1,"always_retry":true}', 9)), { tag: 'retry', val: undefined });
  assert.deepEqual(orders(msg('{"id":1,"always_retry":false}', 9)), { tag: 'done' });
  reset({ retry_delay_ms: 'soon' });
  assert.deepEqual(orders(msg(p, 1)), { tag: 'retry', val: 10n });
  assert.deepEqual(state.logs[0], ['warn', 'config retry_delay_ms="soon" is not a u64; using 10']);
});

test('orders: publish error retries and logs', () => {
  reset();
  state.failPublish = 'queue full';
  assert.deepEqual(orders(msg('{"id":1}')), { tag: 'retry', val: undefined });
  assert.deepEqual(state.logs, [['error', 'order 1: publish to "shipping" failed: queue full']]);
});

test('orders announces on the events topic', () => {
  reset({ events_topic: 'order-events' });
  state.bound = 2;
  assert.deepEqual(orders(msg('{"id":"A7","region":"eu"}')), { tag: 'done' });
  assert.deepEqual(orders(msg(`{"id":8,"region":"${'x'.repeat(32)}"}`)), { tag: 'done' });
  assert.deepEqual(orders(msg('{"id":9}')), { tag: 'done' });
  const options = (id) => ({ headers: [['order-id', id]], key: undefined, delayMs: undefined });
  assert.deepEqual(state.published, [
    { queue: 'shipping', payload: '{"order":"A7","qty":1,"source":"m-1"}', options: options('A7') },
    {
      topic: 'order-events',
      route: 'orders.eu.created',
      payload: '{"order":"A7","qty":1,"source":"m-1"}',
      options: options('A7'),
    },
    { queue: 'shipping', payload: '{"order":8,"qty":1,"source":"m-1"}', options: options('8') },
    {
      topic: 'order-events',
      route: `orders.${'x'.repeat(32)}.created`,
      payload: '{"order":8,"qty":1,"source":"m-1"}',
      options: options('8'),
    },
    { queue: 'shipping', payload: '{"order":9,"qty":1,"source":"m-1"}', options: options('9') },
    {
      topic: 'order-events',
      route: 'orders.default.created',
      payload: '{"order":9,"qty":1,"source":"m-1"}',
      options: options('9'),
    },
  ]);
  const announced = state.logs.filter(([, m]) => m.includes(' announced on '));
  assert.deepEqual(announced, [
    ['info', 'order A7 announced on order-events as orders.eu.created to 2 queue(s)'],
    ['info', `order 8 announced on order-events as orders.${'x'.repeat(32)}.created to 2 queue(s)`],
    ['info', 'order 9 announced on order-events as orders.default.created to 2 queue(s)'],
  ]);
});

test('orders: an unbound events topic retries', () => {
  reset({ events_topic: 'order-events' }, new Map());
  assert.deepEqual(orders(msg('{"id":3}')), { tag: 'retry', val: undefined });
  assert.deepEqual(state.logs, [
    [
      'error',
      'order 3: publish to topic "order-events" failed: no queue is bound to topic "order-events" for routing key "orders.default.created"',
    ],
  ]);
  assert.equal(state.kv.size, 0, 'a retried order is not counted');
});

test('orders: work_ms sleeps first', async () => {
  reset({ work_ms: '50' });
  const start = Date.now();
  const r = orders(msg('{"id":1}'));
  assert.ok(r instanceof Promise);
  assert.deepEqual(await r, { tag: 'done' });
  assert.ok(Date.now() - start >= 45);
});
