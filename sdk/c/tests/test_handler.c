/*
 * Native tests of sluice.h for the world `handler`: every helper, run through
 * the export the host calls (exports_handler_handle), against the fake host
 * in fake_host.c. Built and run by sdk/c/check, under the address and
 * undefined-behaviour sanitizers when the compiler has them, which catch a
 * string freed twice, freed too early or never freed.
 */
#define SLUICE_IMPLEMENTATION
#include "sluice.h"

#include <limits.h>
#include <stdlib.h>

#include "fake_host.h"

/* What the handler does in the current test. */
static sluice_outcome_t (*scenario)(const sluice_message_t *message);

sluice_outcome_t sluice_handle(const sluice_message_t *message) { return scenario(message); }

/* Calls the export as the host does, with a fresh message; returns the
 * outcome, which the caller frees with handler_outcome_free (as the
 * generated post-return function does). */
static sluice_outcome_t call(sluice_outcome_t (*handler)(const sluice_message_t *),
                             const char *payload, size_t header_count, const char *const *headers) {
    scenario = handler;
    sluice_message_t message = fake_message("m-1", payload, header_count, headers);
    sluice_outcome_t ret;
    exports_handler_handle(&message, &ret);
    return ret;
}

static bool reason_is(const sluice_outcome_t *o, const char *text) {
    size_t len = strlen(text);
    return o->tag == SLUICE_HANDLER_TYPES_OUTCOME_REJECT && o->val.reject.len == len &&
           (len == 0 || memcmp(o->val.reject.ptr, text, len) == 0);
}

static void versions(void) {
    CHECK_STR(SLUICE_SDK_VERSION, "0.2.0");
    CHECK_STR(SLUICE_WIT_PACKAGE, "sluice:handler@" SLUICE_WIT_VERSION);
}

static void outcomes(void) {
    sluice_outcome_t o = sluice_done();
    CHECK(o.tag == SLUICE_HANDLER_TYPES_OUTCOME_DONE);

    o = sluice_retry();
    CHECK(o.tag == SLUICE_HANDLER_TYPES_OUTCOME_RETRY && !o.val.retry.is_some);

    o = sluice_retry_after_ms(250);
    CHECK(o.tag == SLUICE_HANDLER_TYPES_OUTCOME_RETRY && o.val.retry.is_some &&
          o.val.retry.val == 250);

    o = sluice_snooze_ms(5000);
    CHECK(o.tag == SLUICE_HANDLER_TYPES_OUTCOME_SNOOZE && o.val.snooze == 5000);

    char reason[] = "bad order";
    o = sluice_reject(reason);
    reason[0] = 'X'; /* the outcome has its own copy */
    CHECK(reason_is(&o, "bad order"));
    handler_outcome_free(&o);

    o = sluice_rejectf("qty %d is not %s", -2, "positive");
    CHECK(reason_is(&o, "qty -2 is not positive"));
    handler_outcome_free(&o);

    o = sluice_reject("");
    CHECK(reason_is(&o, ""));
    handler_outcome_free(&o);

    /* A reason longer than any stack buffer. */
    char *long_reason = malloc(10001);
    memset(long_reason, 'r', 10000);
    long_reason[10000] = '\0';
    o = sluice_rejectf("%s!", long_reason);
    CHECK(o.val.reject.len == 10001 && o.val.reject.ptr[9999] == 'r' &&
          o.val.reject.ptr[10000] == '!');
    handler_outcome_free(&o);
    free(long_reason);
}

/* The message's parts, read at the start and checked at the end of the
 * call: borrowed values stay valid until the handler returns. */
static sluice_outcome_t read_message(const sluice_message_t *m) {
    const char *id = sluice_message_id(m);
    const char *key = sluice_message_key(m);
    const char *queue = sluice_message_queue(m);
    const char *trace = sluice_header(m, "trace");
    const sluice_pair_t *headers;
    size_t count = sluice_headers(m, &headers);
    size_t len;
    const uint8_t *payload = sluice_payload(m, &len);

    CHECK(len == 5 && memcmp(payload, "hello", 5) == 0);
    CHECK(sluice_payload_is(m, "hello"));
    CHECK(!sluice_payload_is(m, "hell"));
    CHECK(!sluice_payload_is(m, "hello!"));
    CHECK(sluice_message_attempt(m) == 3);
    CHECK(sluice_message_enqueued_at_ms(m) == 1700000000123);
    CHECK(sluice_header(m, "missing") == NULL);
    CHECK(sluice_header(m, "Trace") == NULL); /* names match exactly */
    CHECK_STR(sluice_header(m, "empty"), "");
    for (int i = 0; i < 40; i++) sluice_log_debug("filler %d", i % 2); /* other calls between */

    CHECK_STR(id, "m-1");
    CHECK_STR(key, "key-of-");
    CHECK_STR(queue, "orders");
    CHECK_STR(trace, "first"); /* the first of two headers of that name */
    CHECK(count == 3);
    CHECK_STR(headers[0].name, "trace");
    CHECK_STR(headers[1].value, "");
    CHECK(headers[1].value_len == 0);
    CHECK_STR(headers[2].value, "second");
    CHECK(headers[2].value_len == 6);
    return sluice_done();
}

static void message_parts(void) {
    const char *headers[] = {"trace", "first", "empty", "", "trace", "second"};
    sluice_outcome_t o = call(read_message, "hello", 3, headers);
    CHECK(o.tag == SLUICE_HANDLER_TYPES_OUTCOME_DONE);
}

static sluice_outcome_t log_lines(const sluice_message_t *m) {
    sluice_log_trace("t");
    sluice_log_debug("d");
    sluice_log_info("message %s attempt %u", sluice_message_id(m), sluice_message_attempt(m));
    sluice_log_warn("w%d", 1);
    sluice_log_error("e");
    sluice_log_text(SLUICE_INFO, "a\0b", 3);
    char *big = malloc(5001);
    memset(big, 'x', 5000);
    big[5000] = '\0';
    sluice_log(SLUICE_WARN, "%s", big);
    free(big);
    /* The conversions formatted without vsnprintf, at their limits, and
     * one that is left to it. */
    sluice_log_info("%d %i %ld %lld|%u %lu %llu %zu|%c%%%s|%05d %x", INT_MIN, -1, -7L, LLONG_MIN,
                    UINT_MAX, 0UL, ULLONG_MAX, (size_t)42, 'q', "str", 7, 255u);
    sluice_log_info("%d %u %llu %s %c%%", -12, 3u, 18446744073709551615ULL, "txt", 'z');
    return sluice_rejectf("logged %zu lines", (size_t)9);
}

static void logging(void) {
    sluice_outcome_t o = call(log_lines, "", 0, NULL);
    CHECK(reason_is(&o, "logged 9 lines"));
    handler_outcome_free(&o);
    CHECK(host.log_count == 9);
    CHECK(host.log_levels[0] == SLUICE_HANDLER_LOG_LEVEL_TRACE);
    CHECK(host.log_levels[1] == SLUICE_HANDLER_LOG_LEVEL_DEBUG);
    CHECK(host.log_levels[2] == SLUICE_HANDLER_LOG_LEVEL_INFO);
    CHECK(host.log_levels[3] == SLUICE_HANDLER_LOG_LEVEL_WARN);
    CHECK(host.log_levels[4] == SLUICE_HANDLER_LOG_LEVEL_ERROR);
    CHECK(fake_is(host.log_lines[2], "message m-1 attempt 3"));
    CHECK(fake_is(host.log_lines[3], "w1"));
    CHECK(host.log_lines[5].len == 3 && memcmp(host.log_lines[5].data, "a\0b", 3) == 0);
    CHECK(host.log_lines[6].len == 5000 && host.log_lines[6].data[4999] == 'x');
    CHECK(fake_is(host.log_lines[7], "-2147483648 -1 -7 -9223372036854775808|4294967295 0 "
                                     "18446744073709551615 42|q%str|00007 ff"));
    CHECK(fake_is(host.log_lines[8], "-12 3 18446744073709551615 txt z%"));
}

static sluice_outcome_t publish_all_ways(const sluice_message_t *m) {
    (void)m;
    CHECK_STR(sluice_last_error(), "");
    CHECK(sluice_publish("plain", "p1", 2, NULL));

    sluice_pair_t headers[] = {{"order-id", "7", 0}, {"raw", "a\0b", 3}};
    sluice_publish_options_t options = {headers, 2, "dedup-7", 1500};
    CHECK(sluice_publish("shipping", "{\"order\":7}", 11, &options));

    uint32_t copies = 0;
    host.topic_copies = 3;
    CHECK(sluice_publish_to_topic("events", "orders.eu.created", "t", 1, NULL, &copies));
    CHECK(copies == 3);
    CHECK(sluice_publish_to_topic("events", "orders.eu.created", "t", 1, &options, NULL));

    host.publish_error = "queue name \"bad name\" is invalid";
    CHECK(!sluice_publish("bad name", "x", 1, NULL));
    CHECK_STR(sluice_last_error(), "queue name \"bad name\" is invalid");
    host.publish_error = "no queue is bound";
    copies = 99;
    CHECK(!sluice_publish_to_topic("events", "x", "", 0, NULL, &copies));
    CHECK(copies == 99); /* untouched on failure */
    CHECK_STR(sluice_last_error(), "no queue is bound");
    host.publish_error = "";
    CHECK(!sluice_publish("q", "x", 1, NULL)); /* an empty reason is still a failure */
    CHECK_STR(sluice_last_error(), "");
    return sluice_retry();
}

static void publishing(void) {
    sluice_outcome_t o = call(publish_all_ways, "", 0, NULL);
    CHECK(o.tag == SLUICE_HANDLER_TYPES_OUTCOME_RETRY);
    CHECK_STR(sluice_last_error(), ""); /* reset when the call returned */
    CHECK(host.publish_count == 7);

    fake_publish *plain = &host.publishes[0];
    CHECK(fake_is(plain->queue, "plain") && fake_is(plain->payload, "p1"));
    CHECK(plain->header_count == 0 && !plain->has_key && !plain->has_delay);

    fake_publish *full = &host.publishes[1];
    CHECK(fake_is(full->queue, "shipping") && fake_is(full->payload, "{\"order\":7}"));
    CHECK(full->header_count == 2);
    CHECK(fake_is(full->header_names[0], "order-id") && fake_is(full->header_values[0], "7"));
    CHECK(full->header_values[1].len == 3 && memcmp(full->header_values[1].data, "a\0b", 3) == 0);
    CHECK(full->has_key && fake_is(full->key, "dedup-7"));
    CHECK(full->has_delay && full->delay_ms == 1500);

    fake_publish *topic = &host.publishes[2];
    CHECK(topic->to_topic && fake_is(topic->topic, "events"));
    CHECK(fake_is(topic->route, "orders.eu.created") && fake_is(topic->payload, "t"));
    CHECK(host.publishes[3].header_count == 2 && host.publishes[3].has_key);
}

static sluice_outcome_t read_config(const sluice_message_t *m) {
    (void)m;
    CHECK_STR(sluice_config("queue"), "shipping");
    CHECK(sluice_config("absent") == NULL);
    CHECK_STR(sluice_config("empty"), "");
    CHECK_STR(sluice_config_or("absent", "fallback"), "fallback");
    CHECK_STR(sluice_config_or("queue", "fallback"), "shipping");
    const sluice_pair_t *all;
    CHECK(sluice_config_all(&all) == 2);
    CHECK_STR(all[0].name, "queue");
    CHECK_STR(all[0].value, "shipping");
    CHECK(all[0].value_len == 8);
    CHECK_STR(all[1].name, "empty");
    CHECK_STR(all[1].value, "");
    return sluice_done();
}

static void config(void) {
    host.config_count = 2;
    host.config_keys[0] = "queue", host.config_values[0] = "shipping";
    host.config_keys[1] = "empty", host.config_values[1] = "";
    call(read_config, "", 0, NULL);
}

static sluice_outcome_t read_no_config(const sluice_message_t *m) {
    (void)m;
    const sluice_pair_t *all = NULL;
    CHECK(sluice_config_all(&all) == 0);
    CHECK(sluice_config("queue") == NULL);
    return sluice_done();
}

static void config_when_empty(void) { call(read_no_config, "", 0, NULL); }

static sluice_outcome_t use_kv(const sluice_message_t *m) {
    (void)m;
    const uint8_t *value = NULL;
    size_t len = 0;
    CHECK(sluice_kv_get("k", &value, &len) == 0);
    CHECK(sluice_kv_set("k", "v\0w", 3, 0));
    CHECK(!host.kv_set_has_ttl);
    CHECK(sluice_kv_get("k", &value, &len) == 1);
    CHECK(len == 3 && memcmp(value, "v\0w", 3) == 0 && value[3] == '\0');
    CHECK(sluice_kv_set("k", "", 0, 60000));
    CHECK(host.kv_set_has_ttl && host.kv_set_ttl_ms == 60000);
    CHECK(sluice_kv_get("k", &value, &len) == 1 && len == 0 && value[0] == '\0');
    CHECK(sluice_kv_delete("k") == 1);
    CHECK(sluice_kv_delete("k") == 0);

    int64_t count = 0;
    CHECK(sluice_kv_increment("n", 5, &count) && count == 5);
    CHECK(sluice_kv_increment("n", -7, &count) && count == -2);
    CHECK(sluice_kv_increment("n", 1, NULL));
    CHECK(sluice_kv_get("n", &value, &len) == 1);
    CHECK_STR((const char *)value, "-1");

    host.kv_error = "kv is not granted to this handler";
    count = 42;
    CHECK(sluice_kv_get("n", &value, &len) == -1);
    CHECK_STR(sluice_last_error(), "kv is not granted to this handler");
    CHECK(!sluice_kv_set("n", "1", 1, 0));
    CHECK(sluice_kv_delete("n") == -1);
    CHECK(!sluice_kv_increment("n", 1, &count) && count == 42);
    CHECK_STR(sluice_last_error(), "kv is not granted to this handler");
    return sluice_done();
}

static void kv(void) { call(use_kv, "", 0, NULL); }

static sluice_outcome_t use_lease(const sluice_message_t *m) {
    (void)m;
    CHECK(sluice_lease_time_left() == 800);
    CHECK(sluice_lease_extend(30000) == 30000);
    CHECK(host.extended_ms == 30000);
    CHECK(sluice_lease_time_left() == 30000);
    return sluice_snooze_ms(1);
}

static void lease(void) {
    host.time_left_ms = 800;
    sluice_outcome_t o = call(use_lease, "", 0, NULL);
    CHECK(o.tag == SLUICE_HANDLER_TYPES_OUTCOME_SNOOZE);
}

int main(void) {
    RUN(versions);
    RUN(outcomes);
    RUN(message_parts);
    RUN(logging);
    RUN(publishing);
    RUN(config);
    RUN(config_when_empty);
    RUN(kv);
    RUN(lease);
    return fake_summary();
}
