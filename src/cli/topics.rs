//! `sluice topics [list]`, `sluice topics bind|unbind TOPIC QUEUE`.

use std::sync::Arc;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};

use super::{Context, print_json};
use crate::broker::TopicStore;
use crate::message::validate_queue_name;
use crate::topic::{Binding, CLI_ORIGIN, pattern_or_every, validate_topic_name};

/// The arguments of `sluice topics`.
#[derive(Debug, Args)]
pub(crate) struct TopicsArgs {
    #[command(subcommand)]
    pub(crate) action: Option<TopicsAction>,
}

/// What `sluice topics` does.
#[derive(Debug, Subcommand)]
pub(crate) enum TopicsAction {
    /// Every topic: its bindings and how many publishes matched none.
    List,
    /// Bind a queue to a topic (handlers bind theirs with [[subscribe]]).
    Bind {
        topic: String,
        queue: String,
        #[command(flatten)]
        which: Which,
    },
    /// Remove a queue's binding to a topic.
    Unbind {
        topic: String,
        queue: String,
        #[command(flatten)]
        which: Which,
        /// Every binding of the queue to the topic.
        #[arg(long, conflicts_with_all = ["route", "unmatched"])]
        all: bool,
    },
}

/// Which binding: a routing-key pattern, or the topic's catch-all.
#[derive(Debug, Args)]
pub(crate) struct Which {
    /// The routing-key pattern: `*` matches one word, `#` zero or more
    /// (default `#`, every publish).
    #[arg(long, conflicts_with = "unmatched")]
    pub(crate) route: Option<String>,
    /// The catch-all: publishes that no pattern matches.
    #[arg(long)]
    pub(crate) unmatched: bool,
}

impl Which {
    fn pattern(&self) -> Result<Option<String>> {
        if self.unmatched {
            return Ok(None);
        }
        let pattern = pattern_or_every(self.route.clone()).map_err(anyhow::Error::msg)?;
        Ok(Some(pattern))
    }
}

fn check_names(topic: &str, queue: &str) -> Result<()> {
    validate_topic_name(topic).map_err(anyhow::Error::msg)?;
    validate_queue_name(queue).map_err(anyhow::Error::msg)?;
    Ok(())
}

pub(crate) async fn topics(ctx: &Context, args: TopicsArgs) -> Result<()> {
    let broker: Arc<dyn TopicStore> = ctx.broker().await?;
    match args.action.unwrap_or(TopicsAction::List) {
        TopicsAction::List => list(ctx, &*broker).await,
        TopicsAction::Bind {
            topic,
            queue,
            which,
        } => {
            check_names(&topic, &queue)?;
            let binding = Binding {
                pattern: which.pattern()?,
                topic,
                queue,
                origin: CLI_ORIGIN.to_string(),
            };
            bind(ctx, &*broker, binding).await
        }
        TopicsAction::Unbind {
            topic,
            queue,
            which,
            all,
        } => {
            check_names(&topic, &queue)?;
            let pattern = if all { None } else { which.pattern()? };
            unbind(ctx, &*broker, &topic, &queue, pattern.as_deref(), all).await
        }
    }
}

/// `topics list`: every topic with its bindings and unmatched count.
async fn list(ctx: &Context, broker: &dyn TopicStore) -> Result<()> {
    let all = broker.topic_stats().await?;
    if ctx.json {
        return print_json(&all);
    }
    outln!(
        "{:<24} {:<24} {:<28} {:<16} UNMATCHED",
        "TOPIC",
        "QUEUE",
        "ROUTE",
        "ORIGIN"
    );
    for t in &all {
        if t.bindings.is_empty() {
            outln!(
                "{:<24} {:<24} {:<28} {:<16} {}",
                t.topic,
                "-",
                "-",
                "-",
                t.unmatched
            );
        }
        for (i, b) in t.bindings.iter().enumerate() {
            let unmatched = if i == 0 {
                t.unmatched.to_string()
            } else {
                String::new()
            };
            let route = b.pattern.as_deref().unwrap_or("(catch-all)");
            outln!(
                "{:<24} {:<24} {:<28} {:<16} {unmatched}",
                t.topic,
                b.queue,
                route,
                b.origin
            );
        }
    }
    Ok(())
}

/// `topics bind`.
async fn bind(ctx: &Context, broker: &dyn TopicStore, binding: Binding) -> Result<()> {
    broker.bind(std::slice::from_ref(&binding)).await?;
    if ctx.json {
        return print_json(&binding);
    }
    let route = binding.pattern.as_deref().unwrap_or("(catch-all)");
    outln!(
        "bound {} to topic {} for {route}",
        binding.queue,
        binding.topic
    );
    Ok(())
}

/// `topics unbind`: an error when there was no such binding.
async fn unbind(
    ctx: &Context,
    broker: &dyn TopicStore,
    topic: &str,
    queue: &str,
    pattern: Option<&str>,
    all: bool,
) -> Result<()> {
    let removed = broker.unbind(topic, queue, pattern, all).await?;
    if removed == 0 {
        bail!("queue {queue:?} has no such binding to topic {topic:?}: see `sluice topics`");
    }
    if ctx.json {
        print_json(&serde_json::json!({ "removed": removed }))
    } else {
        outln!("removed {removed} binding(s) of {queue} to topic {topic}");
        Ok(())
    }
}
