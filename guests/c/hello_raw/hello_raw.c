/*
 * hello written on the bindings wit-bindgen generates, without the SDK: the
 * test that a component built that way keeps working, and the baseline the
 * SDK's hello is measured against. Behaves exactly as hello
 * (guests/spec/ORDERS.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handler.h"

/* Calls of this instance: a fresh instance starts clean (`call 1`). */
static unsigned long long calls = 0;

void exports_handler_handle(handler_message_t *message, handler_outcome_t *ret) {
    calls += 1;
    /* WIT strings are not NUL-terminated: print the id with its length. */
    const char *format = "hello from sluice: message %.*s attempt %u, call %llu of this instance";
    int id_len = (int)message->id.len;
    const char *id = (const char *)message->id.ptr;
    int len = snprintf(NULL, 0, format, id_len, id, (unsigned)message->attempt, calls);
    char *line = malloc((size_t)len + 1);
    if (len < 0 || !line) abort();
    snprintf(line, (size_t)len + 1, format, id_len, id, (unsigned)message->attempt, calls);
    handler_string_t text = {(uint8_t *)line, (size_t)len}; /* borrowed by the import */
    sluice_handler_log_log(SLUICE_HANDLER_LOG_LEVEL_INFO, &text);
    free(line);

    handler_message_free(message); /* the export owns its argument */
    memset(ret, 0, sizeof *ret);
    ret->tag = SLUICE_HANDLER_TYPES_OUTCOME_DONE;
}
