/*
 * Native tests of sluice.h for the world `batch-handler` (compiled with
 * -DSLUICE_BATCH_HANDLER): the batch export and its list of outcomes, and the
 * helpers over that world's bindings. The helpers themselves are tested in
 * test_handler.c; these check that they build and work over the batch
 * world's types too.
 */
#define SLUICE_IMPLEMENTATION
#include "sluice.h"

#include <stdlib.h>

#include "fake_host.h"

/* What the handler does in the current test. */
static void (*scenario)(const sluice_message_t *messages, size_t count,
                        sluice_outcomes_t *outcomes);

void sluice_handle_batch(const sluice_message_t *messages, size_t count,
                         sluice_outcomes_t *outcomes) {
    scenario(messages, count, outcomes);
}

/* Calls the export as the host does, with one fresh message per payload. The
 * caller frees the result with batch_handler_list_outcome_free (as the
 * generated post-return function does). */
static batch_handler_list_outcome_t call_batch(
    void (*handler)(const sluice_message_t *, size_t, sluice_outcomes_t *),
    const char *const *payloads, size_t count) {
    scenario = handler;
    batch_handler_list_message_t messages;
    messages.len = count;
    messages.ptr = cabi_realloc(NULL, 0, 8, count * sizeof *messages.ptr);
    for (size_t i = 0; i < count; i++) {
        char id[32];
        snprintf(id, sizeof id, "m-%zu", i + 1);
        messages.ptr[i] = fake_message(id, payloads[i], 0, NULL);
    }
    batch_handler_list_outcome_t ret;
    exports_batch_handler_handle_batch(&messages, &ret);
    return ret;
}

/* As hello_batch: an outcome per payload, and one too many for `extra`. */
static void decide_each(const sluice_message_t *messages, size_t count,
                        sluice_outcomes_t *outcomes) {
    sluice_log_info("%zu messages, the second %s", count,
                    count > 1 ? sluice_message_id(&messages[1]) : "-");
    for (size_t i = 0; i < count; i++) {
        const sluice_message_t *m = &messages[i];
        if (sluice_payload_is(m, "retry")) {
            sluice_outcomes_push(outcomes, sluice_retry_after_ms(10));
        } else if (sluice_payload_is(m, "reject")) {
            sluice_outcomes_push(outcomes, sluice_rejectf("rejected %s", sluice_message_id(m)));
        } else if (sluice_payload_is(m, "extra")) {
            sluice_outcomes_push(outcomes, sluice_done());
            sluice_outcomes_push(outcomes, sluice_reject("one too many"));
        } else {
            sluice_outcomes_push(outcomes, sluice_done());
        }
    }
}

static bool reason_is(const sluice_outcome_t *o, const char *text) {
    size_t len = strlen(text);
    return o->tag == SLUICE_HANDLER_TYPES_OUTCOME_REJECT && o->val.reject.len == len &&
           (len == 0 || memcmp(o->val.reject.ptr, text, len) == 0);
}

static void one_outcome_each(void) {
    const char *payloads[] = {"retry", "reject", "ok"};
    batch_handler_list_outcome_t ret = call_batch(decide_each, payloads, 3);
    CHECK(ret.len == 3);
    CHECK(ret.ptr[0].tag == SLUICE_HANDLER_TYPES_OUTCOME_RETRY && ret.ptr[0].val.retry.val == 10);
    CHECK(reason_is(&ret.ptr[1], "rejected m-2"));
    CHECK(ret.ptr[2].tag == SLUICE_HANDLER_TYPES_OUTCOME_DONE);
    CHECK(host.log_count == 1 && fake_is(host.log_lines[0], "3 messages, the second m-2"));
    batch_handler_list_outcome_free(&ret);
}

static void one_too_many(void) {
    const char *payloads[] = {"extra"};
    batch_handler_list_outcome_t ret = call_batch(decide_each, payloads, 1);
    CHECK(ret.len == 2);
    CHECK(reason_is(&ret.ptr[1], "one too many"));
    batch_handler_list_outcome_free(&ret);
}

static void many_grow_the_list(void) {
    const char *payloads[40];
    for (size_t i = 0; i < 40; i++) payloads[i] = i % 2 ? "extra" : "reject";
    batch_handler_list_outcome_t ret = call_batch(decide_each, payloads, 40);
    CHECK(ret.len == 60);
    CHECK(reason_is(&ret.ptr[0], "rejected m-1"));
    CHECK(reason_is(&ret.ptr[59], "one too many"));
    batch_handler_list_outcome_free(&ret);
}

static void push_nothing(const sluice_message_t *messages, size_t count,
                         sluice_outcomes_t *outcomes) {
    (void)messages, (void)count, (void)outcomes;
}

static void empty_lists(void) {
    batch_handler_list_outcome_t ret = call_batch(decide_each, NULL, 0);
    CHECK(ret.len == 0 && ret.ptr == NULL);
    const char *payloads[] = {"a", "b"};
    ret = call_batch(push_nothing, payloads, 2); /* the host refuses it; nothing leaks */
    CHECK(ret.len == 0 && ret.ptr == NULL);
}

static void use_imports(const sluice_message_t *messages, size_t count,
                        sluice_outcomes_t *outcomes) {
    sluice_pair_t header = {"from", sluice_message_id(&messages[0]), 0};
    sluice_publish_options_t options = {&header, 1, NULL, 0};
    bool published = sluice_publish("next", "n", 1, &options);
    int64_t n = 0;
    bool counted = sluice_kv_increment("seen", (int64_t)count, &n);
    const char *mode = sluice_config_or("mode", "plain");
    sluice_lease_extend(9000);
    sluice_outcomes_push(outcomes, published && counted && n == 1 && strcmp(mode, "fast") == 0
                                       ? sluice_snooze_ms(n)
                                       : sluice_reject(sluice_last_error()));
}

static void imports(void) {
    host.config_count = 1;
    host.config_keys[0] = "mode", host.config_values[0] = "fast";
    const char *payloads[] = {"x"};
    batch_handler_list_outcome_t ret = call_batch(use_imports, payloads, 1);
    CHECK(ret.len == 1 && ret.ptr[0].tag == SLUICE_HANDLER_TYPES_OUTCOME_SNOOZE);
    CHECK(host.publish_count == 1 && fake_is(host.publishes[0].header_values[0], "m-1"));
    CHECK(host.extended_ms == 9000);
    batch_handler_list_outcome_free(&ret);

    host.publish_error = "too big";
    ret = call_batch(use_imports, payloads, 1);
    CHECK(ret.len == 1 && reason_is(&ret.ptr[0], "too big"));
    batch_handler_list_outcome_free(&ret);
}

int main(void) {
    RUN(one_outcome_each);
    RUN(one_too_many);
    RUN(many_grow_the_list);
    RUN(empty_lists);
    RUN(imports);
    return fake_summary();
}
