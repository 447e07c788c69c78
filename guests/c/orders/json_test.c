/*
 * Native unit tests of json.c (no WebAssembly needed):
 *
 *     cc -std=c11 -Wall -Wextra -fsanitize=address,undefined -g \
 *        guests/c/orders/json.c guests/c/orders/json_test.c -lm -o /tmp/json_test && /tmp/json_test
 *
 * scripts/build-guests-c runs it when a native `cc` is present.
 */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (cond) {                                        \
            passed++;                                      \
        } else {                                           \
            failed++;                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                  \
            fprintf(stderr, "\n");                         \
        }                                                  \
    } while (0)

/* Parses `in` and re-serialises it; returns the output or "ERR: message". */
static char *roundtrip_n(const char *in, size_t len) {
    char *err;
    json_value *v = json_parse((const uint8_t *)in, len, &err);
    sbuf b;
    sbuf_init(&b);
    if (!v) {
        sbuf_puts(&b, "ERR: ");
        sbuf_puts(&b, err ? err : "(no message)");
        free(err);
    } else {
        sbuf_put_json(&b, v);
        json_free(v);
    }
    return b.data;
}

static char *roundtrip(const char *in) { return roundtrip_n(in, strlen(in)); }

static void expect(const char *in, const char *want) {
    char *got = roundtrip(in);
    CHECK(strcmp(got, want) == 0, "%s: got %s, want %s", in, got, want);
    free(got);
}

static void expect_err(const char *in, const char *prefix) {
    char *got = roundtrip(in);
    CHECK(strncmp(got, "ERR: ", 5) == 0 && strncmp(got + 5, prefix, strlen(prefix)) == 0,
          "%s: got %s, want error %s", in, got, prefix);
    free(got);
}

int main(void) {
    /* Scalars and structure. */
    expect("null", "null");
    expect(" true ", "true");
    expect("\t\r\nfalse\n", "false");
    expect("[]", "[]");
    expect("{}", "{}");
    expect("[1, [2, [3]], {\"a\": null}]", "[1,[2,[3]],{\"a\":null}]");
    expect("{\"id\": 7, \"qty\": 2}", "{\"id\":7,\"qty\":2}");

    /* Numbers, as serde_json writes them. */
    expect("7", "7");
    expect("0", "0");
    expect("-2", "-2");
    expect("-0", "-0.0");
    expect("1.5", "1.5");
    expect("1.0", "1.0");
    expect("1e3", "1000.0");
    expect("1E+3", "1000.0");
    expect("2.5e-3", "0.0025");
    expect("1e-7", "1e-7");
    expect("1.25e-7", "1.25e-7");
    expect("1e20", "1e+20");
    expect("1e16", "1e+16");
    expect("1e15", "1000000000000000.0");
    expect("123456.789", "123456.789");
    expect("0.1", "0.1");
    expect("18446744073709551615", "18446744073709551615");
    expect("18446744073709551616", "1.8446744073709552e+19");
    expect("-9223372036854775808", "-9223372036854775808");
    expect("-9223372036854775809", "-9.223372036854776e+18");
    expect_err("1e400", "number out of range at line 1 column 5");
    expect_err("01", "invalid number");
    expect_err("-", "EOF while parsing a value");
    expect_err("-a", "invalid number");
    expect_err("1.", "EOF while parsing a value");
    expect_err("1.e5", "invalid number");
    expect_err("1e", "EOF while parsing a value");
    expect_err("+1", "expected value");
    expect_err(".5", "expected value");

    /* Strings and escapes. */
    expect("\"a\\\"b\\\\c\\/d\"", "\"a\\\"b\\\\c/d\"");
    expect("\"\\b\\f\\n\\r\\t\"", "\"\\b\\f\\n\\r\\t\"");
    expect("\"\\u0041\\u00e9\\u20AC\"", "\"A\xc3\xa9\xe2\x82\xac\"");
    expect("\"\\ud83d\\ude00\"", "\"\xf0\x9f\x98\x80\"");
    expect("\"\\u0000x\\u001f\\u007f\"", "\"\\u0000x\\u001f\x7f\"");
    expect("\"h\xc3\xa9llo\"", "\"h\xc3\xa9llo\"");
    expect_err("\"\\ud83d\"", "unexpected end of hex escape");
    expect_err("\"\\ud83dx\"", "unexpected end of hex escape");
    expect_err("\"\\ud83d\\u0041\"", "lone leading surrogate");
    expect_err("\"\\ude00\"", "lone trailing surrogate");
    expect_err("\"\\u12\"", "EOF while parsing a string");
    expect_err("{\"id\":\"\\u00\"}", "invalid escape at line 1 column 13");
    expect_err("\"\\u12", "EOF while parsing a string");
    expect_err("\"\\x\"", "invalid escape");
    expect_err("\"abc", "EOF while parsing a string");
    expect_err("\"a\nb\"", "control character");
    expect_err("\"\\", "EOF while parsing a string");

    /* Objects: serde_json's Map sorts keys and keeps the last duplicate. */
    expect("{\"b\":1,\"a\":2,\"b\":3}", "{\"a\":2,\"b\":3}");
    expect("{\"ab\":1,\"a\":2,\"\":3}", "{\"\":3,\"a\":2,\"ab\":1}");

    /* Errors with positions. */
    expect_err("", "EOF while parsing a value at line 1 column 0");
    expect_err("   ", "EOF while parsing a value at line 1 column 3");
    expect_err("nope", "expected ident at line 1 column 2");
    expect_err("not json", "expected ident at line 1 column 2");
    expect_err("tru", "EOF while parsing a value");
    expect_err("{\"a\":1,}", "trailing comma");
    expect_err("[1,]", "trailing comma");
    expect_err("[1 2]", "expected `,` or `]`");
    expect_err("{\"a\" 1}", "expected `:`");
    expect_err("{\"a\":1 \"b\":2}", "expected `,` or `}`");
    expect_err("{a:1}", "key must be a string");
    expect_err("{\"a\":", "EOF while parsing a value");
    expect_err("{\"a\":1", "EOF while parsing an object");
    expect_err("[1", "EOF while parsing a list");
    expect_err("[", "EOF while parsing a list");
    expect_err("{", "EOF while parsing an object");
    expect_err("1 2", "trailing characters at line 1 column 3");
    expect_err("{}\n\n x", "trailing characters at line 3 column 2");
    expect_err("\"\xff\"", "invalid unicode code point");

    /* Depth limit: 127 levels parse, 128 do not (as in serde_json). */
    {
        char deep[300];
        memset(deep, '[', 127);
        memset(deep + 127, ']', 127);
        deep[254] = '\0';
        char *got = roundtrip(deep);
        CHECK(strcmp(got, deep) == 0, "127 deep");
        free(got);
        memset(deep, '[', 128);
        memset(deep + 128, ']', 128);
        deep[256] = '\0';
        expect_err(deep, "recursion limit exceeded at line 1 column 128");
    }

    /* Embedded NUL: the input length, not NUL, bounds parsing. */
    {
        char *got = roundtrip_n("1\0", 2);
        CHECK(strncmp(got, "ERR: trailing characters", 24) == 0, "NUL: %s", got);
        free(got);
        got = roundtrip_n("[1,2]", 3); /* a truncated buffer */
        CHECK(strncmp(got, "ERR: EOF while parsing a value", 30) == 0, "truncated: %s", got);
        free(got);
    }

    /* Lookups. */
    {
        char *err;
        const char *in = "{\"id\":\"A7\",\"qty\":3,\"qty\":4,\"neg\":-1,\"f\":1.0}";
        json_value *v = json_parse((const uint8_t *)in, strlen(in), &err);
        CHECK(v != NULL, "parse lookups");
        const json_value *id = json_object_get(v, "id");
        CHECK(id && id->type == JSON_STRING && strcmp(id->u.string.data, "A7") == 0, "id");
        uint64_t q = 0;
        CHECK(json_as_u64(json_object_get(v, "qty"), &q) && q == 4, "qty last wins: %llu",
              (unsigned long long)q);
        CHECK(!json_as_u64(json_object_get(v, "neg"), &q), "neg is not u64");
        CHECK(!json_as_u64(json_object_get(v, "f"), &q), "1.0 is not u64");
        CHECK(json_object_get(v, "nope") == NULL, "missing key");
        json_free(v);
    }

    /* UTF-8 validation (Rust's rules). */
    {
        struct {
            const char *s;
            size_t len;
            int ok;
        } cases[] = {
            {"", 0, 1},
            {"abc", 3, 1},
            {"\xc3\xa9", 2, 1},
            {"\xe2\x82\xac", 3, 1},
            {"\xf0\x9f\x98\x80", 4, 1},
            {"\xf4\x8f\xbf\xbf", 4, 1},
            {"\xff\xfe", 2, 0},
            {"\xc0\x80", 2, 0},         /* overlong */
            {"\xe0\x80\x80", 3, 0},     /* overlong */
            {"\xed\xa0\x80", 3, 0},     /* surrogate */
            {"\xf4\x90\x80\x80", 4, 0}, /* > U+10FFFF */
            {"\xf5\x80\x80\x80", 4, 0},
            {"\xc3", 1, 0},             /* truncated */
            {"\xe2\x82", 2, 0},
            {"\x80", 1, 0},
            {"a\0b", 3, 1},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            CHECK(utf8_valid((const uint8_t *)cases[i].s, cases[i].len) == cases[i].ok,
                  "utf8 case %zu", i);
        }
    }

    /* String escaping for output. */
    {
        sbuf b;
        sbuf_init(&b);
        sbuf_put_json_string(&b, "a\"b\\c\n\x01\0z", 9);
        CHECK(b.len == 24 && memcmp(b.data, "\"a\\\"b\\\\c\\n\\u0001\\u0000z\"", 24) == 0,
              "escape: %s", b.data);
        sbuf_free(&b);
        sbuf_put_u64(&b, 0);
        sbuf_put_u64(&b, UINT64_MAX);
        CHECK(strcmp(b.data, "018446744073709551615") == 0, "u64: %s", b.data);
        sbuf_free(&b);
    }

    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
