// sluice-sdk: write sluice message handlers (WIT sluice:handler@0.2.0) in
// JavaScript. The declarations, with docs, are in ../index.d.ts.
export { handler, batchHandler } from './handler.js';
export { Message } from './message.js';
export { done, retry, reject, snooze } from './outcome.js';
export { milliseconds } from './duration.js';
export { publish, publishToTopic, PublishError, kv, KvError, config, log, lease } from './host.js';
