/*
 * sluice.h: the C SDK for sluice message handlers, one header.
 *
 * SDK 0.2.0, for the WIT world sluice:handler/handler@0.2.0 (wit/handler.wit)
 * and its batch world `batch-handler`. It sits over the C bindings that
 * `wit-bindgen c` generates from the WIT (handler.h, or batch_handler.h when
 * SLUICE_BATCH_HANDLER is defined), which must be on the include path.
 *
 * Use: include it anywhere; in exactly one .c file define
 * SLUICE_IMPLEMENTATION first, which adds the definitions and the export
 * the host calls. You write one function, and the SDK does the rest:
 *
 *     #define SLUICE_IMPLEMENTATION
 *     #include "sluice.h"
 *
 *     sluice_outcome_t sluice_handle(const sluice_message_t *message) {
 *         sluice_log_info("message %s, attempt %u", sluice_message_id(message),
 *                         sluice_message_attempt(message));
 *         return sluice_done();
 *     }
 *
 * A batch handler (compiled with -DSLUICE_BATCH_HANDLER) writes
 * sluice_handle_batch instead and pushes one outcome per message.
 *
 * Memory, the whole rule:
 * - What the SDK hands you (message fields, header values, config values,
 *   kv values, error reasons) is borrowed: valid until your sluice_handle
 *   (or sluice_handle_batch) returns, then freed by the SDK. Never free it;
 *   copy it to keep it longer.
 * - What you hand the SDK (keys, payloads, headers, format arguments) stays
 *   yours: the SDK copies what it must keep.
 * - An outcome owns its reject reason until you return (or push) it; the
 *   bindings free it once the host has read it.
 * - Running out of memory traps (abort()), as the generated bindings do: the
 *   host counts the call as failed and the message is retried.
 *
 * Errors: a call that can fail returns false (or -1) and leaves the reason
 * in sluice_last_error(). Strings that may contain NUL bytes (WIT strings
 * may) come with an explicit length where it matters: the payload, kv
 * values, sluice_log_text and sluice_pair_t.value_len.
 */
#ifndef SLUICE_H
#define SLUICE_H

#define SLUICE_SDK_VERSION "0.2.0"
/* The WIT package this SDK targets. */
#define SLUICE_WIT_VERSION "0.2.0"
#define SLUICE_WIT_PACKAGE "sluice:handler@0.2.0"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The world's bindings. Their own names start with the world's name
 * (handler_string_t, batch_handler_string_t); SLUICE__W picks the right one.
 */
#ifdef SLUICE_BATCH_HANDLER
#include "batch_handler.h"
#define SLUICE__W(name) batch_handler_##name
#else
#include "handler.h"
#define SLUICE__W(name) handler_##name
#endif

#if defined(__GNUC__) || defined(__clang__)
#define SLUICE__PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define SLUICE__PRINTF(fmt, args)
#endif

/* One delivery of one message (the WIT record `message`). */
typedef SLUICE__W(message_t) sluice_message_t;
/* What the handler decided (the WIT variant `outcome`). */
typedef SLUICE__W(outcome_t) sluice_outcome_t;

/* A name and a value: a header, or a config entry. */
typedef struct {
    const char *name;
    const char *value;
    /* The bytes of `value`. Given to the SDK, 0 means strlen(value); from
     * the SDK, it is always the length (value may contain NUL). */
    size_t value_len;
} sluice_pair_t;

/* ---- The handler: you write one of these ---------------------------------- */

#ifndef SLUICE_BATCH_HANDLER
/* Called once per delivery. `message` is borrowed for the call. */
sluice_outcome_t sluice_handle(const sluice_message_t *message);
#else
/* The outcomes of a batch, in the order of its messages. */
typedef struct {
    sluice_outcome_t *ptr;
    size_t len;
    size_t cap;
} sluice_outcomes_t;

/*
 * Called with up to the handler's batch_size deliveries. Push exactly one
 * outcome per message, in order: a list of any other length fails the whole
 * call, and every message of the batch spends its attempt.
 */
void sluice_handle_batch(const sluice_message_t *messages, size_t count,
                         sluice_outcomes_t *outcomes);

/* Appends `outcome` (taking its reject reason) to the batch's outcomes. */
void sluice_outcomes_push(sluice_outcomes_t *outcomes, sluice_outcome_t outcome);
#endif

/* ---- Outcomes ---------------------------------------------------------------- */

/* Handled: the host acks the message and commits what it published. */
sluice_outcome_t sluice_done(void);
/* A transient failure: deliver again after the handler's backoff policy. */
sluice_outcome_t sluice_retry(void);
/* A transient failure: deliver again after `ms` milliseconds. */
sluice_outcome_t sluice_retry_after_ms(uint64_t ms);
/* A poison message: dead-letter it now with this reason (copied). */
sluice_outcome_t sluice_reject(const char *reason);
/* sluice_reject with a printf-style reason. */
sluice_outcome_t sluice_rejectf(const char *format, ...) SLUICE__PRINTF(1, 2);
/* Not now: deliver again after `ms` without spending an attempt. */
sluice_outcome_t sluice_snooze_ms(uint64_t ms);

/* ---- The message (all borrowed for the call) --------------------------------- */

/* The id the broker gave the message. */
const char *sluice_message_id(const sluice_message_t *message);
/* The idempotency key: the id unless the sender or the config set one. */
const char *sluice_message_key(const sluice_message_t *message);
/* The queue it was taken from. */
const char *sluice_message_queue(const sluice_message_t *message);
/* 1 on the first delivery, 2 on the first retry, ... */
uint32_t sluice_message_attempt(const sluice_message_t *message);
/* When it was first published, in milliseconds since the Unix epoch. */
uint64_t sluice_message_enqueued_at_ms(const sluice_message_t *message);
/* The body as the sender gave it (not necessarily UTF-8 or NUL-terminated);
 * its length in *len. */
const uint8_t *sluice_payload(const sluice_message_t *message, size_t *len);
/* True when the payload is exactly the bytes of `text`. */
bool sluice_payload_is(const sluice_message_t *message, const char *text);
/* The value of the first header named exactly `name`, or NULL. */
const char *sluice_header(const sluice_message_t *message, const char *name);
/* All headers, in order: sets *headers and returns how many. */
size_t sluice_headers(const sluice_message_t *message, const sluice_pair_t **headers);

/* ---- Publish ----------------------------------------------------------------- */

/* Optional settings of a publish; all zero (or a NULL pointer) for none. */
typedef struct {
    const sluice_pair_t *headers; /* header_count headers for the new message */
    size_t header_count;
    const char *key;              /* idempotency key; NULL: the new message's id */
    uint64_t delay_ms;            /* deliver no earlier than this after the commit; 0: at once */
} sluice_publish_options_t;

/*
 * Queues `len` bytes of `payload` for `queue`. Held until the call returns:
 * committed with the ack on done, dropped on any other outcome. False when
 * the host refused it (a bad queue name, over the size limit): the reason is
 * in sluice_last_error().
 */
bool sluice_publish(const char *queue, const void *payload, size_t len,
                    const sluice_publish_options_t *options);

/*
 * Publishes to `topic` with the routing key `route` (like
 * `orders.eu.created`): a copy is held for every queue bound to the topic
 * with a matching pattern. Sets *copies (when not NULL) to how many. False
 * when the names are invalid or no queue would take it (sluice_last_error()).
 */
bool sluice_publish_to_topic(const char *topic, const char *route, const void *payload,
                             size_t len, const sluice_publish_options_t *options,
                             uint32_t *copies);

/* ---- Log --------------------------------------------------------------------- */

typedef sluice_handler_log_level_t sluice_level_t;
#define SLUICE_TRACE SLUICE_HANDLER_LOG_LEVEL_TRACE
#define SLUICE_DEBUG SLUICE_HANDLER_LOG_LEVEL_DEBUG
#define SLUICE_INFO SLUICE_HANDLER_LOG_LEVEL_INFO
#define SLUICE_WARN SLUICE_HANDLER_LOG_LEVEL_WARN
#define SLUICE_ERROR SLUICE_HANDLER_LOG_LEVEL_ERROR

/* Writes one printf-style line into the host's log, tagged with the message. */
void sluice_log(sluice_level_t level, const char *format, ...) SLUICE__PRINTF(2, 3);
void sluice_logv(sluice_level_t level, const char *format, va_list args);
/* Writes `len` bytes of `text` as one line, as they are (NUL included). */
void sluice_log_text(sluice_level_t level, const char *text, size_t len);

#define sluice_log_trace(...) sluice_log(SLUICE_TRACE, __VA_ARGS__)
#define sluice_log_debug(...) sluice_log(SLUICE_DEBUG, __VA_ARGS__)
#define sluice_log_info(...) sluice_log(SLUICE_INFO, __VA_ARGS__)
#define sluice_log_warn(...) sluice_log(SLUICE_WARN, __VA_ARGS__)
#define sluice_log_error(...) sluice_log(SLUICE_ERROR, __VA_ARGS__)

/* ---- Config (the [config] table of the handler's NAME.toml; borrowed) -------- */

/* The value of `key`, or NULL when it is not set. */
const char *sluice_config(const char *key);
/* The value of `key`, or `fallback` when it is not set. */
const char *sluice_config_or(const char *key, const char *fallback);
/* Every key and value: sets *entries and returns how many. */
size_t sluice_config_all(const sluice_pair_t **entries);

/* ---- Key-value store (granted by `kv = true` under [capabilities]) ----------- */

/*
 * Looks `key` up: 1 and the value (borrowed, NUL-terminated for
 * convenience) in *value and *len when it is set, 0 when it is not, -1 when
 * the store refused (sluice_last_error()).
 */
int sluice_kv_get(const char *key, const uint8_t **value, size_t *len);
/* Sets `key` to `len` bytes of `value`, expiring after `ttl_ms` (0: never). */
bool sluice_kv_set(const char *key, const void *value, size_t len, uint64_t ttl_ms);
/* Removes `key`: 1 when it was set, 0 when it was not, -1 on failure. */
int sluice_kv_delete(const char *key);
/* Adds `delta` to the integer at `key` (unset counts as 0); the new value in
 * *value when not NULL. */
bool sluice_kv_increment(const char *key, int64_t delta, int64_t *value);

/* ---- Lease ------------------------------------------------------------------- */

/* Milliseconds left before the call's deadline. */
uint64_t sluice_lease_time_left(void);
/* Asks for the deadline to be `ms` from now (capped by limits.max_extend);
 * returns the milliseconds left. */
uint64_t sluice_lease_extend(uint64_t ms);

/* ---- Errors ------------------------------------------------------------------ */

/* Why the last call that failed failed ("" if none has); borrowed. */
const char *sluice_last_error(void);

#endif /* SLUICE_H */

/* ============================================================================ */

#ifdef SLUICE_IMPLEMENTATION
#ifndef SLUICE_IMPLEMENTED
#define SLUICE_IMPLEMENTED

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef SLUICE__W(string_t) sluice__string_t;

/* What the SDK lent out during this call: freed when the call returns. */
typedef struct sluice__lent {
    struct sluice__lent *next;
} sluice__lent_t;

static sluice__lent_t *sluice__lent;
static const char *sluice__error;

static void *sluice__alloc(size_t size) {
    void *p = malloc(size ? size : 1);
    if (!p) abort();
    return p;
}

/* `size` bytes that live until the call returns. */
static void *sluice__lend(size_t size) {
    sluice__lent_t *block = sluice__alloc(sizeof(sluice__lent_t) + size);
    block->next = sluice__lent;
    sluice__lent = block;
    return block + 1;
}

/* A NUL-terminated copy of `len` bytes that lives until the call returns. */
static char *sluice__lend_text(const void *bytes, size_t len) {
    char *copy = sluice__lend(len + 1);
    if (len) memcpy(copy, bytes, len);
    copy[len] = '\0';
    return copy;
}

/* Frees everything lent during the call: run when the call returns. */
static void sluice__release(void) {
    while (sluice__lent) {
        sluice__lent_t *next = sluice__lent->next;
        free(sluice__lent);
        sluice__lent = next;
    }
    sluice__error = NULL;
}

/* A C string as an argument to an import: borrowed, not copied. */
static sluice__string_t sluice__arg(const char *text) {
    sluice__string_t s = {(uint8_t *)text, strlen(text)};
    return s;
}

/* Lends a copy of a string an import returned, and frees the original. */
static const char *sluice__take(sluice__string_t *s) {
    const char *copy = sluice__lend_text(s->ptr, s->len);
    SLUICE__W(string_free)(s);
    return copy;
}

static void sluice__fail(sluice__string_t *reason) { sluice__error = sluice__take(reason); }

const char *sluice_last_error(void) { return sluice__error ? sluice__error : ""; }

/* ---- Outcomes ---- */

static sluice_outcome_t sluice__outcome(uint8_t tag) {
    sluice_outcome_t o;
    memset(&o, 0, sizeof o);
    o.tag = tag;
    return o;
}

sluice_outcome_t sluice_done(void) { return sluice__outcome(SLUICE_HANDLER_TYPES_OUTCOME_DONE); }

sluice_outcome_t sluice_retry(void) { return sluice__outcome(SLUICE_HANDLER_TYPES_OUTCOME_RETRY); }

sluice_outcome_t sluice_retry_after_ms(uint64_t ms) {
    sluice_outcome_t o = sluice__outcome(SLUICE_HANDLER_TYPES_OUTCOME_RETRY);
    o.val.retry.is_some = true;
    o.val.retry.val = ms;
    return o;
}

sluice_outcome_t sluice_snooze_ms(uint64_t ms) {
    sluice_outcome_t o = sluice__outcome(SLUICE_HANDLER_TYPES_OUTCOME_SNOOZE);
    o.val.snooze = ms;
    return o;
}

/* A reject that owns `reason`, heap memory of `len` bytes: the generated
 * post-return function frees it with free() (only when len > 0). */
static sluice_outcome_t sluice__reject_owning(char *reason, size_t len) {
    sluice_outcome_t o = sluice__outcome(SLUICE_HANDLER_TYPES_OUTCOME_REJECT);
    if (len == 0) {
        free(reason);
        reason = NULL;
    }
    o.val.reject.ptr = (uint8_t *)reason;
    o.val.reject.len = len;
    return o;
}

sluice_outcome_t sluice_reject(const char *reason) {
    size_t len = strlen(reason);
    char *copy = sluice__alloc(len + 1);
    memcpy(copy, reason, len + 1);
    return sluice__reject_owning(copy, len);
}

/* A printf-style text in fresh heap memory (free() it); its length in *len. */
static char *sluice__vformat(const char *format, va_list args, size_t *len) {
    va_list again;
    va_copy(again, args);
    int n = vsnprintf(NULL, 0, format, args);
    if (n < 0) n = 0; /* an encoding error: an empty text rather than a trap */
    char *text = sluice__alloc((size_t)n + 1);
    vsnprintf(text, (size_t)n + 1, format, again);
    va_end(again);
    *len = (size_t)n;
    return text;
}

sluice_outcome_t sluice_rejectf(const char *format, ...) {
    va_list args;
    va_start(args, format);
    size_t len;
    char *reason = sluice__vformat(format, args, &len);
    va_end(args);
    return sluice__reject_owning(reason, len);
}

/* ---- The message ---- */

const char *sluice_message_id(const sluice_message_t *message) {
    return sluice__lend_text(message->id.ptr, message->id.len);
}

const char *sluice_message_key(const sluice_message_t *message) {
    return sluice__lend_text(message->key.ptr, message->key.len);
}

const char *sluice_message_queue(const sluice_message_t *message) {
    return sluice__lend_text(message->queue.ptr, message->queue.len);
}

uint32_t sluice_message_attempt(const sluice_message_t *message) { return message->attempt; }

uint64_t sluice_message_enqueued_at_ms(const sluice_message_t *message) {
    return message->enqueued_at_ms;
}

const uint8_t *sluice_payload(const sluice_message_t *message, size_t *len) {
    *len = message->payload.len;
    return message->payload.ptr;
}

bool sluice_payload_is(const sluice_message_t *message, const char *text) {
    size_t len = strlen(text);
    return message->payload.len == len &&
           (len == 0 || memcmp(message->payload.ptr, text, len) == 0);
}

static bool sluice__string_is(const sluice__string_t *s, const char *text) {
    size_t len = strlen(text);
    return s->len == len && (len == 0 || memcmp(s->ptr, text, len) == 0);
}

const char *sluice_header(const sluice_message_t *message, const char *name) {
    for (size_t i = 0; i < message->headers.len; i++) {
        const sluice__string_t *value = &message->headers.ptr[i].f1;
        if (sluice__string_is(&message->headers.ptr[i].f0, name)) {
            return sluice__lend_text(value->ptr, value->len);
        }
    }
    return NULL;
}

/* Lends `count` pairs copied from a list of WIT string tuples. */
static sluice_pair_t *sluice__lend_pairs(const SLUICE__W(tuple2_string_string_t) *tuples,
                                         size_t count) {
    sluice_pair_t *pairs = sluice__lend(count * sizeof *pairs);
    for (size_t i = 0; i < count; i++) {
        pairs[i].name = sluice__lend_text(tuples[i].f0.ptr, tuples[i].f0.len);
        pairs[i].value = sluice__lend_text(tuples[i].f1.ptr, tuples[i].f1.len);
        pairs[i].value_len = tuples[i].f1.len;
    }
    return pairs;
}

size_t sluice_headers(const sluice_message_t *message, const sluice_pair_t **headers) {
    *headers = sluice__lend_pairs(message->headers.ptr, message->headers.len);
    return message->headers.len;
}

/* ---- Publish ---- */

/*
 * The publish-options record for `options`, all borrowed. Its headers are in
 * *tuples, heap memory the caller frees once the import has returned.
 */
static sluice_handler_publish_publish_options_t sluice__options(
    const sluice_publish_options_t *options, SLUICE__W(tuple2_string_string_t) **tuples) {
    sluice_handler_publish_publish_options_t out;
    memset(&out, 0, sizeof out);
    *tuples = NULL;
    if (!options) return out;
    if (options->header_count > 0) {
        *tuples = sluice__alloc(options->header_count * sizeof **tuples);
        for (size_t i = 0; i < options->header_count; i++) {
            const sluice_pair_t *h = &options->headers[i];
            (*tuples)[i].f0 = sluice__arg(h->name);
            (*tuples)[i].f1.ptr = (uint8_t *)h->value;
            (*tuples)[i].f1.len = h->value_len ? h->value_len : strlen(h->value);
        }
        out.headers.ptr = *tuples;
        out.headers.len = options->header_count;
    }
    if (options->key) {
        out.key.is_some = true;
        out.key.val = sluice__arg(options->key);
    }
    if (options->delay_ms > 0) {
        out.delay_ms.is_some = true;
        out.delay_ms.val = options->delay_ms;
    }
    return out;
}

bool sluice_publish(const char *queue, const void *payload, size_t len,
                    const sluice_publish_options_t *options) {
    SLUICE__W(tuple2_string_string_t) *tuples;
    sluice_handler_publish_publish_options_t opts = sluice__options(options, &tuples);
    sluice__string_t queue_arg = sluice__arg(queue);
    SLUICE__W(list_u8_t) body = {(uint8_t *)payload, len};
    sluice__string_t err;
    bool ok = sluice_handler_publish_publish(&queue_arg, &body, &opts, &err);
    free(tuples);
    if (!ok) sluice__fail(&err);
    return ok;
}

bool sluice_publish_to_topic(const char *topic, const char *route, const void *payload,
                             size_t len, const sluice_publish_options_t *options,
                             uint32_t *copies) {
    SLUICE__W(tuple2_string_string_t) *tuples;
    sluice_handler_publish_publish_options_t opts = sluice__options(options, &tuples);
    sluice__string_t topic_arg = sluice__arg(topic), route_arg = sluice__arg(route);
    SLUICE__W(list_u8_t) body = {(uint8_t *)payload, len};
    uint32_t held = 0;
    sluice__string_t err;
    bool ok = sluice_handler_publish_publish_to_topic(&topic_arg, &route_arg, &body, &opts,
                                                      &held, &err);
    free(tuples);
    if (!ok) sluice__fail(&err);
    if (ok && copies) *copies = held;
    return ok;
}

/* ---- Log ---- */

void sluice_log_text(sluice_level_t level, const char *text, size_t len) {
    sluice__string_t line = {(uint8_t *)text, len};
    sluice_handler_log_log(level, &line);
}

/* Appends `len` bytes of `text` at *n of `buf` (`cap` bytes); false when
 * they do not fit with a NUL after them. */
static bool sluice__put(char *buf, size_t cap, size_t *n, const char *text, size_t len) {
    if (cap - *n <= len) return false;
    memcpy(buf + *n, text, len);
    *n += len;
    return true;
}

/* Formats into `buf` what the common conversions make: %s %c %% and %d %i
 * %u with no, one or two `l`, or %zu; no flags, width or precision. The
 * length, or -1 for any other format or a text that does not fit (the
 * caller then uses vsnprintf, from its own copy of the arguments). */
static int sluice__quick_format(char *buf, size_t cap, const char *format, va_list args) {
    size_t n = 0;
    for (const char *p = format; *p; p++) {
        const char *text = p;
        size_t len = 1;
        char digits[24];
        if (*p == '%') {
            int longs = 0;
            bool size = false;
            for (p++; *p == 'l' && longs < 2; p++) longs++;
            if (*p == 'z' && longs == 0) { size = true; p++; }
            unsigned long long magnitude;
            bool negative = false;
            if (*p == 's' && !size && longs == 0) {
                text = va_arg(args, const char *);
                if (!text) text = "(null)";
                len = strlen(text);
            } else if (*p == 'c' && !size && longs == 0) {
                digits[0] = (char)va_arg(args, int);
                text = digits;
            } else if (*p == '%' && !size && longs == 0) {
                text = "%";
            } else if (*p == 'd' || *p == 'i') {
                if (size) return -1;
                long long v = longs == 2 ? va_arg(args, long long)
                            : longs == 1 ? va_arg(args, long) : va_arg(args, int);
                negative = v < 0;
                magnitude = negative ? 0ULL - (unsigned long long)v : (unsigned long long)v;
            } else if (*p == 'u') {
                magnitude = size ? va_arg(args, size_t)
                          : longs == 2 ? va_arg(args, unsigned long long)
                          : longs == 1 ? va_arg(args, unsigned long) : va_arg(args, unsigned);
            } else {
                return -1;
            }
            if (*p == 'd' || *p == 'i' || *p == 'u') {
                char *end = digits + sizeof digits, *d = end;
                do { *--d = (char)('0' + magnitude % 10); magnitude /= 10; } while (magnitude);
                if (negative) *--d = '-';
                text = d;
                len = (size_t)(end - d);
            }
        }
        if (!sluice__put(buf, cap, &n, text, len)) return -1;
    }
    buf[n] = '\0';
    return (int)n;
}

void sluice_logv(sluice_level_t level, const char *format, va_list args) {
    /* Most lines fit here: formatted once, without an allocation, and
     * without vsnprintf when they use only the common conversions. */
    char small[256];
    va_list quick;
    va_copy(quick, args);
    int quick_len = sluice__quick_format(small, sizeof small, format, quick);
    va_end(quick);
    if (quick_len >= 0) {
        sluice_log_text(level, small, (size_t)quick_len);
        return;
    }
    va_list again;
    va_copy(again, args);
    int n = vsnprintf(small, sizeof small, format, args);
    if (n < 0) n = 0; /* an encoding error: an empty line rather than a trap */
    if ((size_t)n < sizeof small) {
        va_end(again);
        sluice_log_text(level, small, (size_t)n);
        return;
    }
    char *line = sluice__alloc((size_t)n + 1);
    vsnprintf(line, (size_t)n + 1, format, again);
    va_end(again);
    sluice_log_text(level, line, (size_t)n);
    free(line);
}

void sluice_log(sluice_level_t level, const char *format, ...) {
    va_list args;
    va_start(args, format);
    sluice_logv(level, format, args);
    va_end(args);
}

/* ---- Config ---- */

const char *sluice_config(const char *key) {
    sluice__string_t key_arg = sluice__arg(key), value;
    if (!sluice_handler_config_get(&key_arg, &value)) return NULL;
    return sluice__take(&value);
}

const char *sluice_config_or(const char *key, const char *fallback) {
    const char *value = sluice_config(key);
    return value ? value : fallback;
}

size_t sluice_config_all(const sluice_pair_t **entries) {
    SLUICE__W(list_tuple2_string_string_t) all;
    sluice_handler_config_get_all(&all);
    size_t count = all.len;
    *entries = sluice__lend_pairs(all.ptr, count);
    SLUICE__W(list_tuple2_string_string_free)(&all);
    return count;
}

/* ---- Key-value store ---- */

int sluice_kv_get(const char *key, const uint8_t **value, size_t *len) {
    sluice__string_t key_arg = sluice__arg(key), err;
    SLUICE__W(option_list_u8_t) found;
    if (!sluice_handler_kv_get(&key_arg, &found, &err)) {
        sluice__fail(&err);
        return -1;
    }
    if (!found.is_some) return 0;
    *value = (const uint8_t *)sluice__lend_text(found.val.ptr, found.val.len);
    *len = found.val.len;
    SLUICE__W(option_list_u8_free)(&found);
    return 1;
}

bool sluice_kv_set(const char *key, const void *value, size_t len, uint64_t ttl_ms) {
    sluice__string_t key_arg = sluice__arg(key), err;
    SLUICE__W(list_u8_t) value_arg = {(uint8_t *)value, len};
    bool ok = sluice_handler_kv_set(&key_arg, &value_arg, ttl_ms ? &ttl_ms : NULL, &err);
    if (!ok) sluice__fail(&err);
    return ok;
}

int sluice_kv_delete(const char *key) {
    sluice__string_t key_arg = sluice__arg(key), err;
    bool was_set;
    if (!sluice_handler_kv_delete(&key_arg, &was_set, &err)) {
        sluice__fail(&err);
        return -1;
    }
    return was_set ? 1 : 0;
}

bool sluice_kv_increment(const char *key, int64_t delta, int64_t *value) {
    sluice__string_t key_arg = sluice__arg(key), err;
    int64_t now;
    if (!sluice_handler_kv_increment(&key_arg, delta, &now, &err)) {
        sluice__fail(&err);
        return false;
    }
    if (value) *value = now;
    return true;
}

/* ---- Lease ---- */

uint64_t sluice_lease_time_left(void) { return sluice_handler_lease_time_left(); }

uint64_t sluice_lease_extend(uint64_t ms) { return sluice_handler_lease_extend(ms); }

/* ---- The export the host calls ---- */

#ifndef SLUICE_BATCH_HANDLER
/* The bindings own `message` (the SDK frees it) and free the outcome's
 * reject reason after the host has read it. */
void exports_handler_handle(sluice_message_t *message, sluice_outcome_t *ret) {
    *ret = sluice_handle(message);
    handler_message_free(message);
    sluice__release();
}
#else
void sluice_outcomes_push(sluice_outcomes_t *outcomes, sluice_outcome_t outcome) {
    if (outcomes->len == outcomes->cap) {
        size_t cap = outcomes->cap ? 2 * outcomes->cap : 8;
        sluice_outcome_t *grown = realloc(outcomes->ptr, cap * sizeof *grown);
        if (!grown) abort();
        outcomes->ptr = grown;
        outcomes->cap = cap;
    }
    outcomes->ptr[outcomes->len++] = outcome;
}

/* The bindings own `messages` (the SDK frees them) and free the returned
 * array, with each reject reason in it, after the host has read it. */
void exports_batch_handler_handle_batch(batch_handler_list_message_t *messages,
                                        batch_handler_list_outcome_t *ret) {
    sluice_outcomes_t outcomes = {NULL, 0, 0};
    if (messages->len > 0) {
        outcomes.ptr = sluice__alloc(messages->len * sizeof *outcomes.ptr);
        outcomes.cap = messages->len;
    }
    sluice_handle_batch(messages->ptr, messages->len, &outcomes);
    if (outcomes.len == 0) { /* the bindings free the array only when not empty */
        free(outcomes.ptr);
        outcomes.ptr = NULL;
    }
    ret->ptr = outcomes.ptr;
    ret->len = outcomes.len;
    batch_handler_list_message_free(messages);
    sluice__release();
}
#endif

#endif /* SLUICE_IMPLEMENTED */
#endif /* SLUICE_IMPLEMENTATION */
