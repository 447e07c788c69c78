/*
 * Minimal handler: logs `hello from sluice: message <id> attempt <attempt>`
 * at info and returns `done`. The C twin of guests/rust/hello; the spec is
 * guests/spec/ORDERS.md.
 */
#include "guest.h"

void exports_handler_handle(handler_message_t *message, handler_outcome_t *ret) {
    sbuf line;
    sbuf_init(&line);
    sbuf_puts(&line, "hello from sluice: message ");
    sbuf_put(&line, message->id.ptr, message->id.len);
    sbuf_puts(&line, " attempt ");
    sbuf_put_u64(&line, message->attempt);
    guest_log_sbuf(SLUICE_HANDLER_LOG_LEVEL_INFO, &line);

    handler_message_free(message); /* the export owns its argument */
    outcome_done(ret);
}
