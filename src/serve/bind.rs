//! Binding sync: the broker's topic bindings and queue orderings made what
//! the handlers' sidecars declare. A handler's `[[subscribe]]` tables are
//! its bindings, stored with its origin (`handler:NAME`), so a changed
//! sidecar replaces them as a set; bindings made on the command line are
//! left alone. Its `[ordering]` is its queue's ordering (none without one):
//! publishers group the queue's messages by what the broker holds.
//!
//! Bindings are written before a handler serves (and, for every sidecar in
//! the directory, before any handler serves: a publisher must not start
//! before its subscribers are bound), and again every [`STATUS_EVERY`], so
//! that bindings lost with a broker's data come back.

use std::collections::BTreeSet;
use std::path::Path;

use crate::broker::{Broker, STATUS_EVERY};
use crate::config::HandlerSpec;
use crate::error::chain;
use crate::sandbox::loader::load_spec;
use crate::topic::Binding;

/// Make the broker's bindings from this handler's sidecar exactly those its
/// `[[subscribe]]` tables declare, and its queue's ordering its
/// `[ordering]`. A broker that is away is tried again with the next sync.
pub(crate) async fn bind(store: &dyn Broker, spec: &HandlerSpec) {
    if let Err(e) = store
        .set_ordering(&spec.queue, spec.ordering.as_ref())
        .await
    {
        tracing::error!(handler = %spec.name, queue = %spec.queue, "could not set the queue's ordering: {}; trying again in {STATUS_EVERY:?}", chain(&e));
    }
    let origin = Binding::origin_of_handler(&spec.name);
    let bindings: Vec<Binding> = spec
        .subscriptions
        .iter()
        .map(|s| Binding {
            topic: s.topic.clone(),
            queue: spec.queue.clone(),
            pattern: s.pattern.clone(),
            origin: origin.clone(),
        })
        .collect();
    if let Err(e) = store.replace_bindings(&origin, &bindings).await {
        tracing::error!(handler = %spec.name, "could not bind its topics: {}; trying again in {STATUS_EVERY:?}", chain(&e));
    }
}

/// Bind the topics of every spec in turn.
pub(crate) async fn bind_all(store: &dyn Broker, specs: &[HandlerSpec]) {
    for spec in specs {
        bind(store, spec).await;
    }
}

/// Bind again, as [`bind_all`], the specs that declare something the
/// broker may have lost (bindings, an ordering). One that declares neither
/// was bound to nothing when it loaded, and nothing can be lost of that:
/// a host serving a thousand plain handlers makes no calls for them here.
pub(crate) async fn rebind_all(store: &dyn Broker, specs: &[HandlerSpec]) {
    for spec in specs {
        if !spec.subscriptions.is_empty() || spec.ordering.is_some() {
            bind(store, spec).await;
        }
    }
}

/// Bind the topics of the handlers `names` in `dir` from their sidecars
/// alone, before any of them serves: a handler that publishes to a topic
/// must not start before the handlers that subscribe to it are bound,
/// whatever order they load in. A sidecar that does not parse is left to
/// the load, which reports it. Of two sidecars naming one queue, only the
/// first name's is bound, as only the first loads.
pub(crate) async fn bind_sidecars(store: &dyn Broker, dir: &Path, names: &[String]) {
    // Read off the async threads: files are small and regular by then, but
    // a slow disk must not hold the runtime.
    let specs = {
        let (dir, names) = (dir.to_path_buf(), names.to_vec());
        tokio::task::spawn_blocking(move || sidecar_specs(&dir, &names))
            .await
            .unwrap_or_default()
    };
    bind_all(store, &specs).await;
}

/// The specs of the sidecars that parse, the first of each queue.
fn sidecar_specs(dir: &Path, names: &[String]) -> Vec<HandlerSpec> {
    let mut queues = BTreeSet::new();
    names
        .iter()
        .filter_map(|name| load_spec(name, &dir.join(format!("{name}.toml"))).ok())
        .filter(|spec| queues.insert(spec.queue.clone()))
        .collect()
}
