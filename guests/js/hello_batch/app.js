// @ts-check
// The batch twin of `hello` (world `batch-handler`), as guests/rust/hello_batch.
//
// Logs one line per call, `hello_batch: N messages`, and decides each
// message by its payload: `retry` -> retry after 10 ms, `reject` ->
// reject("rejected by hello_batch"), `snooze` -> snooze for 50 ms, anything
// else -> done. When any payload is exactly `wrong-length` it returns one
// outcome too many (an extra done), which the host must refuse, failing the
// whole batch.
import { batchHandler, done, log, reject, retry, snooze } from 'sluice-sdk';

/** @param {string} payload */
function outcome(payload) {
  switch (payload) {
    case 'retry':
      return retry({ after: 10 });
    case 'reject':
      return reject('rejected by hello_batch');
    case 'snooze':
      return snooze({ for: 50 });
    default:
      return done();
  }
}

export const handleBatch = batchHandler((msgs) => {
  log.info(`hello_batch: ${msgs.length} messages`);
  // Compared as text: a payload that is not UTF-8 matches none of them.
  const payloads = msgs.map((m) => new TextDecoder().decode(m.payload));
  const outcomes = payloads.map(outcome);
  if (payloads.includes('wrong-length')) outcomes.push(done());
  return outcomes;
});
