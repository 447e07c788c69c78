//! Guest stdout and stderr, line by line, into the host's log, tagged with
//! the handler's name.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// Longest line kept before it is logged in pieces.
const MAX_LINE: usize = 16 * 1024;

/// Which of a guest's output streams a [`LogStream`] carries.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A guest's stdout or stderr, written to the host's log line by line.
#[derive(Clone)]
pub struct LogStream {
    handler: std::sync::Arc<str>,
    stream: Stream,
}

impl LogStream {
    pub fn new(handler: &str, stream: Stream) -> Self {
        LogStream {
            handler: handler.into(),
            stream,
        }
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
        })
    }
}

struct LineWriter {
    sink: LogStream,
    line: Vec<u8>,
}

impl LineWriter {
    fn emit(&mut self) {
        let text = String::from_utf8_lossy(&self.line);
        let text = text.trim_end_matches(['\r', '\n']);
        let handler = &*self.sink.handler;
        match self.sink.stream {
            Stream::Stdout => {
                tracing::info!(target: "sluice::guest", handler, stream = "stdout", "{text}")
            }
            Stream::Stderr => {
                tracing::warn!(target: "sluice::guest", handler, stream = "stderr", "{text}")
            }
        }
        self.line.clear();
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
            this.line.push(b);
            if b == b'\n' || this.line.len() >= MAX_LINE {
                this.emit();
            }
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.line.is_empty() {
            this.emit();
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if !self.line.is_empty() {
            self.emit();
        }
    }
}
