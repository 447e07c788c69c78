/*
 * The realistic example handler: validates a JSON order and publishes a
 * follow-up message for it. The C twin of guests/rust/orders; the exact
 * behaviour is guests/spec/ORDERS.md:
 *
 * 1. config `work_ms`: sleep that long first (simulated work);
 * 2. the payload must be UTF-8, 3. parse as JSON, 4. be an object;
 * 5. `id` a string or a number, 6. `qty` (default 1) a positive integer,
 *    `region` (default `default`) a word of letters, digits, `-` or `_`;
 * 7. `"retry_until_attempt": N` retries after config `retry_delay_ms`
 *    (default 10) while attempt < N; 8. `"always_retry": true` retries
 *    with the host's backoff;
 * 9. otherwise publishes {"order": id, "qty": qty, "source": message-id} to
 *    config `followup_queue` (default `shipping`) with header `order-id`;
 * 10. announces it on the topic named by config `events_topic` (if set) with
 *    routing key `orders.<region>.created`;
 * 11. counts the forward in the key-value store (key `forwarded`); without
 *    the key-value grant it warns and forwards the order all the same.
 *
 * json.c is the example's own JSON parser, and rust_text.c its copy of
 * Rust's rules for numbers and quoting, so that the logs match the Rust
 * guest's byte for byte.
 */
/* nanosleep is POSIX: -std=c11 hides it without this. */
#define _POSIX_C_SOURCE 200809L

#define SLUICE_IMPLEMENTATION
#include "sluice.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json.h"
#include "rust_text.h"

#define DEFAULT_RETRY_DELAY_MS 10
#define DEFAULT_FOLLOWUP_QUEUE "shipping"
/* The key-value counter of forwarded orders. */
#define FORWARDED_KEY "forwarded"
#define DEFAULT_REGION "default"
/* The longest `region`: one word of a routing key. */
#define MAX_REGION_LEN 32

/* An order, borrowed from the parsed payload. */
typedef struct {
    const json_value *id;   /* as it appeared: a string or a number */
    const char *id_text;    /* the string, or the number as JSON writes it */
    size_t id_len;          /* (a JSON string may hold NUL) */
    uint64_t qty;
    const char *region;     /* the routing key's middle word */
    bool has_retry_until;
    uint64_t retry_until;   /* `retry_until_attempt` */
    bool always_retry;
} order;

static void sleep_ms(uint64_t ms) {
    struct timespec t;
    t.tv_sec = (time_t)(ms / 1000);
    t.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* Logs `order <id_text>` followed by the printf-style rest of the line. */
static void log_order(sluice_level_t level, const order *o, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static void log_order(sluice_level_t level, const order *o, const char *format, ...) {
    sbuf line;
    sbuf_init(&line);
    sbuf_puts(&line, "order ");
    sbuf_put(&line, o->id_text, o->id_len);
    va_list args;
    va_start(args, format);
    sbuf_vprintf(&line, format, args);
    va_end(args);
    sbuf_check(&line);
    sluice_log_text(level, line.data, line.len);
    sbuf_free(&line);
}

/* `text` quoted as Rust's {:?} writes it, in fresh heap memory (free it). */
static char *quoted(const char *text) {
    sbuf b;
    sbuf_init(&b);
    sbuf_put_rust_debug(&b, text, strlen(text));
    sbuf_check(&b);
    return b.data;
}

/* 1 to 32 of ASCII letters, digits, `-` and `_`: one word of a routing key. */
static bool is_word(const char *s, size_t len) {
    if (len == 0 || len > MAX_REGION_LEN) return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_';
        if (!ok) return false;
    }
    return true;
}

/* Steps 4 to 6: fills *o from the parsed payload, or sets *reject and
 * returns false. */
static bool parse_order(const json_value *root, order *o, sluice_outcome_t *reject) {
    memset(o, 0, sizeof *o);
    if (root->type != JSON_OBJECT) {
        *reject = sluice_reject("malformed order: not a JSON object");
        return false;
    }
    o->id = json_object_get(root, "id");
    if (!o->id) {
        *reject = sluice_reject("malformed order: missing `id`");
        return false;
    } else if (o->id->type == JSON_STRING) {
        o->id_text = o->id->u.string.data;
        o->id_len = o->id->u.string.len;
    } else if (o->id->type == JSON_NUMBER) {
        o->id_text = o->id->u.number.text;
        o->id_len = o->id->u.number.text_len;
    } else {
        *reject = sluice_reject("malformed order: `id` must be a string or a number");
        return false;
    }

    o->qty = 1;
    const json_value *qty = json_object_get(root, "qty");
    if (qty && !(json_as_u64(qty, &o->qty) && o->qty > 0)) {
        sbuf got; /* the value as serde_json writes it */
        sbuf_init(&got);
        sbuf_put_json(&got, qty);
        sbuf_check(&got);
        *reject = sluice_rejectf("malformed order: `qty` must be a positive integer, got %s",
                                 got.data);
        sbuf_free(&got);
        return false;
    }

    o->region = DEFAULT_REGION;
    const json_value *region = json_object_get(root, "region");
    if (region) {
        if (region->type != JSON_STRING || !is_word(region->u.string.data, region->u.string.len)) {
            *reject = sluice_reject(
                "malformed order: `region` must be a word of letters, digits, - or _");
            return false;
        }
        o->region = region->u.string.data;
    }

    o->has_retry_until = json_as_u64(json_object_get(root, "retry_until_attempt"), &o->retry_until);
    const json_value *always = json_object_get(root, "always_retry");
    o->always_retry = always && always->type == JSON_BOOL && always->u.boolean;
    return true;
}

/* Config `retry_delay_ms` (trimmed), default 10; a bad value logs a warning. */
static uint64_t retry_delay_ms(void) {
    const char *value = sluice_config("retry_delay_ms");
    if (!value) return DEFAULT_RETRY_DELAY_MS;
    const char *digits = value;
    size_t len = strlen(value);
    trim_unicode(&digits, &len);
    uint64_t delay;
    if (parse_u64(digits, len, &delay)) return delay;
    char *shown = quoted(value);
    sluice_log_warn("config retry_delay_ms=%s is not a u64; using %d", shown,
                    DEFAULT_RETRY_DELAY_MS);
    free(shown);
    return DEFAULT_RETRY_DELAY_MS;
}

/*
 * Step 10: announces the follow-up on config `events_topic`, if set, with
 * routing key `orders.<region>.created`. False when the publish failed (it
 * logs why): the caller retries, which drops the held follow-up.
 */
static bool announce(const order *o, const sbuf *payload, const sluice_publish_options_t *options) {
    const char *topic = sluice_config("events_topic");
    if (!topic) return true;
    char route[sizeof "orders..created" + MAX_REGION_LEN];
    snprintf(route, sizeof route, "orders.%s.created", o->region);
    uint32_t copies;
    if (!sluice_publish_to_topic(topic, route, payload->data, payload->len, options, &copies)) {
        char *shown = quoted(topic);
        log_order(SLUICE_ERROR, o, ": publish to topic %s failed: %s", shown, sluice_last_error());
        free(shown);
        return false;
    }
    log_order(SLUICE_INFO, o, " announced on %s as %s to %" PRIu32 " queue(s)", topic, route,
              copies);
    return true;
}

/*
 * Step 11: counts the forward in the key-value store and logs it. The count
 * is a statistic: when the store refuses (not granted, unreachable) it warns
 * and logs the forward without a count.
 */
static void log_forwarded(const order *o, const char *message_id, const char *queue) {
    int64_t count;
    if (sluice_kv_increment(FORWARDED_KEY, 1, &count)) {
        log_order(SLUICE_INFO, o,
                  " (qty %" PRIu64 ") from message %s forwarded to %s (forwarded: %" PRId64 ")",
                  o->qty, message_id, queue, count);
        return;
    }
    log_order(SLUICE_WARN, o, ": not counted: %s", sluice_last_error());
    log_order(SLUICE_INFO, o, " (qty %" PRIu64 ") from message %s forwarded to %s", o->qty,
              message_id, queue);
}

/* Steps 7 to 11, for a valid order. */
static sluice_outcome_t handle_order(const sluice_message_t *message, const order *o) {
    uint32_t attempt = sluice_message_attempt(message);
    if (o->has_retry_until && attempt < o->retry_until) {
        uint64_t delay = retry_delay_ms();
        log_order(SLUICE_INFO, o, ": attempt %" PRIu32 " < %" PRIu64 ", retrying in %" PRIu64 " ms",
                  attempt, o->retry_until, delay);
        return sluice_retry_after_ms(delay);
    }
    if (o->always_retry) {
        log_order(SLUICE_INFO, o, ": always_retry set, retrying");
        return sluice_retry();
    }

    const char *message_id = sluice_message_id(message);
    const char *queue = sluice_config_or("followup_queue", DEFAULT_FOLLOWUP_QUEUE);
    /* {"order":<id as it appeared>,"qty":<qty>,"source":"<message id>"} */
    sbuf followup;
    sbuf_init(&followup);
    sbuf_puts(&followup, "{\"order\":");
    sbuf_put_json(&followup, o->id);
    sbuf_puts(&followup, ",\"qty\":");
    sbuf_put_u64(&followup, o->qty);
    sbuf_puts(&followup, ",\"source\":");
    sbuf_put_json_string(&followup, message_id, strlen(message_id));
    sbuf_puts(&followup, "}");
    sbuf_check(&followup);

    sluice_pair_t header = {"order-id", o->id_text, o->id_len};
    sluice_publish_options_t options = {.headers = &header, .header_count = 1};
    sluice_outcome_t outcome = sluice_retry();
    if (!sluice_publish(queue, followup.data, followup.len, &options)) {
        char *shown = quoted(queue);
        log_order(SLUICE_ERROR, o, ": publish to %s failed: %s", shown, sluice_last_error());
        free(shown);
    } else if (announce(o, &followup, &options)) {
        log_forwarded(o, message_id, queue);
        outcome = sluice_done();
    }
    sbuf_free(&followup);
    return outcome;
}

sluice_outcome_t sluice_handle(const sluice_message_t *message) {
    /* Simulated processing time: config work_ms, when it is a whole number. */
    const char *work = sluice_config("work_ms");
    uint64_t ms;
    if (work && parse_u64(work, strlen(work), &ms)) sleep_ms(ms);

    size_t len;
    const uint8_t *payload = sluice_payload(message, &len);
    if (!utf8_valid(payload, len)) return sluice_reject("payload is not UTF-8");
    char *error = NULL;
    json_value *root = json_parse(payload, len, &error);
    if (!root) {
        if (!error) abort(); /* out of memory */
        sluice_outcome_t reject = sluice_rejectf("malformed order: %s", error);
        free(error);
        return reject;
    }
    order o;
    sluice_outcome_t outcome;
    if (parse_order(root, &o, &outcome)) outcome = handle_order(message, &o);
    json_free(root);
    return outcome;
}
