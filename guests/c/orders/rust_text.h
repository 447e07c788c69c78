/*
 * Rust's rules for reading and quoting text, so that the C orders handler
 * reads config values and quotes names in its logs exactly as the Rust one
 * (guests/rust/orders) does.
 */
#ifndef SLUICE_RUST_TEXT_H
#define SLUICE_RUST_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json.h"

/* Rust's `u64::from_str`: an optional `+`, then one or more ASCII digits, no overflow. */
bool parse_u64(const char *s, size_t len, uint64_t *out);

/* Rust's `str::trim`: strips Unicode White_Space from both ends (in place, by pointer/len). */
void trim_unicode(const char **s, size_t *len);

/* Appends `s` as Rust's `{:?}` of a str writes it (quoted, escaped). */
void sbuf_put_rust_debug(sbuf *b, const char *s, size_t len);

#endif
