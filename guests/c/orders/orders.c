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
 */
/* nanosleep is POSIX: -std=c11 hides it without this. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "guest.h"

#define DEFAULT_RETRY_DELAY_MS 10
#define DEFAULT_FOLLOWUP_QUEUE "shipping"
/* The key-value counter of forwarded orders. */
#define FORWARDED_KEY "forwarded"
#define DEFAULT_REGION "default"
/* The longest `region`: one word of a routing key. */
#define MAX_REGION_LEN 32

static void sleep_ms(uint64_t ms) {
    struct timespec t;
    t.tv_sec = (time_t)(ms / 1000);
    t.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* Rejects with `malformed order: <why>` (`why` of `len` bytes). */
static void malformed(handler_outcome_t *ret, const char *why, size_t len) {
    sbuf reason;
    sbuf_init(&reason);
    sbuf_puts(&reason, "malformed order: ");
    sbuf_put(&reason, why, len);
    sbuf_check(&reason);
    outcome_reject(ret, reason.data, reason.len);
    sbuf_free(&reason);
}

static void malformed_s(handler_outcome_t *ret, const char *why) { malformed(ret, why, strlen(why)); }

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

/*
 * Step 10: announces the follow-up on config `events_topic`, if set, with
 * routing key `orders.<region>.created`. False when the publish failed (it
 * logs why): the caller retries, which drops the held follow-up.
 */
static bool announce(const char *id_text, size_t id_len, const char *region, size_t region_len,
                     handler_list_u8_t *payload, sluice_handler_publish_publish_options_t *options) {
    size_t topic_len;
    char *topic = guest_config("events_topic", &topic_len);
    if (!topic) return true;
    sbuf route;
    sbuf_init(&route);
    sbuf_puts(&route, "orders.");
    sbuf_put(&route, region, region_len);
    sbuf_puts(&route, ".created");
    sbuf_check(&route);

    handler_string_t topic_arg = {(uint8_t *)topic, topic_len};
    handler_string_t route_arg = {(uint8_t *)route.data, route.len};
    uint32_t copies;
    handler_string_t err;
    bool ok = sluice_handler_publish_publish_to_topic(&topic_arg, &route_arg, payload, options,
                                                      &copies, &err);
    sbuf line;
    sbuf_init(&line);
    sbuf_puts(&line, "order ");
    sbuf_put(&line, id_text, id_len);
    if (ok) {
        sbuf_puts(&line, " announced on ");
        sbuf_put(&line, topic, topic_len);
        sbuf_puts(&line, " as ");
        sbuf_put(&line, route.data, route.len);
        sbuf_puts(&line, " to ");
        sbuf_put_u64(&line, copies);
        sbuf_puts(&line, " queue(s)");
        guest_log_sbuf(SLUICE_HANDLER_LOG_LEVEL_INFO, &line);
    } else {
        sbuf_puts(&line, ": publish to topic ");
        sbuf_put_rust_debug(&line, topic, topic_len);
        sbuf_puts(&line, " failed: ");
        sbuf_put(&line, err.ptr, err.len);
        handler_string_free(&err); /* the error string is ours */
        guest_log_sbuf(SLUICE_HANDLER_LOG_LEVEL_ERROR, &line);
    }
    sbuf_free(&route);
    free(topic);
    return ok;
}

/* Config `retry_delay_ms` (trimmed), default 10; a bad value logs a warning. */
static uint64_t retry_delay_ms(void) {
    size_t len;
    char *value = guest_config("retry_delay_ms", &len);
    if (!value) return DEFAULT_RETRY_DELAY_MS;
    const char *s = value;
    size_t n = len;
    trim_unicode(&s, &n);
    uint64_t delay;
    if (!parse_u64(s, n, &delay)) {
        sbuf warn;
        sbuf_init(&warn);
        sbuf_puts(&warn, "config retry_delay_ms=");
        sbuf_put_rust_debug(&warn, value, len);
        sbuf_puts(&warn, " is not a u64; using ");
        sbuf_put_u64(&warn, DEFAULT_RETRY_DELAY_MS);
        guest_log_sbuf(SLUICE_HANDLER_LOG_LEVEL_WARN, &warn);
        delay = DEFAULT_RETRY_DELAY_MS;
    }
    free(value);
    return delay;
}

/*
 * Counts one forward in the key-value store and logs `line` (freeing it)
 * with the new count. The count is a statistic: when the store refuses (not
 * granted, unreachable) it logs a warning and `line` as it is.
 */
static void log_forwarded(const char *id_text, size_t id_len, sbuf *line) {
    handler_string_t key;
    handler_string_set(&key, FORWARDED_KEY);
    int64_t count;
    handler_string_t err;
    if (sluice_handler_kv_increment(&key, 1, &count, &err)) {
        sbuf_puts(line, " (forwarded: ");
        if (count < 0) {
            sbuf_puts(line, "-");
            sbuf_put_u64(line, (uint64_t)0 - (uint64_t)count);
        } else {
            sbuf_put_u64(line, (uint64_t)count);
        }
        sbuf_puts(line, ")");
    } else {
        sbuf warn;
        sbuf_init(&warn);
        sbuf_puts(&warn, "order ");
        sbuf_put(&warn, id_text, id_len);
        sbuf_puts(&warn, ": not counted: ");
        sbuf_put(&warn, err.ptr, err.len);
        handler_string_free(&err); /* the error string is ours */
        guest_log_sbuf(SLUICE_HANDLER_LOG_LEVEL_WARN, &warn);
    }
    guest_log_sbuf(SLUICE_HANDLER_LOG_LEVEL_INFO, line);
}

/* Decides about one message. Borrows `message`; sets `*ret`. */
static void handle(const handler_message_t *message, handler_outcome_t *ret) {
    const uint8_t *payload = message->payload.ptr;
    size_t payload_len = message->payload.len;
    if (!utf8_valid(payload, payload_len)) {
        static const char reason[] = "payload is not UTF-8";
        outcome_reject(ret, reason, sizeof reason - 1);
        return;
    }

    char *error = NULL;
    json_value *root = json_parse(payload, payload_len, &error);
    if (!root) {
        if (!error) abort(); /* out of memory */
        malformed_s(ret, error);
        free(error);
        return;
    }
    if (root->type != JSON_OBJECT) {
        malformed_s(ret, "not a JSON object");
        json_free(root);
        return;
    }

    /* id, and id_text: the string itself or the number as JSON writes it. */
    const json_value *id = json_object_get(root, "id");
    const char *id_text;
    size_t id_len;
    if (!id) {
        malformed_s(ret, "missing `id`");
        json_free(root);
        return;
    } else if (id->type == JSON_STRING) {
        id_text = id->u.string.data;
        id_len = id->u.string.len;
    } else if (id->type == JSON_NUMBER) {
        id_text = id->u.number.text;
        id_len = id->u.number.text_len;
    } else {
        malformed_s(ret, "`id` must be a string or a number");
        json_free(root);
        return;
    }

    uint64_t qty = 1;
    const json_value *qty_value = json_object_get(root, "qty");
    if (qty_value && !(json_as_u64(qty_value, &qty) && qty > 0)) {
        sbuf why;
        sbuf_init(&why);
        sbuf_puts(&why, "`qty` must be a positive integer, got ");
        sbuf_put_json(&why, qty_value);
        sbuf_check(&why);
        malformed(ret, why.data, why.len);
        sbuf_free(&why);
        json_free(root);
        return;
    }

    const char *region = DEFAULT_REGION;
    size_t region_len = strlen(DEFAULT_REGION);
    const json_value *region_value = json_object_get(root, "region");
    if (region_value) {
        if (region_value->type != JSON_STRING ||
            !is_word(region_value->u.string.data, region_value->u.string.len)) {
            malformed_s(ret, "`region` must be a word of letters, digits, - or _");
            json_free(root);
            return;
        }
        region = region_value->u.string.data;
        region_len = region_value->u.string.len;
    }

    uint64_t until;
    if (json_as_u64(json_object_get(root, "retry_until_attempt"), &until) &&
        (uint64_t)message->attempt < until) {
        uint64_t delay = retry_delay_ms();
        sbuf line;
        sbuf_init(&line);
        sbuf_puts(&line, "order ");
        sbuf_put(&line, id_text, id_len);
        sbuf_puts(&line, ": attempt ");
        sbuf_put_u64(&line, message->attempt);
        sbuf_puts(&line, " < ");
        sbuf_put_u64(&line, until);
        sbuf_puts(&line, ", retrying in ");
        sbuf_put_u64(&line, delay);
        sbuf_puts(&line, " ms");
        guest_log_sbuf(SLUICE_HANDLER_LOG_LEVEL_INFO, &line);
        outcome_retry(ret, true, delay);
        json_free(root);
        return;
    }

    const json_value *always = json_object_get(root, "always_retry");
    if (always && always->type == JSON_BOOL && always->u.boolean) {
        sbuf line;
        sbuf_init(&line);
        sbuf_puts(&line, "order ");
        sbuf_put(&line, id_text, id_len);
        sbuf_puts(&line, ": always_retry set, retrying");
        guest_log_sbuf(SLUICE_HANDLER_LOG_LEVEL_INFO, &line);
        outcome_retry(ret, false, 0);
        json_free(root);
        return;
    }

    size_t queue_len;
    char *queue = guest_config("followup_queue", &queue_len);
    if (!queue) {
        queue_len = strlen(DEFAULT_FOLLOWUP_QUEUE);
        queue = malloc(queue_len + 1);
        if (!queue) abort();
        memcpy(queue, DEFAULT_FOLLOWUP_QUEUE, queue_len + 1);
    }

    /* {"order":<id as it appeared>,"qty":<qty>,"source":"<message id>"} */
    sbuf followup;
    sbuf_init(&followup);
    sbuf_puts(&followup, "{\"order\":");
    sbuf_put_json(&followup, id);
    sbuf_puts(&followup, ",\"qty\":");
    sbuf_put_u64(&followup, qty);
    sbuf_puts(&followup, ",\"source\":");
    sbuf_put_json_string(&followup, (const char *)message->id.ptr, message->id.len);
    sbuf_puts(&followup, "}");
    sbuf_check(&followup);

    /* All borrowed: publish copies what it needs. */
    handler_string_t queue_arg = {(uint8_t *)queue, queue_len};
    handler_list_u8_t payload_arg = {(uint8_t *)followup.data, followup.len};
    handler_tuple2_string_string_t header;
    handler_string_set(&header.f0, "order-id");
    header.f1 = (handler_string_t){(uint8_t *)id_text, id_len};
    sluice_handler_publish_publish_options_t options;
    memset(&options, 0, sizeof options);
    options.headers.ptr = &header;
    options.headers.len = 1;
    options.key.is_some = false;
    options.delay_ms.is_some = false;

    handler_string_t err;
    sbuf line;
    sbuf_init(&line);
    sbuf_puts(&line, "order ");
    sbuf_put(&line, id_text, id_len);
    if (!sluice_handler_publish_publish(&queue_arg, &payload_arg, &options, &err)) {
        sbuf_puts(&line, ": publish to ");
        sbuf_put_rust_debug(&line, queue, queue_len);
        sbuf_puts(&line, " failed: ");
        sbuf_put(&line, err.ptr, err.len);
        handler_string_free(&err); /* the error string is ours */
        guest_log_sbuf(SLUICE_HANDLER_LOG_LEVEL_ERROR, &line);
        outcome_retry(ret, false, 0);
    } else if (!announce(id_text, id_len, region, region_len, &payload_arg, &options)) {
        sbuf_free(&line);
        outcome_retry(ret, false, 0);
    } else {
        sbuf_puts(&line, " (qty ");
        sbuf_put_u64(&line, qty);
        sbuf_puts(&line, ") from message ");
        sbuf_put(&line, message->id.ptr, message->id.len);
        sbuf_puts(&line, " forwarded to ");
        sbuf_put(&line, queue, queue_len);
        log_forwarded(id_text, id_len, &line);
        outcome_done(ret);
    }

    sbuf_free(&followup);
    free(queue);
    json_free(root);
}

void exports_handler_handle(handler_message_t *message, handler_outcome_t *ret) {
    /* Simulated processing time: config work_ms, when it is a whole number. */
    size_t len;
    char *work = guest_config("work_ms", &len);
    if (work) {
        uint64_t ms;
        if (parse_u64(work, len, &ms)) sleep_ms(ms);
        free(work);
    }

    handle(message, ret);
    handler_message_free(message); /* the export owns its argument */
}
