// A fake sluice host for unit tests: records logs, publishes and topic
// publishes, serves config and a key-value store. Mirrors the componentize-js conventions: a result
// error is thrown as an Error whose `payload` is the error value, and s64/u64
// are BigInts.
export const state = {
  config: {},
  logs: [],
  published: [],
  failPublish: undefined,
  // How many queues take a topic publish; 0: the publish is refused, as the
  // host refuses a routing key no queue is bound for.
  bound: 0,
  kv: undefined,
};

/** `kv`: a Map of the store's entries, or undefined when not granted. */
export function reset(config = {}, kv = undefined) {
  state.config = config;
  state.logs = [];
  state.published = [];
  state.failPublish = undefined;
  state.bound = 0;
  state.kv = kv;
}

function fail(reason) {
  const e = new Error(reason);
  Object.defineProperty(e, 'payload', { value: reason });
  throw e;
}

// sluice:handler/log
export function log(level, message) {
  if (!['trace', 'debug', 'info', 'warn', 'error'].includes(level)) {
    throw new TypeError(`"${level}" is not one of the cases of level`);
  }
  state.logs.push([level, message]);
}

// sluice:handler/publish
export function publish(queue, payload, options) {
  if (!(payload instanceof Uint8Array)) throw new TypeError('payload must be a Uint8Array');
  if (state.failPublish !== undefined) fail(state.failPublish);
  state.published.push({ queue, payload: new TextDecoder().decode(payload), options });
}

export function publishToTopic(topic, route, payload, options) {
  if (!(payload instanceof Uint8Array)) throw new TypeError('payload must be a Uint8Array');
  if (state.bound === 0) {
    fail(`no queue is bound to topic ${JSON.stringify(topic)} for routing key ${JSON.stringify(route)}`);
  }
  state.published.push({ topic, route, payload: new TextDecoder().decode(payload), options });
  return state.bound; // u32: a Number, as the bindings return it
}

// sluice:handler/config
export function get(key) {
  return Object.hasOwn(state.config, key) ? state.config[key] : undefined;
}
export function getAll() {
  return Object.entries(state.config);
}

// sluice:handler/kv: `increment` is what the guests call. `get` above is
// config's (this one module stands for every interface); `set` and `delete`
// exist because the SDK imports them. Values are stored as the
// host stores them: bytes, an increment's result as decimal text.
function store() {
  if (state.kv === undefined) {
    fail('handler orders is not granted the key-value store: add `kv = true` under [capabilities] in orders.toml');
  }
  return state.kv;
}
export function increment(key, delta) {
  if (typeof delta !== 'bigint') throw new TypeError('delta must be a BigInt (s64)');
  const kv = store();
  const old = kv.has(key) ? BigInt(new TextDecoder().decode(kv.get(key))) : 0n;
  const sum = old + delta;
  kv.set(key, new TextEncoder().encode(String(sum)));
  return sum;
}
export function set() {
  throw new Error('fake host: kv.set is not faked');
}
function kvDelete() {
  throw new Error('fake host: kv.delete is not faked');
}
export { kvDelete as delete };

// sluice:handler/lease: imported by the SDK, called by no guest.
export function timeLeft() {
  throw new Error('fake host: lease.timeLeft is not faked');
}
export function extend() {
  throw new Error('fake host: lease.extend is not faked');
}
