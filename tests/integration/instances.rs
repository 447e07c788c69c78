//! Spare fresh instances: made ahead of the messages and off their path,
//! each handed to one message only, bounded, and given back when their
//! version goes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::broker::policy::Outcome;
use sluice::testkit::runtime::{Deadline, Failure, Handler, Runtime, SPARES_PER_HANDLER};

use crate::support::{delivery, guest};

/// `hello` loaded as handler `spare` with the sidecar `sidecar`.
fn load_with(runtime: &Runtime, dir: &std::path::Path, sidecar: &str) -> Arc<Handler> {
    let wasm = dir.join("spare.wasm");
    std::fs::copy(guest("hello"), &wasm).unwrap();
    std::fs::write(dir.join("spare.toml"), sidecar).unwrap();
    let cache = sluice::testkit::cache::CompileCache::in_memory(runtime);
    Arc::new(sluice::testkit::loader::load_file(runtime, &cache, "spare", &wasm, 1 << 20).unwrap())
}

/// `hello` loaded in fresh mode with `concurrency`.
fn load(runtime: &Runtime, dir: &std::path::Path, concurrency: usize) -> Arc<Handler> {
    let sidecar = format!("instance_mode = \"fresh\"\nconcurrency = {concurrency}\n");
    load_with(runtime, dir, &sidecar)
}

async fn call(handler: &Handler, i: usize) {
    let deadline = Deadline::new(handler.spec.timeout, handler.spec.max_extend);
    let invocation = handler
        .invoke(&delivery("spare", i, &format!("message {i}")), &deadline)
        .await;
    assert_eq!(invocation.result, Ok(Outcome::Done), "message {i}");
    assert!(
        invocation.instantiate.is_some(),
        "message {i}: a fresh call reports how long its instance took to make"
    );
}

async fn wait_for_spares(handler: &Handler, n: usize) {
    let start = Instant::now();
    while handler.spare_instances() < n {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{} spare(s) ready, {n} expected",
            handler.spare_instances()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn spares_are_made_ahead_taken_once_and_given_back() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let runtime = Runtime::new().unwrap();
        let handler = load(&runtime, dir.path(), 16);
        let target = SPARES_PER_HANDLER;

        // Made ahead, before any message.
        handler.prepare();
        wait_for_spares(&handler, target).await;
        assert_eq!(runtime.spare_instances(), target);
        assert_eq!(runtime.instances_in_use(), target);

        // A call takes one; tidying drops the used instance and makes the
        // next spare: the instances alive are the spares again.
        for i in 0..20 {
            call(&handler, i).await;
            assert_eq!(handler.spare_instances(), target - 1, "message {i}");
            handler.tidy().await;
            assert_eq!(handler.spare_instances(), target, "message {i}");
            assert_eq!(runtime.instances_in_use(), target, "message {i}");
        }

        // Calls faster than anyone tidies: the spares run out, messages make
        // their own, and used instances waiting to be dropped stay bounded.
        for i in 20..60 {
            call(&handler, i).await;
            assert!(
                runtime.instances_in_use() <= 2 * target,
                "message {i}: {} instances alive",
                runtime.instances_in_use()
            );
        }
        assert_eq!(handler.spare_instances(), 0);
        handler.tidy().await;
        assert_eq!(runtime.instances_in_use(), target);

        // The version goes: its spares give their places back.
        drop(handler);
        assert_eq!(runtime.instances_in_use(), 0);
        assert_eq!(runtime.spare_instances(), 0);
    });
}

#[test]
fn reuse_mode_and_one_caller_keep_few_or_no_spares() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let runtime = Runtime::new().unwrap();
        // Never more spares than callers.
        let handler = load(&runtime, dir.path(), 1);
        handler.prepare();
        wait_for_spares(&handler, 1).await;
        call(&handler, 0).await;
        handler.tidy().await;
        assert_eq!(handler.spare_instances(), 1);
        assert_eq!(runtime.instances_in_use(), 1);
        drop(handler);

        let sidecar = "instance_mode = \"reuse\"\nconcurrency = 8\n";
        let handler = load_with(&runtime, dir.path(), sidecar);
        handler.prepare();
        call(&handler, 1).await;
        handler.tidy().await;
        assert_eq!(
            handler.spare_instances(),
            0,
            "reuse mode keeps warm instances only"
        );
        assert_eq!(handler.warm_instances(), 1);
    });
}

/// A version whose instances cannot be made (its memory cap is below what
/// the component needs to start) keeps no spares: each message makes its
/// own and meets the failure itself, and nothing stays alive.
#[test]
fn a_version_whose_instances_cannot_be_made_keeps_no_spares() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let runtime = Runtime::new().unwrap();
        let sidecar = "instance_mode = \"fresh\"\nconcurrency = 4\n[limits]\nmemory = \"64KiB\"\n";
        let handler = load_with(&runtime, dir.path(), sidecar);
        handler.tidy().await;
        assert_eq!(handler.spare_instances(), 0);
        for i in 0..3 {
            let deadline = Deadline::new(handler.spec.timeout, handler.spec.max_extend);
            let invocation = handler.invoke(&delivery("spare", i, "m"), &deadline).await;
            assert!(
                matches!(invocation.result, Err(Failure::MemoryLimit(_))),
                "message {i}: {:?}",
                invocation.result
            );
            handler.tidy().await;
            assert_eq!(handler.spare_instances(), 0, "message {i}");
            assert_eq!(runtime.instances_in_use(), 0, "message {i}");
        }
    });
}
