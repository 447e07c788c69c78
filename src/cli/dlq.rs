//! `sluice dlq list|show|replay|purge QUEUE`.

use anyhow::{Result, bail};
use base64::Engine as _;
use clap::{Args, Subcommand};

use super::{Context, print_json};
use crate::broker::{DeadLetter, ReplaySelector};

#[derive(Debug, Args)]
pub struct DlqArgs {
    #[command(subcommand)]
    pub action: DlqAction,
}

#[derive(Debug, Subcommand)]
pub enum DlqAction {
    /// List a queue's dead letters, oldest first.
    List {
        queue: String,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Show one dead letter in full, payload included.
    Show { queue: String, id: String },
    /// Put dead letters back on their queue with attempts reset.
    Replay {
        queue: String,
        /// Only this dead letter; repeatable. All of the queue's when absent.
        #[arg(long = "id")]
        ids: Vec<String>,
    },
    /// Delete all of a queue's dead letters.
    Purge { queue: String },
}

pub async fn dlq(ctx: &Context, args: DlqArgs) -> Result<()> {
    let broker = ctx.broker().await?;
    match args.action {
        DlqAction::List { queue, limit } => {
            let dead = broker.dead_letters(&queue, limit).await?;
            if ctx.json {
                for d in &dead {
                    print_json(&with_payload(d))?;
                }
            } else {
                println!("{:<34} {:>8}  {:<24} REASON", "ID", "ATTEMPTS", "DIED");
                for d in &dead {
                    println!(
                        "{:<34} {:>8}  {:<24} {}",
                        d.id,
                        d.attempts,
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
                print_json(&with_payload(&d))?;
            } else {
                println!("id:        {}", d.id);
                println!("queue:     {}", d.queue);
                println!("key:       {}", d.key);
                println!("attempts:  {}", d.attempts);
                println!("enqueued:  {}", iso(d.enqueued_at_ms));
                println!("died:      {}", iso(d.died_at_ms));
                println!("reason:    {}", d.reason);
                println!("error:     {}", d.last_error.as_deref().unwrap_or("-"));
                println!("version:   {}", d.handler_version.as_deref().unwrap_or("-"));
                for (k, v) in &d.headers {
                    println!("header:    {k}={v}");
                }
                match std::str::from_utf8(&d.payload) {
                    Ok(text) => println!("payload:   {text}"),
                    Err(_) => println!(
                        "payload:   (not UTF-8, {} bytes, base64) {}",
                        d.payload.len(),
                        base64::engine::general_purpose::STANDARD.encode(&d.payload)
                    ),
                }
            }
        }
        DlqAction::Replay { queue, ids } => {
            let n = broker
                .replay(&queue, &ReplaySelector { ids: ids.clone() })
                .await?;
            if !ids.is_empty() && n < ids.len() as u64 {
                bail!(
                    "replayed {n} of {} dead letters in queue {queue:?}: the others were not found",
                    ids.len()
                );
            }
            report(ctx, "replayed", &queue, n)?;
        }
        DlqAction::Purge { queue } => {
            let n = broker.purge(&queue).await?;
            report(ctx, "purged", &queue, n)?;
        }
    }
    Ok(())
}

fn report(ctx: &Context, verb: &str, queue: &str, n: u64) -> Result<()> {
    if ctx.json {
        print_json(&serde_json::json!({ "queue": queue, verb: n }))
    } else {
        println!("{verb} {n} dead letter(s) in queue {queue}");
        Ok(())
    }
}

/// A dead letter as JSON, with its payload as text when it is UTF-8 and as
/// base64 otherwise.
fn with_payload(d: &DeadLetter) -> serde_json::Value {
    let mut v = serde_json::to_value(d).expect("dead letters serialize");
    let obj = v.as_object_mut().expect("a dead letter is an object");
    match std::str::from_utf8(&d.payload) {
        Ok(text) => obj.insert("payload".into(), text.into()),
        Err(_) => obj.insert(
            "payload_base64".into(),
            base64::engine::general_purpose::STANDARD
                .encode(&d.payload)
                .into(),
        ),
    };
    v
}

fn iso(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(t).to_string()
}
