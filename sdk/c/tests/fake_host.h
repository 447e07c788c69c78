/*
 * A fake sluice host for the SDK's native tests: the imports of the WIT
 * world, implemented in plain C. Each import records what it was called with
 * and answers from what the test set up. Strings and lists it returns are
 * heap memory, handed over as the real bindings hand them over (a zero-length
 * one gets a dummy pointer that must never be freed), so the sanitizers see
 * whether the SDK frees each of them exactly once.
 *
 * Compiled once per world, like the SDK: with -DSLUICE_BATCH_HANDLER for
 * `batch-handler`.
 */
#ifndef FAKE_HOST_H
#define FAKE_HOST_H

#include <stdio.h>
#include <string.h>

#include "sluice.h"

#define FAKE_MAX 64

/* A copy of one string or byte list, with its length (it may hold NUL). */
typedef struct {
    char *data;
    size_t len;
} fake_bytes;

typedef struct {
    fake_bytes queue, topic, route, payload, key;
    bool to_topic, has_key, has_delay;
    uint64_t delay_ms;
    size_t header_count;
    fake_bytes header_names[FAKE_MAX], header_values[FAKE_MAX];
} fake_publish;

typedef struct {
    /* What the handler did. */
    size_t log_count;
    sluice_level_t log_levels[FAKE_MAX];
    fake_bytes log_lines[FAKE_MAX];
    size_t publish_count;
    fake_publish publishes[FAKE_MAX];
    bool kv_set_has_ttl;
    uint64_t kv_set_ttl_ms;
    uint64_t extended_ms;

    /* What the host answers. */
    const char *publish_error; /* NULL: publishes succeed */
    uint32_t topic_copies;
    size_t config_count;
    const char *config_keys[FAKE_MAX], *config_values[FAKE_MAX];
    const char *kv_error; /* NULL: the store works */
    size_t kv_count;
    fake_bytes kv_keys[FAKE_MAX], kv_values[FAKE_MAX];
    uint64_t time_left_ms;
} fake_host;

extern fake_host host;

/* The bindings' allocator, as they define it (test_*.c allocate what the
 * host hands over with it). */
void *cabi_realloc(void *ptr, size_t old_size, size_t align, size_t new_size);

/* Forgets everything recorded and set up (frees the copies). */
void fake_reset(void);

/* A message as the bindings hand one to the export: all heap memory. */
sluice_message_t fake_message(const char *id, const char *payload, size_t header_count,
                              const char *const *headers /* name, value, ... */);

/* Whether `b` holds exactly the bytes of `text`. */
bool fake_is(fake_bytes b, const char *text);

/* Test checks: each failure is printed and counted. */
extern int checks, failures;
#define CHECK(cond)                                                                    \
    do {                                                                               \
        checks++;                                                                      \
        if (!(cond)) {                                                                 \
            failures++;                                                                \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
        }                                                                              \
    } while (0)
#define CHECK_STR(got, want)                                                           \
    do {                                                                               \
        const char *got_ = (got), *want_ = (want);                                     \
        checks++;                                                                      \
        if (!got_ || strcmp(got_, want_) != 0) {                                       \
            failures++;                                                                \
            fprintf(stderr, "%s:%d: %s is \"%s\", expected \"%s\"\n", __FILE__,        \
                    __LINE__, #got, got_ ? got_ : "(null)", want_);                    \
        }                                                                              \
    } while (0)

/* Runs the named test function and reports it. */
#define RUN(test)                                                                      \
    do {                                                                               \
        int before_ = failures;                                                        \
        setvbuf(stdout, NULL, _IONBF, 0);                                              \
        fake_reset();                                                                  \
        test();                                                                        \
        printf("%s %s\n", failures == before_ ? "ok  " : "FAIL", #test);               \
    } while (0)

/* Prints the summary; the process's exit status. */
int fake_summary(void);

#endif
