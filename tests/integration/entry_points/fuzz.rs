//! Bounded fuzzing of the publish entry points: random queue names, keys,
//! headers, delays and sizes through every one (`Bench::run`), which must
//! agree on each.

use std::cell::Cell;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sluice::broker::message::{MAX_HEADERS, MAX_KEY};

use super::{Bench, HANDLER, Input, MAX_DELAY_MS, MAX_SIZE, agree};

/// Queue names: mostly plain, some with anything in them, some around
/// the 128-byte bound.
fn queue_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[A-Za-z0-9._-]{1,8}",
        2 => "\\PC{0,6}",
        1 => "[a-z]{127,129}",
        1 => Just("nul\0".to_string()),
    ]
    .prop_filter("not the handler's queue", |q| q != HANDLER)
}

fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![8 => "[a-z]{1,6}", 1 => "[a-z=]{0,3}", 1 => "\\PC{0,3}", 1 => Just("n\0".into())]
}

fn header_value() -> impl Strategy<Value = String> {
    prop_oneof![8 => "[ -~]{0,8}", 1 => "\\PC{0,4}", 1 => Just("v\0".into())]
}

/// Headers with distinct names (a JSON object has each name once): a few
/// random ones, or about [`MAX_HEADERS`] (`h0`, `h1`, ... and a few random
/// ones).
fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    let random = || prop::collection::vec((header_name(), header_value()), 0..3);
    let many = (MAX_HEADERS - 3..MAX_HEADERS, random()).prop_map(|(n, random)| {
        let plain = (0..n).map(|i| (format!("h{i}"), "v".to_string()));
        plain.chain(random).collect()
    });
    prop_oneof![4 => random(), 1 => many].prop_map(|headers: Vec<(String, String)>| {
        let mut seen = std::collections::BTreeSet::new();
        headers
            .into_iter()
            .filter(|(name, _)| seen.insert(name.clone()))
            .collect()
    })
}

fn key() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        3 => Just(None),
        3 => "[a-z0-9-]{1,8}".prop_map(Some),
        1 => "\\PC{0,3}".prop_map(Some),
        1 => (MAX_KEY - 1..MAX_KEY + 2).prop_map(|n| Some("k".repeat(n))),
        1 => Just(Some("k\0".into())),
    ]
}

fn input() -> impl Strategy<Value = Input> {
    let delay = prop_oneof![
        4 => Just(0i64),
        2 => 1..60_000i64,
        1 => MAX_DELAY_MS - 1..MAX_DELAY_MS + 2,
        1 => -3..0i64,
    ];
    let payload_len = prop_oneof![8 => 0..16usize, 1 => MAX_SIZE - 40..MAX_SIZE + 2];
    (queue_name(), payload_len, headers(), key(), delay).prop_map(
        |(queue, payload_len, headers, key, delay_ms)| Input {
            queue,
            payload_len,
            headers,
            key,
            delay_ms,
        },
    )
}

/// Bounded fuzzing (16 cases of 12 inputs, on one broker): random queue
/// names, keys, headers, delays and sizes through every entry point. Each
/// input is taken everywhere or refused everywhere; both happen; what was
/// taken is in `stats` and reachable by `dlq` (checked by `Bench::run`).
#[test]
fn random_inputs_are_taken_or_refused_alike_everywhere() {
    let bench = Bench::new();
    let (taken, refused) = (Cell::new(0), Cell::new(0));
    let config = Config {
        cases: 16,
        // A case runs a host: shrinking would take minutes. The failure
        // names the input.
        max_shrink_iters: 0,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let strategy = prop::collection::vec(input(), 12);
    let result = runner.run(&strategy, |inputs| {
        let rows = bench.run(&inputs);
        for (input, row) in inputs.iter().zip(&rows) {
            let counter = match agree(input, row).map_err(TestCaseError::fail)? {
                true => &taken,
                false => &refused,
            };
            counter.set(counter.get() + 1);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (taken, refused) = (taken.get(), refused.get());
    eprintln!("entry points fuzz: {taken} inputs taken everywhere, {refused} refused everywhere");
    assert!(taken > 0 && refused > 0, "{taken} taken, {refused} refused");
}
