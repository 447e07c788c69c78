//! `sluice send QUEUE (PAYLOAD | @FILE | -)`, and
//! `sluice send --topic T --route R (PAYLOAD | @FILE | -)`.

use std::io::Read;

use anyhow::{Context as _, Result, bail};
use clap::Args;

use super::{Context, print_json};
use crate::client::{Client, PublishError, PublishOptions};
use crate::units::parse_duration;

/// The arguments of `sluice send`.
#[derive(Debug, Args)]
#[command(
    override_usage = "sluice send [OPTIONS] QUEUE PAYLOAD\n       sluice send [OPTIONS] --topic TOPIC --route KEY PAYLOAD"
)]
pub struct SendArgs {
    /// QUEUE and PAYLOAD, or with --topic only PAYLOAD. The payload is
    /// literal text, @FILE for a file's bytes, or - for stdin.
    #[arg(value_name = "QUEUE/PAYLOAD", num_args = 1..=2, required = true)]
    pub values: Vec<String>,
    /// Publish to this topic: one copy into every queue bound with a
    /// matching pattern.
    #[arg(long, requires = "route")]
    pub topic: Option<String>,
    /// The routing key of a topic publish, e.g. orders.eu.created.
    #[arg(long, requires = "topic")]
    pub route: Option<String>,
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
    // The queue, or None for a topic publish.
    let (queue, payload) = match (&args.topic, args.values.as_slice()) {
        (None, [queue, payload]) => (Some(queue.as_str()), payload),
        (None, [_]) => bail!(
            "give a queue and a payload: sluice send QUEUE PAYLOAD (or --topic T --route KEY PAYLOAD)"
        ),
        (Some(_), [payload]) => (None, payload),
        (Some(topic), _) => bail!(
            "with --topic {topic} give only the payload: the topic's bindings choose the queues"
        ),
        _ => unreachable!("clap takes one or two values"),
    };
    let payload = read_payload(payload)?;
    let headers = args
        .headers
        .iter()
        .map(|h| match h.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("bad --header {h:?}: write it as NAME=VALUE"),
        })
        .collect::<Result<Vec<_>>>()?;
    let options = PublishOptions {
        headers,
        key: args.key,
        delay: args.delay.unwrap_or_default(),
    };
    let client = Client::from_broker(ctx.broker().await?)
        .with_max_message_size(ctx.config.max_message_size());
    let Some(queue) = queue else {
        let (Some(topic), Some(route)) = (&args.topic, &args.route) else {
            unreachable!("clap requires --route with --topic")
        };
        return send_to_topic(ctx, &client, topic, route, &payload, options).await;
    };
    let id = client
        .publish_with(queue, &payload, options)
        .await
        .map_err(|e| {
            refused_or(e, || {
                format!("cannot publish to queue {queue:?} on {}", ctx.broker_url)
            })
        })?;
    if ctx.json {
        print_json(&serde_json::json!({ "queue": queue, "id": id }))
    } else {
        println!("{id}");
        Ok(())
    }
}

/// Publish to a topic; prints one line per copy, `QUEUE ID`.
async fn send_to_topic(
    ctx: &Context,
    client: &Client,
    topic: &str,
    route: &str,
    payload: &[u8],
    options: PublishOptions,
) -> Result<()> {
    let copies = client
        .publish_to_topic_with(topic, route, payload, options)
        .await
        .map_err(|e| {
            refused_or(e, || {
                format!("cannot publish to topic {topic:?} on {}", ctx.broker_url)
            })
        })?;
    if ctx.json {
        return print_json(
            &serde_json::json!({ "topic": topic, "route": route, "copies": copies }),
        );
    }
    for c in copies {
        println!("{} {}", c.queue, c.id);
    }
    Ok(())
}

/// A refusal says all there is to say; a broker failure gets context.
fn refused_or(e: PublishError, context: impl FnOnce() -> String) -> anyhow::Error {
    match e {
        PublishError::Refused(why) => anyhow::Error::msg(why),
        PublishError::Broker(e) => anyhow::Error::new(e).context(context()),
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
