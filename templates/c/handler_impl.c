/* The {{name}} handler for sluice, of the world `handler`. The bindings
 * (gen/handler.h) are made by build.sh with wit-bindgen from wit/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handler.h"

static void log_line(sluice_handler_log_level_t level, const char *text) {
    handler_string_t s = {(uint8_t *)text, strlen(text)};
    sluice_handler_log_log(level, &s);
}

static void reject(handler_outcome_t *ret, const char *reason) {
    ret->tag = SLUICE_HANDLER_TYPES_OUTCOME_REJECT;
    /* Freed by the bindings after the call: it must be heap-allocated. */
    handler_string_dup(&ret->val.reject, reason);
}

void exports_handler_handle(handler_message_t *message, handler_outcome_t *ret) {
    memset(ret, 0, sizeof *ret);
    char line[256];
    snprintf(line, sizeof line, "{{name}}: message %.*s attempt %u",
             (int)message->id.len, (const char *)message->id.ptr, (unsigned)message->attempt);
    log_line(SLUICE_HANDLER_LOG_LEVEL_INFO, line);

    if (message->payload.len == 0) {
        reject(ret, "empty payload");            /* dead-lettered at once */
    } else {
        /* Values from the [config] table of {{name}}.toml. */
        handler_string_t key, value;
        handler_string_set(&key, "forward_to");
        if (sluice_handler_config_get(&key, &value)) {
            /* Held until this call returns; committed together with the ack. */
            sluice_handler_publish_publish_options_t options;
            memset(&options, 0, sizeof options);
            handler_string_t error;
            if (!sluice_handler_publish_publish(&value, &message->payload, &options, &error)) {
                log_line(SLUICE_HANDLER_LOG_LEVEL_WARN, "publish failed");
                handler_string_free(&error);
                ret->tag = SLUICE_HANDLER_TYPES_OUTCOME_RETRY; /* after the policy's backoff */
                ret->val.retry.is_some = false;
            } else {
                ret->tag = SLUICE_HANDLER_TYPES_OUTCOME_DONE;
            }
            handler_string_free(&value);
        } else {
            ret->tag = SLUICE_HANDLER_TYPES_OUTCOME_DONE;
        }
    }
    /* Also possible: SLUICE_HANDLER_TYPES_OUTCOME_SNOOZE with ret->val.snooze
     * = milliseconds puts the message off without spending an attempt; and
     * work that may outlast the timeout asks for more time with
     * sluice_handler_lease_extend(ms) (sluice_handler_lease_time_left() says
     * how much is left). */
    handler_message_free(message); /* the export owns its argument */
}
