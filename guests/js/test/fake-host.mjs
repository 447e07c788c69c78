// A fake sluice host for unit tests: records logs and publishes, serves config.
// Mirrors the componentize-js conventions: a result error is thrown as an
// Error whose `payload` is the error value.
export const state = { config: {}, logs: [], published: [], failPublish: undefined };

export function reset(config = {}) {
  state.config = config;
  state.logs = [];
  state.published = [];
  state.failPublish = undefined;
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
  if (state.failPublish !== undefined) {
    const e = new Error(state.failPublish);
    Object.defineProperty(e, 'payload', { value: state.failPublish });
    throw e;
  }
  state.published.push({ queue, payload: new TextDecoder().decode(payload), options });
}

// sluice:handler/config
export function get(key) {
  return Object.hasOwn(state.config, key) ? state.config[key] : undefined;
}
export function getAll() {
  return Object.entries(state.config);
}
