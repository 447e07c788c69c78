//! Topics: publish once, and a copy goes to every queue bound to the topic
//! with a matching routing-key pattern. Patterns follow AMQP topic
//! exchanges: a routing key is dot-separated words (`orders.eu.created`); in
//! a pattern `*` stands for exactly one word and `#` for zero or more
//! (`orders.*.created`, `orders.#`).
//!
//! This module is the pure part: names, patterns, matching, and which queues
//! a publish goes to. Bindings are stored by the broker
//! (`crate::TopicStore`), so every host and every publisher sees the
//! same ones; `crate::publish::fan_out` routes a publish by them.

use serde::Serialize;

use crate::message::validate_queue_name;

/// The header each copy of a topic publish carries: the topic's name.
pub const TOPIC_HEADER: &str = "sluice-topic";
/// The header each copy of a topic publish carries: its routing key.
pub const ROUTE_HEADER: &str = "sluice-route";

/// Where a binding came from: a handler's sidecar (`handler:NAME`) or the
/// command line (`cli`). A host replaces a handler's bindings as a set when
/// its sidecar changes, and leaves the others alone.
pub const CLI_ORIGIN: &str = "cli";

/// One queue's subscription to a topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Binding {
    /// The topic.
    pub topic: String,
    /// The queue that gets copies.
    pub queue: String,
    /// The routing-key pattern; `None` makes the queue the topic's catch-all:
    /// it gets the publishes that no pattern matches.
    pub pattern: Option<String>,
    /// Who made it: [`CLI_ORIGIN`], or [`Binding::origin_of_handler`].
    pub origin: String,
}

impl Binding {
    /// The origin of the bindings handler `name`'s sidecar declares.
    pub fn origin_of_handler(name: &str) -> String {
        format!("handler:{name}")
    }
}

/// Per-topic counts for `sluice topics`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TopicStats {
    /// The topic counted.
    pub topic: String,
    /// Publishes whose routing key no binding's pattern matched, whether a
    /// catch-all queue took them or they were refused.
    pub unmatched: u64,
    /// Its bindings.
    pub bindings: Vec<Binding>,
}

/// Topic names follow queue names: they appear in keys and metrics.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    validate_queue_name(name)
        .map_err(|_| format!("bad topic name {name:?}: use 1 to 128 of A-Z a-z 0-9 - _ ."))
}

/// A word of a routing key or pattern: letters, digits, `-` and `_`.
fn plain_word(w: &str) -> bool {
    !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

/// A routing key: 1 to 255 characters, dot-separated words.
pub fn validate_route(route: &str) -> Result<(), String> {
    if route.is_empty() || route.len() > 255 || !route.split('.').all(plain_word) {
        return Err(format!(
            "bad routing key {route:?}: use dot-separated words of A-Z a-z 0-9 - _, like orders.eu.created"
        ));
    }
    Ok(())
}

/// A pattern: like a routing key, where a word may also be `*` or `#`.
pub fn validate_pattern(pattern: &str) -> Result<(), String> {
    let ok = !pattern.is_empty()
        && pattern.len() <= 255
        && pattern
            .split('.')
            .all(|w| w == "*" || w == "#" || plain_word(w));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "bad routing pattern {pattern:?}: use dot-separated words, where `*` matches one word and `#` zero or more, like orders.*.created or orders.#"
        ))
    }
}

/// The pattern a binding gets from an optional `route`: the route (checked),
/// or `#`, every publish.
pub fn pattern_or_every(route: Option<String>) -> Result<String, String> {
    let pattern = route.unwrap_or_else(|| "#".to_string());
    validate_pattern(&pattern)?;
    Ok(pattern)
}

/// Whether `route` matches `pattern` (both valid). Runs in time of the
/// route's words times the pattern's: it keeps the set of pattern positions
/// reachable after each word of the route.
pub fn matches(pattern: &str, route: &str) -> bool {
    let pat: Vec<&str> = pattern.split('.').collect();
    // reach[i]: pattern words 0..i can match the route words read so far.
    let mut reach = vec![false; pat.len() + 1];
    reach[0] = true;
    close_over_hashes(&pat, &mut reach);
    for word in route.split('.') {
        let mut next = vec![false; pat.len() + 1];
        for i in 0..pat.len() {
            if !reach[i] {
                continue;
            }
            match pat[i] {
                // `#` may swallow this word and stay.
                "#" => next[i] = true,
                "*" => next[i + 1] = true,
                w if w == word => next[i + 1] = true,
                _ => {}
            }
        }
        close_over_hashes(&pat, &mut next);
        if !next.iter().any(|&r| r) {
            return false;
        }
        reach = next;
    }
    reach[pat.len()]
}

/// A `#` may also match no word: whoever reaches it reaches past it too.
fn close_over_hashes(pat: &[&str], reach: &mut [bool]) {
    for i in 0..pat.len() {
        if reach[i] && pat[i] == "#" {
            reach[i + 1] = true;
        }
    }
}

/// Where one publish to a topic goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Routed {
    /// The queues that get a copy, each once, in binding order.
    pub queues: Vec<String>,
    /// No pattern matched: `queues` are the catch-alls, or empty when the
    /// topic has none and the publish must be refused.
    pub unmatched: bool,
}

/// The queues a publish with `route` goes to, given the topic's bindings.
pub fn queues_for(bindings: &[Binding], route: &str) -> Routed {
    fn add(queues: &mut Vec<String>, q: &str) {
        if !queues.iter().any(|have| have == q) {
            queues.push(q.to_string());
        }
    }
    let mut queues: Vec<String> = Vec::new();
    for b in bindings {
        if let Some(p) = &b.pattern
            && matches(p, route)
        {
            add(&mut queues, &b.queue);
        }
    }
    if !queues.is_empty() {
        return Routed {
            queues,
            unmatched: false,
        };
    }
    for b in bindings.iter().filter(|b| b.pattern.is_none()) {
        add(&mut queues, &b.queue);
    }
    Routed {
        queues,
        unmatched: true,
    }
}

/// The error for a publish that matched nothing and has nowhere to go.
pub fn unmatched_error(topic: &str, route: &str) -> String {
    format!(
        "no queue is bound to topic {topic:?} for routing key {route:?}, and the topic has no catch-all queue: bind one with `[[subscribe]] topic = {topic:?}` (and `route` or `unmatched = true`) in a handler's sidecar, or `sluice topics bind {topic} QUEUE`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition, written as plainly as possible: the reference the
    /// real matcher is checked against.
    fn reference(pat: &[&str], words: &[&str]) -> bool {
        match pat.split_first() {
            None => words.is_empty(),
            Some((&"#", rest)) => (0..=words.len()).any(|k| reference(rest, &words[k..])),
            Some((&"*", rest)) => !words.is_empty() && reference(rest, &words[1..]),
            Some((w, rest)) => words.first() == Some(w) && reference(rest, &words[1..]),
        }
    }

    #[test]
    fn amqp_examples() {
        let cases = [
            ("orders.*.created", "orders.eu.created", true),
            ("orders.*.created", "orders.created", false),
            ("orders.*.created", "orders.eu.x.created", false),
            ("orders.#", "orders", true),
            ("orders.#", "orders.eu.created", true),
            ("orders.#", "order", false),
            ("#", "anything.at.all", true),
            ("#.created", "created", true),
            ("#.created", "orders.eu.created", true),
            ("#.created", "orders.eu.deleted", false),
            ("*", "a", true),
            ("*", "a.b", false),
            ("a.#.b", "a.b", true),
            ("a.#.b", "a.x.y.b", true),
            ("a.#.#.b", "a.b", true),
            ("a.b", "a.b", true),
            ("a.b", "a.c", false),
        ];
        for (p, r, want) in cases {
            assert_eq!(matches(p, r), want, "{p} vs {r}");
        }
    }

    #[test]
    fn names_and_keys_are_checked() {
        assert!(validate_route("orders.eu.created").is_ok());
        assert!(validate_route("orders..created").is_err());
        assert!(validate_route("orders.*").unwrap_err().contains("orders.*"));
        assert!(validate_route("").is_err());
        assert!(validate_pattern("orders.*.#").is_ok());
        assert!(validate_pattern("orders.x*").is_err());
        assert!(validate_pattern("").is_err());
        assert!(validate_topic_name("a/b").unwrap_err().contains("topic"));
    }

    fn binding(queue: &str, pattern: Option<&str>) -> Binding {
        Binding {
            topic: "t".into(),
            queue: queue.into(),
            pattern: pattern.map(str::to_string),
            origin: CLI_ORIGIN.into(),
        }
    }

    #[test]
    fn routing_copies_once_per_queue_and_falls_back_to_catch_alls() {
        let b = [
            binding("all", Some("orders.#")),
            binding("eu", Some("orders.eu.*")),
            binding("all", Some("orders.*.created")),
            binding("rest", None),
        ];
        assert_eq!(
            queues_for(&b, "orders.eu.created"),
            Routed {
                queues: vec!["all".into(), "eu".into()],
                unmatched: false
            }
        );
        assert_eq!(
            queues_for(&b, "refunds.x"),
            Routed {
                queues: vec!["rest".into()],
                unmatched: true
            }
        );
        let none = queues_for(&b[..2], "refunds.x");
        assert!(none.unmatched && none.queues.is_empty());
    }

    fn words(max: usize) -> impl Strategy<Value = Vec<&'static str>> {
        prop::collection::vec(prop::sample::select(vec!["a", "b", "c"]), 1..=max)
    }

    fn pattern_words(max: usize) -> impl Strategy<Value = Vec<&'static str>> {
        prop::collection::vec(prop::sample::select(vec!["a", "b", "*", "#"]), 1..=max)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn matcher_agrees_with_the_definition(pat in pattern_words(6), key in words(7)) {
            let (p, r) = (pat.join("."), key.join("."));
            prop_assert_eq!(matches(&p, &r), reference(&pat, &key), "{} vs {}", p, r);
        }

        #[test]
        fn a_key_matches_itself_and_hash(key in words(6)) {
            let r = key.join(".");
            prop_assert!(matches(&r, &r));
            prop_assert!(matches("#", &r));
            let stars = vec!["*"; key.len()].join(".");
            prop_assert!(matches(&stars, &r));
        }
    }
}
