//! The `sluice` command line: argument parsing and one module per command.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::config::{DEFAULT_BROKER, HostConfig, LogFormat};

/// `println!` for the command line's own output: when the reader has gone
/// away (`sluice stats | head`), the command ends quietly with status 141,
/// as one killed by SIGPIPE would, instead of panicking. The process keeps
/// SIGPIPE ignored (Rust's default): a host writing to a socket a broker
/// closed must get an error to handle, not a signal that kills it.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::say(format_args!($($arg)*))
    };
}

/// Write one line of output; see [`outln!`].
pub(crate) fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(line).and_then(|()| out.write_all(b"\n"));
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(141),
        Err(e) => panic!("failed printing to stdout: {e}"),
    }
}

mod check;
mod dlq;
mod invoke;
mod new;
mod pause;
mod run;
mod send;
mod stats;
mod topics;

#[derive(Debug, Parser)]
/// The whole command line.
#[command(
    name = "sluice",
    version,
    about = "Run sandboxed WebAssembly handlers over a message queue"
)]
pub(crate) struct Cli {
    /// Broker URL: sqlite://PATH (default sqlite://sluice.db), redis://HOST:PORT[/DB]
    /// or postgres://USER@HOST:PORT/DB[?schema=NAME].
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) broker: Option<String>,
    /// Config file (default: sluice.toml, when it exists).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Print machine-readable JSON.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the handlers in a directory.
    Run(run::RunArgs),
    /// Publish one message.
    Send(send::SendArgs),
    /// Inspect, replay or purge dead letters.
    Dlq(dlq::DlqArgs),
    /// Per-queue counts, and the handlers the running hosts serve.
    Stats(stats::StatsArgs),
    /// Pause a queue: no host leases its messages until it is resumed.
    Pause(pause::PauseArgs),
    /// Resume a paused queue.
    Resume(pause::PauseArgs),
    /// List topics and their bindings; bind or unbind a queue.
    Topics(topics::TopicsArgs),
    /// Validate a handler component against the WIT world.
    Check(check::CheckArgs),
    /// Scaffold a handler project: rust, python, js or c.
    New(new::NewArgs),
    /// Call a handler once on a message, without a broker, and show what it did.
    #[command(after_help = invoke::EXIT_STATUSES)]
    Invoke(invoke::InvokeArgs),
}

/// An error in what the user gave (an argument, a file it names): the
/// command exits with status 2, as for a usage error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadInput(pub(crate) String);

/// What every command shares: the config file and the broker to use.
pub(crate) struct Context {
    pub(crate) config: HostConfig,
    pub(crate) broker_url: String,
    pub(crate) json: bool,
}

impl Context {
    fn new(cli: &Cli) -> Result<Self> {
        let config = match &cli.config {
            Some(path) => HostConfig::load(path)?,
            None if std::path::Path::new("sluice.toml").exists() => {
                HostConfig::load(std::path::Path::new("sluice.toml"))?
            }
            None => HostConfig::default(),
        };
        let broker_url = cli
            .broker
            .clone()
            .or_else(|| config.broker.clone())
            .unwrap_or_else(|| DEFAULT_BROKER.to_string());
        Ok(Context {
            config,
            broker_url,
            json: cli.json,
        })
    }

    pub(crate) async fn broker(&self) -> Result<std::sync::Arc<dyn crate::broker::Broker>> {
        crate::broker::connect(&self.broker_url).await
    }

    /// `SLUICE_LOG_FORMAT` (`text` or `json`), else `log_format` in
    /// sluice.toml, else text.
    pub(crate) fn log_format(&self) -> Result<LogFormat> {
        match std::env::var("SLUICE_LOG_FORMAT") {
            Ok(v) if !v.trim().is_empty() => match v.trim().to_ascii_lowercase().as_str() {
                "text" => Ok(LogFormat::Text),
                "json" => Ok(LogFormat::Json),
                _ => anyhow::bail!("SLUICE_LOG_FORMAT={v:?}: give text or json"),
            },
            _ => Ok(self.config.log_format.unwrap_or_default()),
        }
    }

    pub(crate) fn grace(&self) -> Duration {
        self.config
            .shutdown_grace
            .map_or(Duration::from_secs(30), |d| d.0)
    }
}

/// The `sluice` command line as the binary runs it: parse the arguments
/// (clap prints help, the version or a usage error and exits), run the
/// command, and report its error, if any, on one line of stderr. The exit
/// status says which: success, or failure.
pub async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match dispatch(cli).await {
        Ok(status) => status,
        Err(e) => {
            eprintln!("error: {}", crate::error::one_line(&e));
            if e.is::<BadInput>() {
                std::process::ExitCode::from(2)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}

/// Run the parsed command line. Logging is set up here, once.
async fn dispatch(cli: Cli) -> Result<std::process::ExitCode> {
    let ctx = Context::new(&cli)?;
    // `invoke` shows the handler's lines itself, and only sluice's warnings.
    let quiet = matches!(cli.command, Command::Invoke(_));
    init_logging(
        ctx.log_format()?,
        if quiet {
            "warn,sluice::guest=off"
        } else {
            "info"
        },
    );
    let done = match cli.command {
        Command::Invoke(args) => return invoke::invoke(&ctx, args).await,
        Command::Run(args) => run::run(&ctx, args).await,
        Command::Send(args) => send::send(&ctx, args).await,
        Command::Dlq(args) => dlq::dlq(&ctx, args).await,
        Command::Stats(args) => stats::stats(&ctx, args).await,
        Command::Pause(args) => pause::set_paused(&ctx, args, true).await,
        Command::Resume(args) => pause::set_paused(&ctx, args, false).await,
        Command::Topics(args) => topics::topics(&ctx, args).await,
        Command::Check(args) => check::check(&ctx, args),
        Command::New(args) => new::new(&ctx, args),
    };
    done.map(|()| std::process::ExitCode::SUCCESS)
}

fn init_logging(format: LogFormat, default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("SLUICE_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match format {
        // Every field of a line at the top level of its object, beside
        // `message`, so collectors index handler, queue, message id,
        // attempt and trace id as they are.
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Print a value as JSON on one line.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> Result<()> {
    outln!("{}", serde_json::to_string(value)?);
    Ok(())
}
