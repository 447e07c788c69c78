/* Rust's rules for reading and quoting text. See rust_text.h. */
#include "rust_text.h"

bool parse_u64(const char *s, size_t len, uint64_t *out) {
    size_t i = 0;
    if (len > 0 && s[0] == '+') i = 1;
    if (i == len) return false;
    uint64_t v = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static bool is_white_space(uint32_t c) {
    /* Unicode's White_Space property, as Rust's char::is_whitespace. */
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* Decodes the code point starting at s[i] (valid UTF-8 assumed); sets its length. */
static uint32_t decode_at(const unsigned char *s, size_t len, size_t i, size_t *n) {
    unsigned char c = s[i];
    size_t need = c < 0x80 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
    if (need > len - i - 1) need = len - i - 1; /* defensive: never read past the end */
    uint32_t cp = need == 0 ? c : need == 1 ? (c & 0x1F) : need == 2 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k <= need; k++) cp = (cp << 6) | (s[i + k] & 0x3F);
    *n = need + 1;
    return cp;
}

void trim_unicode(const char **sp, size_t *lenp) {
    const unsigned char *s = (const unsigned char *)*sp;
    size_t len = *lenp, start = 0, end = len, n;
    while (start < end && is_white_space(decode_at(s, end, start, &n))) start += n;
    while (end > start) {
        size_t begin = end - 1; /* back up to the start of the last code point */
        while (begin > start && (s[begin] & 0xC0) == 0x80) begin--;
        if (!is_white_space(decode_at(s, end, begin, &n))) break;
        end = begin;
    }
    *sp = (const char *)s + start;
    *lenp = end - start;
}

void sbuf_put_rust_debug(sbuf *b, const char *s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    sbuf_put(b, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': sbuf_puts(b, "\\\""); break;
        case '\\': sbuf_puts(b, "\\\\"); break;
        case '\0': sbuf_puts(b, "\\0"); break;
        case '\t': sbuf_puts(b, "\\t"); break;
        case '\r': sbuf_puts(b, "\\r"); break;
        case '\n': sbuf_puts(b, "\\n"); break;
        default:
            if (c < 0x20 || c == 0x7F) {
                /* \u{1b}, \u{7f}: hex without leading zeros. */
                sbuf_puts(b, "\\u{");
                if (c >> 4) sbuf_put(b, &hex[c >> 4], 1);
                sbuf_put(b, &hex[c & 15], 1);
                sbuf_puts(b, "}");
            } else {
                sbuf_put(b, s + i, 1);
            }
        }
    }
    sbuf_put(b, "\"", 1);
}
