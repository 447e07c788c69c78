/* The {{name}} handler for sluice, of the world `handler`. sdk/sluice.h is
 * the sluice C SDK; the bindings it sits on (gen/handler.h) are made by
 * build.sh with wit-bindgen from wit/. What the SDK hands you (message
 * fields, config values, error reasons) is valid until this call returns;
 * nothing needs freeing. */
#define SLUICE_IMPLEMENTATION
#include "sluice.h"

sluice_outcome_t sluice_handle(const sluice_message_t *message) {
    sluice_log_info("{{name}}: message %s attempt %u", sluice_message_id(message),
                    sluice_message_attempt(message));

    size_t len;
    const uint8_t *payload = sluice_payload(message, &len);
    if (len == 0) return sluice_reject("empty payload"); /* dead-lettered at once */

    /* Values from the [config] table of {{name}}.toml. */
    const char *forward_to = sluice_config("forward_to");
    if (forward_to) {
        /* Held until this call returns; committed together with the ack. */
        if (!sluice_publish(forward_to, payload, len, NULL)) {
            sluice_log_warn("publish to %s failed: %s", forward_to, sluice_last_error());
            return sluice_retry(); /* after the policy's backoff */
        }
    }
    /* Also possible: sluice_snooze_ms(ms) puts the message off without
     * spending an attempt; work that may outlast the timeout asks for more
     * time with sluice_lease_extend(ms) (sluice_lease_time_left() says how
     * much is left). */
    return sluice_done();
}
