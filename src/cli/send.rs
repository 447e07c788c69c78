//! `sluice send QUEUE (PAYLOAD | @FILE | -)`,
//! `sluice send --topic T --route R (PAYLOAD | @FILE | -)`, and
//! `sluice send QUEUE --lines FILE`: one message per line, in batches.
//!
//! A bulk send reads on a thread of its own, a few batches ahead of the
//! broker, so reading overlaps publishing and memory stays bounded (by
//! [`BATCH_MESSAGES`] and [`BATCH_BYTES`] per batch) however big the file.
//! Batches are published one after another, in file order, so when one fails
//! every line before it is in and the error can say where to resume.

use std::io::{BufRead, IsTerminal as _, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Args;
use indicatif::{HumanCount, ProgressBar, ProgressStyle};
use tokio::sync::mpsc;

use super::{Context, print_json};
use crate::client::{Client, PublishError, PublishOptions};
use crate::message::{NewMessage, validate_queue_name};
use crate::units::{format_size, parse_duration};

/// At most this many messages go in one broker call of a bulk send.
const BATCH_MESSAGES: usize = 1_000;
/// A batch is closed once its payloads reach this many bytes, so a file of
/// long lines does not hold a thousand of them in memory at once.
const BATCH_BYTES: usize = 8 << 20;
/// How many batches the reading thread may read ahead of the broker.
const READ_AHEAD: usize = 2;

/// The arguments of `sluice send`.
#[derive(Debug, Args)]
#[command(
    override_usage = "sluice send [OPTIONS] QUEUE PAYLOAD\n       sluice send [OPTIONS] --topic TOPIC --route KEY PAYLOAD\n       sluice send [OPTIONS] QUEUE --lines FILE"
)]
pub(crate) struct SendArgs {
    /// QUEUE and PAYLOAD, or with --topic only PAYLOAD, or with --lines only
    /// QUEUE. The payload is literal text, @FILE for a file's bytes, or - for
    /// stdin.
    #[arg(value_name = "QUEUE/PAYLOAD", num_args = 1..=2, required = true)]
    pub(crate) values: Vec<String>,
    /// Publish to this topic: one copy into every queue bound with a
    /// matching pattern.
    #[arg(long, requires = "route")]
    pub(crate) topic: Option<String>,
    /// The routing key of a topic publish, e.g. orders.eu.created.
    #[arg(long, requires = "topic")]
    pub(crate) route: Option<String>,
    /// Publish one message per line of FILE (- for stdin) to QUEUE, in
    /// batches of up to 1,000. A line's "\n" or "\r\n" is not part of the
    /// message; empty lines are skipped and counted as skipped. --header
    /// and --delay apply to every message; --key cannot be used. A failure
    /// names the line to resume from: every line before it was sent.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["topic", "route"])]
    pub(crate) lines: Option<PathBuf>,
    /// Idempotency key (default: the new message's id).
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// A header, K=V; repeatable.
    #[arg(long = "header", value_name = "K=V")]
    pub(crate) headers: Vec<String>,
    /// Deliver no earlier than this, e.g. 5s or 1m.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) delay: Option<std::time::Duration>,
}

pub(crate) async fn send(ctx: &Context, args: SendArgs) -> Result<()> {
    if let Some(file) = &args.lines {
        return send_lines(ctx, &args, file).await;
    }
    // The queue, or None for a topic publish.
    let (queue, payload) = match (&args.topic, args.values.as_slice()) {
        (None, [queue, payload]) => (Some(queue.as_str()), payload),
        (None, [_]) => bail!(
            "give a queue and a payload: sluice send QUEUE PAYLOAD (or --topic T --route KEY PAYLOAD, or QUEUE --lines FILE)"
        ),
        (Some(_), [payload]) => (None, payload),
        (Some(topic), _) => bail!(
            "with --topic {topic} give only the payload: the topic's bindings choose the queues"
        ),
        _ => unreachable!("clap takes one or two values"),
    };
    let payload = read_payload(payload)?;
    let options = PublishOptions {
        headers: parse_headers(&args.headers)?,
        key: args.key,
        delay: args.delay.unwrap_or_default(),
    };
    let client = client(ctx).await?;
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
        outln!("{id}");
        Ok(())
    }
}

/// A publisher on the configured broker, with the configured size limit.
async fn client(ctx: &Context) -> Result<Client> {
    Ok(Client::from_broker(ctx.broker().await?)
        .with_max_message_size(ctx.config.max_message_size()))
}

/// `--header K=V` values as pairs.
fn parse_headers(headers: &[String]) -> Result<Vec<(String, String)>> {
    headers
        .iter()
        .map(|h| match h.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("bad --header {h:?}: write it as NAME=VALUE"),
        })
        .collect()
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
        outln!("{} {}", c.queue, c.id);
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

/// `sluice send QUEUE --lines FILE`: publish every non-empty line of FILE
/// as a message to QUEUE, then print a summary.
async fn send_lines(ctx: &Context, args: &SendArgs, file: &Path) -> Result<()> {
    let template = line_template(args)?;
    let max_size = ctx.config.max_message_size();
    // A bad queue name or too many headers is said once, not for every line.
    template.validate(max_size).map_err(anyhow::Error::msg)?;
    let input = Input::open(file)?;
    let client = client(ctx).await?;
    let mut run = BulkRun::new(ctx, &client, &template.queue, &input);
    let (tx, mut rx) = mpsc::channel(READ_AHEAD);
    let reader = std::thread::spawn(move || read_batches(input, template, max_size, tx));
    while let Some(item) = rx.recv().await {
        match item {
            Ok(batch) => run.publish(batch).await?,
            Err(stop) => return Err(run.stopped(stop)),
        }
    }
    // The channel closes when the reader returns; it only ends early by panicking.
    if reader.join().is_err() {
        bail!(
            "reading {} stopped unexpectedly; {}",
            run.source,
            run.resume_at(run.next_line)
        );
    }
    run.finish()
}

/// The message every line becomes, with an empty payload; refuses the flags
/// that cannot go with --lines.
fn line_template(args: &SendArgs) -> Result<NewMessage> {
    if args.key.is_some() {
        bail!(
            "--key cannot be used with --lines: one idempotency key on many messages would make every line after the first a duplicate; leave --key out and each message is keyed by its own id"
        );
    }
    let [queue] = args.values.as_slice() else {
        bail!(
            "with --lines give only the queue, no payload: sluice send QUEUE --lines FILE (each line of FILE is a payload)"
        );
    };
    validate_queue_name(queue).map_err(anyhow::Error::msg)?;
    Ok(NewMessage {
        queue: queue.clone(),
        payload: Vec::new(),
        headers: parse_headers(&args.headers)?,
        key: None,
        delay: args.delay.unwrap_or_default(),
    })
}

/// Where the lines come from.
struct Input {
    reader: Box<dyn BufRead + Send>,
    /// The file's name, or "stdin".
    name: String,
    /// A regular file's size, the progress bar's total; None for a stream.
    len: Option<u64>,
}

impl Input {
    /// Open `path`, or stdin for `-`.
    fn open(path: &Path) -> Result<Self> {
        if path == Path::new("-") {
            return Ok(Input {
                reader: Box::new(std::io::BufReader::new(std::io::stdin())),
                name: "stdin".into(),
                len: None,
            });
        }
        let name = path.display().to_string();
        let file = std::fs::File::open(path)
            .with_context(|| format!("cannot open --lines file {name}"))?;
        let meta = file
            .metadata()
            .with_context(|| format!("cannot read --lines file {name}"))?;
        Ok(Input {
            reader: Box::new(std::io::BufReader::with_capacity(1 << 16, file)),
            len: meta.is_file().then_some(meta.len()),
            name,
        })
    }
}

/// One broker call's worth of lines.
#[derive(Default)]
struct Batch {
    messages: Vec<NewMessage>,
    /// The line number of each message, for errors.
    lines: Vec<u64>,
    /// Payload bytes in `messages`.
    bytes: usize,
    /// Empty lines skipped since the previous batch.
    skipped: u64,
    /// Input bytes read since the previous batch, newlines and all.
    read: u64,
    /// The last line this batch covers.
    end_line: u64,
}

impl Batch {
    fn push(&mut self, line: u64, message: NewMessage) {
        self.bytes += message.payload.len();
        self.messages.push(message);
        self.lines.push(line);
    }

    fn is_full(&self) -> bool {
        self.messages.len() >= BATCH_MESSAGES || self.bytes >= BATCH_BYTES
    }
}

/// Why reading stopped before the end: the line, and what is wrong with it.
struct Stop {
    line: u64,
    why: String,
}

/// The reading thread: turn the lines of `input` into batches of messages
/// like `template` until the end, the first bad line (sent last, after the
/// batch before it), or the publisher hanging up.
fn read_batches(
    mut input: Input,
    template: NewMessage,
    max_size: u64,
    tx: mpsc::Sender<Result<Batch, Stop>>,
) {
    let mut batch = Batch::default();
    let mut stop = None;
    for line in 1.. {
        let payload = match read_line(&mut *input.reader, &template.queue, max_size) {
            Ok(Some((payload, read))) => {
                batch.read += read;
                batch.end_line = line;
                payload
            }
            Ok(None) => break,
            Err(why) => {
                stop = Some(Stop { line, why });
                break;
            }
        };
        if payload.is_empty() {
            batch.skipped += 1;
            continue;
        }
        let message = NewMessage {
            payload,
            ..template.clone()
        };
        if let Err(why) = message.validate(max_size) {
            stop = Some(Stop { line, why });
            break;
        }
        batch.push(line, message);
        if batch.is_full() && tx.blocking_send(Ok(std::mem::take(&mut batch))).is_err() {
            return;
        }
    }
    if batch.read > 0 && tx.blocking_send(Ok(batch)).is_err() {
        return;
    }
    if let Some(stop) = stop {
        let _ = tx.blocking_send(Err(stop));
    }
}

/// The next line without its "\n" or "\r\n", and the bytes it took; None at
/// the end. A line too long for `max_size` is refused without reading all
/// of it, so one huge line cannot exhaust memory.
fn read_line(
    input: &mut dyn BufRead,
    queue: &str,
    max_size: u64,
) -> Result<Option<(Vec<u8>, u64)>, String> {
    // Room for the largest payload allowed and its "\r\n".
    let limit = max_size + 2;
    let mut line = Vec::new();
    let read = input
        .take(limit)
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("cannot read it: {e}"))? as u64;
    if read == 0 {
        return Ok(None);
    }
    let ended = line.last() == Some(&b'\n');
    if !ended && read == limit {
        return Err(format!(
            "message for queue {queue:?} is over the {} limit (raise max_message_size in sluice.toml, or send less)",
            format_size(max_size)
        ));
    }
    if ended {
        line.pop();
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(Some((line, read)))
}

/// A bulk send under way: what is sent so far, for the progress bar, the
/// summary, and an error that says where to resume.
struct BulkRun<'a> {
    ctx: &'a Context,
    client: &'a Client,
    queue: String,
    source: String,
    started: Instant,
    progress: ProgressBar,
    sent: u64,
    skipped: u64,
    /// Input bytes covered by the batches sent.
    read: u64,
    /// The first line not sent yet.
    next_line: u64,
}

impl<'a> BulkRun<'a> {
    fn new(ctx: &'a Context, client: &'a Client, queue: &str, input: &Input) -> Self {
        let run = BulkRun {
            ctx,
            client,
            queue: queue.to_string(),
            source: input.name.clone(),
            started: Instant::now(),
            progress: progress_bar(input.len),
            sent: 0,
            skipped: 0,
            read: 0,
            next_line: 1,
        };
        run.show_progress();
        run
    }

    /// Publish one batch in one broker call. When the client refuses it
    /// (the reader checked every line, but the client has the last word),
    /// publish it one message at a time to find the line it refuses.
    async fn publish(&mut self, batch: Batch) -> Result<()> {
        if !batch.messages.is_empty() {
            match self.client.publish_all(batch.messages.clone()).await {
                Ok(_) => self.sent += batch.messages.len() as u64,
                Err(PublishError::Refused(_)) => self.publish_singly(&batch).await?,
                Err(PublishError::Broker(e)) => {
                    return Err(self.failed(batch.lines[0], batch.end_line, e.into()));
                }
            }
        }
        self.skipped += batch.skipped;
        self.read += batch.read;
        self.next_line = batch.end_line + 1;
        self.show_progress();
        Ok(())
    }

    /// Publish `batch` one message at a time, stopping at the first refusal.
    async fn publish_singly(&mut self, batch: &Batch) -> Result<()> {
        for (message, &line) in batch.messages.iter().zip(&batch.lines) {
            match self.client.publish_all(vec![message.clone()]).await {
                Ok(_) => self.sent += 1,
                Err(PublishError::Refused(why)) => return Err(self.stopped(Stop { line, why })),
                Err(PublishError::Broker(e)) => {
                    return Err(self.failed(line, batch.end_line, e.into()));
                }
            }
        }
        Ok(())
    }

    /// The error for a line that cannot be sent; every line before it was.
    fn stopped(&self, stop: Stop) -> anyhow::Error {
        anyhow::anyhow!(
            "line {} of {}: {}; {}",
            stop.line,
            self.source,
            stop.why,
            self.resume_at(stop.line)
        )
    }

    /// The error for a batch the broker failed to take, from line `first`
    /// to line `last`.
    fn failed(&self, first: u64, last: u64, e: anyhow::Error) -> anyhow::Error {
        e.context(format!(
            "cannot publish lines {first} to {last} of {} to queue {:?} on {}; {} (on Redis some of lines {first} to {last} may be in already)",
            self.source,
            self.queue,
            self.ctx.broker_url,
            self.resume_at(first),
        ))
    }

    /// What was sent before `line`, and where to resume.
    fn resume_at(&self, line: u64) -> String {
        if line <= 1 {
            return "nothing was sent".into();
        }
        format!(
            "lines 1 to {} were sent ({}); resume from line {line}",
            line - 1,
            plural(self.sent, "message")
        )
    }

    fn rate(&self) -> u64 {
        let seconds = self.started.elapsed().as_secs_f64();
        if seconds > 0.0 {
            (self.sent as f64 / seconds).round() as u64
        } else {
            0
        }
    }

    fn show_progress(&self) {
        self.progress.set_position(self.read);
        self.progress.set_message(format!(
            "{} messages, {} msg/s",
            HumanCount(self.sent),
            HumanCount(self.rate())
        ));
    }

    /// Clear the progress bar and print the summary.
    fn finish(self) -> Result<()> {
        self.progress.finish_and_clear();
        let seconds = self.started.elapsed().as_secs_f64();
        if self.ctx.json {
            return print_json(&serde_json::json!({
                "queue": self.queue,
                "sent": self.sent,
                "skipped": self.skipped,
                "seconds": (seconds * 1000.0).round() / 1000.0,
                "rate": self.rate(),
            }));
        }
        let skipped = match self.skipped {
            0 => String::new(),
            n => format!("; skipped {}", plural(n, "empty line")),
        };
        outln!(
            "sent {} to queue {} in {seconds:.2}s ({} msg/s){skipped}",
            plural(self.sent, "message"),
            self.queue,
            HumanCount(self.rate()),
        );
        Ok(())
    }
}

/// A progress bar on stderr when it is a terminal: bytes of a regular file
/// read so far out of its size, or a spinner for a stream.
fn progress_bar(len: Option<u64>) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let (bar, template) = match len {
        Some(len) => (
            ProgressBar::new(len),
            "{wide_bar} {bytes}/{total_bytes}  {msg}  {elapsed}",
        ),
        None => (ProgressBar::new_spinner(), "{spinner} {msg}  {elapsed}"),
    };
    bar.set_style(ProgressStyle::with_template(template).expect("a valid template"));
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// "1 message", "2,000 messages".
fn plural(n: u64, noun: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{} {noun}{s}", HumanCount(n))
}
