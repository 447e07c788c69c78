/* The {{name}} batch handler for sluice, of the world `batch-handler`: each
 * call takes up to the `batch_size` of {{name}}.toml messages and returns one
 * outcome per message, in the same order. Each message is settled by its own
 * outcome. The bindings (gen/batch_handler.h) are made by build.sh with
 * wit-bindgen from wit/; in this world their own names start with
 * `batch_handler_`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_handler.h"

static void log_line(sluice_handler_log_level_t level, const char *text) {
    batch_handler_string_t s = {(uint8_t *)text, strlen(text)};
    sluice_handler_log_log(level, &s);
}

static void reject(batch_handler_outcome_t *ret, const char *reason) {
    ret->tag = SLUICE_HANDLER_TYPES_OUTCOME_REJECT;
    /* Freed by the bindings after the call: it must be heap-allocated. */
    batch_handler_string_dup(&ret->val.reject, reason);
}

/* Handles one message of the batch, as a `handler` world's handle would. */
static void handle(batch_handler_message_t *message, batch_handler_outcome_t *ret) {
    memset(ret, 0, sizeof *ret);
    char line[256];
    snprintf(line, sizeof line, "{{name}}: message %.*s attempt %u",
             (int)message->id.len, (const char *)message->id.ptr, (unsigned)message->attempt);
    log_line(SLUICE_HANDLER_LOG_LEVEL_INFO, line);

    if (message->payload.len == 0) {
        reject(ret, "empty payload");            /* dead-lettered at once */
        return;
    }
    /* Values from the [config] table of {{name}}.toml. */
    batch_handler_string_t key, value;
    batch_handler_string_set(&key, "forward_to");
    if (sluice_handler_config_get(&key, &value)) {
        /* Held until this call returns, then committed with the ack of the
         * batch's first `done` message, whichever message published: so
         * publish only once the message is sure to be done. */
        sluice_handler_publish_publish_options_t options;
        memset(&options, 0, sizeof options);
        batch_handler_string_t error;
        if (!sluice_handler_publish_publish(&value, &message->payload, &options, &error)) {
            log_line(SLUICE_HANDLER_LOG_LEVEL_WARN, "publish failed");
            batch_handler_string_free(&error);
            /* A transient failure: retry this message after the policy's backoff. */
            ret->tag = SLUICE_HANDLER_TYPES_OUTCOME_RETRY;
            ret->val.retry.is_some = false;
            batch_handler_string_free(&value);
            return;
        }
        batch_handler_string_free(&value);
    }
    /* Also possible: SLUICE_HANDLER_TYPES_OUTCOME_SNOOZE with ret->val.snooze
     * = milliseconds puts the message off without spending an attempt. */
    ret->tag = SLUICE_HANDLER_TYPES_OUTCOME_DONE;
}

void exports_batch_handler_handle_batch(batch_handler_list_message_t *messages,
                                        batch_handler_list_outcome_t *ret) {
    char line[64];
    snprintf(line, sizeof line, "{{name}}: %zu messages", messages->len);
    log_line(SLUICE_HANDLER_LOG_LEVEL_INFO, line);

    /* Exactly one outcome per message: a list of any other length fails the
     * whole call, as a trap would, and every message spends an attempt. The
     * timeout is for the whole call too; work that may outlast it asks for
     * more with sluice_handler_lease_extend(ms). The array is freed with
     * free() by the bindings after the call (when it is not empty). */
    ret->len = messages->len;
    ret->ptr = NULL;
    if (ret->len > 0) {
        ret->ptr = malloc(ret->len * sizeof *ret->ptr);
        if (!ret->ptr) abort();
    }
    for (size_t i = 0; i < messages->len; i++) handle(&messages->ptr[i], &ret->ptr[i]);
    batch_handler_list_message_free(messages); /* the export owns its argument */
}
