//! Real SIP phones in the lab (issue 13, point 7): every call of a point is
//! made by two baresip user agents (Debian's `baresip-core`), one in each
//! endpoint's namespace, calling each other directly by IP (no registrar),
//! G.711 µ-law, audio from a WAV file, auto-answer.
//!
//! Owns: the user agents' configuration ([`config_text`], [`accounts_text`]),
//! driving them over baresip's `ctrl_tcp` control socket (dial, hang up, call
//! events), the RTP captures in the endpoints' namespaces ([`Capture`]: an
//! `AF_PACKET` socket on every interface, kernel timestamps) and turning those
//! captures into the same per-node results `airpack voip` writes
//! ([`node_results`]), so that merging, E-model quality and the capacity
//! search are exactly the ones of the project's own generator.
//!
//! Measured where: a packet's send time is when the caller's kernel put it on
//! a device (the radio, or the daemon's TUN when steered), its receive time
//! when it entered the callee's stack (from the radio, or from the daemon's
//! TUN after splitting a bundle); both on one machine's CLOCK_REALTIME. So
//! delay, loss and jitter are the network's (daemons included), not the
//! phones' own buffers.
//!
//! Must not touch: the meshes, the daemons, `airpack voip` and its quality
//! math (used read-only through [`crate::voip`]).

use crate::topology::Mesh;
use crate::voip::{Direction, NodeResult, RxCounters, Spec, StreamReport};
use airpack_voice::stats::{RxPacket, StreamStats};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// SIP port of call `k`'s user agents (both ends; one agent per call and end).
pub fn sip_port(k: u32) -> u16 {
    5060 + 2 * k as u16
}

/// `ctrl_tcp` port of call `k`'s agents (on each namespace's own loopback).
fn ctrl_port(k: u32) -> u16 {
    14000 + k as u16
}

/// Whether baresip with the modules the lab uses is installed.
pub fn check_available() -> std::result::Result<(), String> {
    let ok = Command::new("baresip")
        .arg("-h")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !ok {
        return Err(
            "baresip is not installed (Debian package baresip-core; scripts/setup.sh installs it)"
                .into(),
        );
    }
    for m in [
        "g711.so",
        "aufile.so",
        "aubridge.so",
        "ctrl_tcp.so",
        "rtcpsummary.so",
        "account.so",
        "menu.so",
    ] {
        if !Path::new(MODULES).join(m).exists() {
            return Err(format!("baresip module {MODULES}/{m} is missing"));
        }
    }
    Ok(())
}

const MODULES: &str = "/usr/lib/baresip/modules";

/// A deterministic speech-like test signal (8 kHz, mono, S16LE WAV): two
/// formants under a 3 Hz syllable envelope plus a little noise. Any WAV of
/// that format works; this one needs no download.
pub fn write_wav(path: &Path, seconds: u32) -> Result<()> {
    let sr = 8000u32;
    let n = sr * seconds;
    let mut data = Vec::with_capacity(n as usize * 2);
    let mut x = 0x9e37_79b9u32;
    for i in 0..n {
        let t = f64::from(i) / f64::from(sr);
        let env = 0.5 * (1.0 + (2.0 * std::f64::consts::PI * 3.0 * t).sin());
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let noise = f64::from(x) / f64::from(u32::MAX) - 0.5;
        let v = env
            * (0.3 * (2.0 * std::f64::consts::PI * 440.0 * t).sin()
                + 0.2 * (2.0 * std::f64::consts::PI * 1230.0 * t).sin()
                + 0.1 * noise);
        data.extend_from_slice(&((v * 20000.0) as i16).to_le_bytes());
    }
    let mut out = Vec::with_capacity(44 + data.len());
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    for v in [
        16u32.to_le_bytes().as_slice(),
        &1u16.to_le_bytes(),
        &1u16.to_le_bytes(),
        &sr.to_le_bytes(),
        &(sr * 2).to_le_bytes(),
        &2u16.to_le_bytes(),
        &16u16.to_le_bytes(),
    ] {
        out.extend_from_slice(v);
    }
    out.extend_from_slice(b"data");
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&data);
    std::fs::write(path, out).with_context(|| format!("write {}", path.display()))
}

/// baresip's `config` for one agent: SIP on `addr:sip_port`, RTP on
/// `rtp_port` (RTCP on the next port), control on 127.0.0.1:`ctrl`, audio from
/// `wav`, received audio into an unread bridge, RTP marked EF (DSCP 46) as
/// phones do, SIP marked CS3 (24) as RFC 4594 suggests for signalling.
pub fn config_text(addr: IpAddr, sip_port: u16, rtp_port: u16, ctrl: u16, wav: &Path) -> String {
    format!(
        "poll_method epoll\n\
         sip_listen {addr}:{sip_port}\n\
         sip_tos 96\n\
         rtp_tos 184\n\
         rtp_ports {rtp_port}-{rtp_end}\n\
         rtp_stats yes\n\
         rtcp_mux no\n\
         audio_player aubridge,sink\n\
         audio_alert aubridge,sink\n\
         audio_source aufile,{wav}\n\
         ausrc_srate 8000\n\
         auplay_srate 8000\n\
         ausrc_channels 1\n\
         auplay_channels 1\n\
         module_path {MODULES}\n\
         module g711.so\n\
         module aufile.so\n\
         module aubridge.so\n\
         module rtcpsummary.so\n\
         module_app account.so\n\
         module_app menu.so\n\
         module_app ctrl_tcp.so\n\
         ctrl_tcp_listen 127.0.0.1:{ctrl}\n",
        wav = wav.display(),
        rtp_end = rtp_port + 1,
    )
}

/// baresip's `accounts` for one agent: no registration, answers by itself, PCMU only.
pub fn accounts_text(user: &str, addr: IpAddr, sip_port: u16) -> String {
    format!("<sip:{user}@{addr}:{sip_port}>;regint=0;answermode=auto;audio_codecs=PCMU\n")
}

/// A netstring (`LEN:DATA,`) as `ctrl_tcp` speaks it.
fn netstring(s: &str) -> Vec<u8> {
    format!("{}:{s},", s.len()).into_bytes()
}

/// Splits complete netstrings off the front of `buf`.
fn take_netstrings(buf: &mut Vec<u8>) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(colon) = buf.iter().position(|&b| b == b':') {
        let Some(len) = std::str::from_utf8(&buf[..colon])
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
        else {
            buf.clear();
            break;
        };
        if buf.len() < colon + 1 + len + 1 {
            break;
        }
        out.push(String::from_utf8_lossy(&buf[colon + 1..colon + 1 + len]).into_owned());
        buf.drain(..colon + 1 + len + 1);
    }
    out
}

/// One agent: its process and its control connection.
struct Agent {
    child: Child,
    log: PathBuf,
    ctrl: Option<TcpStream>,
    pending: Vec<u8>,
}

impl Agent {
    fn command(&mut self, cmd: &str, params: &str) -> Result<()> {
        let ctrl = self.ctrl.as_mut().context("no control connection")?;
        let msg = json!({"command": cmd, "params": params, "token": cmd}).to_string();
        ctrl.write_all(&netstring(&msg)).context("ctrl_tcp write")
    }

    /// Waits for an event of `kind` (e.g. `CALL_ESTABLISHED`) until `deadline`.
    fn wait_event(&mut self, kind: &str, deadline: Instant) -> Option<Value> {
        let ctrl = self.ctrl.as_mut()?;
        let mut buf = [0u8; 4096];
        while Instant::now() < deadline {
            for m in take_netstrings(&mut self.pending) {
                if let Ok(v) = serde_json::from_str::<Value>(&m) {
                    if v.get("type").and_then(Value::as_str) == Some(kind) {
                        return Some(v);
                    }
                }
            }
            let _ = ctrl.set_read_timeout(Some(Duration::from_millis(100)));
            match ctrl.read(&mut buf) {
                Ok(0) => return None,
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(_) => {}
            }
        }
        None
    }

    /// The `rtcpsummary` line of the agent's log (baresip's own RTCP view).
    fn rtcp_summary(&self) -> Option<Value> {
        let text = std::fs::read_to_string(&self.log).ok()?;
        // `EX=BareSip;CS=...` with figures, or `EX=BareSip;ERROR=No RTCP
        // stats collected;` when no RTCP report arrived before the hang-up
        // (reports come every 2.5-7.5 s).
        let line = text.lines().rfind(|l| l.starts_with("EX=BareSip;"))?;
        let mut m = serde_json::Map::new();
        for kv in line.split(';') {
            if let Some((k, v)) = kv.split_once('=') {
                m.insert(k.to_string(), Value::String(v.to_string()));
            }
        }
        Some(Value::Object(m))
    }

    fn stop(&mut self) {
        self.ctrl = None;
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(2) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// One RTP packet seen by a capture: call, direction, whether it left
/// (`true`) or entered the node, sequence, RTP timestamp, marker, time (µs,
/// CLOCK_REALTIME, from the kernel's timestamp).
type Seen = (u32, Direction, bool, u16, u32, bool, u64);

/// An `AF_PACKET` capture of every interface of one endpoint's namespace.
struct Capture {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Seen>>,
}

/// Which call and direction a UDP packet between `src` and `dst` belongs to,
/// from the spec (each call's RTP uses port 16000 + 2k at both ends).
fn classify(spec: &Spec, src: (IpAddr, u16), dst: (IpAddr, u16)) -> Option<(u32, Direction)> {
    spec.calls.iter().find_map(|c| {
        let a = (c.a.addr, c.a.port);
        let b = (c.b.addr, c.b.port);
        if src == a && dst == b {
            Some((c.id, Direction::AToB))
        } else if src == b && dst == a {
            Some((c.id, Direction::BToA))
        } else {
            None
        }
    })
}

/// (src, dst, UDP payload) of an IPv4/IPv6 UDP packet without extension headers.
type Udp<'a> = ((IpAddr, u16), (IpAddr, u16), &'a [u8]);

fn udp_of(p: &[u8]) -> Option<Udp<'_>> {
    let (src, dst, rest) = match p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            if p.len() < ihl.max(20) || p[9] != 17 {
                return None;
            }
            let s: [u8; 4] = p[12..16].try_into().ok()?;
            let d: [u8; 4] = p[16..20].try_into().ok()?;
            (IpAddr::from(s), IpAddr::from(d), &p[ihl..])
        }
        6 => {
            if p.len() < 40 || p[6] != 17 {
                return None;
            }
            let s: [u8; 16] = p[8..24].try_into().ok()?;
            let d: [u8; 16] = p[24..40].try_into().ok()?;
            (IpAddr::from(s), IpAddr::from(d), &p[40..])
        }
        _ => return None,
    };
    if rest.len() < 8 {
        return None;
    }
    let sp = u16::from_be_bytes([rest[0], rest[1]]);
    let dp = u16::from_be_bytes([rest[2], rest[3]]);
    Some(((src, sp), (dst, dp), &rest[8..]))
}

/// A cooked (`SOCK_DGRAM`) packet socket on every interface of the calling
/// thread's namespace, with kernel timestamps.
fn packet_socket() -> std::io::Result<OwnedFd> {
    let proto = (nix::libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2); checked below.
    let fd = unsafe {
        nix::libc::socket(
            nix::libc::AF_PACKET,
            nix::libc::SOCK_DGRAM,
            nix::libc::c_int::from(proto),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is fresh and owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let on: nix::libc::c_int = 1;
    let big: nix::libc::c_int = 8 << 20;
    let tv = nix::libc::timeval {
        tv_sec: 0,
        tv_usec: 200_000,
    };
    // SAFETY: valid option values of the given sizes.
    unsafe {
        nix::libc::setsockopt(
            fd.as_raw_fd(),
            nix::libc::SOL_SOCKET,
            nix::libc::SO_TIMESTAMPNS,
            (&on as *const nix::libc::c_int).cast(),
            4,
        );
        nix::libc::setsockopt(
            fd.as_raw_fd(),
            nix::libc::SOL_SOCKET,
            nix::libc::SO_RCVBUFFORCE,
            (&big as *const nix::libc::c_int).cast(),
            4,
        );
        nix::libc::setsockopt(
            fd.as_raw_fd(),
            nix::libc::SOL_SOCKET,
            nix::libc::SO_RCVTIMEO,
            (&tv as *const nix::libc::timeval).cast(),
            std::mem::size_of::<nix::libc::timeval>() as u32,
        );
    }
    Ok(fd)
}

impl Capture {
    fn start(mesh: &Mesh, node: &str, spec: Arc<Spec>) -> Result<Capture> {
        let n = mesh.node(node).context("unknown node")?;
        let fd = n.ns.run_in(packet_socket)?.context("AF_PACKET socket")?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut frame = [0u8; 2048];
            while !stop2.load(Ordering::Relaxed) && seen.len() < 4_000_000 {
                let mut iov = nix::libc::iovec {
                    iov_base: frame.as_mut_ptr().cast(),
                    iov_len: frame.len(),
                };
                let mut cbuf = [0u64; 16];
                // SAFETY: plain data; the pointers below outlive the call.
                let mut from: nix::libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                // SAFETY: as above.
                let mut msg: nix::libc::msghdr = unsafe { std::mem::zeroed() };
                msg.msg_name = (&mut from as *mut nix::libc::sockaddr_ll).cast();
                msg.msg_namelen = std::mem::size_of::<nix::libc::sockaddr_ll>() as u32;
                msg.msg_iov = &mut iov;
                msg.msg_iovlen = 1;
                msg.msg_control = cbuf.as_mut_ptr().cast();
                msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
                // SAFETY: msg describes valid buffers.
                let len = unsafe { nix::libc::recvmsg(fd.as_raw_fd(), &mut msg, 0) };
                if len <= 0 || from.sll_pkttype == nix::libc::PACKET_LOOPBACK {
                    continue;
                }
                let out = from.sll_pkttype == nix::libc::PACKET_OUTGOING;
                // SAFETY: walking the control messages the kernel wrote into cbuf.
                let ts = unsafe {
                    let mut c = nix::libc::CMSG_FIRSTHDR(&msg);
                    let mut ts = None;
                    while !c.is_null() {
                        if (*c).cmsg_level == nix::libc::SOL_SOCKET
                            && (*c).cmsg_type == nix::libc::SCM_TIMESTAMPNS
                        {
                            let t = std::ptr::read_unaligned(
                                nix::libc::CMSG_DATA(c) as *const nix::libc::timespec
                            );
                            ts = Some(t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1000);
                        }
                        c = nix::libc::CMSG_NXTHDR(&msg, c);
                    }
                    ts
                };
                let Some(ts) = ts else { continue };
                let p = &frame[..(len as usize).min(frame.len())];
                let Some((src, dst, udp)) = udp_of(p) else {
                    continue;
                };
                let Some((call, dir)) = classify(&spec, src, dst) else {
                    continue;
                };
                let Ok(rtp) = airpack_voice::rtp::parse(udp) else {
                    continue;
                };
                seen.push((
                    call,
                    dir,
                    out,
                    rtp.header.sequence,
                    rtp.header.timestamp,
                    rtp.header.marker,
                    ts,
                ));
            }
            seen
        });
        Ok(Capture { stop, thread })
    }

    fn finish(self) -> Vec<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Per-node results in `airpack voip`'s format from the captures: for each
/// stream, the sender's node reports the packets that left it, the
/// receiver's node the packets that entered it, timed against their send
/// times (first sighting of each sequence number at the sender).
pub fn node_results(spec: &Spec, captures: &BTreeMap<String, Vec<Seen>>) -> Vec<NodeResult> {
    let mut results: BTreeMap<&str, NodeResult> = BTreeMap::new();
    for node in captures.keys() {
        results.insert(
            node,
            NodeResult {
                node: node.clone(),
                start_late_ms: 0.0,
                streams: Vec::new(),
                rx: RxCounters::default(),
                rtcp: None,
            },
        );
    }
    let empty = Vec::new();
    for c in &spec.calls {
        for (dir, from, to) in [(Direction::AToB, &c.a, &c.b), (Direction::BToA, &c.b, &c.a)] {
            let sent_seen = captures.get(&from.node).unwrap_or(&empty);
            let mut sent: HashMap<u16, u64> = HashMap::new();
            for s in sent_seen
                .iter()
                .filter(|s| s.0 == c.id && s.1 == dir && s.2)
            {
                sent.entry(s.3).or_insert(s.6);
            }
            // How far the phone fell behind its own packet clock: the spread
            // of (send time - sequence offset x interval) over the stream (a
            // starved phone or host sends late; the lab re-measures such
            // points, as it does for `airpack voip` senders that lagged).
            let interval_us = i64::from(spec.interval_ms) * 1000;
            let first = sent_seen
                .iter()
                .find(|s| s.0 == c.id && s.1 == dir && s.2)
                .map(|s| s.3);
            let (mut lo, mut hi) = (i64::MAX, i64::MIN);
            for (&seq, &t) in &sent {
                let k = i64::from(seq.wrapping_sub(first.unwrap_or(seq)));
                let o = t as i64 - k * interval_us;
                lo = lo.min(o);
                hi = hi.max(o);
            }
            let lag_us = if sent.is_empty() { 0 } else { hi - lo };
            if let Some(r) = results.get_mut(from.node.as_str()) {
                r.streams.push(StreamReport {
                    call: c.id,
                    direction: dir,
                    sent: Some(sent.len() as u64),
                    send_errors: Some(0),
                    max_send_lag_ms: Some(lag_us as f64 / 1000.0),
                    sends_late_1ms: None,
                    received: None,
                    rtcp: None,
                });
            }
            let clock = 8000;
            let mut st = StreamStats::new(clock, spec.playout_ms)
                .with_timestamp_step(clock / 1000 * spec.interval_ms);
            let mut got: HashMap<u16, ()> = HashMap::new();
            let rx_seen = captures.get(&to.node).unwrap_or(&empty);
            let mut accepted = 0;
            for s in rx_seen.iter().filter(|s| s.0 == c.id && s.1 == dir && !s.2) {
                if got.insert(s.3, ()).is_some() {
                    continue;
                }
                let Some(&send_us) = sent.get(&s.3) else {
                    continue;
                };
                st.on_packet(&RxPacket {
                    seq: s.3,
                    rtp_ts: s.4,
                    marker: s.5,
                    send_us,
                    recv_us: s.6,
                });
                accepted += 1;
            }
            if let Some(r) = results.get_mut(to.node.as_str()) {
                r.rx.datagrams += accepted;
                r.rx.accepted += accepted;
                r.streams.push(StreamReport {
                    call: c.id,
                    direction: dir,
                    sent: None,
                    send_errors: None,
                    max_send_lag_ms: None,
                    sends_late_1ms: None,
                    received: Some(st.summary()),
                    rtcp: None,
                });
            }
        }
    }
    results.into_values().collect()
}

/// What the phones themselves said, per call.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CallSignalling {
    /// Call id.
    pub call: u32,
    /// From the caller's `dial` to its `CALL_ESTABLISHED` event (ms), or
    /// None if the call was not established within 10 s.
    pub setup_ms: Option<f64>,
    /// baresip's `rtcpsummary` of the caller and of the callee (packets
    /// sent/received/lost, jitter, RTCP delay), as printed at hang-up.
    pub rtcp_caller: Option<Value>,
    /// As `rtcp_caller`, the callee's.
    pub rtcp_callee: Option<Value>,
}

/// Runs the spec's calls with baresip: agents up, captures on, each call
/// dialled at `spec.start_at_unix_ms`, hung up after `spec.duration_s`.
/// Returns the per-node results (as `airpack voip` writes them) and the
/// phones' own view of each call.
pub fn run_calls(
    mesh: &Mesh,
    spec: &Spec,
    dir: &Path,
) -> Result<(Vec<NodeResult>, Vec<CallSignalling>)> {
    check_available().map_err(|e| anyhow::anyhow!(e))?;
    if !matches!(
        spec.codec,
        airpack_voice::codec::Codec::G711 | airpack_voice::codec::Codec::G711NoPlc
    ) || spec.interval_ms != 20
        || spec.vad
    {
        bail!("baresip calls are G.711 µ-law at 20 ms without voice activity (--codec g711 --vad off)");
    }
    let wav = dir.join("voice.wav");
    write_wav(&wav, (spec.duration_s.ceil() as u32).saturating_add(30))?;
    let spec_arc = Arc::new(spec.clone());
    let mut nodes: Vec<&str> = Vec::new();
    for c in &spec.calls {
        for n in [c.a.node.as_str(), c.b.node.as_str()] {
            if !nodes.contains(&n) {
                nodes.push(n);
            }
        }
    }
    let mut captures = Vec::new();
    for n in &nodes {
        captures.push((n.to_string(), Capture::start(mesh, n, spec_arc.clone())?));
    }
    // One agent per call and end: callee then caller.
    let mut agents: Vec<(Agent, Agent)> = Vec::new();
    for c in &spec.calls {
        let mut pair = Vec::new();
        for (role, ep) in [("callee", &c.b), ("caller", &c.a)] {
            let d = dir.join(format!("baresip-{}-{role}", c.id));
            std::fs::create_dir_all(&d)?;
            std::fs::write(
                d.join("config"),
                config_text(ep.addr, sip_port(c.id), ep.port, ctrl_port(c.id), &wav),
            )?;
            let user = format!("{role}{}", c.id);
            std::fs::write(
                d.join("accounts"),
                accounts_text(&user, ep.addr, sip_port(c.id)),
            )?;
            let log = d.join("log");
            let f = std::fs::File::create(&log)?;
            let node = mesh.node(&ep.node).context("unknown node")?;
            // at the same real-time priority as `airpack voip` senders
            let mut cmd = if crate::experiment::realtime() {
                let mut c = node.ns.command(Path::new("chrt"));
                c.args(["-r", "10", "baresip"]);
                c
            } else {
                node.ns.command(Path::new("baresip"))
            };
            let child = cmd
                .args(["-f", &d.to_string_lossy()])
                .stdin(Stdio::null())
                .stdout(f.try_clone()?)
                .stderr(f)
                .spawn()
                .context("spawn baresip")?;
            pair.push(Agent {
                child,
                log,
                ctrl: None,
                pending: Vec::new(),
            });
        }
        let caller = pair.pop().expect("two agents");
        let callee = pair.pop().expect("two agents");
        agents.push((callee, caller));
    }
    // Control connections (each namespace has its own loopback).
    for (c, (callee, caller)) in spec.calls.iter().zip(agents.iter_mut()) {
        for (agent, ep) in [(callee, &c.b), (caller, &c.a)] {
            let node = mesh.node(&ep.node).context("unknown node")?;
            let port = ctrl_port(c.id);
            let t = Instant::now();
            loop {
                if let Ok(Some(st)) = agent.child.try_wait() {
                    bail!(
                        "baresip for call {} exited at start ({st}): see {}",
                        c.id,
                        agent.log.display()
                    );
                }
                let conn = node
                    .ns
                    .run_in(move || TcpStream::connect(("127.0.0.1", port)))?;
                if let Ok(s) = conn {
                    agent.ctrl = Some(s);
                    break;
                }
                if t.elapsed() > Duration::from_secs(10) {
                    bail!(
                        "baresip for call {} did not open its control port: see {}",
                        c.id,
                        agent.log.display()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    if let Some(at) = spec.start_at_unix_ms {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        std::thread::sleep(Duration::from_millis(at.saturating_sub(now)));
    }
    let mut signalling = Vec::new();
    let mut dialled = Vec::new();
    for (c, (_, caller)) in spec.calls.iter().zip(agents.iter_mut()) {
        caller.command(
            "dial",
            &format!("sip:callee{}@{}:{}", c.id, c.b.addr, sip_port(c.id)),
        )?;
        dialled.push(Instant::now());
    }
    // Every caller's events are read on its own thread, so each setup time
    // ends when its own CALL_ESTABLISHED arrives.
    let established: Vec<Option<f64>> = std::thread::scope(|scope| {
        let waits: Vec<_> = agents
            .iter_mut()
            .zip(&dialled)
            .map(|((_, caller), t)| {
                scope.spawn(move || {
                    caller
                        .wait_event("CALL_ESTABLISHED", *t + Duration::from_secs(10))
                        .map(|_| t.elapsed().as_secs_f64() * 1000.0)
                })
            })
            .collect();
        waits.into_iter().map(|w| w.join().ok().flatten()).collect()
    });
    for (c, setup_ms) in spec.calls.iter().zip(established) {
        signalling.push(CallSignalling {
            call: c.id,
            setup_ms,
            rtcp_caller: None,
            rtcp_callee: None,
        });
    }
    let end = dialled.first().copied().unwrap_or_else(Instant::now)
        + Duration::from_secs_f64(spec.duration_s);
    while Instant::now() < end {
        if crate::netns::interrupted() {
            bail!("interrupted");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for (_, caller) in agents.iter_mut() {
        let _ = caller.command("hangup", "");
    }
    // Let the last packets and the hang-up cross the mesh.
    std::thread::sleep(Duration::from_millis(spec.grace_ms.min(3000)));
    let mut seen = BTreeMap::new();
    for (n, cap) in captures {
        seen.insert(n, cap.finish());
    }
    for ((callee, caller), s) in agents.iter_mut().zip(signalling.iter_mut()) {
        caller.stop();
        callee.stop();
        s.rtcp_caller = caller.rtcp_summary();
        s.rtcp_callee = callee.rtcp_summary();
    }
    Ok((node_results(spec, &seen), signalling))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netstrings_split_and_keep_partial_tails() {
        let mut b = b"5:hello,3:abc,7:par".to_vec();
        assert_eq!(
            take_netstrings(&mut b),
            vec!["hello".to_string(), "abc".to_string()]
        );
        assert_eq!(b, b"7:par".to_vec());
        b.extend_from_slice(b"tial,");
        assert_eq!(take_netstrings(&mut b), vec!["partial".to_string()]);
        assert!(b.is_empty());
        let mut junk = b"x:1,".to_vec();
        assert!(take_netstrings(&mut junk).is_empty());
        assert!(junk.is_empty());
    }

    #[test]
    fn wav_header_is_8khz_mono_s16le() {
        let p = std::env::temp_dir().join(format!("airpack-wav-{}.wav", std::process::id()));
        write_wav(&p, 2).unwrap();
        let b = std::fs::read(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        assert_eq!(&b[..4], b"RIFF");
        assert_eq!(&b[8..16], b"WAVEfmt ");
        assert_eq!(u16::from_le_bytes([b[22], b[23]]), 1, "mono");
        assert_eq!(u32::from_le_bytes(b[24..28].try_into().unwrap()), 8000);
        assert_eq!(u16::from_le_bytes([b[34], b[35]]), 16);
        assert_eq!(
            u32::from_le_bytes(b[40..44].try_into().unwrap()) as usize,
            b.len() - 44
        );
        assert_eq!(b.len() - 44, 2 * 8000 * 2);
    }

    #[test]
    fn captures_become_voip_results() {
        let spec: Spec = serde_json::from_str(
            r#"{"codec":"g711","interval_ms":20,"duration_s":1.0,"playout_ms":60,
                "calls":[{"id":0,"a":{"node":"A","addr":"10.9.0.1","port":16000},
                               "b":{"node":"D","addr":"10.9.0.4","port":16000}}]}"#,
        )
        .unwrap();
        let mut caps: BTreeMap<String, Vec<Seen>> = BTreeMap::new();
        // A sends 50 packets a->b (the last one lost), 5 ms transit; D sends none back.
        let mut a = Vec::new();
        let mut d = Vec::new();
        for i in 0..50u16 {
            let t = 1_000_000 + u64::from(i) * 20_000;
            a.push((
                0,
                Direction::AToB,
                true,
                100 + i,
                160 * u32::from(i),
                i == 0,
                t,
            ));
            if i < 49 {
                d.push((
                    0,
                    Direction::AToB,
                    false,
                    100 + i,
                    160 * u32::from(i),
                    i == 0,
                    t + 5_000,
                ));
            }
        }
        // a duplicate sighting at the receiver counts once
        d.push(d[3]);
        caps.insert("A".into(), a);
        caps.insert("D".into(), d);
        let res = node_results(&spec, &caps);
        let merged = crate::voip::merge(&spec, &res);
        let q = &merged[0].a_to_b;
        assert_eq!(q.sent, 50);
        assert_eq!(q.received, 49);
        assert!((q.loss_pct - 2.0).abs() < 1e-9, "{q:?}");
        assert!((q.delay_ms.unwrap() - 5.0).abs() < 1e-6, "{q:?}");
        assert_eq!(merged[0].b_to_a.sent, 0);
        let lag = res
            .iter()
            .flat_map(|r| &r.streams)
            .filter_map(|s| s.max_send_lag_ms)
            .fold(0.0, f64::max);
        assert_eq!(lag, 0.0, "evenly spaced sends");
        // one send 75 ms late: the phone lagged 55 ms behind its 20 ms clock
        caps.get_mut("A").unwrap()[10].6 += 75_000;
        let res = node_results(&spec, &caps);
        let lag = res
            .iter()
            .flat_map(|r| &r.streams)
            .filter_map(|s| s.max_send_lag_ms)
            .fold(0.0, f64::max);
        assert!((lag - 75.0).abs() < 1e-9, "{lag}");
    }

    #[test]
    fn classify_by_spec_addresses_and_ports() {
        let spec: Spec = serde_json::from_str(
            r#"{"codec":"g711","interval_ms":20,"duration_s":1.0,
                "calls":[{"id":7,"a":{"node":"A","addr":"10.9.0.1","port":16014},
                               "b":{"node":"D","addr":"10.9.0.4","port":16014}}]}"#,
        )
        .unwrap();
        let a: IpAddr = "10.9.0.1".parse().unwrap();
        let d: IpAddr = "10.9.0.4".parse().unwrap();
        assert_eq!(
            classify(&spec, (a, 16014), (d, 16014)),
            Some((7, Direction::AToB))
        );
        assert_eq!(
            classify(&spec, (d, 16014), (a, 16014)),
            Some((7, Direction::BToA))
        );
        assert_eq!(
            classify(&spec, (a, 16015), (d, 16015)),
            None,
            "RTCP is not RTP"
        );
        assert_eq!(classify(&spec, (a, 5060), (d, 5060)), None);
    }
}
