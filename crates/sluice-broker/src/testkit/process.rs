//! Child processes with deadlines, for the test servers ([`PgServer`],
//! [`RedisServer`]) and whatever else a test runs: a command that hangs
//! fails its caller instead of the whole run.
//!
//! [`PgServer`]: super::PgServer
//! [`RedisServer`]: super::RedisServer

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Runs a command to completion or kills it at the deadline: its exit
/// status, stdout and stderr (lossily UTF-8), or why it could not be run or
/// did not finish in time. Output is read on threads so a chatty command
/// cannot block on a full pipe; stdin is closed.
pub fn run_with_deadline(
    mut cmd: Command,
    limit: Duration,
) -> Result<(ExitStatus, String, String), String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("spawning {cmd:?}: {e}"))?;
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = read(Box::new(child.stdout.take().unwrap()));
    let err = read(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < limit => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                reap(&mut child);
                return Err(format!("{cmd:?} did not finish within {limit:?}"));
            }
            Err(e) => {
                reap(&mut child);
                return Err(format!("waiting for {cmd:?}: {e}"));
            }
        }
    };
    Ok((status, out.join().unwrap(), err.join().unwrap()))
}

/// SIGKILL (what `Child::kill` sends on Unix) and reap; errors are ignored,
/// so a child that has exited already is reaped all the same.
pub fn reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}
