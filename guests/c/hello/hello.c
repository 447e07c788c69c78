/*
 * Minimal handler: logs `hello from sluice: message <id> attempt <attempt>,
 * call <n> of this instance` at info and returns `done`. The C twin of guests/rust/hello; the spec is
 * guests/spec/ORDERS.md.
 */
#include "guest.h"

/* Calls of this instance: a fresh instance starts clean (`call 1`). */
static uint64_t calls = 0;

void exports_handler_handle(handler_message_t *message, handler_outcome_t *ret) {
    sbuf line;
    sbuf_init(&line);
    calls += 1;
    sbuf_puts(&line, "hello from sluice: message ");
    sbuf_put(&line, message->id.ptr, message->id.len);
    sbuf_puts(&line, " attempt ");
    sbuf_put_u64(&line, message->attempt);
    sbuf_puts(&line, ", call ");
    sbuf_put_u64(&line, calls);
    sbuf_puts(&line, " of this instance");
    guest_log_sbuf(SLUICE_HANDLER_LOG_LEVEL_INFO, &line);

    handler_message_free(message); /* the export owns its argument */
    outcome_done(ret);
}
