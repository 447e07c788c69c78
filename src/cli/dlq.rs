//! `sluice dlq list|show|replay|purge QUEUE`.

use anyhow::{Result, bail};
use base64::Engine as _;
use clap::{Args, Subcommand};

use super::{Context, print_json};
use crate::broker::{DeadLetter, DeadLetters, ReplaySelector};
use crate::message::now_ms;

/// The arguments of `sluice dlq`.
#[derive(Debug, Args)]
pub(crate) struct DlqArgs {
    #[command(subcommand)]
    pub(crate) action: DlqAction,
}

/// What `sluice dlq` does.
#[derive(Debug, Subcommand)]
pub(crate) enum DlqAction {
    /// List a queue's dead letters, oldest first.
    List {
        queue: String,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Show one dead letter in full, payload included.
    Show { queue: String, id: String },
    /// Put dead letters back on their queue with attempts reset, those that
    /// died first first. All of the queue's unless options narrow it down.
    /// A replay is not a scheduled redrive: redrive counts stay as they are.
    Replay {
        queue: String,
        /// Only this dead letter; repeatable.
        #[arg(long = "id", value_name = "ID")]
        ids: Vec<String>,
        /// Only those dead at least this long, e.g. 10m or 2h.
        #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
        older_than: Option<String>,
        /// At most this many, those that died first.
        #[arg(long, value_name = "N", allow_hyphen_values = true)]
        limit: Option<String>,
    },
    /// Delete all of a queue's dead letters.
    Purge { queue: String },
}

pub(crate) async fn dlq(ctx: &Context, args: DlqArgs) -> Result<()> {
    let broker: std::sync::Arc<dyn DeadLetters> = ctx.broker().await?;
    match args.action {
        DlqAction::List { queue, limit } => {
            let dead = broker.dead_letters(&queue, limit).await?;
            if ctx.json {
                for d in &dead {
                    print_json(&d.to_json())?;
                }
            } else {
                outln!(
                    "{:<34} {:>8} {:>8}  {:<24} REASON",
                    "ID",
                    "ATTEMPTS",
                    "REDRIVES",
                    "DIED"
                );
                for d in &dead {
                    outln!(
                        "{:<34} {:>8} {:>8}  {:<24} {}",
                        d.id,
                        d.attempts,
                        d.redrives,
                        iso(d.died_at_ms),
                        d.reason
                    );
                }
            }
        }
        DlqAction::Show { queue, id } => {
            let Some(d) = broker.dead_letter(&queue, &id).await? else {
                bail!(
                    "no dead letter {id:?} in queue {queue:?}; `sluice dlq list {queue}` shows what is there"
                );
            };
            if ctx.json {
                print_json(&d.to_json())?;
            } else {
                print_dead_letter(&d);
            }
        }
        DlqAction::Replay {
            queue,
            ids,
            older_than,
            limit,
        } => {
            let selector = replay_selector(ids, older_than, limit)?;
            replay(ctx, &*broker, &queue, &selector).await?;
        }
        DlqAction::Purge { queue } => {
            let n = broker.purge(&queue).await?;
            report(ctx, "purged", &queue, n)?;
        }
    }
    Ok(())
}

/// What `dlq replay` takes, from its options as typed; a bad value is one
/// line naming the flag.
fn replay_selector(
    ids: Vec<String>,
    older_than: Option<String>,
    limit: Option<String>,
) -> Result<ReplaySelector> {
    ReplaySelector::by_hand(
        ids,
        older_than.as_deref(),
        limit.as_deref(),
        now_ms(),
        ["--older-than", "--limit"],
    )
    .map_err(anyhow::Error::msg)
}

/// `dlq replay`: an error when some of the ids asked for were not replayed.
async fn replay(
    ctx: &Context,
    broker: &dyn DeadLetters,
    queue: &str,
    selector: &ReplaySelector,
) -> Result<()> {
    let wanted = selector.ids.len() as u64;
    let n = broker.replay(queue, selector).await?;
    if wanted > 0 && n < wanted {
        let why = if selector.died_before_ms.is_some() || selector.limit.is_some() {
            "were not found, or were left out by --older-than or --limit"
        } else {
            "were not found"
        };
        bail!(
            "replayed {n} of {wanted} dead letters in queue {queue:?}: the others {why}; `sluice dlq list {queue}` shows what is there"
        );
    }
    report(ctx, "replayed", queue, n)
}

/// `dlq show` as text, one field a line.
fn print_dead_letter(d: &DeadLetter) {
    outln!("id:        {}", d.id);
    outln!("queue:     {}", d.queue);
    outln!("key:       {}", d.key);
    outln!("attempts:  {}", d.attempts);
    outln!("redrives:  {}", d.redrives);
    outln!("enqueued:  {}", iso(d.enqueued_at_ms));
    outln!("died:      {}", iso(d.died_at_ms));
    outln!("reason:    {}", d.reason);
    outln!("error:     {}", d.last_error.as_deref().unwrap_or("-"));
    outln!("version:   {}", d.handler_version.as_deref().unwrap_or("-"));
    if let Some(group) = &d.group {
        outln!("group:     {group}");
    }
    for (k, v) in &d.headers {
        outln!("header:    {k}={v}");
    }
    match std::str::from_utf8(&d.payload) {
        Ok(text) => outln!("payload:   {text}"),
        Err(_) => outln!(
            "payload:   (not UTF-8, {} bytes, base64) {}",
            d.payload.len(),
            base64::engine::general_purpose::STANDARD.encode(&d.payload)
        ),
    }
}

fn report(ctx: &Context, verb: &str, queue: &str, n: u64) -> Result<()> {
    if ctx.json {
        print_json(&serde_json::json!({ "queue": queue, verb: n }))
    } else {
        outln!("{verb} {n} dead letter(s) in queue {queue}");
        Ok(())
    }
}

fn iso(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn select(older_than: Option<&str>, limit: Option<&str>) -> Result<ReplaySelector, String> {
        ReplaySelector::by_hand(
            vec!["a".into()],
            older_than,
            limit,
            1_000_000,
            ["--older-than", "--limit"],
        )
    }

    #[test]
    fn options_become_a_selector_that_is_not_a_redrive() {
        let s = select(Some("10m"), Some("5")).unwrap();
        assert_eq!(s.ids, ["a"]);
        assert_eq!((s.died_before_ms, s.limit), (Some(400_000), Some(5)));
        assert!(!s.redrive && s.max_redrives.is_none(), "{s:?}");
        let s = select(None, None).unwrap();
        assert_eq!((s.died_before_ms, s.limit), (None, None));
    }

    #[test]
    fn bad_values_name_the_flag() {
        let e = select(Some("soon"), None).unwrap_err();
        assert!(e.starts_with("--older-than: bad duration \"soon\""), "{e}");
        for bad in ["0", "-1", "many"] {
            let e = select(None, Some(bad)).unwrap_err();
            assert!(e.starts_with("--limit: bad number"), "{bad}: {e}");
        }
    }
}
