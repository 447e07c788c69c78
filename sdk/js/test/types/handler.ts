// Type tests of index.d.ts, checked by `tsc -p tsconfig.examples.json`: a
// TypeScript handler, and calls the declarations must refuse (each
// `@ts-expect-error` fails the check when its line type-checks).
import {
  KvError,
  PublishError,
  batchHandler,
  config,
  done,
  handler,
  kv,
  lease,
  log,
  milliseconds,
  publish,
  publishToTopic,
  reject,
  retry,
  snooze,
  type Message,
  type Outcome,
} from 'sluice-sdk';

function decide(msg: Message): Outcome {
  const order: { id?: string } = msg.json();
  if (order.id === undefined) return reject('no id');
  if (msg.attempt < 3) return retry({ after: '1s' });
  if (lease.timeLeft() < 100) return snooze({ for: 250 });
  return done();
}

export const handle = handler(decide);
export const handleAsync = handler(async (msg) => {
  const copies: number = publishToTopic('events', 'orders.eu.created', { json: { id: msg.id } });
  publish('q', msg.payload, { headers: [['a', 'b']], key: msg.key, delay: '2m' });
  publish('q', 'text', { headers: { a: 'b' } });
  const n: number = kv.increment('seen');
  kv.set('last', msg.text(), { ttl: milliseconds('1d') });
  const all: Record<string, string> = config.getAll();
  log.info(`${copies} ${n} ${Object.keys(all).length} ${msg.enqueuedAt.toISOString()} ${msg.header('x')}`);
  lease.extend('30s');
});
export const handleBatch = batchHandler((msgs) => msgs.map((m) => (m.attempt > 1 ? undefined : done())));

export function errors(e: unknown): string {
  if (e instanceof PublishError) return `${e.target}: ${e.reason}`;
  if (e instanceof KvError) return `${e.key}: ${e.reason}`;
  return '';
}

export function refused(msg: Message) {
  // @ts-expect-error a bare number is not retry's options
  retry(1000);
  // @ts-expect-error no BigInt durations
  retry({ after: 10n });
  // @ts-expect-error snooze needs `for`
  snooze({});
  // @ts-expect-error the reason is a string
  reject(new Error('x'));
  // @ts-expect-error a payload is bytes, text or { json }
  publish('q', 42);
  // @ts-expect-error unknown publish option
  publish('q', 'x', { delayMs: 5 });
  // @ts-expect-error increment takes a number
  kv.increment('n', 1n);
  // @ts-expect-error the message is read-only
  msg.attempt = 2;
  // @ts-expect-error a handler returns outcomes
  handler(() => 'done');
}
