/*
 * The batch twin of hello (world `batch-handler`, so built with
 * -DSLUICE_BATCH_HANDLER), as guests/rust/hello_batch. Logs one line per
 * call, `hello_batch: N messages`, and decides each message by its payload:
 * `retry` -> retry(10), `reject` -> reject("rejected by hello_batch"),
 * `snooze` -> snooze(50), anything else -> done. When any payload is exactly
 * `wrong-length` it returns one outcome too many (an extra `done`), which
 * the host must refuse, failing the whole batch.
 */
#define SLUICE_IMPLEMENTATION
#include "sluice.h"

static sluice_outcome_t decide(const sluice_message_t *message) {
    if (sluice_payload_is(message, "retry")) return sluice_retry_after_ms(10);
    if (sluice_payload_is(message, "reject")) return sluice_reject("rejected by hello_batch");
    if (sluice_payload_is(message, "snooze")) return sluice_snooze_ms(50);
    return sluice_done();
}

void sluice_handle_batch(const sluice_message_t *messages, size_t count,
                         sluice_outcomes_t *outcomes) {
    sluice_log_info("hello_batch: %zu messages", count);
    bool wrong_length = false;
    for (size_t i = 0; i < count; i++) {
        sluice_outcomes_push(outcomes, decide(&messages[i]));
        if (sluice_payload_is(&messages[i], "wrong-length")) wrong_length = true;
    }
    if (wrong_length) sluice_outcomes_push(outcomes, sluice_done());
}
