/* The fake host's imports. See fake_host.h. */
#include "fake_host.h"

#include <stdlib.h>

typedef SLUICE__W(string_t) wit_string;

fake_host host;
int checks, failures;

/* The generated bindings' allocator (its definition in the bindings carries
 * wasm export attributes, so the tests define it). */
void *cabi_realloc(void *ptr, size_t old_size, size_t align, size_t new_size) {
    (void)old_size;
    if (new_size == 0) return (void *)align;
    void *ret = realloc(ptr, new_size);
    if (!ret) abort();
    return ret;
}

static fake_bytes copy(const void *data, size_t len) {
    fake_bytes b = {malloc(len + 1), len};
    if (!b.data) abort();
    if (len) memcpy(b.data, data, len);
    b.data[len] = '\0';
    return b;
}

static void drop(fake_bytes *b) {
    free(b->data);
    b->data = NULL;
    b->len = 0;
}

bool fake_is(fake_bytes b, const char *text) {
    return b.data && b.len == strlen(text) && memcmp(b.data, text, b.len) == 0;
}

void fake_reset(void) {
    for (size_t i = 0; i < host.log_count; i++) drop(&host.log_lines[i]);
    for (size_t i = 0; i < host.publish_count; i++) {
        fake_publish *p = &host.publishes[i];
        drop(&p->queue), drop(&p->topic), drop(&p->route), drop(&p->payload), drop(&p->key);
        for (size_t h = 0; h < p->header_count; h++) {
            drop(&p->header_names[h]);
            drop(&p->header_values[h]);
        }
    }
    for (size_t i = 0; i < host.kv_count; i++) drop(&host.kv_keys[i]), drop(&host.kv_values[i]);
    memset(&host, 0, sizeof host);
}

/* `len` bytes handed to the guest as the bindings hand them: heap memory,
 * or the dummy pointer cabi_realloc gives a zero-length list. */
static uint8_t *hand_over(const void *data, size_t len) {
    uint8_t *p = cabi_realloc(NULL, 0, 1, len);
    if (len) memcpy(p, data, len);
    return p;
}

static wit_string hand_over_text(const char *text) {
    wit_string s = {hand_over(text, strlen(text)), strlen(text)};
    return s;
}

sluice_message_t fake_message(const char *id, const char *payload, size_t header_count,
                              const char *const *headers) {
    sluice_message_t m;
    memset(&m, 0, sizeof m);
    m.id = hand_over_text(id);
    m.key = hand_over_text("key-of-");
    m.queue = hand_over_text("orders");
    m.payload.ptr = hand_over(payload, strlen(payload));
    m.payload.len = strlen(payload);
    m.headers.len = header_count;
    m.headers.ptr = cabi_realloc(NULL, 0, 8, header_count * sizeof *m.headers.ptr);
    for (size_t i = 0; i < header_count; i++) {
        m.headers.ptr[i].f0 = hand_over_text(headers[2 * i]);
        m.headers.ptr[i].f1 = hand_over_text(headers[2 * i + 1]);
    }
    m.attempt = 3;
    m.enqueued_at_ms = 1700000000123;
    return m;
}

/* ---- log ---- */

void sluice_handler_log_log(sluice_handler_log_level_t level, wit_string *message) {
    if (host.log_count == FAKE_MAX) abort();
    host.log_levels[host.log_count] = level;
    host.log_lines[host.log_count++] = copy(message->ptr, message->len);
}

/* ---- publish ---- */

static fake_publish *record_publish(wit_string *queue_or_topic, SLUICE__W(list_u8_t) *payload,
                                    sluice_handler_publish_publish_options_t *options) {
    if (host.publish_count == FAKE_MAX) abort();
    fake_publish *p = &host.publishes[host.publish_count++];
    p->queue = copy(queue_or_topic->ptr, queue_or_topic->len);
    p->payload = copy(payload->ptr, payload->len);
    p->header_count = options->headers.len;
    for (size_t i = 0; i < options->headers.len && i < FAKE_MAX; i++) {
        p->header_names[i] = copy(options->headers.ptr[i].f0.ptr, options->headers.ptr[i].f0.len);
        p->header_values[i] = copy(options->headers.ptr[i].f1.ptr, options->headers.ptr[i].f1.len);
    }
    p->has_key = options->key.is_some;
    if (p->has_key) p->key = copy(options->key.val.ptr, options->key.val.len);
    p->has_delay = options->delay_ms.is_some;
    p->delay_ms = options->delay_ms.val;
    return p;
}

bool sluice_handler_publish_publish(wit_string *queue, SLUICE__W(list_u8_t) *payload,
                                    sluice_handler_publish_publish_options_t *options,
                                    wit_string *err) {
    record_publish(queue, payload, options);
    if (host.publish_error) {
        *err = hand_over_text(host.publish_error);
        return false;
    }
    return true;
}

bool sluice_handler_publish_publish_to_topic(wit_string *topic, wit_string *route,
                                             SLUICE__W(list_u8_t) *payload,
                                             sluice_handler_publish_publish_options_t *options,
                                             uint32_t *ret, wit_string *err) {
    fake_publish *p = record_publish(topic, payload, options);
    p->to_topic = true;
    p->topic = p->queue;
    p->queue = copy("", 0);
    p->route = copy(route->ptr, route->len);
    if (host.publish_error) {
        *err = hand_over_text(host.publish_error);
        return false;
    }
    *ret = host.topic_copies;
    return true;
}

/* ---- config ---- */

bool sluice_handler_config_get(wit_string *key, wit_string *ret) {
    for (size_t i = 0; i < host.config_count; i++) {
        const char *k = host.config_keys[i];
        if (strlen(k) == key->len && memcmp(k, key->ptr, key->len) == 0) {
            *ret = hand_over_text(host.config_values[i]);
            return true;
        }
    }
    return false;
}

void sluice_handler_config_get_all(SLUICE__W(list_tuple2_string_string_t) *ret) {
    ret->len = host.config_count;
    ret->ptr = cabi_realloc(NULL, 0, 8, host.config_count * sizeof *ret->ptr);
    for (size_t i = 0; i < host.config_count; i++) {
        ret->ptr[i].f0 = hand_over_text(host.config_keys[i]);
        ret->ptr[i].f1 = hand_over_text(host.config_values[i]);
    }
}

/* ---- kv: a small store in memory ---- */

static int kv_find(const wit_string *key) {
    for (size_t i = 0; i < host.kv_count; i++) {
        fake_bytes *k = &host.kv_keys[i];
        if (k->len == key->len && memcmp(k->data, key->ptr, key->len) == 0) return (int)i;
    }
    return -1;
}

static bool kv_refused(wit_string *err) {
    if (!host.kv_error) return false;
    *err = hand_over_text(host.kv_error);
    return true;
}

static void kv_put(const wit_string *key, const void *value, size_t len) {
    int i = kv_find(key);
    if (i < 0) {
        if (host.kv_count == FAKE_MAX) abort();
        i = (int)host.kv_count++;
        host.kv_keys[i] = copy(key->ptr, key->len);
    } else {
        drop(&host.kv_values[i]);
    }
    host.kv_values[i] = copy(value, len);
}

bool sluice_handler_kv_get(wit_string *key, SLUICE__W(option_list_u8_t) *ret, wit_string *err) {
    if (kv_refused(err)) return false;
    int i = kv_find(key);
    ret->is_some = i >= 0;
    if (i >= 0) {
        ret->val.ptr = hand_over(host.kv_values[i].data, host.kv_values[i].len);
        ret->val.len = host.kv_values[i].len;
    }
    return true;
}

bool sluice_handler_kv_set(wit_string *key, SLUICE__W(list_u8_t) *value, uint64_t *maybe_ttl_ms,
                           wit_string *err) {
    if (kv_refused(err)) return false;
    kv_put(key, value->ptr, value->len);
    host.kv_set_has_ttl = maybe_ttl_ms != NULL;
    host.kv_set_ttl_ms = maybe_ttl_ms ? *maybe_ttl_ms : 0;
    return true;
}

bool sluice_handler_kv_delete(wit_string *key, bool *ret, wit_string *err) {
    if (kv_refused(err)) return false;
    int i = kv_find(key);
    *ret = i >= 0;
    if (i >= 0) {
        drop(&host.kv_keys[i]), drop(&host.kv_values[i]);
        host.kv_keys[i] = host.kv_keys[host.kv_count - 1];
        host.kv_values[i] = host.kv_values[host.kv_count - 1];
        host.kv_count--;
    }
    return true;
}

bool sluice_handler_kv_increment(wit_string *key, int64_t delta, int64_t *ret, wit_string *err) {
    if (kv_refused(err)) return false;
    int i = kv_find(key);
    int64_t value = i >= 0 ? strtoll(host.kv_values[i].data, NULL, 10) : 0;
    value += delta;
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)value);
    kv_put(key, text, strlen(text));
    *ret = value;
    return true;
}

/* ---- lease ---- */

uint64_t sluice_handler_lease_time_left(void) { return host.time_left_ms; }

uint64_t sluice_handler_lease_extend(uint64_t ms) {
    host.extended_ms = ms;
    host.time_left_ms = ms;
    return ms;
}

int fake_summary(void) {
    fake_reset();
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
