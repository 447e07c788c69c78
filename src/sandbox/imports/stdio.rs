//! Guest stdout and stderr, line by line, into the host's log, tagged with
//! the handler's name: each line cut to [`MAX_LOG_LINE`] (the rest of it is
//! skipped up to its newline), within the handler's log rate.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

use super::HandlerContext;
use super::budget::MAX_LOG_LINE;
use crate::sandbox::wit::sluice::handler::log::Level;

/// Which of a guest's output streams a [`LogStream`] carries.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// A guest's stdout or stderr, written to the host's log line by line.
#[derive(Clone)]
pub(crate) struct LogStream {
    handler: std::sync::Arc<HandlerContext>,
    stream: Stream,
}

impl LogStream {
    /// `handler`'s stream `stream`.
    pub(crate) fn new(handler: std::sync::Arc<HandlerContext>, stream: Stream) -> Self {
        LogStream { handler, stream }
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(LineWriter {
            sink: self.clone(),
            line: Vec::new(),
            cut: 0,
        })
    }
}

struct LineWriter {
    sink: LogStream,
    line: Vec<u8>,
    /// Bytes of the current line skipped past [`MAX_LOG_LINE`].
    cut: usize,
}

impl LineWriter {
    fn emit(&mut self) {
        let text = String::from_utf8_lossy(&self.line);
        let mut text = text.trim_end_matches(['\r', '\n']).to_string();
        if self.cut > 0 {
            text.push_str(&format!("… [cut: {} more bytes]", self.cut));
        }
        self.line.clear();
        self.cut = 0;
        let handler = self.sink.handler.name.as_str();
        if !self.sink.handler.log.admit(handler) {
            return;
        }
        if let Some(capture) = &self.sink.handler.capture {
            let (level, stream) = match self.sink.stream {
                Stream::Stdout => (Level::Info, "stdout"),
                Stream::Stderr => (Level::Warn, "stderr"),
            };
            capture.line(level, stream, &text);
        }
        match self.sink.stream {
            Stream::Stdout => {
                tracing::info!(target: "sluice::guest", handler, stream = "stdout", "{text}")
            }
            Stream::Stderr => {
                tracing::warn!(target: "sluice::guest", handler, stream = "stderr", "{text}")
            }
        }
    }
}

impl AsyncWrite for LineWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        for &b in buf {
            if b == b'\n' {
                this.emit();
            } else if this.line.len() < MAX_LOG_LINE {
                this.line.push(b);
            } else {
                this.cut += 1;
            }
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.line.is_empty() || this.cut > 0 {
            this.emit();
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if !self.line.is_empty() || self.cut > 0 {
            self.emit();
        }
    }
}
