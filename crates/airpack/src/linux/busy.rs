//! Busy-signal sources below the daemon besides its own sockets' unsent
//! bytes (issue 11 point 6): the radio's qdisc backlog and the medium's
//! utilisation from a counters file.
//!
//! Owns: [`QdiscMonitor`], a thread that asks the kernel for the root qdisc
//! statistics of named interfaces (an RTM_GETQDISC dump, the root qdiscs'
//! TCA_STATS2 / TCA_STATS_QUEUE) at most every `interval` while the loop says
//! packets are held, and publishes the summed backlog in atomics; the
//! request takes the RTNL lock inside send(2), which may wait behind any
//! other RTNL holder, so it never runs on the daemon's loop. [`MediumFile`]:
//! reads a counters file in the lab's `NODE.air` format (`docs/lab.md`
//! section 2b; the lab's stand-in for nl80211 survey data) and turns channel
//! busy/active time deltas into a utilisation over the last window.
//!
//! Must not touch: the engine or its policy (the daemon combines the
//! signals), the lab, or any interface configuration (read-only queries).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
// 32-bit MIPS has no 64-bit atomics: a locked cell there (the loop calls
// `want` at most once per poll, never per packet).
#[cfg(not(target_has_atomic = "64"))]
use super::atomic64::AtomicU64;
#[cfg(target_has_atomic = "64")]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::{cvt_size, monotonic_micros};

const NLMSG_HDRLEN: usize = 16;
const TCMSG_LEN: usize = 20;
const RTM_NEWQDISC: u16 = 36;
const RTM_GETQDISC: u16 = 38;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_DONE: u16 = 3;
/// Datagrams one dump may take at most (a router's qdiscs fit in a few).
const MAX_DUMP_DATAGRAMS: usize = 256;
const TC_H_ROOT: u32 = 0xFFFF_FFFF;
const TCA_STATS2: u16 = 7;
const TCA_STATS_QUEUE: u16 = 3;
/// How long the monitor keeps polling after the loop last asked (µs).
const WANT_LINGER_US: u64 = 50_000;

/// Backlog of one root qdisc: packets and bytes queued.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Packets queued (`qlen`).
    pub packets: u32,
    /// Bytes queued (`backlog`).
    pub bytes: u32,
}

/// Writes an RTM_GETQDISC dump request (every qdisc of every interface;
/// the reader keeps the root qdiscs of its interfaces). A dump, not a
/// single get: the kernel answers a get with a notification to every
/// RTNLGRP_TC listener, which a poll every few hundred µs must not cause.
pub fn qdisc_request(out: &mut Vec<u8>, seq: u32) {
    out.clear();
    let len = (NLMSG_HDRLEN + TCMSG_LEN) as u32;
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&RTM_GETQDISC.to_ne_bytes());
    out.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    // struct tcmsg: family, pad, pad, ifindex, handle, parent, info (all 0).
    out.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
    out.extend_from_slice(&[0u8; 16]);
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("qdisc reply: {what}"))
}

/// Netlink attributes of `buf`: (type without flags, value); every length checked.
fn attrs(mut buf: &[u8]) -> impl Iterator<Item = io::Result<(u16, &[u8])>> {
    std::iter::from_fn(move || {
        if buf.is_empty() {
            return None;
        }
        let r = (|| {
            let len = usize::from(u16::from_ne_bytes([*buf.first()?, *buf.get(1)?]));
            let ty = u16::from_ne_bytes([*buf.get(2)?, *buf.get(3)?]) & 0x3fff;
            if len < 4 || len > buf.len() {
                return None;
            }
            let v = &buf[4..len];
            buf = &buf[((len + 3) & !3).min(buf.len())..];
            Some((ty, v))
        })();
        if r.is_none() {
            buf = &[];
        }
        Some(r.ok_or_else(|| bad("attribute length")))
    })
}

/// The backlog in one RTM_NEWQDISC payload (tcmsg + attributes).
fn qdisc_backlog(payload: &[u8]) -> io::Result<Backlog> {
    for a in attrs(payload.get(TCMSG_LEN..).ok_or_else(|| bad("short tcmsg"))?) {
        let (t, v) = a?;
        if t != TCA_STATS2 {
            continue;
        }
        for n in attrs(v) {
            let (t, v) = n?;
            if t == TCA_STATS_QUEUE {
                // struct gnet_stats_queue: qlen, backlog, drops, requeues, overlimits.
                if v.len() < 8 {
                    return Err(bad("short queue statistics"));
                }
                return Ok(Backlog {
                    packets: u32::from_ne_bytes(v[0..4].try_into().unwrap()),
                    bytes: u32::from_ne_bytes(v[4..8].try_into().unwrap()),
                });
            }
        }
    }
    Err(bad("no queue statistics"))
}

/// Parses one datagram of the answer to [`qdisc_request`] with sequence
/// `seq`: appends `(ifindex, backlog)` of each root qdisc to `out` and
/// returns whether the dump is complete (NLMSG_DONE). Messages of other
/// sequences are skipped; a netlink error or a malformed message is an error.
pub fn parse_qdisc_reply(
    mut buf: &[u8],
    seq: u32,
    out: &mut Vec<(u32, Backlog)>,
) -> io::Result<bool> {
    while !buf.is_empty() {
        if buf.len() < NLMSG_HDRLEN {
            return Err(bad("truncated header"));
        }
        let len = u32::from_ne_bytes(buf[0..4].try_into().unwrap()) as usize;
        if len < NLMSG_HDRLEN || len > buf.len() {
            return Err(bad("message length"));
        }
        let ty = u16::from_ne_bytes([buf[4], buf[5]]);
        let got = u32::from_ne_bytes(buf[8..12].try_into().unwrap());
        let payload = &buf[NLMSG_HDRLEN..len];
        buf = &buf[((len + 3) & !3).min(buf.len())..];
        if got != seq {
            continue;
        }
        match ty {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let code = payload
                    .get(..4)
                    .map(|b| i32::from_ne_bytes(b.try_into().unwrap()))
                    .ok_or_else(|| bad("truncated error"))?;
                return Err(io::Error::from_raw_os_error(code.saturating_neg()));
            }
            RTM_NEWQDISC => {
                if payload.len() < TCMSG_LEN {
                    return Err(bad("short tcmsg"));
                }
                let ifindex = i32::from_ne_bytes(payload[4..8].try_into().unwrap()) as u32;
                let parent = u32::from_ne_bytes(payload[12..16].try_into().unwrap());
                if parent == TC_H_ROOT {
                    out.push((ifindex, qdisc_backlog(payload)?));
                }
            }
            _ => return Err(bad("unexpected message type")),
        }
    }
    Ok(false)
}

/// Dumps the qdiscs once (blocking, with a receive timeout): the root qdisc
/// backlogs by interface index.
fn query(
    fd: &OwnedFd,
    buf: &mut Vec<u8>,
    rx: &mut [u8],
    seq: u32,
    out: &mut Vec<(u32, Backlog)>,
) -> io::Result<()> {
    out.clear();
    qdisc_request(buf, seq);
    // SAFETY: buf is a valid, initialised byte buffer; the socket is connected to the kernel.
    cvt_size(unsafe { libc::send(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), 0) })?;
    for _ in 0..MAX_DUMP_DATAGRAMS {
        // SAFETY: rx is a valid writable buffer of its length.
        let n =
            cvt_size(unsafe { libc::recv(fd.as_raw_fd(), rx.as_mut_ptr().cast(), rx.len(), 0) })?;
        if parse_qdisc_reply(&rx[..n], seq, out)? {
            return Ok(());
        }
    }
    Err(bad("dump too long"))
}

fn open_socket() -> io::Result<OwnedFd> {
    super::netlink_socket(libc::NETLINK_ROUTE, 200_000)
}

fn ifindex(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: c is a valid NUL-terminated string.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

#[derive(Debug, Default)]
struct Shared {
    /// Summed backlog of the last read, bytes and packets.
    bytes: AtomicU64,
    packets: AtomicU64,
    /// Completed reads (every interface answered or failed).
    reads: AtomicU64,
    /// Failed interface queries.
    errors: AtomicU64,
    /// Monotonic µs until which the thread keeps reading.
    want_until: AtomicU64,
    stop: AtomicBool,
}

/// Reads the root qdisc backlog of some interfaces off the loop (see the
/// module documentation). The loop calls [`QdiscMonitor::want`] while
/// packets are held and reads [`QdiscMonitor::backlog`]; neither blocks.
#[derive(Debug)]
pub struct QdiscMonitor {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl QdiscMonitor {
    /// Starts the reader for `interfaces`, at most one read every `interval_us`.
    pub fn start(interfaces: Vec<String>, interval_us: u64) -> io::Result<QdiscMonitor> {
        let fd = open_socket()?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("airpack-qdisc".into())
            .spawn(move || run(fd, &interfaces, interval_us, &s))?;
        Ok(QdiscMonitor {
            shared,
            thread: Some(thread),
        })
    }

    /// Packets are held at `now` (monotonic µs): keep reading for a while.
    pub fn want(&self, now: u64) {
        let until = now + WANT_LINGER_US;
        let before = self.shared.want_until.swap(until, Ordering::Relaxed);
        if before <= now {
            if let Some(t) = &self.thread {
                t.thread().unpark();
            }
        }
    }

    /// The backlog of the last read (zero while nothing is held).
    pub fn backlog(&self) -> Backlog {
        Backlog {
            packets: self.shared.packets.load(Ordering::Relaxed) as u32,
            bytes: self.shared.bytes.load(Ordering::Relaxed) as u32,
        }
    }

    /// Reads completed and interface queries failed so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.reads.load(Ordering::Relaxed),
            self.shared.errors.load(Ordering::Relaxed),
        )
    }
}

impl Drop for QdiscMonitor {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn run(fd: OwnedFd, interfaces: &[String], interval_us: u64, s: &Shared) {
    let (mut buf, mut rx) = (Vec::with_capacity(64), vec![0u8; 32 * 1024]);
    let mut roots = Vec::new();
    let mut seq = 0u32;
    let mut idx: Vec<u32> = interfaces.iter().map(|n| ifindex(n)).collect();
    while !s.stop.load(Ordering::Relaxed) {
        let now = monotonic_micros();
        if now >= s.want_until.load(Ordering::Relaxed) {
            s.bytes.store(0, Ordering::Relaxed);
            s.packets.store(0, Ordering::Relaxed);
            std::thread::park_timeout(Duration::from_millis(200));
            continue;
        }
        let (mut bytes, mut packets) = (0u64, 0u64);
        for (k, name) in interfaces.iter().enumerate() {
            if idx[k] == 0 {
                idx[k] = ifindex(name);
            }
        }
        seq = seq.wrapping_add(1);
        match query(&fd, &mut buf, &mut rx, seq, &mut roots) {
            Ok(()) => {
                for i in idx.iter_mut() {
                    match roots.iter().find(|(x, _)| *x == *i && *i != 0) {
                        Some((_, b)) => {
                            bytes += u64::from(b.bytes);
                            packets += u64::from(b.packets);
                        }
                        None => {
                            // Gone (or back with another index): look it up again.
                            *i = 0;
                            s.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            Err(_) => {
                s.errors.fetch_add(1, Ordering::Relaxed);
                // Unread parts of a failed dump would confuse the next one.
                super::drain(&fd, &mut rx);
            }
        }
        s.bytes.store(bytes, Ordering::Relaxed);
        s.packets.store(packets, Ordering::Relaxed);
        s.reads.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_micros(interval_us));
    }
}

pub use super::busy_medium::{AirCounters, MediumFile};
