// A fake sluice host for the SDK's tests: the five imported interfaces of
// sluice:handler@0.2.0, bound as componentize-js 0.23 binds them (u64 and
// s64 are BigInt both ways, a `result` error is thrown as an Error whose
// `payload` is the string), checking the argument types the real bindings
// would refuse, and recording every call in `state`.
export const state = fresh();

function fresh() {
  return {
    logs: [],
    published: [],
    config: {},
    // The store's entries (key -> bytes), or undefined when not granted.
    kv: new Map(),
    ttls: new Map(),
    // The host's reason to refuse the next publish, if any.
    failPublish: undefined,
    // How many queues take a topic publish; 0 refuses it.
    bound: 1,
    timeLeftMs: 5000n,
    extendedTo: [],
  };
}

export function reset(changes = {}) {
  Object.assign(state, fresh(), changes);
}

function fail(reason) {
  const e = new Error(reason);
  Object.defineProperty(e, 'payload', { value: reason });
  throw e;
}

function checkOptions(options) {
  const keys = Object.keys(options).sort().join(',');
  if (keys !== 'delayMs,headers,key') throw new TypeError(`publish-options has fields ${keys}`);
  if (!Array.isArray(options.headers)) throw new TypeError('headers must be a list');
  if (!(options.delayMs === undefined || typeof options.delayMs === 'bigint')) {
    throw new TypeError('delay-ms must be a BigInt or undefined');
  }
}

function checkBytes(payload) {
  if (!(payload instanceof Uint8Array)) throw new TypeError('list<u8> must be a Uint8Array');
}

function store() {
  if (state.kv === undefined) fail('handler is not granted the key-value store');
  return state.kv;
}

const S64_MAX = (1n << 63n) - 1n;

export const host = {
  log: {
    log(level, message) {
      if (!['trace', 'debug', 'info', 'warn', 'error'].includes(level)) {
        throw new TypeError(`"${level}" is not one of the cases of level`);
      }
      if (typeof message !== 'string') throw new TypeError('message must be a string');
      state.logs.push([level, message]);
    },
  },
  publish: {
    publish(queue, payload, options) {
      checkBytes(payload);
      checkOptions(options);
      if (state.failPublish !== undefined) fail(state.failPublish);
      state.published.push({ queue, payload: new TextDecoder().decode(payload), options });
    },
    publishToTopic(topic, route, payload, options) {
      checkBytes(payload);
      checkOptions(options);
      if (state.bound === 0) fail(`no queue is bound to topic "${topic}" for routing key "${route}"`);
      state.published.push({ topic, route, payload: new TextDecoder().decode(payload), options });
      return state.bound;
    },
  },
  config: {
    get: (key) => (Object.hasOwn(state.config, key) ? state.config[key] : undefined),
    getAll: () => Object.entries(state.config),
  },
  kv: {
    get(key) {
      const kv = store();
      return kv.has(key) ? kv.get(key).slice() : undefined;
    },
    set(key, value, ttlMs) {
      checkBytes(value);
      if (!(ttlMs === undefined || typeof ttlMs === 'bigint')) throw new TypeError('ttl-ms must be a BigInt');
      if (key === '') fail('the key is empty');
      store().set(key, value.slice());
      state.ttls.set(key, ttlMs);
    },
    delete(key) {
      return store().delete(key);
    },
    increment(key, delta) {
      if (typeof delta !== 'bigint') throw new TypeError('delta must be a BigInt (s64)');
      const kv = store();
      const old = kv.has(key) ? BigInt(new TextDecoder().decode(kv.get(key))) : 0n;
      const sum = old + delta;
      if (sum > S64_MAX || sum < -S64_MAX - 1n) fail('the result would overflow');
      kv.set(key, new TextEncoder().encode(String(sum)));
      return sum;
    },
  },
  lease: {
    timeLeft: () => state.timeLeftMs,
    extend(ms) {
      if (typeof ms !== 'bigint') throw new TypeError('ms must be a BigInt (u64)');
      state.extendedTo.push(ms);
      if (ms > state.timeLeftMs) state.timeLeftMs = ms;
      return state.timeLeftMs;
    },
  },
};
