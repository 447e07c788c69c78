/*
 * The batch twin of hello (world `batch-handler`, so built with
 * -DSLUICE_BATCH_HANDLER), as guests/rust/hello_batch. Logs one line per
 * call, `hello_batch: N messages`, and decides each message by its payload:
 * `retry` -> retry(10), `reject` -> reject("rejected by hello_batch"),
 * `snooze` -> snooze(50), anything else -> done. When any payload is exactly
 * `wrong-length` it returns one outcome too many (an extra `done`), which
 * the host must refuse, failing the whole batch.
 */
#include <stdlib.h>
#include <string.h>

#include "guest.h"

static bool payload_is(const handler_list_u8_t *payload, const char *text) {
    size_t len = strlen(text);
    return payload->len == len && memcmp(payload->ptr, text, len) == 0;
}

static void decide(const handler_message_t *message, handler_outcome_t *ret) {
    static const char rejected[] = "rejected by hello_batch";
    if (payload_is(&message->payload, "retry")) {
        outcome_retry(ret, true, 10);
    } else if (payload_is(&message->payload, "reject")) {
        outcome_reject(ret, rejected, sizeof rejected - 1);
    } else if (payload_is(&message->payload, "snooze")) {
        outcome_snooze(ret, 50);
    } else {
        outcome_done(ret);
    }
}

void exports_batch_handler_handle_batch(batch_handler_list_message_t *messages,
                                        batch_handler_list_outcome_t *ret) {
    size_t n = messages->len;
    sbuf line;
    sbuf_init(&line);
    sbuf_puts(&line, "hello_batch: ");
    sbuf_put_u64(&line, n);
    sbuf_puts(&line, " messages");
    guest_log_sbuf(SLUICE_HANDLER_LOG_LEVEL_INFO, &line);

    bool wrong_length = false;
    for (size_t i = 0; i < n; i++) {
        if (payload_is(&messages->ptr[i].payload, "wrong-length")) wrong_length = true;
    }
    /* The array is freed by the generated post-return function (when not empty). */
    ret->len = n + (wrong_length ? 1 : 0);
    ret->ptr = NULL;
    if (ret->len > 0) {
        ret->ptr = malloc(ret->len * sizeof *ret->ptr);
        if (!ret->ptr) abort();
    }
    for (size_t i = 0; i < n; i++) decide(&messages->ptr[i], &ret->ptr[i]);
    if (wrong_length) outcome_done(&ret->ptr[n]);

    batch_handler_list_message_free(messages); /* the export owns its argument */
}
