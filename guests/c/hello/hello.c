/*
 * Minimal handler: logs `hello from sluice: message <id> attempt <attempt>,
 * call <n> of this instance` at info and returns `done`. The C twin of
 * guests/rust/hello; the spec is guests/spec/ORDERS.md. hello_raw is the same
 * handler written on the generated bindings alone.
 */
#define SLUICE_IMPLEMENTATION
#include "sluice.h"

/* Calls of this instance: a fresh instance starts clean (`call 1`). */
static unsigned long long calls = 0;

sluice_outcome_t sluice_handle(const sluice_message_t *message) {
    calls += 1;
    sluice_log_info("hello from sluice: message %s attempt %u, call %llu of this instance",
                    sluice_message_id(message), sluice_message_attempt(message), calls);
    return sluice_done();
}
