//! Trace context in message headers: W3C `traceparent`/`tracestate`. A
//! message carries the context of the span that sent it; [`start_or_continue`]
//! gives a message about to be sent one. Spans themselves (one per attempt,
//! exported over OTLP) are the host's.

/// The header that carries a message's trace context.
pub const TRACEPARENT: &str = "traceparent";
/// Vendor data that travels with the context, passed on untouched.
pub const TRACESTATE: &str = "tracestate";

/// A parsed `traceparent`: whose trace, which span sent it, and its flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace, never all zeros.
    pub trace_id: [u8; 16],
    /// The span that sent the message, never all zeros.
    pub span_id: [u8; 8],
    /// The trace flags; bit 0 is "sampled".
    pub flags: u8,
}

impl TraceParent {
    /// A new trace, sampled, started by a span with a new id.
    pub fn new_root() -> Self {
        TraceParent {
            trace_id: nonzero(),
            span_id: nonzero(),
            flags: 1,
        }
    }

    /// Parse a header value (version `00`, or a later version read as `00`
    /// as the W3C spec says). `None` for anything malformed, or all-zero ids.
    pub fn parse(value: &str) -> Option<Self> {
        let value = value.trim();
        let bytes = value.as_bytes();
        if bytes.len() < 55 || (bytes.len() > 55 && bytes[55] != b'-') {
            return None;
        }
        let version = &value[0..2];
        if version == "ff"
            || (version == "00" && bytes.len() != 55)
            || bytes[2] != b'-'
            || bytes[35] != b'-'
            || bytes[52] != b'-'
        {
            return None;
        }
        hex::<1>(version)?;
        let trace_id = hex::<16>(&value[3..35])?;
        let span_id = hex::<8>(&value[36..52])?;
        let [flags] = hex::<1>(&value[53..55])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The header value.
    pub fn header(&self) -> String {
        // Made once or twice per delivery: digits pushed, not formatted.
        let mut out = Vec::with_capacity(55);
        out.extend_from_slice(b"00-");
        push_hex(&mut out, &self.trace_id);
        out.push(b'-');
        push_hex(&mut out, &self.span_id);
        out.push(b'-');
        push_hex(&mut out, &[self.flags]);
        String::from_utf8(out).expect("hex digits are ASCII")
    }

    /// The trace id as 32 hex digits, as log lines show it.
    pub fn trace_id_hex(&self) -> String {
        to_hex(&self.trace_id)
    }

    /// A new span of the same trace, with the same flags: a child of this
    /// one.
    pub fn child(&self) -> Self {
        TraceParent {
            span_id: nonzero(),
            ..*self
        }
    }

    /// The parent `headers` name, if any parses.
    pub fn from_headers(headers: &[(String, String)]) -> Option<Self> {
        header(headers, TRACEPARENT).and_then(TraceParent::parse)
    }
}

/// Make sure `headers` carry a trace context, for a message about to be
/// sent: one given (a valid `traceparent`) is continued as it is; otherwise
/// a new trace starts here (an invalid one is replaced).
pub fn start_or_continue(headers: &mut Vec<(String, String)>) {
    if TraceParent::from_headers(headers).is_some() {
        return;
    }
    // An invalid context is dropped with its state, as the spec says.
    headers.retain(|(k, _)| !is(k, TRACEPARENT) && !is(k, TRACESTATE));
    headers.push((TRACEPARENT.into(), TraceParent::new_root().header()));
}

/// The value of the first header called `name` (ASCII case ignored).
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| is(k, name))
        .map(|(_, v)| v.as_str())
}

/// Replace every header called `name` by one with `value`.
pub fn set_header(headers: &mut Vec<(String, String)>, name: &str, value: String) {
    headers.retain(|(k, _)| !is(k, name));
    headers.push((name.to_string(), value));
}

/// Whether header name `key` is `name`, ASCII case ignored.
pub fn is(key: &str, name: &str) -> bool {
    key.eq_ignore_ascii_case(name)
}

/// Random bytes, not all zero (an all-zero id is invalid).
fn nonzero<const N: usize>() -> [u8; N] {
    loop {
        let bytes: [u8; N] = rand::random();
        if bytes != [0; N] {
            return bytes;
        }
    }
}

fn hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let b = text.as_bytes();
    if b.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(b[2 * i])? << 4 | digit(b[2 * i + 1])?;
    }
    Some(out)
}

fn to_hex(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len() * 2);
    push_hex(&mut out, bytes);
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// Append `bytes` as lower-case hex digits.
fn push_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 0x0f)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_spec_example_round_trips() {
        let p = TraceParent::parse(EXAMPLE).unwrap();
        assert_eq!(p.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(p.span_id, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        assert_eq!(p.flags, 1);
        assert_eq!(p.header(), EXAMPLE);
    }

    #[test]
    fn malformed_values_are_refused() {
        let zero_trace = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        let zero_span = "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01";
        let upper = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01";
        let long_00 = format!("{EXAMPLE}-extra");
        let version_ff = EXAMPLE.replacen("00", "ff", 1);
        for bad in [
            "",
            "garbage",
            zero_trace,
            zero_span,
            upper,
            &long_00,
            &version_ff,
            &EXAMPLE[..54],
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
        // A later version is read by its first four fields.
        let later = format!("01{}-more", &EXAMPLE[2..]);
        assert_eq!(
            TraceParent::parse(&later).map(|p| p.span_id),
            TraceParent::parse(EXAMPLE).map(|p| p.span_id)
        );
    }

    #[test]
    fn a_send_continues_a_valid_context_and_starts_one_otherwise() {
        let mut given = vec![("traceparent".to_string(), EXAMPLE.to_string())];
        start_or_continue(&mut given);
        assert_eq!(given, [("traceparent".to_string(), EXAMPLE.to_string())]);

        let mut none = vec![("a".to_string(), "b".to_string())];
        start_or_continue(&mut none);
        assert_eq!(none.len(), 2);
        assert!(TraceParent::from_headers(&none).is_some(), "{none:?}");

        let mut bad = vec![
            ("TraceParent".to_string(), "nonsense".to_string()),
            ("tracestate".to_string(), "k=v".to_string()),
        ];
        start_or_continue(&mut bad);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(TraceParent::from_headers(&bad).is_some());
    }
}
