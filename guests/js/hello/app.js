// @ts-check
// The minimal sluice handler: logs one line and acks.
// See guests/spec/ORDERS.md ("hello"). hello_raw/app.js is the same handler
// on the raw WIT bindings, without the SDK.
import { handler, log } from 'sluice-sdk';

// Calls of this instance: a fresh instance starts clean (`call 1`).
let calls = 0;

export const handle = handler((msg) => {
  calls += 1;
  log.info(`hello from sluice: message ${msg.id} attempt ${msg.attempt}, call ${calls} of this instance`);
  // Returning nothing means done.
});
