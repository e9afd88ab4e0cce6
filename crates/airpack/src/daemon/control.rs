//! The control socket and the metrics endpoint: server side (polled by the
//! daemon's event loop) and the `airpack stats` / `airpack peers` clients.
//!
//! Protocol: a client connects to the Unix stream socket, writes one request
//! line (`stats` or `peers`), and reads a JSON document until EOF. The optional
//! Prometheus endpoint is a minimal HTTP/1.0 responder for `GET /metrics`.
//!
//! Owns: listening sockets, a bounded table of client connections (nonblocking,
//! oldest evicted when full), request parsing with size bounds.
//!
//! Must not touch: the engine or statistics content: the daemon renders
//! answers (off its loop, `runtime::report`) and hands them back with
//! [`Server::respond`], checking [`Server::serial`] first.

use crate::linux::{Interest, Poller};
use anyhow::Context;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default control socket path (matches the config default).
pub const DEFAULT_SOCKET: &str = "/run/airpack/airpack.sock";

/// Token of the control listener in the daemon's poller.
pub const TOK_CONTROL: u64 = 8;
/// Token of the metrics listener.
pub const TOK_METRICS: u64 = 9;
/// Tokens from here on are client connections (slot = token - base).
pub const TOK_CONN_BASE: u64 = 100;
/// At most this many client connections at once.
pub const MAX_CONNS: usize = 16;
/// Requests longer than this are rejected.
const MAX_REQUEST: usize = 4096;
/// Answers larger than this are cut (bounded memory per client).
const MAX_RESPONSE: usize = 16 << 20;

/// What a client asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `stats`: the statistics JSON.
    Stats,
    /// `peers`: the peers JSON.
    Peers,
    /// `GET /metrics` on the metrics endpoint.
    Metrics,
    /// Anything else (answered with an error).
    Bad(String),
}

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn fd(&self) -> i32 {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
        }
    }
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(b),
            Stream::Tcp(s) => s.read(b),
        }
    }
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(b),
            Stream::Tcp(s) => s.write(b),
        }
    }
}

struct Conn {
    stream: Stream,
    http: bool,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    written: usize,
    answering: bool,
    /// The answer was handed over ([`Server::respond`]).
    responded: bool,
    opened: u64,
}

/// The listeners and their client connections.
pub struct Server {
    control: UnixListener,
    path: PathBuf,
    metrics: Option<TcpListener>,
    conns: Vec<Option<Conn>>,
    serial: u64,
}

impl Server {
    /// Binds the control socket at `path` (creating its directory, replacing a
    /// stale socket left by a crashed run, refusing if a live daemon answers
    /// there) and, if given, the metrics listener.
    pub fn bind(path: &Path, metrics: Option<SocketAddr>) -> anyhow::Result<Server> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                anyhow::bail!(
                    "another daemon is already serving control socket {}",
                    path.display()
                );
            }
            std::fs::remove_file(path)
                .with_context(|| format!("removing stale socket {}", path.display()))?;
        }
        let control = UnixListener::bind(path)
            .with_context(|| format!("binding control socket {}", path.display()))?;
        // Only root talks to the daemon (like WireGuard's sockets): the
        // answers name peers and addresses. bind() honoured the umask; narrow
        // it to 0600, or 0660 when the directory is setgid to a group other
        // than root (`install -d -m 2750 -g GROUP /run/airpack`): the socket
        // then already belongs to that group, whose members may ask too.
        {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            let group =
                std::fs::metadata(dir).is_ok_and(|m| m.mode() & 0o2000 != 0 && m.gid() != 0);
            let mode = if group { 0o660 } else { 0o600 };
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                .with_context(|| format!("restricting control socket {}", path.display()))?;
        }
        control.set_nonblocking(true)?;
        let metrics = match metrics {
            Some(a) => {
                let l = TcpListener::bind(a)
                    .with_context(|| format!("binding metrics endpoint {a}"))?;
                l.set_nonblocking(true)?;
                Some(l)
            }
            None => None,
        };
        Ok(Server {
            control,
            path: path.to_owned(),
            metrics,
            conns: (0..MAX_CONNS).map(|_| None).collect(),
            serial: 0,
        })
    }

    /// Registers the listeners with the poller.
    pub fn register(&self, poller: &Poller) -> io::Result<()> {
        poller.add(self.control.as_raw_fd(), TOK_CONTROL, Interest::READ)?;
        if let Some(m) = &self.metrics {
            poller.add(m.as_raw_fd(), TOK_METRICS, Interest::READ)?;
        }
        Ok(())
    }

    /// The metrics address actually bound (port 0 resolved).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|m| m.local_addr().ok())
    }

    /// Accepts pending connections on a listener (`TOK_CONTROL` or `TOK_METRICS`).
    pub fn accept(&mut self, poller: &Poller, token: u64) {
        for _ in 0..MAX_CONNS {
            let stream = match token {
                TOK_CONTROL => match self.control.accept() {
                    Ok((s, _)) => Stream::Unix(s),
                    Err(_) => return,
                },
                _ => match self.metrics.as_ref().map(|m| m.accept()) {
                    Some(Ok((s, _))) => Stream::Tcp(s),
                    _ => return,
                },
            };
            let ok = match &stream {
                Stream::Unix(s) => s.set_nonblocking(true).is_ok(),
                Stream::Tcp(s) => s.set_nonblocking(true).is_ok(),
            };
            if !ok {
                continue;
            }
            let slot = match self.conns.iter().position(Option::is_none) {
                Some(s) => s,
                None => {
                    // Full: evict the oldest connection (bounded table; a stuck
                    // client cannot lock out the operator).
                    let oldest = self
                        .conns
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, c)| c.as_ref().map(|c| c.opened).unwrap_or(0))
                        .map(|(i, _)| i)
                        .unwrap_or(0);
                    self.close(poller, oldest);
                    oldest
                }
            };
            if poller
                .add(stream.fd(), TOK_CONN_BASE + slot as u64, Interest::READ)
                .is_err()
            {
                continue;
            }
            self.serial += 1;
            self.conns[slot] = Some(Conn {
                stream,
                http: token == TOK_METRICS,
                inbuf: Vec::with_capacity(256),
                out: Vec::new(),
                written: 0,
                answering: false,
                responded: false,
                opened: self.serial,
            });
        }
    }

    fn close(&mut self, poller: &Poller, slot: usize) {
        if let Some(c) = self.conns.get_mut(slot).and_then(Option::take) {
            let _ = poller.delete(c.stream.fd());
        }
    }

    /// The serial number of the connection in `slot` (unique per accepted
    /// connection): an answer rendered elsewhere is given to `slot` only if
    /// it still holds the connection that asked.
    pub fn serial(&self, slot: usize) -> Option<u64> {
        self.conns.get(slot)?.as_ref().map(|c| c.opened)
    }

    /// Handles readiness of connection `slot`; returns a complete request to answer.
    pub fn ready(&mut self, poller: &Poller, slot: usize, writable: bool) -> Option<Request> {
        let conn = self.conns.get_mut(slot)?.as_mut()?;
        if conn.answering {
            // Answer being rendered: nothing to do until it is handed over
            // (interest is off meanwhile). Answer handed over: writable (or
            // hung up) means try to send the rest.
            let _ = writable;
            if conn.responded {
                self.flush(poller, slot);
            }
            return None;
        }
        let mut buf = [0u8; 1024];
        let mut eof = false;
        loop {
            match conn.stream.read(&mut buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    if conn.inbuf.len() + n > MAX_REQUEST {
                        conn.inbuf.clear();
                        conn.answering = true;
                        let _ = poller.modify(
                            conn.stream.fd(),
                            TOK_CONN_BASE + slot as u64,
                            Interest::NONE,
                        );
                        return Some(Request::Bad("request too long".into()));
                    }
                    conn.inbuf.extend_from_slice(&buf[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.close(poller, slot);
                    return None;
                }
            }
        }
        let req = if conn.http {
            let text = String::from_utf8_lossy(&conn.inbuf);
            if !(text.contains("\r\n\r\n") || text.contains("\n\n") || eof) {
                return None;
            }
            let first = text.lines().next().unwrap_or("");
            let mut parts = first.split_whitespace();
            match (parts.next(), parts.next()) {
                (Some("GET"), Some("/metrics")) => Request::Metrics,
                _ => Request::Bad(first.chars().take(80).collect()),
            }
        } else {
            let newline = conn.inbuf.iter().position(|&b| b == b'\n');
            let end = newline.or(eof.then_some(conn.inbuf.len()))?;
            let line = String::from_utf8_lossy(&conn.inbuf[..end])
                .trim()
                .to_owned();
            match line.as_str() {
                "stats" => Request::Stats,
                "peers" => Request::Peers,
                _ if line.is_empty() && eof => {
                    self.close(poller, slot);
                    return None;
                }
                other => Request::Bad(other.chars().take(80).collect()),
            }
        };
        conn.answering = true;
        // Level-triggered: a client that shut its side down stays readable;
        // stop listening until the answer is ready.
        let _ = poller.modify(
            conn.stream.fd(),
            TOK_CONN_BASE + slot as u64,
            Interest::NONE,
        );
        Some(req)
    }

    /// Sends `body` as the answer on `slot` (HTTP framing added for metrics
    /// clients), then closes the connection once written.
    pub fn respond(&mut self, poller: &Poller, slot: usize, status_ok: bool, mut body: Vec<u8>) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        body.truncate(MAX_RESPONSE);
        if conn.http {
            let status = if status_ok { "200 OK" } else { "404 Not Found" };
            let head = format!(
                "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            body.splice(0..0, head.into_bytes());
        }
        // The body becomes the output buffer: a large answer is not copied.
        conn.responded = true;
        conn.out = body;
        conn.written = 0;
        let _ = poller.modify(
            conn.stream.fd(),
            TOK_CONN_BASE + slot as u64,
            Interest::WRITE,
        );
        self.flush(poller, slot);
    }

    fn flush(&mut self, poller: &Poller, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        while conn.written < conn.out.len() {
            match conn.stream.write(&conn.out[conn.written..]) {
                Ok(0) => break,
                Ok(n) => conn.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => break,
            }
        }
        self.close(poller, slot);
    }

    /// Removes the socket file.
    pub fn remove_socket_file(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

// ---------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------

/// `airpack stats` arguments.
#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    /// Control socket of the daemon.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Print the JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `airpack peers` arguments.
#[derive(clap::Args, Debug)]
pub struct PeersArgs {
    /// Control socket of the daemon.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Print the JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Sends one request line and returns the parsed JSON answer.
pub fn query(socket: &Path, request: &str) -> anyhow::Result<serde_json::Value> {
    let mut s = UnixStream::connect(socket).with_context(|| {
        format!(
            "connecting to {} (is `airpack run` running?)",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(format!("{request}\n").as_bytes())?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut text = String::new();
    s.take(MAX_RESPONSE as u64)
        .read_to_string(&mut text)
        .context("reading the daemon's answer")?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("daemon answered non-JSON: {:.200}", text))?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        anyhow::bail!("daemon: {e}");
    }
    Ok(v)
}

/// Prints statistics of a running daemon.
pub fn stats(args: StatsArgs) -> anyhow::Result<()> {
    print_query(&args.socket, "stats", args.json, super::stats::human_stats)
}

/// Prints peers of a running daemon.
pub fn peers(args: PeersArgs) -> anyhow::Result<()> {
    print_query(&args.socket, "peers", args.json, super::stats::human_peers)
}

/// Asks the daemon at `socket` for `what` and prints the answer as pretty
/// JSON or through `human`.
fn print_query(
    socket: &Path,
    what: &str,
    json: bool,
    human: fn(&serde_json::Value) -> String,
) -> anyhow::Result<()> {
    let v = query(socket, what)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", human(&v));
    }
    Ok(())
}
