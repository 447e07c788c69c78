/*
 * hello written on the bindings wit-bindgen generates, without the SDK: the
 * test that a component built that way keeps working, and the baseline the
 * SDK's hello is measured against. Behaves exactly as hello
 * (guests/spec/ORDERS.md). It builds its line by hand, without printf, so
 * that libc's stdio (and the WASI imports it brings) stays out, as it did in
 * hello before the SDK.
 */
#include <stdlib.h>
#include <string.h>

#include "handler.h"

/* Calls of this instance: a fresh instance starts clean (`call 1`). */
static uint64_t calls = 0;

/* Writes `len` bytes at `at`; returns how many. */
static size_t put(char *at, const void *bytes, size_t len) {
    if (len) memcpy(at, bytes, len);
    return len;
}

/* Writes `v` in decimal at `at` (at most 20 digits); returns how many. */
static size_t put_u64(char *at, uint64_t v) {
    char digits[20];
    size_t n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++) at[i] = digits[n - 1 - i];
    return n;
}

void exports_handler_handle(handler_message_t *message, handler_outcome_t *ret) {
    static const char hello[] = "hello from sluice: message ", attempt[] = " attempt ",
                      call[] = ", call ", tail[] = " of this instance";
    calls += 1;
    /* WIT strings are not NUL-terminated: the id goes in by its length. */
    char *line = malloc(message->id.len + sizeof hello + sizeof attempt + sizeof call +
                        sizeof tail + 2 * 20);
    if (!line) abort();
    size_t len = put(line, hello, sizeof hello - 1);
    len += put(line + len, message->id.ptr, message->id.len);
    len += put(line + len, attempt, sizeof attempt - 1);
    len += put_u64(line + len, message->attempt);
    len += put(line + len, call, sizeof call - 1);
    len += put_u64(line + len, calls);
    len += put(line + len, tail, sizeof tail - 1);
    handler_string_t text = {(uint8_t *)line, len}; /* borrowed by the import */
    sluice_handler_log_log(SLUICE_HANDLER_LOG_LEVEL_INFO, &text);
    free(line);

    handler_message_free(message); /* the export owns its argument */
    memset(ret, 0, sizeof *ret);
    ret->tag = SLUICE_HANDLER_TYPES_OUTCOME_DONE;
}
