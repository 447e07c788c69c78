//! A TCP proxy between a host and its broker that loses replies: what the
//! host sends reaches the server at once, what the server answers is held
//! for a while on its way back, and [`Proxy::cut`] drops every connection
//! with what it holds. A write the server applied in the moment before a
//! cut then looks to the host like one that never arrived, as after a
//! network failure, and the host writes it again on a new connection.
//! [`Proxy::freeze`] stops it passing anything either way, closing nothing,
//! as a peer that hangs or a network that drops every packet would.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Proxy {
    port: u16,
    /// Both sockets of every connection made so far.
    open: Arc<Mutex<Vec<TcpStream>>>,
    stopped: Arc<AtomicBool>,
    /// Replies held now, over every connection.
    held: Arc<AtomicUsize>,
    /// While set, nothing passes in either direction.
    frozen: Arc<AtomicBool>,
}

impl Proxy {
    /// A proxy on a free loopback port to `upstream` (`127.0.0.1:PORT`),
    /// holding each reply for `hold`.
    pub fn start(upstream: &str, hold: Duration) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let stopped: Arc<AtomicBool> = Arc::default();
        let held: Arc<AtomicUsize> = Arc::default();
        let (upstream, accepted, stop) = (upstream.to_string(), open.clone(), stopped.clone());
        let holding = held.clone();
        let frozen: Arc<AtomicBool> = Arc::default();
        let ice = frozen.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                accepted
                    .lock()
                    .unwrap()
                    .extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                let (c, s) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (now_ice, held_ice) = (ice.clone(), ice.clone());
                std::thread::spawn(move || copy_now(c, s, &now_ice));
                let holding = holding.clone();
                std::thread::spawn(move || copy_held(server, client, hold, &holding, &held_ice));
            }
        });
        Proxy {
            port,
            open,
            stopped,
            held,
            frozen,
        }
    }

    /// Pass nothing, either way, until [`thaw`](Self::thaw); connections
    /// stay open and what is sent waits.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// Pass what waited, and everything after.
    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }

    /// A proxy in front of the loopback server of broker `url`
    /// (`…127.0.0.1:PORT…`), and the same URL through it.
    pub fn in_front_of(url: &str, hold: Duration) -> (Proxy, String) {
        let port = url
            .split("127.0.0.1:")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .unwrap_or_else(|| panic!("no 127.0.0.1:PORT in broker URL {url}"))
            .to_string();
        let proxy = Proxy::start(&format!("127.0.0.1:{port}"), hold);
        let through = url.replacen(
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{}", proxy.port()),
            1,
        );
        (proxy, through)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Wait until a reply is held (up to a second), then [`cut`](Self::cut):
    /// a cut that loses at least one reply, unless none came.
    pub fn cut_a_reply(&self) {
        let since = Instant::now();
        while self.held.load(Ordering::SeqCst) == 0 && since.elapsed() < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_micros(200));
        }
        self.cut();
    }

    /// Drop every connection open now, and the replies held on them.
    pub fn cut(&self) {
        for socket in self.open.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.thaw();
        self.cut();
        // Wake the accepting thread so that it sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Wait while `frozen` is set.
fn wait_thawed(frozen: &AtomicBool) {
    while frozen.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Copy `from` to `to` as it comes (unless frozen).
fn copy_now(mut from: TcpStream, mut to: TcpStream, frozen: &AtomicBool) {
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        wait_thawed(frozen);
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

/// Copy `from` to `to`, each piece `hold` after it came, counting the
/// pieces on their way in `held`.
fn copy_held(
    mut from: TcpStream,
    to: TcpStream,
    hold: Duration,
    held: &Arc<AtomicUsize>,
    frozen: &Arc<AtomicBool>,
) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let mut out = to.try_clone().unwrap();
    let counted = held.clone();
    let frozen = frozen.clone();
    let writer = std::thread::spawn(move || {
        let mut ok = true;
        for (due, bytes) in rx {
            if ok {
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                wait_thawed(&frozen);
                ok = out.write_all(&bytes).is_ok();
            }
            counted.fetch_sub(1, Ordering::SeqCst);
        }
    });
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        held.fetch_add(1, Ordering::SeqCst);
        if tx.send((Instant::now() + hold, buf[..n].to_vec())).is_err() {
            held.fetch_sub(1, Ordering::SeqCst);
            break;
        }
    }
    drop(tx);
    // Held replies of a cut connection go nowhere: the socket is shut.
    let _ = writer.join();
    let _ = to.shutdown(Shutdown::Both);
}
