//! The gateway's kernel pacer: an HTB tree on the mesh interface, managed
//! with `tc` from a helper thread at the control period (never per packet).
//!
//! Owns: the class layout, the `tc -batch` scripts that set it up, change
//! the rates and add or remove per-flow classes ([`setup_script`],
//! [`Applied::update_script`], pure), the parser of `tc -s class show`
//! ([`parse_class_stats`], pure), and the helper thread ([`TcWorker`]) that
//! runs them so the event loop never waits for `tc`.
//!
//! Must not touch: which flows exist or what the rate is (the runtime's
//! gateway module decides; this module only makes the kernel say so).
//!
//! Layout (major [`MAJOR`], `1a0:`):
//!
//! ```text
//! 1a0: htb default 30
//! └─ 1a0:1    link rate
//!    ├─ 1a0:10   voice (prio 0, link rate): bpf filter over the voice rules, prio 1
//!    ├─ 1a0:20   TCP aggregate: rate = ceil = R (prio 1)
//!    │  ├─ 1a0:21      TCP not in the flow table: rate = ceil = R / n (bpf filter, prio 9000)
//!    │  └─ 1a0:100+s   flow in slot s: rate = ceil = R / n, pfifo (u32 5-tuple filter, prio 100+s)
//!    └─ 1a0:30   everything else (prio 2, link rate)
//! ```
//!
//! Every TCP class's `burst`/`cburst` is one MTU-sized packet or 1 ms of
//! its rate, whichever is larger: evenly spaced packets, no bursts.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Major handle of the gateway's root qdisc.
pub const MAJOR: u16 = 0x1a0;
/// Root class.
pub const ROOT: u16 = 0x1;
/// Voice class.
pub const VOICE: u16 = 0x10;
/// TCP aggregate class.
pub const TCP: u16 = 0x20;
/// Class of paced TCP outside the flow table.
pub const TCP_SHARED: u16 = 0x21;
/// Default class (neither voice nor paced TCP).
pub const OTHER: u16 = 0x30;
/// First per-flow class minor (slot 0).
pub const FLOW_BASE: u16 = 0x100;
/// Filter priority of the voice filter.
pub const PRIO_VOICE: u16 = 1;
/// Filter priority of slot 0's filter.
pub const PRIO_FLOW_BASE: u16 = 100;
/// Filter priority of the shared TCP filter.
pub const PRIO_TCP_SHARED: u16 = 9000;
/// Most slots the layout has room for.
pub const MAX_SLOTS: usize = (PRIO_TCP_SHARED - PRIO_FLOW_BASE) as usize;
/// HTB quantum (bytes): one Ethernet frame.
const QUANTUM: u32 = 1514;

/// A paced flow as the kernel must classify it (the direction into the mesh).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowMatch {
    /// Source address (the wired-side sender).
    pub src: IpAddr,
    /// Destination address (the mesh-side receiver).
    pub dst: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

/// What the kernel should look like.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Desired {
    /// Total TCP rate (bit/s).
    pub rate_bps: u64,
    /// Each flow's share (bit/s).
    pub share_bps: u64,
    /// Flows by slot.
    pub flows: Vec<(usize, FlowMatch)>,
}

/// The fixed parts of the tree.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Interface.
    pub dev: String,
    /// Root class rate (bit/s).
    pub link_bps: u64,
    /// Per-flow pfifo limit (packets).
    pub queue_packets: u32,
    /// The voice rules as tc `bpf bytecode`.
    pub voice_bytecode: String,
    /// The TCP rules as tc `bpf bytecode`.
    pub tcp_bytecode: String,
}

fn burst(rate_bps: u64) -> u64 {
    (rate_bps / 8 / 1000).max(1600)
}

fn htb_class(
    out: &mut String,
    verb: &str,
    dev: &str,
    parent: u16,
    minor: u16,
    rate: u64,
    prio: u8,
) {
    let rate = rate.max(8);
    let b = burst(rate);
    let _ = writeln!(
        out,
        "class {verb} dev {dev} parent {MAJOR:x}:{parent:x} classid {MAJOR:x}:{minor:x} htb rate {rate}bit ceil {rate}bit burst {b} cburst {b} prio {prio} quantum {QUANTUM}"
    );
}

/// The script that (re)creates the tree with the TCP rate `rate_bps`.
pub fn setup_script(l: &Layout, rate_bps: u64) -> String {
    let d = &l.dev;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "qdisc replace dev {d} root handle {MAJOR:x}: htb default {OTHER:x}"
    );
    let _ = writeln!(
        s,
        "class add dev {d} parent {MAJOR:x}: classid {MAJOR:x}:{ROOT:x} htb rate {r}bit ceil {r}bit quantum {QUANTUM}",
        r = l.link_bps
    );
    let _ = writeln!(
        s,
        "class add dev {d} parent {MAJOR:x}:{ROOT:x} classid {MAJOR:x}:{VOICE:x} htb rate {r}bit ceil {r}bit prio 0 quantum {QUANTUM}",
        r = l.link_bps
    );
    htb_class(&mut s, "add", d, ROOT, TCP, rate_bps, 1);
    htb_class(&mut s, "add", d, TCP, TCP_SHARED, rate_bps, 1);
    let _ = writeln!(
        s,
        "qdisc add dev {d} parent {MAJOR:x}:{TCP_SHARED:x} handle {TCP_SHARED:x}: pfifo limit {}",
        l.queue_packets
    );
    let _ = writeln!(
        s,
        "class add dev {d} parent {MAJOR:x}:{ROOT:x} classid {MAJOR:x}:{OTHER:x} htb rate {r}bit ceil {r}bit prio 2 quantum {QUANTUM}",
        r = l.link_bps
    );
    let _ = writeln!(
        s,
        "filter add dev {d} parent {MAJOR:x}: prio {PRIO_VOICE} protocol all bpf bytecode \"{}\" classid {MAJOR:x}:{VOICE:x}",
        l.voice_bytecode
    );
    let _ = writeln!(
        s,
        "filter add dev {d} parent {MAJOR:x}: prio {PRIO_TCP_SHARED} protocol all bpf bytecode \"{}\" classid {MAJOR:x}:{TCP_SHARED:x}",
        l.tcp_bytecode
    );
    s
}

/// The script that removes the tree.
pub fn teardown_script(dev: &str) -> String {
    format!("qdisc del dev {dev} root handle {MAJOR:x}:\n")
}

fn flow_filter(out: &mut String, dev: &str, slot: usize, f: &FlowMatch) {
    let minor = FLOW_BASE as usize + slot;
    let prio = PRIO_FLOW_BASE as usize + slot;
    let (proto, m, bits) = match f.src {
        IpAddr::V4(_) => ("ip", "ip", 32),
        IpAddr::V6(_) => ("ipv6", "ip6", 128),
    };
    let _ = writeln!(
        out,
        "filter add dev {dev} parent {MAJOR:x}: prio {prio} protocol {proto} u32 match {m} protocol 6 0xff match {m} src {}/{bits} match {m} dst {}/{bits} match {m} sport {} 0xffff match {m} dport {} 0xffff classid {MAJOR:x}:{minor:x}",
        f.src, f.dst, f.sport, f.dport
    );
}

/// What has been handed to the kernel (the worker's view).
#[derive(Clone, Debug, Default)]
pub struct Applied {
    rate_bps: u64,
    share_bps: u64,
    flows: HashMap<usize, FlowMatch>,
}

impl Applied {
    /// The state right after [`setup_script`] with `rate_bps`.
    pub fn after_setup(rate_bps: u64) -> Applied {
        Applied {
            rate_bps,
            share_bps: rate_bps,
            flows: HashMap::new(),
        }
    }

    /// The script taking the kernel from `self` to `want` (empty: nothing
    /// to do); `self` becomes `want`.
    pub fn update_script(&mut self, l: &Layout, want: &Desired) -> String {
        let d = &l.dev;
        let mut s = String::new();
        let wanted: HashMap<usize, FlowMatch> = want
            .flows
            .iter()
            .filter(|(slot, _)| *slot < MAX_SLOTS)
            .copied()
            .collect();
        // Removed or reused slots first (their filter, then class and pfifo).
        let mut gone: Vec<usize> = self
            .flows
            .iter()
            .filter(|(slot, f)| wanted.get(slot) != Some(f))
            .map(|(slot, _)| *slot)
            .collect();
        gone.sort_unstable();
        for slot in gone {
            let _ = writeln!(
                s,
                "filter del dev {d} parent {MAJOR:x}: prio {}",
                PRIO_FLOW_BASE as usize + slot
            );
            let _ = writeln!(
                s,
                "class del dev {d} classid {MAJOR:x}:{:x}",
                FLOW_BASE as usize + slot
            );
            self.flows.remove(&slot);
        }
        if want.rate_bps != self.rate_bps {
            htb_class(&mut s, "change", d, ROOT, TCP, want.rate_bps, 1);
        }
        if want.share_bps != self.share_bps {
            htb_class(&mut s, "change", d, TCP, TCP_SHARED, want.share_bps, 1);
            let mut kept: Vec<usize> = self.flows.keys().copied().collect();
            kept.sort_unstable();
            for slot in kept {
                htb_class(
                    &mut s,
                    "change",
                    d,
                    TCP,
                    FLOW_BASE + slot as u16,
                    want.share_bps,
                    1,
                );
            }
        }
        let mut new: Vec<(usize, FlowMatch)> = wanted
            .iter()
            .filter(|(slot, _)| !self.flows.contains_key(slot))
            .map(|(s, f)| (*s, *f))
            .collect();
        new.sort_unstable_by_key(|(s, _)| *s);
        for (slot, f) in new {
            let minor = FLOW_BASE + slot as u16;
            htb_class(&mut s, "add", d, TCP, minor, want.share_bps, 1);
            let _ = writeln!(
                s,
                "qdisc add dev {d} parent {MAJOR:x}:{minor:x} handle {minor:x}: pfifo limit {}",
                l.queue_packets
            );
            flow_filter(&mut s, d, slot, &f);
            self.flows.insert(slot, f);
        }
        self.rate_bps = want.rate_bps;
        self.share_bps = want.share_bps;
        s
    }
}

/// One class's kernel counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Configured rate as `tc` prints it (truncated to its unit), bit/s.
    pub rate_bps: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// Packets sent.
    pub packets: u64,
    /// Packets dropped (queue full).
    pub dropped: u64,
    /// Packets waiting now.
    pub backlog_packets: u64,
}

/// Parses a `tc` rate (`67200bit`, `1050Kbit`, `2Mbit`, `1Gbit`, `1.5Mbit`).
pub fn parse_rate(s: &str) -> Option<u64> {
    let (num, mult) = if let Some(n) = s.strip_suffix("Gbit") {
        (n, 1e9)
    } else if let Some(n) = s.strip_suffix("Mbit") {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix("Kbit") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix("bit") {
        (n, 1.0)
    } else {
        return None;
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v >= 0.0).then(|| (v * mult).round() as u64)
}

/// Parses `tc -s class show dev D` output: the gateway's classes by minor.
pub fn parse_class_stats(text: &str) -> HashMap<u16, ClassStats> {
    let mut out = HashMap::new();
    let mut cur: Option<u16> = None;
    let prefix = format!("{MAJOR:x}:");
    for line in text.lines() {
        let t = line.trim();
        let words: Vec<&str> = t.split_whitespace().collect();
        if words.first() == Some(&"class") {
            cur = words
                .get(2)
                .and_then(|h| h.strip_prefix(prefix.as_str()))
                .and_then(|m| u16::from_str_radix(m, 16).ok());
            if let Some(c) = cur {
                let rate = words
                    .iter()
                    .position(|w| *w == "rate")
                    .and_then(|i| words.get(i + 1))
                    .and_then(|r| parse_rate(r))
                    .unwrap_or(0);
                out.insert(
                    c,
                    ClassStats {
                        rate_bps: rate,
                        ..ClassStats::default()
                    },
                );
            }
            continue;
        }
        let Some(st) = cur.and_then(|c| out.get_mut(&c)) else {
            continue;
        };
        let num = |w: Option<&&str>| -> u64 {
            w.map(|w| w.trim_matches(|c: char| !c.is_ascii_digit()))
                .and_then(|w| w.parse().ok())
                .unwrap_or(0)
        };
        match words.first() {
            Some(&"Sent") => {
                st.bytes = num(words.get(1));
                st.packets = num(words.get(3));
                if let Some(i) = words.iter().position(|w| *w == "(dropped") {
                    st.dropped = num(words.get(i + 1));
                }
            }
            Some(&"backlog") => st.backlog_packets = num(words.get(2)),
            _ => {}
        }
    }
    out
}

/// Runs `tc -force -batch -` with `script`; the error text on failure.
pub fn run_batch(script: &str) -> Result<(), String> {
    let mut child = Command::new("tc")
        .args(["-force", "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run tc: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| format!("writing to tc: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for tc: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(err.lines().take(4).collect::<Vec<_>>().join(" / "))
    }
}

/// Reads the gateway's class counters on `dev`.
pub fn read_stats(dev: &str) -> Result<HashMap<u16, ClassStats>, String> {
    let out = Command::new("tc")
        .args(["-s", "class", "show", "dev", dev])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run tc: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    Ok(parse_class_stats(&String::from_utf8_lossy(&out.stdout)))
}

/// What the helper thread reports.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Class counters from the last read, by minor.
    pub classes: HashMap<u16, ClassStats>,
    /// Reads done (the loop compares to see a fresh one).
    pub reads: u64,
    /// Update scripts run.
    pub updates: u64,
    /// Update scripts or reads that failed.
    pub failures: u64,
    /// The last failure's text.
    pub last_error: Option<String>,
}

/// The helper thread that applies [`Desired`] states and reads counters.
pub struct TcWorker {
    tx: SyncSender<Option<Desired>>,
    report: Arc<Mutex<Report>>,
    thread: Option<JoinHandle<()>>,
}

impl TcWorker {
    /// Starts the thread; the tree must already be set up with `rate_bps`.
    pub fn start(layout: Layout, rate_bps: u64) -> std::io::Result<TcWorker> {
        let (tx, rx) = sync_channel::<Option<Desired>>(4);
        let report = Arc::new(Mutex::new(Report::default()));
        let r2 = Arc::clone(&report);
        let thread = std::thread::Builder::new()
            .name("airpack-tc".into())
            .spawn(move || worker(layout, rate_bps, rx, r2))?;
        Ok(TcWorker {
            tx,
            report,
            thread: Some(thread),
        })
    }

    /// Hands over the state wanted now; `false` if the thread is still busy
    /// with earlier ones (the next period sends the then-current state).
    pub fn submit(&self, want: Desired) -> bool {
        self.tx.try_send(Some(want)).is_ok()
    }

    /// A copy of the latest report.
    pub fn report(&self) -> Report {
        self.report.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Stops the thread (waits for the script it runs).
    pub fn stop(mut self) {
        let _ = self.tx.send(None);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn worker(l: Layout, rate: u64, rx: Receiver<Option<Desired>>, report: Arc<Mutex<Report>>) {
    let mut applied = Applied::after_setup(rate);
    while let Ok(mut job) = rx.recv() {
        // Only the newest state matters.
        loop {
            match rx.try_recv() {
                Ok(j) => job = j,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return,
            }
            if job.is_none() {
                break;
            }
        }
        let Some(want) = job else { return };
        let script = applied.update_script(&l, &want);
        let result = if script.is_empty() {
            Ok(())
        } else {
            run_batch(&script)
        };
        let stats = read_stats(&l.dev);
        let Ok(mut r) = report.lock() else { return };
        if !script.is_empty() {
            r.updates += 1;
        }
        if let Err(e) = result {
            r.failures += 1;
            r.last_error = Some(e);
        }
        match stats {
            Ok(c) => {
                r.classes = c;
                r.reads += 1;
            }
            Err(e) => {
                r.failures += 1;
                r.last_error = Some(e);
            }
        }
    }
}

#[cfg(test)]
#[path = "htb_tests.rs"]
mod tests;
