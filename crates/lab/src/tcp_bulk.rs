//! Real kernel TCP bulk transfers between lab nodes (issue 12 point 6): the
//! downloads of seed 003's scenario, from the wired server into the mesh.
//!
//! Owns: one sender and one receiver thread per flow, each inside its
//! node's network namespace (setns(2) on a thread of the lab process, like
//! [`crate::netns::Netns::run_in`]), the sender's congestion control
//! (`TCP_CONGESTION`: `cubic`, `reno`, any the kernel allows), and what a
//! flow measured ([`FlowResult`]: goodput at the receiver over the point's
//! window, bytes the sender's kernel sent and retransmitted, smoothed RTT
//! samples from `TCP_INFO`). Must not touch: the mesh, the gateway arms
//! ([`crate::gw`]), the calls.
//!
//! The sender writes 64 KiB blocks as fast as the socket takes them from
//! `start_at` until `end_at` (unix ms); the receiver counts the bytes the
//! application reads with arrival time inside that window. Goodput is those
//! bytes over the window; throughput the kernel's `tcpi_bytes_sent`
//! (retransmissions included) over the window.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One flow to start.
#[derive(Debug, Clone)]
pub struct FlowSpec {
    /// Sender node (name, for the report).
    pub src: String,
    /// Receiver node.
    pub dst: String,
    /// Sender's namespace (full name).
    pub src_ns: String,
    /// Receiver's namespace.
    pub dst_ns: String,
    /// Receiver's address.
    pub dst_addr: Ipv4Addr,
    /// Receiver's port.
    pub port: u16,
    /// `Some(sender's address)`: the receiver opens the connection to the
    /// sender listening there (a download the client asks for, as seed 003's
    /// mesh clients do; the gateway's TCP Improvement Module tracks only
    /// flows whose SYN comes from the mesh side). None: the sender connects
    /// to the receiver at `dst_addr`.
    pub connect_to_src: Option<Ipv4Addr>,
}

/// What one flow measured.
#[derive(Debug, Clone, Serialize, Default)]
pub struct FlowResult {
    /// Sender node.
    pub src: String,
    /// Receiver node.
    pub dst: String,
    /// Receiver port.
    pub port: u16,
    /// Congestion control the sender used.
    pub cc: String,
    /// Bytes the receiving application read inside the window.
    pub bytes_received: u64,
    /// Goodput over the window (kbit/s).
    pub goodput_kbps: f64,
    /// Bytes the sender's kernel sent (retransmissions included; `TCP_INFO`).
    pub bytes_sent: u64,
    /// Of which retransmitted.
    pub bytes_retrans: u64,
    /// Throughput: `bytes_sent` over the window (kbit/s).
    pub throughput_kbps: f64,
    /// Mean of the sender's smoothed RTT samples (every 250 ms; ms).
    pub rtt_mean_ms: f64,
    /// Largest smoothed RTT sample (ms).
    pub rtt_max_ms: f64,
    /// Smallest RTT the kernel saw (ms).
    pub rtt_min_ms: f64,
    /// Median of the smoothed RTT samples (ms).
    pub rtt_median_ms: f64,
    /// 95th percentile of the smoothed RTT samples (ms).
    pub rtt_p95_ms: f64,
    /// The smoothed RTT samples (ms; not in the JSON).
    #[serde(skip)]
    pub rtt_samples_ms: Vec<f64>,
    /// Retransmission timeouts (`tcpi_total_rto`; 0 on kernels without it).
    pub rtos: u32,
    /// Connected at all (a flow that never connected measured nothing).
    pub connected: bool,
    /// Why the flow failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Totals of a point's flows.
#[derive(Debug, Clone, Serialize, Default)]
pub struct TcpSummary {
    /// Flows started.
    pub flows: u32,
    /// Congestion control.
    pub cc: String,
    /// Sum of the flows' goodput (kbit/s).
    pub goodput_kbps: f64,
    /// Sum of the flows' throughput (kbit/s).
    pub throughput_kbps: f64,
    /// Mean of the flows' mean RTT (ms).
    pub rtt_mean_ms: f64,
    /// Median of all flows' smoothed RTT samples pooled (ms; 0: none).
    pub rtt_median_ms: f64,
    /// 95th percentile of all flows' smoothed RTT samples pooled (ms).
    pub rtt_p95_ms: f64,
    /// Per flow.
    pub per_flow: Vec<FlowResult>,
}

impl TcpSummary {
    /// Totals of `per_flow`.
    pub fn of(cc: &str, per_flow: Vec<FlowResult>) -> TcpSummary {
        let n = per_flow.len();
        let rtts: Vec<f64> = per_flow
            .iter()
            .filter(|f| f.connected)
            .map(|f| f.rtt_mean_ms)
            .collect();
        let mut pooled: Vec<f64> = per_flow
            .iter()
            .flat_map(|f| f.rtt_samples_ms.iter().copied())
            .collect();
        pooled.sort_by(f64::total_cmp);
        TcpSummary {
            flows: n as u32,
            cc: cc.to_string(),
            goodput_kbps: per_flow.iter().map(|f| f.goodput_kbps).sum(),
            throughput_kbps: per_flow.iter().map(|f| f.throughput_kbps).sum(),
            rtt_mean_ms: if rtts.is_empty() {
                0.0
            } else {
                rtts.iter().sum::<f64>() / rtts.len() as f64
            },
            rtt_median_ms: quantile(&pooled, 0.5),
            rtt_p95_ms: quantile(&pooled, 0.95),
            per_flow,
        }
    }
}

/// The `q` quantile of sorted `v` (nearest rank; 0 when empty).
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Spawn `f` on a thread inside namespace `ns` (full name).
fn spawn_in_ns<R: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<JoinHandle<Result<R>>> {
    let path = format!("/run/netns/{ns}");
    let file = std::fs::File::open(&path).with_context(|| format!("open {path}"))?;
    Ok(std::thread::spawn(move || -> Result<R> {
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).context("setns")?;
        Ok(f())
    }))
}

/// The kernel's `TCP_INFO` of `s`.
fn tcp_info(s: &TcpStream) -> Option<libc::tcp_info> {
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a plain C struct of `len` bytes owned by this frame.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(info)
}

/// A receiver thread: bytes read in the window (outer Err: setns failed).
type Receiver = JoinHandle<Result<Result<u64>>>;
/// A sender thread.
type Sender = JoinHandle<Result<FlowResult>>;

/// Running flows; [`Flows::finish`] joins them.
pub struct Flows {
    stop: Arc<AtomicBool>,
    cc: String,
    window_s: f64,
    threads: Vec<(FlowSpec, Receiver, Sender)>,
}

/// Start `specs`: receivers listen at once, senders connect at `start_at`
/// (unix ms) and send until `end_at`; `cc` is set with `TCP_CONGESTION` on
/// every sender (an unknown algorithm is an error now, not a silent cubic).
pub fn start(specs: &[FlowSpec], cc: &str, start_at: u64, end_at: u64) -> Result<Flows> {
    if end_at <= start_at {
        bail!("TCP window ends before it starts");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for f in specs {
        if let Some(src_addr) = f.connect_to_src {
            // the sender listens before the receiver connects
            let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
            let addr = SocketAddr::from((src_addr, f.port));
            let (cc_s, stop_s, fc) = (cc.to_string(), stop.clone(), f.clone());
            let send = spawn_in_ns(&f.src_ns, move || {
                let l = match TcpListener::bind(addr).with_context(|| format!("listen on {addr}")) {
                    Ok(l) => {
                        let _ = tx.send(Ok(()));
                        l
                    }
                    Err(e) => {
                        let _ = tx.send(Err(anyhow::anyhow!("{e:#}")));
                        return flow_error(&fc, &cc_s, format!("{e:#}"));
                    }
                };
                send_accepted(&fc, l, &cc_s, start_at, end_at, &stop_s)
            })?;
            rx.recv_timeout(Duration::from_secs(10))
                .context("sender did not start")??;
            let stop_r = stop.clone();
            let recv = spawn_in_ns(&f.dst_ns, move || -> Result<u64> {
                let s = connect(addr, start_at, end_at, &stop_r)?;
                drain(s, start_at, end_at, &stop_r)
            })?;
            threads.push((f.clone(), recv, send));
            continue;
        }
        // the receiver listens before any sender connects
        let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
        let (addr, stop_r) = (SocketAddr::from((f.dst_addr, f.port)), stop.clone());
        let recv = spawn_in_ns(&f.dst_ns, move || -> Result<u64> {
            let l = match TcpListener::bind(addr).with_context(|| format!("listen on {addr}")) {
                Ok(l) => {
                    let _ = tx.send(Ok(()));
                    l
                }
                Err(e) => {
                    let _ = tx.send(Err(anyhow::anyhow!("{e:#}")));
                    return Err(e);
                }
            };
            receive(l, start_at, end_at, &stop_r)
        })?;
        rx.recv_timeout(Duration::from_secs(10))
            .context("receiver did not start")??;
        let (cc_s, stop_s, fc) = (cc.to_string(), stop.clone(), f.clone());
        let send = spawn_in_ns(&f.src_ns, move || {
            send(&fc, &cc_s, start_at, end_at, &stop_s)
        })?;
        threads.push((f.clone(), recv, send));
    }
    Ok(Flows {
        stop,
        cc: cc.to_string(),
        window_s: (end_at - start_at) as f64 / 1000.0,
        threads,
    })
}

fn receive(l: TcpListener, start_at: u64, end_at: u64, stop: &AtomicBool) -> Result<u64> {
    l.set_nonblocking(true)?;
    let s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    return Ok(0);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e).context("accept"),
        }
    };
    drain(s, start_at, end_at, stop)
}

/// Connect to `to` from `start_at` on, retrying (the SYN crosses the air)
/// until the window is half over.
fn connect(to: SocketAddr, start_at: u64, end_at: u64, stop: &AtomicBool) -> Result<TcpStream> {
    std::thread::sleep(Duration::from_millis(start_at.saturating_sub(unix_ms())));
    loop {
        match TcpStream::connect_timeout(&to, Duration::from_secs(3)) {
            Ok(s) => return Ok(s),
            Err(e)
                if unix_ms() < start_at + (end_at - start_at) / 2
                    && !stop.load(Ordering::Relaxed) =>
            {
                tracing::debug!("connect {to}: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e).with_context(|| format!("connect {to}")),
        }
    }
}

/// Read `s` until EOF, the stop flag or 2 s after `end_at`: bytes read
/// inside the window.
fn drain(mut s: TcpStream, start_at: u64, end_at: u64, stop: &AtomicBool) -> Result<u64> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut buf = vec![0u8; 1 << 16];
    let mut in_window = 0u64;
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let now = unix_ms();
                if (start_at..=end_at).contains(&now) {
                    in_window += n as u64;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => break, // reset by the sender's close: the window is over
        }
        if stop.load(Ordering::Relaxed) || unix_ms() > end_at + 2000 {
            break;
        }
    }
    Ok(in_window)
}

fn flow_error(f: &FlowSpec, cc: &str, e: String) -> FlowResult {
    FlowResult {
        src: f.src.clone(),
        dst: f.dst.clone(),
        port: f.port,
        cc: cc.to_string(),
        error: Some(e),
        ..Default::default()
    }
}

/// The sender of a flow the receiver opens: accept its connection (until the
/// window is half over), then send as [`send`] does.
fn send_accepted(
    f: &FlowSpec,
    l: TcpListener,
    cc: &str,
    start_at: u64,
    end_at: u64,
    stop: &AtomicBool,
) -> FlowResult {
    if let Err(e) = l.set_nonblocking(true) {
        return flow_error(f, cc, format!("listener: {e}"));
    }
    let s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e)
                if e.kind() == ErrorKind::WouldBlock
                    && unix_ms() < start_at + (end_at - start_at) / 2
                    && !stop.load(Ordering::Relaxed) =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return flow_error(f, cc, format!("accept: {e}")),
        }
    };
    if let Err(e) = s.set_nonblocking(false) {
        return flow_error(f, cc, format!("accepted socket: {e}"));
    }
    pump(f, s, cc, end_at, stop)
}

fn send(f: &FlowSpec, cc: &str, start_at: u64, end_at: u64, stop: &AtomicBool) -> FlowResult {
    let to = SocketAddr::from((f.dst_addr, f.port));
    match connect(to, start_at, end_at, stop) {
        Ok(s) => pump(f, s, cc, end_at, stop),
        Err(e) => flow_error(f, cc, format!("{e:#}")),
    }
}

/// Write 64 KiB blocks into connected `s` until `end_at`, sampling its RTT.
fn pump(f: &FlowSpec, mut s: TcpStream, cc: &str, end_at: u64, stop: &AtomicBool) -> FlowResult {
    let mut r = FlowResult {
        src: f.src.clone(),
        dst: f.dst.clone(),
        port: f.port,
        cc: cc.to_string(),
        ..Default::default()
    };
    r.connected = true;
    if let Err(e) = nix::sys::socket::setsockopt(
        &s,
        nix::sys::socket::sockopt::TcpCongestion,
        &std::ffi::OsString::from(cc),
    ) {
        r.error = Some(format!("TCP_CONGESTION {cc}: {e}"));
        return r;
    }
    let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
    let buf = vec![0x5au8; 1 << 16];
    let mut rtts = Vec::new();
    let mut last_sample = Instant::now();
    let mut info = tcp_info(&s);
    while unix_ms() < end_at && !stop.load(Ordering::Relaxed) {
        match s.write(&buf) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                r.error = Some(format!("write: {e}"));
                break;
            }
        }
        if last_sample.elapsed() >= Duration::from_millis(250) {
            last_sample = Instant::now();
            if let Some(i) = tcp_info(&s) {
                rtts.push(i.tcpi_rtt as f64 / 1000.0);
                info = Some(i);
            }
        }
    }
    if let Some(i) = tcp_info(&s).or(info) {
        r.bytes_sent = i.tcpi_bytes_sent;
        r.bytes_retrans = i.tcpi_bytes_retrans;
        r.rtt_min_ms = i.tcpi_min_rtt as f64 / 1000.0;
        r.rtos = i.tcpi_total_rto as u32;
    }
    if !rtts.is_empty() {
        r.rtt_mean_ms = rtts.iter().sum::<f64>() / rtts.len() as f64;
        r.rtt_max_ms = rtts.iter().cloned().fold(0.0, f64::max);
        let mut v = rtts.clone();
        v.sort_by(f64::total_cmp);
        r.rtt_median_ms = quantile(&v, 0.5);
        r.rtt_p95_ms = quantile(&v, 0.95);
        r.rtt_samples_ms = rtts;
    }
    r
}

impl Flows {
    /// Stop every flow (after its window) and collect the results.
    pub fn finish(self) -> Vec<FlowResult> {
        let mut out = Vec::new();
        let mut pending = Vec::new();
        for (spec, recv, send) in self.threads {
            let mut r = match send.join() {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => FlowResult {
                    error: Some(format!("{e:#}")),
                    ..Default::default()
                },
                Err(_) => FlowResult {
                    error: Some("sender panicked".into()),
                    ..Default::default()
                },
            };
            r.src.clone_from(&spec.src);
            r.dst.clone_from(&spec.dst);
            r.port = spec.port;
            r.cc.clone_from(&self.cc);
            pending.push((r, recv));
        }
        // senders are done: receivers end on EOF, else on their deadline
        self.stop.store(true, Ordering::Relaxed);
        for (mut r, recv) in pending {
            match recv.join() {
                Ok(Ok(Ok(b))) => r.bytes_received = b,
                Ok(Ok(Err(e)) | Err(e)) => r.error = Some(format!("receiver: {e:#}")),
                Err(_) => r.error = Some("receiver panicked".into()),
            }
            r.goodput_kbps = r.bytes_received as f64 * 8.0 / self.window_s / 1000.0;
            r.throughput_kbps = r.bytes_sent as f64 * 8.0 / self.window_s / 1000.0;
            out.push(r);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_adds_flows_and_averages_connected_rtts() {
        let f = |g: f64, rtt: f64, c: bool| FlowResult {
            goodput_kbps: g,
            throughput_kbps: g * 1.1,
            rtt_mean_ms: rtt,
            connected: c,
            ..Default::default()
        };
        let s = TcpSummary::of(
            "reno",
            vec![
                f(100.0, 50.0, true),
                f(300.0, 150.0, true),
                f(0.0, 0.0, false),
            ],
        );
        assert_eq!(s.flows, 3);
        assert_eq!(s.cc, "reno");
        assert!((s.goodput_kbps - 400.0).abs() < 1e-9);
        assert!((s.throughput_kbps - 440.0).abs() < 1e-9);
        assert!(
            (s.rtt_mean_ms - 100.0).abs() < 1e-9,
            "the flow that never connected has no RTT"
        );
        assert_eq!(TcpSummary::of("cubic", vec![]).rtt_mean_ms, 0.0);
    }

    #[test]
    fn rtt_median_and_p95_pool_every_flows_samples() {
        assert_eq!(quantile(&[], 0.5), 0.0);
        assert_eq!(quantile(&[7.0], 0.95), 7.0);
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 10.0);
        assert_eq!(quantile(&v, 0.95), 19.0);
        assert_eq!(quantile(&v, 1.0), 20.0);
        let f = |samples: Vec<f64>| FlowResult {
            rtt_samples_ms: samples,
            connected: true,
            ..Default::default()
        };
        // one flow at 100 ms (18 samples), one at 3 s (2 samples): the pooled
        // median is the short flow's, the p95 the long one's
        let s = TcpSummary::of("reno", vec![f(vec![100.0; 18]), f(vec![3000.0; 2])]);
        assert_eq!(s.rtt_median_ms, 100.0);
        assert_eq!(s.rtt_p95_ms, 3000.0);
        let json = serde_json::to_value(&s).unwrap();
        assert!(json["per_flow"][0].get("rtt_samples_ms").is_none());
        assert_eq!(json["rtt_p95_ms"].as_f64(), Some(3000.0));
    }
}
