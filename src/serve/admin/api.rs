//! The JSON API: what the CLI does, over HTTP.
//!
//! | Route | What |
//! |---|---|
//! | `GET /api/queues` | every queue with its counts (and `paused`) |
//! | `GET /api/queues/{queue}` | one queue |
//! | `POST /api/queues/{queue}/pause`, `.../resume` | pause or resume it, on every host |
//! | `GET /api/handlers` | what each running host serves and refused |
//! | `GET /api/topics` | topics with their bindings |
//! | `GET /api/schedules` | cron schedules with their last and next tick |
//! | `GET /api/queues/{queue}/dead?limit=50&offset=0` | a page of dead letters, oldest first |
//! | `GET /api/queues/{queue}/dead/{id}` | one, payload included |
//! | `POST /api/queues/{queue}/dead/replay?id=..&older_than=10m&limit=N` | replay (all, unless narrowed) |
//! | `POST /api/queues/{queue}/dead/purge` | delete them all |
//!
//! Bad parameters get 400 naming the parameter; failures of the broker 503.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::{Admin, error};
use crate::base::schedule;
use crate::broker::{BrokerError, ReplaySelector, fresh_statuses};
use crate::error::chain;
use crate::message::{now_ms, validate_queue_name};

/// Dead letters on one page, unless `limit` asks for fewer.
const PAGE: usize = 50;
/// The most a page may hold.
const MAX_PAGE: usize = 1000;
/// How deep pages go: a page is read from the oldest dead letter on.
const MAX_OFFSET: usize = 10_000;

type Params = Result<Query<Vec<(String, String)>>, QueryRejection>;

pub(super) fn routes() -> Router<Arc<Admin>> {
    Router::new()
        .route("/api/queues", get(queues))
        .route("/api/queues/{queue}", get(queue))
        .route("/api/queues/{queue}/pause", post(pause))
        .route("/api/queues/{queue}/resume", post(resume))
        .route("/api/handlers", get(handlers))
        .route("/api/topics", get(topics))
        .route("/api/schedules", get(schedules))
        .route("/api/queues/{queue}/dead", get(dead_letters))
        .route("/api/queues/{queue}/dead/replay", post(replay))
        .route("/api/queues/{queue}/dead/purge", post(purge))
        .route("/api/queues/{queue}/dead/{id}", get(dead_letter))
}

/// A broker failure: 503, with what failed.
fn unavailable(what: &str, e: &BrokerError) -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{what}: {}", chain(e)),
    )
}

fn bad_request(why: impl Into<String>) -> Response {
    error(StatusCode::BAD_REQUEST, why)
}

/// The `{queue}` of a request's path. A name no queue can have (`a/b`, a
/// NUL, ...) is answered with 400 saying what a queue name is, before the
/// handler, and so any broker, sees it.
struct QueueName(String);

impl<S: Send + Sync> FromRequestParts<S> for QueueName {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let Path(mut params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let queue = params.remove("queue").unwrap_or_default();
        validate_queue_name(&queue).map_err(bad_request)?;
        Ok(QueueName(queue))
    }
}

/// Why a request's parameters are refused: answered with 400.
type Bad = String;

/// The query's parameters, or why they cannot be read.
fn params(p: Params) -> Result<Vec<(String, String)>, Bad> {
    p.map(|Query(v)| v)
        .map_err(|e| format!("bad query string: {e}"))
}

/// The one value of parameter `name`, if given; given twice is an error.
fn one<'a>(params: &'a [(String, String)], name: &str) -> Result<Option<&'a str>, Bad> {
    let mut values = params.iter().filter(|(k, _)| k == name).map(|(_, v)| v);
    let first = values.next();
    if values.next().is_some() {
        return Err(format!("{name}: give it once"));
    }
    Ok(first.map(String::as_str))
}

/// Refuse parameters the route does not take, naming them.
fn only(params: &[(String, String)], known: &[&str]) -> Result<(), Bad> {
    match params.iter().find(|(k, _)| !known.contains(&k.as_str())) {
        Some((k, _)) if known.is_empty() => {
            Err(format!("{k}: unknown parameter; this route takes none"))
        }
        Some((k, _)) => Err(format!(
            "{k}: unknown parameter; this route takes {}",
            known.join(", ")
        )),
        None => Ok(()),
    }
}

/// A count parameter within `1..=max` (or `0..=max` when `zero` is allowed).
fn count(
    params: &[(String, String)],
    name: &str,
    default: usize,
    max: usize,
    zero: bool,
) -> Result<usize, Bad> {
    let Some(text) = one(params, name)? else {
        return Ok(default);
    };
    match text.trim().parse::<usize>() {
        Ok(n) if n <= max && (zero || n > 0) => Ok(n),
        _ => Err(format!(
            "{name}: bad number {text:?}; give {} to {max}",
            if zero { 0 } else { 1 }
        )),
    }
}

async fn queues(State(a): State<Arc<Admin>>) -> Response {
    match a.broker.stats().await {
        Ok(all) => {
            let all: Vec<Value> = all.iter().map(|s| with_stall(&a, s)).collect();
            Json(all).into_response()
        }
        Err(e) => unavailable("cannot read the queues", &e),
    }
}

async fn queue(State(a): State<Arc<Admin>>, QueueName(queue): QueueName) -> Response {
    match a.broker.queue_stats(&queue).await {
        Ok(s) => Json(with_stall(&a, &s)).into_response(),
        Err(e) => unavailable(&format!("cannot read queue {queue:?}"), &e),
    }
}

/// A queue's counts with `stalled`: what it waits on, when this host's
/// watchdog finds it stalled, else null.
fn with_stall(a: &Admin, s: &crate::broker::QueueStats) -> Value {
    let mut v = serde_json::to_value(s).expect("counts serialize");
    v["stalled"] = json!(a.registry.observers().stalls.of(&s.queue));
    v
}

async fn pause(State(a): State<Arc<Admin>>, QueueName(queue): QueueName) -> Response {
    set_paused(&a, &queue, true).await
}

async fn resume(State(a): State<Arc<Admin>>, QueueName(queue): QueueName) -> Response {
    set_paused(&a, &queue, false).await
}

/// Store the pause in the broker, then take it on this host at once (the
/// others read it within their next poll).
async fn set_paused(a: &Admin, queue: &str, paused: bool) -> Response {
    if let Err(e) = a.broker.set_paused(queue, paused).await {
        let verb = if paused { "pause" } else { "resume" };
        return unavailable(&format!("cannot {verb} queue {queue:?}"), &e);
    }
    if let Ok(all) = a.broker.paused().await {
        a.registry.observers().pauses.set(all);
    }
    Json(json!({ "queue": queue, "paused": paused })).into_response()
}

async fn handlers(State(a): State<Arc<Admin>>) -> Response {
    match fresh_statuses(&*a.broker, now_ms()).await {
        Ok(fresh) => Json(fresh).into_response(),
        Err(e) => unavailable("cannot read the handlers' statuses", &e),
    }
}

/// Every cron schedule, with its last and next tick.
async fn schedules(State(a): State<Arc<Admin>>) -> Response {
    let now = now_ms();
    let views = match fresh_statuses(&*a.broker, now).await {
        Ok(fresh) => schedule::overview(&*a.broker, &fresh, now).await,
        Err(e) => Err(e),
    };
    match views {
        Ok(views) => Json(views).into_response(),
        Err(e) => unavailable("cannot read the schedules", &e),
    }
}

async fn topics(State(a): State<Arc<Admin>>) -> Response {
    match a.broker.topic_stats().await {
        Ok(all) => Json(all).into_response(),
        Err(e) => unavailable("cannot read the topics", &e),
    }
}

async fn dead_letters(
    State(a): State<Arc<Admin>>,
    QueueName(queue): QueueName,
    p: Params,
) -> Response {
    let page = || -> Result<(usize, usize), Bad> {
        let p = params(p)?;
        only(&p, &["limit", "offset"])?;
        Ok((
            count(&p, "limit", PAGE, MAX_PAGE, false)?,
            count(&p, "offset", 0, MAX_OFFSET, true)?,
        ))
    };
    let (limit, offset) = match page() {
        Ok(page) => page,
        Err(why) => return bad_request(why),
    };
    let (all, stats) = match tokio::try_join!(
        a.broker.dead_letters(&queue, offset + limit),
        a.broker.queue_stats(&queue)
    ) {
        Ok(read) => read,
        Err(e) => return unavailable(&format!("cannot read the dead letters of {queue:?}"), &e),
    };
    let page: Vec<serde_json::Value> = all.iter().skip(offset).map(|d| d.to_json()).collect();
    Json(json!({
        "queue": queue,
        "total": stats.dead,
        "offset": offset,
        "limit": limit,
        "dead_letters": page,
    }))
    .into_response()
}

async fn dead_letter(
    State(a): State<Arc<Admin>>,
    QueueName(queue): QueueName,
    Path((_, id)): Path<(String, String)>,
) -> Response {
    // No id holds a NUL, which PostgreSQL's text could not even look for.
    let found = if id.contains('\0') {
        Ok(None)
    } else {
        a.broker.dead_letter(&queue, &id).await
    };
    match found {
        Ok(Some(d)) => Json(d.to_json()).into_response(),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            format!("no dead letter {id:?} in queue {queue:?}"),
        ),
        Err(e) => unavailable(&format!("cannot read dead letter {id:?}"), &e),
    }
}

async fn replay(State(a): State<Arc<Admin>>, QueueName(queue): QueueName, p: Params) -> Response {
    let selector = || -> Result<ReplaySelector, Bad> {
        let p = params(p)?;
        only(&p, &["id", "older_than", "limit"])?;
        let ids: Vec<String> = p
            .iter()
            .filter(|(k, _)| k == "id")
            .map(|(_, v)| v.clone())
            .collect();
        if let Some(id) = ids.iter().find(|id| id.contains('\0')) {
            return Err(format!(
                "id: no dead letter id holds a NUL character: {id:?}"
            ));
        }
        ReplaySelector::by_hand(
            ids,
            one(&p, "older_than")?,
            one(&p, "limit")?,
            now_ms(),
            ["older_than", "limit"],
        )
    };
    let selector = match selector() {
        Ok(s) => s,
        Err(why) => return bad_request(why),
    };
    match a.broker.replay(&queue, &selector).await {
        Ok(n) => Json(json!({ "queue": queue, "replayed": n })).into_response(),
        Err(e) => unavailable(&format!("cannot replay the dead letters of {queue:?}"), &e),
    }
}

async fn purge(State(a): State<Arc<Admin>>, QueueName(queue): QueueName, p: Params) -> Response {
    if let Err(why) = params(p).and_then(|p| only(&p, &[])) {
        return bad_request(why);
    }
    match a.broker.purge(&queue).await {
        Ok(n) => Json(json!({ "queue": queue, "purged": n })).into_response(),
        Err(e) => unavailable(&format!("cannot purge the dead letters of {queue:?}"), &e),
    }
}
