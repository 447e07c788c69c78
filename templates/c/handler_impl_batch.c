/* The {{name}} batch handler for sluice, of the world `batch-handler`: each
 * call takes up to the `batch_size` of {{name}}.toml messages and returns one
 * outcome per message, in the same order. Each message is settled by its own
 * outcome. sdk/sluice.h is the sluice C SDK (build.sh compiles this file
 * with -DSLUICE_BATCH_HANDLER, for the bindings gen/batch_handler.h). What
 * the SDK hands you is valid until this call returns; nothing needs freeing. */
#define SLUICE_IMPLEMENTATION
#include "sluice.h"

/* Decides one message of the batch, as a `handler` world's handle would. */
static sluice_outcome_t handle(const sluice_message_t *message) {
    sluice_log_info("{{name}}: message %s attempt %u", sluice_message_id(message),
                    sluice_message_attempt(message));

    size_t len;
    const uint8_t *payload = sluice_payload(message, &len);
    if (len == 0) return sluice_reject("empty payload"); /* dead-lettered at once */

    /* Values from the [config] table of {{name}}.toml. */
    const char *forward_to = sluice_config("forward_to");
    /* Held until this call returns, then committed with the ack of the
     * batch's first `done` message, whichever message published: so publish
     * only once the message is sure to be done. */
    if (forward_to && !sluice_publish(forward_to, payload, len, NULL)) {
        sluice_log_warn("publish to %s failed: %s", forward_to, sluice_last_error());
        return sluice_retry(); /* this message only, after the policy's backoff */
    }
    /* Also possible: sluice_snooze_ms(ms) puts the message off without
     * spending an attempt. */
    return sluice_done();
}

void sluice_handle_batch(const sluice_message_t *messages, size_t count,
                         sluice_outcomes_t *outcomes) {
    sluice_log_info("{{name}}: %zu messages", count);
    /* Exactly one outcome per message: a list of any other length fails the
     * whole call, as a trap would, and every message spends an attempt. The
     * timeout is for the whole call too; work that may outlast it asks for
     * more with sluice_lease_extend(ms). */
    for (size_t i = 0; i < count; i++) sluice_outcomes_push(outcomes, handle(&messages[i]));
}
