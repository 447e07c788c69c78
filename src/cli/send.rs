//! `sluice send QUEUE (PAYLOAD | @FILE | -)`.

use std::io::Read;

use anyhow::{Context as _, Result, bail};
use clap::Args;

use super::{Context, print_json};
use crate::message::NewMessage;
use crate::units::parse_duration;

#[derive(Debug, Args)]
pub struct SendArgs {
    /// Queue to publish to.
    pub queue: String,
    /// The payload: literal text, @FILE for a file's bytes, or - for stdin.
    pub payload: String,
    /// Idempotency key (default: the new message's id).
    #[arg(long)]
    pub key: Option<String>,
    /// A header, K=V; repeatable.
    #[arg(long = "header", value_name = "K=V")]
    pub headers: Vec<String>,
    /// Deliver no earlier than this, e.g. 5s or 1m.
    #[arg(long, value_parser = parse_duration)]
    pub delay: Option<std::time::Duration>,
}

pub async fn send(ctx: &Context, args: SendArgs) -> Result<()> {
    let payload = read_payload(&args.payload)?;
    let headers = args
        .headers
        .iter()
        .map(|h| match h.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("bad --header {h:?}: write it as NAME=VALUE"),
        })
        .collect::<Result<Vec<_>>>()?;
    let message = NewMessage {
        queue: args.queue,
        payload,
        headers,
        key: args.key,
        delay: args.delay.unwrap_or_default(),
    };
    message
        .validate(ctx.config.max_message_size())
        .map_err(anyhow::Error::msg)?;
    let queue = message.queue.clone();
    let broker = ctx.broker().await?;
    let ids = broker
        .publish(vec![message])
        .await
        .with_context(|| format!("cannot publish to queue {queue:?} on {}", ctx.broker_url))?;
    let id = &ids[0];
    if ctx.json {
        print_json(&serde_json::json!({ "queue": queue, "id": id }))
    } else {
        println!("{id}");
        Ok(())
    }
}

fn read_payload(arg: &str) -> Result<Vec<u8>> {
    if arg == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .context("cannot read the payload from stdin")?;
        return Ok(buf);
    }
    if let Some(path) = arg.strip_prefix('@') {
        return std::fs::read(path).with_context(|| format!("cannot read payload file {path}"));
    }
    Ok(arg.as_bytes().to_vec())
}
