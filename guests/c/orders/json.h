/*
 * A small, bounds-checked JSON parser and writer for the C guests.
 *
 * Parsing never reads past the `len` bytes it is given (the input need not be
 * NUL-terminated and may contain NUL bytes), nests at most JSON_MAX_DEPTH
 * deep, and reports the first error as a message with a line and column, in
 * the style of serde_json ("expected value at line 1 column 1").
 *
 * Strings are decoded (escapes, \uXXXX with surrogate pairs) into
 * heap-allocated UTF-8 with an explicit length: they may contain NUL.
 *
 * Output follows serde_json's compact form, so that the C guests report
 * values exactly as the Rust guests do: strings escaped as serde_json escapes
 * them, objects with their keys sorted and duplicate keys collapsed (the last
 * wins), integers as they appeared and other numbers in Rust's shortest
 * round-trip form (`1.5`, `1000.0`, `1e+20`).
 */
#ifndef SLUICE_JSON_H
#define SLUICE_JSON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Arrays and objects nest at most this deep (serde_json's limit too). */
#define JSON_MAX_DEPTH 127

typedef enum {
    JSON_NULL,
    JSON_BOOL,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
} json_type;

typedef struct json_value json_value;

typedef struct {
    char *key; /* decoded UTF-8, NUL-terminated, may contain NUL */
    size_t key_len;
    json_value *value;
} json_member;

/* Kinds of number, as serde_json would hold them. */
typedef enum {
    JSON_NUM_U64, /* a non-negative integer literal that fits u64 */
    JSON_NUM_I64, /* a negative integer literal that fits i64 */
    JSON_NUM_F64, /* anything else (fraction, exponent, too large, -0) */
} json_num_kind;

struct json_value {
    json_type type;
    union {
        bool boolean;
        struct {
            json_num_kind kind;
            uint64_t u;
            int64_t i;
            double f;
            /* The number as serde_json writes it, NUL-terminated. */
            char *text;
            size_t text_len;
        } number;
        struct {
            char *data; /* decoded UTF-8, NUL-terminated, may contain NUL */
            size_t len;
        } string;
        struct {
            json_value **items;
            size_t len;
        } array;
        struct {
            json_member *members; /* in input order, duplicates kept */
            size_t len;
        } object;
    } u;
};

/*
 * Parses exactly one JSON value, surrounded by optional whitespace, from
 * `input[0..len)`. On success returns the value (free it with json_free) and
 * sets *error to NULL. On failure returns NULL and sets *error to a
 * heap-allocated, NUL-terminated message (free it with free()); *error is
 * NULL only if even that allocation failed.
 */
json_value *json_parse(const uint8_t *input, size_t len, char **error);

void json_free(json_value *value);

/* The value of the last member named `key` (as serde_json's map keeps), or NULL. */
const json_value *json_object_get(const json_value *object, const char *key);

/* The number as u64 if it is a non-negative integer that fits (serde's as_u64). */
bool json_as_u64(const json_value *value, uint64_t *out);

/* True when `bytes` is well-formed UTF-8 (same rules as Rust's str::from_utf8). */
bool utf8_valid(const uint8_t *bytes, size_t len);

/* A growable byte buffer. All appends report allocation failure by setting `failed`. */
typedef struct {
    char *data; /* NUL-terminated while !failed */
    size_t len;
    size_t cap;
    bool failed;
} sbuf;

void sbuf_init(sbuf *b);
void sbuf_free(sbuf *b);
void sbuf_put(sbuf *b, const void *bytes, size_t len);
void sbuf_puts(sbuf *b, const char *s);
/* Appends printf-style text. */
void sbuf_vprintf(sbuf *b, const char *format, va_list args);
/* Traps when `b` ran out of memory, as the generated cabi_realloc does. */
void sbuf_check(const sbuf *b);
void sbuf_put_u64(sbuf *b, uint64_t v);
/* Appends `"..."` with serde_json's string escaping. */
void sbuf_put_json_string(sbuf *b, const char *s, size_t len);
/* Appends `value` as compact JSON (serde_json's Display of a Value). */
void sbuf_put_json(sbuf *b, const json_value *value);

#endif
