/* A small, bounds-checked JSON parser and writer. See json.h. */
#include "json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* sbuf                                                                      */

void sbuf_init(sbuf *b) {
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->failed = false;
}

void sbuf_free(sbuf *b) {
    free(b->data);
    sbuf_init(b);
}

/* Makes room for `extra` more bytes plus the terminating NUL. */
static bool sbuf_reserve(sbuf *b, size_t extra) {
    if (b->failed) return false;
    if (extra > SIZE_MAX - 1 - b->len) {
        b->failed = true;
        return false;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 32;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    char *data = realloc(b->data, cap);
    if (!data) {
        b->failed = true;
        return false;
    }
    b->data = data;
    b->cap = cap;
    return true;
}

void sbuf_put(sbuf *b, const void *bytes, size_t len) {
    if (!sbuf_reserve(b, len)) return;
    if (len) memcpy(b->data + b->len, bytes, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void sbuf_puts(sbuf *b, const char *s) { sbuf_put(b, s, strlen(s)); }

void sbuf_vprintf(sbuf *b, const char *format, va_list args) {
    va_list again;
    va_copy(again, args);
    int n = vsnprintf(NULL, 0, format, args);
    if (n < 0) b->failed = true; /* an encoding error */
    if (n >= 0 && sbuf_reserve(b, (size_t)n)) {
        vsnprintf(b->data + b->len, (size_t)n + 1, format, again);
        b->len += (size_t)n;
    }
    va_end(again);
}

void sbuf_check(const sbuf *b) {
    if (b->failed) abort();
}

static void sbuf_putc(sbuf *b, char c) { sbuf_put(b, &c, 1); }

void sbuf_put_u64(sbuf *b, uint64_t v) {
    char digits[20];
    size_t n = 0;
    do {
        digits[sizeof digits - 1 - n] = (char)('0' + v % 10);
        v /= 10;
        n++;
    } while (v);
    sbuf_put(b, digits + sizeof digits - n, n);
}

void sbuf_put_json_string(sbuf *b, const char *s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    sbuf_putc(b, '"');
    size_t start = 0; /* first byte not yet written */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[6];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c >= 0x20) continue;
            break;
        }
        sbuf_put(b, s + start, i - start);
        start = i + 1;
        if (esc) {
            sbuf_puts(b, esc);
        } else {
            u[0] = '\\';
            u[1] = 'u';
            u[2] = '0';
            u[3] = '0';
            u[4] = hex[c >> 4];
            u[5] = hex[c & 15];
            sbuf_put(b, u, 6);
        }
    }
    sbuf_put(b, s + start, len - start);
    sbuf_putc(b, '"');
}

static int member_cmp(const void *pa, const void *pb) {
    const json_member *a = *(const json_member *const *)pa;
    const json_member *b = *(const json_member *const *)pb;
    size_t n = a->key_len < b->key_len ? a->key_len : b->key_len;
    int c = n ? memcmp(a->key, b->key, n) : 0;
    if (c) return c;
    if (a->key_len != b->key_len) return a->key_len < b->key_len ? -1 : 1;
    /* Equal keys: input order, so the last of a run is the one that wins. */
    return a < b ? -1 : (a > b ? 1 : 0);
}

static bool same_key(const json_member *a, const json_member *b) {
    return a->key_len == b->key_len && memcmp(a->key, b->key, a->key_len) == 0;
}

void sbuf_put_json(sbuf *b, const json_value *v) {
    if (b->failed) return;
    switch (v->type) {
    case JSON_NULL: sbuf_puts(b, "null"); break;
    case JSON_BOOL: sbuf_puts(b, v->u.boolean ? "true" : "false"); break;
    case JSON_NUMBER: sbuf_put(b, v->u.number.text, v->u.number.text_len); break;
    case JSON_STRING: sbuf_put_json_string(b, v->u.string.data, v->u.string.len); break;
    case JSON_ARRAY:
        sbuf_putc(b, '[');
        for (size_t i = 0; i < v->u.array.len; i++) {
            if (i) sbuf_putc(b, ',');
            sbuf_put_json(b, v->u.array.items[i]);
        }
        sbuf_putc(b, ']');
        break;
    case JSON_OBJECT: {
        /* serde_json's Map is a BTreeMap: sorted keys, the last duplicate wins. */
        size_t n = v->u.object.len;
        const json_member **sorted = NULL;
        if (n) {
            sorted = malloc(n * sizeof *sorted);
            if (!sorted) {
                b->failed = true;
                return;
            }
            for (size_t i = 0; i < n; i++) sorted[i] = &v->u.object.members[i];
            qsort(sorted, n, sizeof *sorted, member_cmp);
        }
        sbuf_putc(b, '{');
        bool first = true;
        for (size_t i = 0; i < n; i++) {
            if (i + 1 < n && same_key(sorted[i], sorted[i + 1])) continue;
            if (!first) sbuf_putc(b, ',');
            first = false;
            sbuf_put_json_string(b, sorted[i]->key, sorted[i]->key_len);
            sbuf_putc(b, ':');
            sbuf_put_json(b, sorted[i]->value);
        }
        sbuf_putc(b, '}');
        free(sorted);
        break;
    }
    }
}

/* ------------------------------------------------------------------------ */
/* UTF-8                                                                     */

bool utf8_valid(const uint8_t *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;      /* no overlongs */
            else if (c == 0xED) hi = 0x9F; /* no surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;      /* no overlongs */
            else if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
        } else {
            return false;
        }
        if (len - i - 1 < need) return false;
        if (s[i + 1] < lo || s[i + 1] > hi) return false;
        for (size_t k = 2; k <= need; k++) {
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return false;
        }
        i += need + 1;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Values                                                                    */

void json_free(json_value *v) {
    if (!v) return;
    switch (v->type) {
    case JSON_NUMBER: free(v->u.number.text); break;
    case JSON_STRING: free(v->u.string.data); break;
    case JSON_ARRAY:
        for (size_t i = 0; i < v->u.array.len; i++) json_free(v->u.array.items[i]);
        free(v->u.array.items);
        break;
    case JSON_OBJECT:
        for (size_t i = 0; i < v->u.object.len; i++) {
            free(v->u.object.members[i].key);
            json_free(v->u.object.members[i].value);
        }
        free(v->u.object.members);
        break;
    default: break;
    }
    free(v);
}

const json_value *json_object_get(const json_value *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    size_t klen = strlen(key);
    for (size_t i = obj->u.object.len; i-- > 0;) {
        const json_member *m = &obj->u.object.members[i];
        if (m->key_len == klen && memcmp(m->key, key, klen) == 0) return m->value;
    }
    return NULL;
}

bool json_as_u64(const json_value *v, uint64_t *out) {
    if (!v || v->type != JSON_NUMBER || v->u.number.kind != JSON_NUM_U64) return false;
    *out = v->u.number.u;
    return true;
}

/*
 * Writes a finite double the way Rust's ryu crate (and so serde_json) does:
 * the shortest digits that round-trip, then `1000.0`, `12.34`, `0.001234`,
 * `1e+30` or `1.234e+30` depending on the magnitude.
 */
static void put_f64(sbuf *b, double f) {
    if (signbit(f)) sbuf_putc(b, '-');
    f = fabs(f);
    if (f == 0.0) {
        sbuf_puts(b, "0.0");
        return;
    }
    char tmp[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp is "d.ddde[+-]x": collect the digits and the exponent. */
    char digits[24];
    int length = 0;
    const char *p = tmp;
    for (; *p && *p != 'e'; p++) {
        if (*p >= '0' && *p <= '9' && length < (int)sizeof digits) digits[length++] = *p;
    }
    int exp10 = *p == 'e' ? atoi(p + 1) : 0;
    while (length > 1 && digits[length - 1] == '0') length--;
    int k = exp10 - (length - 1); /* value = digits * 10^k */
    int kk = length + k;          /* 10^(kk-1) <= value < 10^kk */
    if (0 <= k && kk <= 16) {
        sbuf_put(b, digits, (size_t)length);
        for (int i = length; i < kk; i++) sbuf_putc(b, '0');
        sbuf_puts(b, ".0");
    } else if (0 < kk && kk <= 16) {
        sbuf_put(b, digits, (size_t)kk);
        sbuf_putc(b, '.');
        sbuf_put(b, digits + kk, (size_t)(length - kk));
    } else if (-5 < kk && kk <= 0) {
        sbuf_puts(b, "0.");
        for (int i = kk; i < 0; i++) sbuf_putc(b, '0');
        sbuf_put(b, digits, (size_t)length);
    } else {
        sbuf_putc(b, digits[0]);
        if (length > 1) {
            sbuf_putc(b, '.');
            sbuf_put(b, digits + 1, (size_t)(length - 1));
        }
        /* serde_json writes the exponent's sign either way: 1e+20, 1e-7. */
        sbuf_putc(b, 'e');
        int e = kk - 1;
        sbuf_putc(b, e < 0 ? '-' : '+');
        if (e < 0) e = -e;
        sbuf_put_u64(b, (uint64_t)e);
    }
}

/* ------------------------------------------------------------------------ */
/* Parser                                                                    */

typedef struct {
    const uint8_t *s;
    size_t len;
    size_t pos;
    int depth;
    bool failed;
    char *error; /* the first error's message; NULL if it could not be allocated */
} parser;

/*
 * Records the first error. `at_eof` errors point at the last byte read, the
 * others at the offending byte (serde_json's convention, 1-based columns).
 */
static void fail_at(parser *p, const char *what, bool at_eof) {
    if (p->failed) return;
    p->failed = true;
    size_t line = 1, line_start = 0;
    size_t end = p->pos < p->len ? p->pos : p->len;
    for (size_t i = 0; i < end; i++) {
        if (p->s[i] == '\n') {
            line++;
            line_start = i + 1;
        }
    }
    size_t column = end - line_start + (at_eof ? 0 : 1);
    sbuf msg;
    sbuf_init(&msg);
    sbuf_puts(&msg, what);
    sbuf_puts(&msg, " at line ");
    sbuf_put_u64(&msg, line);
    sbuf_puts(&msg, " column ");
    sbuf_put_u64(&msg, column);
    if (msg.failed) sbuf_free(&msg);
    p->error = msg.data;
}

static void fail(parser *p, const char *what) { fail_at(p, what, p->pos >= p->len); }

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        uint8_t c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static json_value *new_value(parser *p, json_type type) {
    json_value *v = calloc(1, sizeof *v);
    if (!v) {
        fail_at(p, "out of memory", false);
        return NULL;
    }
    v->type = type;
    return v;
}

static json_value *parse_value(parser *p);

static json_value *parse_literal(parser *p, const char *word, json_type type, bool boolean) {
    for (size_t i = 0; word[i]; i++) {
        if (p->pos >= p->len) {
            fail_at(p, "EOF while parsing a value", true);
            return NULL;
        }
        if (p->s[p->pos] != (uint8_t)word[i]) {
            fail(p, "expected ident");
            return NULL;
        }
        p->pos++;
    }
    json_value *v = new_value(p, type);
    if (v && type == JSON_BOOL) v->u.boolean = boolean;
    return v;
}

static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* Reads one or more digits; false (with an error) when there is none. */
static bool digits(parser *p) {
    if (p->pos >= p->len) {
        fail_at(p, "EOF while parsing a value", true);
        return false;
    }
    if (!is_digit(p->s[p->pos])) {
        fail(p, "invalid number");
        return false;
    }
    while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
    return true;
}

static json_value *parse_number(parser *p) {
    size_t start = p->pos;
    bool negative = false, integer = true;
    if (p->s[p->pos] == '-') {
        negative = true;
        p->pos++;
    }
    if (p->pos >= p->len) {
        fail_at(p, "EOF while parsing a value", true);
        return NULL;
    }
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->len && is_digit(p->s[p->pos])) {
            fail(p, "invalid number");
            return NULL;
        }
    } else if (!digits(p)) {
        return NULL;
    }
    size_t int_end = p->pos;
    if (p->pos < p->len && p->s[p->pos] == '.') {
        integer = false;
        p->pos++;
        if (!digits(p)) return NULL;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        integer = false;
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (!digits(p)) return NULL;
    }
    size_t end = p->pos;

    json_value *v = new_value(p, JSON_NUMBER);
    if (!v) return NULL;
    bool done = false;
    if (integer) {
        /* Magnitude as u64, if it fits. */
        uint64_t mag = 0;
        bool fits = true;
        for (size_t i = start + (negative ? 1 : 0); i < int_end; i++) {
            unsigned d = (unsigned)(p->s[i] - '0');
            if (mag > (UINT64_MAX - d) / 10) {
                fits = false;
                break;
            }
            mag = mag * 10 + d;
        }
        if (fits && !negative) {
            v->u.number.kind = JSON_NUM_U64;
            v->u.number.u = mag;
            done = true;
        } else if (fits && negative && mag != 0 && mag <= (uint64_t)INT64_MAX + 1) {
            /* serde_json keeps -0 as the float -0.0, like us. */
            v->u.number.kind = JSON_NUM_I64;
            v->u.number.i = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
            done = true;
        }
        if (done) {
            size_t n = end - start;
            v->u.number.text = malloc(n + 1);
            if (!v->u.number.text) {
                free(v);
                fail_at(p, "out of memory", false);
                return NULL;
            }
            memcpy(v->u.number.text, p->s + start, n);
            v->u.number.text[n] = '\0';
            v->u.number.text_len = n;
        }
    }
    if (!done) {
        size_t n = end - start;
        char *lit = malloc(n + 1);
        if (!lit) {
            free(v);
            fail_at(p, "out of memory", false);
            return NULL;
        }
        memcpy(lit, p->s + start, n);
        lit[n] = '\0';
        double f = strtod(lit, NULL);
        free(lit);
        if (!isfinite(f)) {
            free(v);
            p->pos = end - 1; /* serde_json points at the number's last byte */
            fail_at(p, "number out of range", false);
            return NULL;
        }
        v->u.number.kind = JSON_NUM_F64;
        v->u.number.f = f;
        sbuf text;
        sbuf_init(&text);
        put_f64(&text, f);
        if (text.failed) {
            sbuf_free(&text);
            free(v);
            fail_at(p, "out of memory", false);
            return NULL;
        }
        v->u.number.text = text.data;
        v->u.number.text_len = text.len;
    }
    return v;
}

static int hex_value(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/*
 * Reads the XXXX of a \uXXXX escape (p->pos at the first X). Like serde_json,
 * takes all four bytes before judging them.
 */
static bool read_hex4(parser *p, unsigned *out) {
    if (p->len - p->pos < 4) {
        p->pos = p->len;
        fail_at(p, "EOF while parsing a string", true);
        return false;
    }
    unsigned cp = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_value(p->s[p->pos + i]);
        if (h < 0) {
            p->pos += 3;
            fail(p, "invalid escape");
            return false;
        }
        cp = cp * 16 + (unsigned)h;
    }
    p->pos += 4;
    *out = cp;
    return true;
}

static void put_utf8(sbuf *b, unsigned cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    sbuf_put(b, u, n);
}

/* Parses a string (p->pos at the opening quote) into a fresh NUL-terminated buffer. */
static bool parse_string_raw(parser *p, char **out, size_t *out_len) {
    sbuf b;
    sbuf_init(&b);
    sbuf_put(&b, "", 0); /* so that an empty string is a valid allocation */
    p->pos++;            /* the opening quote */
    for (;;) {
        if (p->pos >= p->len) {
            fail_at(p, "EOF while parsing a string", true);
            goto err;
        }
        /* Copy a run of plain bytes at once. */
        size_t run = p->pos;
        while (run < p->len && p->s[run] != '"' && p->s[run] != '\\' && p->s[run] >= 0x20) run++;
        sbuf_put(&b, p->s + p->pos, run - p->pos);
        p->pos = run;
        if (p->pos >= p->len) continue;
        uint8_t c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) {
            fail(p, "control character (\\u0000-\\u001F) found while parsing a string");
            goto err;
        }
        /* A backslash escape. */
        p->pos++;
        if (p->pos >= p->len) {
            fail_at(p, "EOF while parsing a string", true);
            goto err;
        }
        c = p->s[p->pos++];
        switch (c) {
        case '"': sbuf_putc(&b, '"'); break;
        case '\\': sbuf_putc(&b, '\\'); break;
        case '/': sbuf_putc(&b, '/'); break;
        case 'b': sbuf_putc(&b, '\b'); break;
        case 'f': sbuf_putc(&b, '\f'); break;
        case 'n': sbuf_putc(&b, '\n'); break;
        case 'r': sbuf_putc(&b, '\r'); break;
        case 't': sbuf_putc(&b, '\t'); break;
        case 'u': {
            unsigned cp;
            if (!read_hex4(p, &cp)) goto err;
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                p->pos--;
                fail(p, "lone trailing surrogate in hex escape");
                goto err;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                /* Must be followed by \u and a trailing surrogate. */
                for (const char *want = "\\u"; *want; want++) {
                    if (p->pos >= p->len) {
                        fail_at(p, "EOF while parsing a string", true);
                        goto err;
                    }
                    if (p->s[p->pos] != (uint8_t)*want) {
                        fail(p, "unexpected end of hex escape");
                        goto err;
                    }
                    p->pos++;
                }
                unsigned lo;
                if (!read_hex4(p, &lo)) goto err;
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    p->pos--;
                    fail(p, "lone leading surrogate in hex escape");
                    goto err;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            put_utf8(&b, cp);
            break;
        }
        default:
            p->pos--;
            fail(p, "invalid escape");
            goto err;
        }
    }
    if (b.failed) {
        fail_at(p, "out of memory", false);
        goto err;
    }
    *out = b.data;
    *out_len = b.len;
    return true;
err:
    sbuf_free(&b);
    return false;
}

/* Grows a dynamic array of `size`-byte elements to hold one more. */
static bool grow(parser *p, void **items, size_t len, size_t *cap, size_t size) {
    if (len < *cap) return true;
    size_t n = *cap ? *cap * 2 : 4;
    if (n < *cap || n > SIZE_MAX / size) {
        fail_at(p, "out of memory", false);
        return false;
    }
    void *grown = realloc(*items, n * size);
    if (!grown) {
        fail_at(p, "out of memory", false);
        return false;
    }
    *items = grown;
    *cap = n;
    return true;
}

static json_value *parse_array(parser *p) {
    json_value *v = new_value(p, JSON_ARRAY);
    if (!v) return NULL;
    size_t cap = 0;
    p->pos++; /* [ */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
        return v;
    }
    for (;;) {
        if (p->pos >= p->len) {
            fail_at(p, "EOF while parsing a list", true);
            goto err;
        }
        json_value *item = parse_value(p);
        if (!item) goto err;
        if (!grow(p, (void **)&v->u.array.items, v->u.array.len, &cap, sizeof(json_value *))) {
            json_free(item);
            goto err;
        }
        v->u.array.items[v->u.array.len++] = item;
        skip_ws(p);
        if (p->pos >= p->len) {
            fail_at(p, "EOF while parsing a list", true);
            goto err;
        }
        uint8_t c = p->s[p->pos];
        if (c == ']') {
            p->pos++;
            return v;
        }
        if (c != ',') {
            fail(p, "expected `,` or `]`");
            goto err;
        }
        p->pos++;
        skip_ws(p);
        if (p->pos >= p->len) {
            fail_at(p, "EOF while parsing a value", true);
            goto err;
        }
        if (p->s[p->pos] == ']') {
            fail(p, "trailing comma");
            goto err;
        }
    }
err:
    json_free(v);
    return NULL;
}

static json_value *parse_object(parser *p) {
    json_value *v = new_value(p, JSON_OBJECT);
    if (!v) return NULL;
    size_t cap = 0;
    p->pos++; /* { */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
        return v;
    }
    for (;;) {
        if (p->pos >= p->len) {
            fail_at(p, "EOF while parsing an object", true);
            goto err;
        }
        if (p->s[p->pos] != '"') {
            fail(p, "key must be a string");
            goto err;
        }
        char *key;
        size_t key_len;
        if (!parse_string_raw(p, &key, &key_len)) goto err;
        skip_ws(p);
        if (p->pos >= p->len) {
            free(key);
            fail_at(p, "EOF while parsing an object", true);
            goto err;
        }
        if (p->s[p->pos] != ':') {
            free(key);
            fail(p, "expected `:`");
            goto err;
        }
        p->pos++;
        skip_ws(p);
        if (p->pos >= p->len) {
            free(key);
            fail_at(p, "EOF while parsing a value", true);
            goto err;
        }
        json_value *item = parse_value(p);
        if (!item) {
            free(key);
            goto err;
        }
        if (!grow(p, (void **)&v->u.object.members, v->u.object.len, &cap, sizeof(json_member))) {
            free(key);
            json_free(item);
            goto err;
        }
        json_member *m = &v->u.object.members[v->u.object.len++];
        m->key = key;
        m->key_len = key_len;
        m->value = item;
        skip_ws(p);
        if (p->pos >= p->len) {
            fail_at(p, "EOF while parsing an object", true);
            goto err;
        }
        uint8_t c = p->s[p->pos];
        if (c == '}') {
            p->pos++;
            return v;
        }
        if (c != ',') {
            fail(p, "expected `,` or `}`");
            goto err;
        }
        p->pos++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == '}') {
            fail(p, "trailing comma");
            goto err;
        }
    }
err:
    json_free(v);
    return NULL;
}

/* Parses one value; p->pos is at its first byte (whitespace skipped). */
static json_value *parse_value(parser *p) {
    if (p->pos >= p->len) {
        fail_at(p, "EOF while parsing a value", true);
        return NULL;
    }
    uint8_t c = p->s[p->pos];
    switch (c) {
    case 'n': return parse_literal(p, "null", JSON_NULL, false);
    case 't': return parse_literal(p, "true", JSON_BOOL, true);
    case 'f': return parse_literal(p, "false", JSON_BOOL, false);
    case '"': {
        json_value *v = new_value(p, JSON_STRING);
        if (!v) return NULL;
        if (!parse_string_raw(p, &v->u.string.data, &v->u.string.len)) {
            free(v);
            return NULL;
        }
        return v;
    }
    case '[':
    case '{': {
        if (p->depth >= JSON_MAX_DEPTH) { /* this one would be one too deep */
            fail(p, "recursion limit exceeded");
            return NULL;
        }
        p->depth++;
        json_value *v = c == '[' ? parse_array(p) : parse_object(p);
        p->depth--;
        return v;
    }
    default:
        if (c == '-' || is_digit(c)) return parse_number(p);
        fail(p, "expected value");
        return NULL;
    }
}

json_value *json_parse(const uint8_t *input, size_t len, char **error) {
    parser p = {.s = input, .len = len, .pos = 0, .depth = 0, .failed = false, .error = NULL};
    *error = NULL;
    json_value *v = NULL;
    if (!utf8_valid(input, len)) {
        fail_at(&p, "invalid unicode code point", false);
    } else {
        skip_ws(&p);
        v = parse_value(&p);
        if (v) {
            skip_ws(&p);
            if (p.pos < p.len) {
                fail(&p, "trailing characters");
                json_free(v);
                v = NULL;
            }
        }
    }
    if (!v) *error = p.error;
    return v;
}
