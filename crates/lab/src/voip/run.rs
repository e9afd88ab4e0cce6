//! The runtime of `airpack voip`: sockets, the sender's schedule (CBR or
//! voice activity), the receive thread (RTP statistics, RTCP reports via
//! [`super::rtcp`]), and the node's report.
//!
//! Owns: timing and socket I/O of one node. Must not touch: the result
//! formats and the merge (see [`super`]), voice-quality math
//! (`airpack_voice`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use rand::{rngs::SmallRng, Rng, SeedableRng};

use airpack_voice::codec::Profile;
use airpack_voice::rtcp::ReceptionStats;
use airpack_voice::rtp::{self, ProbeTag, RtpHeader};
use airpack_voice::stats::{self, StreamStats};

use super::rtcp::{self, RtcpCounters};
use super::*;

/// CLOCK_MONOTONIC in µs.
pub fn monotonic_us() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available on Linux");
    t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1000
}

fn sleep_until_monotonic_us(deadline_us: u64) {
    let ts = nix::sys::time::TimeSpec::new(
        (deadline_us / 1_000_000) as i64,
        ((deadline_us % 1_000_000) * 1000) as i64,
    );
    loop {
        match nix::time::clock_nanosleep(
            nix::time::ClockId::CLOCK_MONOTONIC,
            nix::time::ClockNanosleepFlags::TIMER_ABSTIME,
            &ts,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            _ => return,
        }
    }
}

/// A stream this node receives.
struct RxStream {
    call: u32,
    dir: Direction,
    ssrc: u32,
    stats: StreamStats,
    /// RFC 3550 A.1 reception state, for RTCP report blocks.
    reception: ReceptionStats,
}

/// A stream this node sends.
struct TxStream {
    call: u32,
    dir: Direction,
    socket: usize,
    peer: SocketAddr,
    ssrc: u32,
    seq: u16,
    ts0: u32,
    offset_us: u64,
    next_k: u64,
    rng: SmallRng,
    talking: bool,
    state_end_us: u64,
    marker_next: bool,
    sent: u64,
    send_errors: u64,
    max_lag_us: u64,
    late_sends: u64,
}

struct VadModel {
    on: bool,
    talk_mean_us: f64,
    silence_mean_us: f64,
}

fn exp_sample(rng: &mut SmallRng, mean_us: f64) -> u64 {
    let u: f64 = rng.gen::<f64>();
    // 1 - u is in (0, 1]: ln is finite.
    ((-(1.0 - u).ln() * mean_us) as u64).max(1)
}

impl TxStream {
    /// Time (µs after t0) of the next packet to send, advancing the voice
    /// activity state; `None` when past the duration.
    fn next_due(&mut self, interval_us: u64, duration_us: u64, vad: &VadModel) -> Option<u64> {
        loop {
            let t = self.offset_us + self.next_k * interval_us;
            if t >= duration_us {
                return None;
            }
            if !vad.on {
                return Some(t);
            }
            while self.state_end_us <= t {
                self.talking = !self.talking;
                let mean = if self.talking {
                    vad.talk_mean_us
                } else {
                    vad.silence_mean_us
                };
                self.state_end_us += exp_sample(&mut self.rng, mean);
                if self.talking {
                    self.marker_next = true;
                }
            }
            if self.talking {
                return Some(t);
            }
            // Skip to the first grid point at or after the silence's end.
            let end = self.state_end_us.saturating_sub(self.offset_us);
            self.next_k = end.div_ceil(interval_us).max(self.next_k + 1);
        }
    }
}

/// Run this node's part of the spec: send and receive until the end of the
/// duration plus grace, and return its report. Packets carry DSCP EF.
pub fn run(spec: &Spec, node: &str) -> anyhow::Result<NodeResult> {
    run_with(spec, node, RunOptions::default())
}

/// Mark every packet a socket sends with `dscp` (IPv4 TOS or IPv6 traffic
/// class; the ECN bits stay 0).
fn set_dscp(sock: &UdpSocket, dscp: u8) -> anyhow::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt};
    let tos = i32::from(dscp) << 2;
    match sock.local_addr()? {
        SocketAddr::V4(_) => setsockopt(sock, sockopt::IpTos, &tos)?,
        SocketAddr::V6(_) => setsockopt(sock, sockopt::Ipv6TClass, &tos)?,
    }
    Ok(())
}

/// [`run`] with options: the DSCP, and sockets the caller already bound.
pub fn run_with(spec: &Spec, node: &str, opts: RunOptions) -> anyhow::Result<NodeResult> {
    let profile = spec.validate()?;
    let params = profile.params();
    if opts.dscp > 63 {
        bail!("dscp must be in 0..=63, got {}", opts.dscp);
    }
    let mut bound = opts.bound;
    if opts.rtcp.enabled {
        // RTCP goes to the RTP port + 1 of both ends: it must not be an RTP port.
        let rtp_binds: std::collections::HashSet<(&str, IpAddr, u16)> = spec
            .calls
            .iter()
            .flat_map(|c| [&c.a, &c.b])
            .map(|e| (e.node.as_str(), e.addr, e.port))
            .collect();
        for c in &spec.calls {
            for e in [&c.a, &c.b] {
                if rtp_binds.contains(&(e.node.as_str(), e.addr, e.port.wrapping_add(1))) {
                    bail!("call {}: RTCP port {} on node {} is another endpoint's RTP port (use even RTP ports, or --rtcp off)", c.id, e.port.wrapping_add(1), e.node);
                }
            }
        }
    }

    // Local endpoints: one socket each.
    let mut sockets: Vec<UdpSocket> = Vec::new();
    let mut rx_streams: Vec<RxStream> = Vec::new(); // index = socket index
    let mut tx_streams: Vec<TxStream> = Vec::new();
    for c in &spec.calls {
        for (me, peer, out_dir, in_dir) in [
            (&c.a, &c.b, Direction::AToB, Direction::BToA),
            (&c.b, &c.a, Direction::BToA, Direction::AToB),
        ] {
            if me.node != node {
                continue;
            }
            let sock = match bound
                .iter()
                .position(|b| b.local_addr().ok() == Some(me.sockaddr()))
            {
                Some(i) => bound.swap_remove(i),
                None => UdpSocket::bind(me.sockaddr())
                    .with_context(|| format!("call {}: binding {}", c.id, me.sockaddr()))?,
            };
            sock.set_nonblocking(true)?;
            set_dscp(&sock, opts.dscp)
                .with_context(|| format!("call {}: setting DSCP {}", c.id, opts.dscp))?;
            let idx = sockets.len();
            sockets.push(sock);
            rx_streams.push(RxStream {
                call: c.id,
                dir: in_dir,
                ssrc: ssrc_of(spec.seed, c.id, in_dir),
                stats: StreamStats::new(params.clock_rate, spec.playout_ms)
                    .with_timestamp_step(profile.timestamp_step()),
                reception: ReceptionStats::new(params.clock_rate),
            });
            let mut rng = SmallRng::seed_from_u64(splitmix(
                spec.seed ^ splitmix(u64::from(c.id) << 1 | u64::from(out_dir.index())),
            ));
            let offset_us = rng.gen_range(0..profile.interval_us());
            let p_talk = spec.talk_mean_s / (spec.talk_mean_s + spec.silence_mean_s);
            let talking = !spec.vad || rng.gen::<f64>() < p_talk;
            let first_mean = if talking {
                spec.talk_mean_s
            } else {
                spec.silence_mean_s
            } * 1e6;
            let state_end_us = if spec.vad {
                exp_sample(&mut rng, first_mean)
            } else {
                u64::MAX
            };
            tx_streams.push(TxStream {
                call: c.id,
                dir: out_dir,
                socket: idx,
                peer: peer.sockaddr(),
                ssrc: ssrc_of(spec.seed, c.id, out_dir),
                seq: rng.gen(),
                ts0: rng.gen(),
                offset_us,
                next_k: 0,
                rng,
                talking,
                state_end_us,
                marker_next: talking,
                sent: 0,
                send_errors: 0,
                max_lag_us: 0,
                late_sends: 0,
            });
        }
    }

    if sockets.is_empty() {
        bail!("node {node:?} is not an endpoint of any call in the spec");
    }
    // RTCP: one socket per local endpoint on the RTP port + 1.
    let mut rtcp_calls = Vec::new();
    if opts.rtcp.enabled {
        if opts.rtcp.interval_ms == 0 {
            bail!("the RTCP interval must be positive");
        }
        for (ti, t) in tx_streams.iter().enumerate() {
            let c = spec
                .calls
                .iter()
                .find(|c| c.id == t.call)
                .expect("streams come from the spec");
            let (me, peer) = if t.dir == Direction::AToB {
                (&c.a, &c.b)
            } else {
                (&c.b, &c.a)
            };
            let rtcp_port = |e: &Endpoint| e.port.checked_add(1);
            let (Some(my_port), Some(peer_port)) = (rtcp_port(me), rtcp_port(peer)) else {
                bail!(
                    "call {}: RTP port 65535 leaves no RTCP port (use --rtcp off)",
                    c.id
                );
            };
            let addr = SocketAddr::new(me.addr, my_port);
            let sock = match bound.iter().position(|b| b.local_addr().ok() == Some(addr)) {
                Some(i) => bound.swap_remove(i),
                None => UdpSocket::bind(addr)
                    .with_context(|| format!("call {}: binding RTCP {addr}", c.id))?,
            };
            sock.set_nonblocking(true)?;
            set_dscp(&sock, opts.dscp)
                .with_context(|| format!("call {}: setting DSCP {}", c.id, opts.dscp))?;
            let in_dir = if t.dir == Direction::AToB {
                Direction::BToA
            } else {
                Direction::AToB
            };
            let rng = SmallRng::seed_from_u64(splitmix(
                spec.seed ^ splitmix(u64::from(c.id) << 2 | 2 | u64::from(t.dir.index())),
            ));
            rtcp_calls.push(rtcp::RtcpCall::new(
                sock,
                SocketAddr::new(peer.addr, peer_port),
                t.socket,
                ti,
                t.ssrc,
                ssrc_of(spec.seed, c.id, in_dir),
                format!("airpack-voip-{}@{}", c.id, me.addr),
                t.ts0,
                t.offset_us,
                rng,
            ));
        }
    }

    // Start time: the common start if it is ahead, else now (recorded).
    let now_mono = monotonic_us();
    let mut start_late_ms = 0.0;
    let t0 = match spec.start_at_unix_ms {
        None => now_mono,
        Some(at_ms) => {
            let now_unix_us = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros() as u64;
            let at_us = at_ms.saturating_mul(1000);
            let wait = at_us.saturating_sub(now_unix_us);
            if wait > MAX_START_WAIT.as_micros() as u64 {
                bail!(
                    "start_at_unix_ms is {} s in the future (max {} s)",
                    wait / 1_000_000,
                    MAX_START_WAIT.as_secs()
                );
            }
            let late_us = now_unix_us.saturating_sub(at_us);
            if late_us > 0 {
                start_late_ms = late_us as f64 / 1000.0;
                eprintln!("airpack voip: node {node}: started {start_late_ms:.1} ms after start_at_unix_ms");
            }
            now_mono + wait
        }
    };
    let duration_us = (spec.duration_s * 1e6) as u64;
    let rx_end = t0 + duration_us + spec.grace_ms * 1000;
    let vad = VadModel {
        on: spec.vad,
        talk_mean_us: spec.talk_mean_s * 1e6,
        silence_mean_us: spec.silence_mean_s * 1e6,
    };

    let mut counters = RxCounters::default();
    let mut rtcp_counters = RtcpCounters::default();
    // Packets sent per send stream, read by the RTCP side for its SRs.
    let sent_counts: Vec<AtomicU64> = tx_streams.iter().map(|_| AtomicU64::new(0)).collect();
    let payload_len = rtp::probe_payload_len(profile.payload_bytes());
    let session = rtcp::Session {
        interval_ms: opts.rtcp.interval_ms,
        // Both directions: payload + RTP/UDP/IPv4 headers, per second.
        session_bw: 2.0 * (payload_len as f64 + 40.0) * profile.packets_per_second(),
        clock_rate: params.clock_rate,
        payload_len,
        t0_us: t0,
        realtime_offset_us: (realtime_minus_monotonic_ns() / 1000) as i64,
        bye_at_us: t0 + duration_us + spec.grace_ms * 500,
    };
    for c in &mut rtcp_calls {
        c.schedule(t0, &session, true);
    }
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let sockets = &sockets;
        let rx_streams = &mut rx_streams;
        let counters = &mut counters;
        let rtcp = RtcpSide {
            calls: &mut rtcp_calls,
            counters: &mut rtcp_counters,
            session: &session,
            sent: &sent_counts,
        };
        let receiver = scope
            .spawn(move || receive_loop(sockets, rx_streams, counters, rtcp, &profile, rx_end));
        send_loop(
            sockets,
            &mut tx_streams,
            &sent_counts,
            &profile,
            &vad,
            t0,
            duration_us,
        );
        receiver
            .join()
            .map_err(|_| anyhow::anyhow!("receive thread panicked"))??;
        Ok(())
    })?;

    let mut streams = Vec::with_capacity(tx_streams.len() + rx_streams.len());
    for (i, t) in tx_streams.iter().enumerate() {
        streams.push(StreamReport {
            call: t.call,
            direction: t.dir,
            sent: Some(t.sent),
            send_errors: Some(t.send_errors),
            max_send_lag_ms: Some(t.max_lag_us as f64 / 1000.0),
            sends_late_1ms: Some(t.late_sends),
            received: None,
            rtcp: rtcp_calls
                .iter()
                .find(|c| c.tx == i)
                .map(|c| c.report.clone()),
        });
    }
    for r in &rx_streams {
        streams.push(StreamReport {
            call: r.call,
            direction: r.dir,
            sent: None,
            send_errors: None,
            max_send_lag_ms: None,
            sends_late_1ms: None,
            received: Some(r.stats.summary()),
            rtcp: None,
        });
    }
    streams.sort_by_key(|s| (s.call, s.direction));
    let rtcp = opts.rtcp.enabled.then_some(rtcp_counters);
    Ok(NodeResult {
        node: node.to_string(),
        start_late_ms,
        streams,
        rx: counters,
        rtcp,
    })
}

fn send_loop(
    sockets: &[UdpSocket],
    streams: &mut [TxStream],
    sent_counts: &[AtomicU64],
    profile: &Profile,
    vad: &VadModel,
    t0: u64,
    duration_us: u64,
) {
    let interval_us = profile.interval_us();
    let step = profile.timestamp_step();
    let pt = profile.params().payload_type;
    let payload_len = rtp::probe_payload_len(profile.payload_bytes());
    let mut heap = BinaryHeap::with_capacity(streams.len());
    for (i, s) in streams.iter_mut().enumerate() {
        if let Some(t) = s.next_due(interval_us, duration_us, vad) {
            heap.push(Reverse((t, i)));
        }
    }
    let mut payload = [0u8; 2048];
    let mut buf = [0u8; 2048];
    while let Some(Reverse((due, i))) = heap.pop() {
        let deadline = t0 + due;
        if monotonic_us() < deadline {
            sleep_until_monotonic_us(deadline);
        }
        let s = &mut streams[i];
        let header = RtpHeader {
            marker: std::mem::take(&mut s.marker_next),
            payload_type: pt,
            sequence: s.seq,
            timestamp: s.ts0.wrapping_add((s.next_k as u32).wrapping_mul(step)),
            ssrc: s.ssrc,
        };
        let now = monotonic_us();
        let tag = ProbeTag {
            send_us: now,
            call_id: s.call,
        };
        let p = &mut payload[..payload_len];
        let lag = now.saturating_sub(deadline);
        s.max_lag_us = s.max_lag_us.max(lag);
        s.late_sends += u64::from(lag > 1000);
        s.sent += 1;
        // Sizes are bounded (payload <= 960 bytes < 2048), so building the
        // packet cannot fail; if it ever did, it counts as a send error.
        match tag
            .write_payload(p)
            .and_then(|_| rtp::write(&header, p, &mut buf))
        {
            Some(n) => {
                if sockets[s.socket].send_to(&buf[..n], s.peer).is_err() {
                    s.send_errors += 1;
                }
            }
            None => s.send_errors += 1,
        }
        sent_counts[i].store(s.sent, Ordering::Relaxed);
        s.seq = s.seq.wrapping_add(1);
        s.next_k += 1;
        if let Some(t) = s.next_due(interval_us, duration_us, vad) {
            heap.push(Reverse((t, i)));
        }
    }
}

/// Offset CLOCK_REALTIME - CLOCK_MONOTONIC in ns, to convert the kernel's
/// receive timestamps (SO_TIMESTAMPNS is CLOCK_REALTIME) to CLOCK_MONOTONIC.
fn realtime_minus_monotonic_ns() -> i128 {
    use nix::time::{clock_gettime, ClockId};
    let ns = |t: nix::sys::time::TimeSpec| {
        i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec())
    };
    let (Ok(m0), Ok(rt), Ok(m1)) = (
        clock_gettime(ClockId::CLOCK_MONOTONIC),
        clock_gettime(ClockId::CLOCK_REALTIME),
        clock_gettime(ClockId::CLOCK_MONOTONIC),
    ) else {
        return 0;
    };
    ns(rt) - (ns(m0) + ns(m1)) / 2
}

/// What the receive thread needs for RTCP: it sends the reports too (at
/// their deadlines, between datagrams), so the reception state stays in one
/// thread.
struct RtcpSide<'a> {
    calls: &'a mut [rtcp::RtcpCall],
    counters: &'a mut RtcpCounters,
    session: &'a rtcp::Session,
    sent: &'a [AtomicU64],
}

impl RtcpSide<'_> {
    /// Send every report due at `now`; the last one (with BYE) at the
    /// session's `bye_at_us`. Returns the next deadline.
    fn send_due(&mut self, now: u64, streams: &mut [RxStream]) -> Option<u64> {
        let mut next = None;
        for c in self.calls.iter_mut() {
            if c.report.bye_sent {
                continue;
            }
            let bye = now >= self.session.bye_at_us;
            if bye || now >= c.next_due_us {
                let sent = self.sent.get(c.tx).map_or(0, |a| a.load(Ordering::Relaxed));
                if let Some(rx) = streams.get_mut(c.rx) {
                    c.send(
                        now,
                        self.session,
                        sent,
                        &mut rx.reception,
                        bye,
                        self.counters,
                    );
                }
                if bye {
                    c.report.bye_sent = true;
                    continue;
                }
            }
            let due = c.next_due_us.min(self.session.bye_at_us);
            next = Some(next.map_or(due, |n: u64| n.min(due)));
        }
        next
    }
}

fn receive_loop(
    sockets: &[UdpSocket],
    streams: &mut [RxStream],
    counters: &mut RxCounters,
    mut rtcp: RtcpSide<'_>,
    profile: &Profile,
    end_us: u64,
) -> anyhow::Result<()> {
    use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
    use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags};
    use std::os::fd::AsRawFd;
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    for (i, s) in sockets.iter().enumerate() {
        // Kernel receive timestamps: arrival time without our wake-up latency.
        let _ = setsockopt(s, sockopt::ReceiveTimestampns, &true);
        epoll.add(s.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, i as u64))?;
    }
    // RTCP sockets after the RTP ones.
    let rtcp_base = sockets.len();
    for (j, c) in rtcp.calls.iter().enumerate() {
        epoll.add(
            c.socket.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, (rtcp_base + j) as u64),
        )?;
    }
    let offset_ns = realtime_minus_monotonic_ns();
    let pt = profile.params().payload_type;
    let payload_len = rtp::probe_payload_len(profile.payload_bytes());
    let mut events = vec![EpollEvent::empty(); (sockets.len() + rtcp.calls.len()).clamp(1, 256)];
    let mut buf = [0u8; 2048];
    let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
    // Report deadlines only move when a report is sent: walk the calls only then.
    let mut next_rtcp = if rtcp.calls.is_empty() { None } else { Some(0) };
    loop {
        let now = monotonic_us();
        if now >= end_us {
            return Ok(());
        }
        if next_rtcp.is_some_and(|t| now >= t) {
            next_rtcp = rtcp.send_due(now, streams);
        }
        let until = next_rtcp.map_or(end_us, |t| t.clamp(now, end_us));
        let wait_ms = ((until - now).div_ceil(1000)).min(100) as u16;
        let n = match epoll.wait(&mut events, wait_ms) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        for ev in &events[..n] {
            let idx = ev.data() as usize;
            if idx >= rtcp_base {
                if let Some(c) = rtcp.calls.get_mut(idx - rtcp_base) {
                    rtcp_drain(c, streams, rtcp.counters, rtcp.session, &mut buf);
                }
                continue;
            }
            let (Some(sock), Some(stream)) = (sockets.get(idx), streams.get_mut(idx)) else {
                continue;
            };
            // Drain, bounded per wakeup so one busy socket cannot starve others.
            for _ in 0..256 {
                let mut iov = [std::io::IoSliceMut::new(&mut buf)];
                let (len, truncated, kernel_ns) = match recvmsg::<()>(
                    sock.as_raw_fd(),
                    &mut iov,
                    Some(&mut cmsg),
                    MsgFlags::MSG_DONTWAIT,
                ) {
                    Ok(m) => {
                        let mut ts = None;
                        if let Ok(it) = m.cmsgs() {
                            for c in it {
                                if let ControlMessageOwned::ScmTimestampns(t) = c {
                                    ts = Some(
                                        i128::from(t.tv_sec()) * 1_000_000_000
                                            + i128::from(t.tv_nsec()),
                                    );
                                }
                            }
                        }
                        (m.bytes, m.flags.contains(MsgFlags::MSG_TRUNC), ts)
                    }
                    Err(nix::errno::Errno::EAGAIN) => break,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => {
                        counters.recv_errors += 1;
                        break;
                    }
                };
                let user_us = monotonic_us();
                counters.datagrams += 1;
                if truncated {
                    counters.truncated += 1;
                    continue;
                }
                let recv_us = match kernel_ns.map(|k| (k - offset_ns) / 1000) {
                    // Plausible: not after our own clock read, not a second before it.
                    Some(k) if k <= i128::from(user_us) && k + 1_000_000 >= i128::from(user_us) => {
                        counters.kernel_timestamps += 1;
                        k as u64
                    }
                    _ => {
                        counters.user_timestamps += 1;
                        user_us
                    }
                };
                accept(
                    &buf[..len.min(buf.len())],
                    recv_us,
                    pt,
                    payload_len,
                    stream,
                    counters,
                );
            }
        }
    }
}

/// Read every datagram waiting on one call's RTCP socket (bounded).
fn rtcp_drain(
    c: &mut rtcp::RtcpCall,
    streams: &mut [RxStream],
    counters: &mut RtcpCounters,
    s: &rtcp::Session,
    buf: &mut [u8],
) {
    for _ in 0..64 {
        match c.socket.recv(buf) {
            Ok(n) => {
                let now = monotonic_us();
                if let Some(rx) = streams.get_mut(c.rx) {
                    c.receive(
                        &buf[..n.min(buf.len())],
                        now,
                        s,
                        &mut rx.reception,
                        counters,
                    );
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
}

/// Check one datagram and feed it to its stream; count rejections.
fn accept(
    datagram: &[u8],
    recv_us: u64,
    pt: u8,
    payload_len: usize,
    stream: &mut RxStream,
    counters: &mut RxCounters,
) {
    let pkt = match rtp::parse(datagram) {
        Ok(p) => p,
        Err(e) => {
            match counters.not_rtp.get_mut(e.name()) {
                Some(n) => *n += 1,
                None => {
                    counters.not_rtp.insert(e.name().to_string(), 1);
                }
            }
            return;
        }
    };
    if pkt.header.payload_type != pt {
        counters.wrong_payload_type += 1;
        return;
    }
    if pkt.header.ssrc != stream.ssrc {
        counters.wrong_ssrc += 1;
        return;
    }
    if pkt.payload.len() != payload_len {
        counters.wrong_payload_size += 1;
        return;
    }
    let Some(tag) = ProbeTag::read(pkt.payload) else {
        counters.wrong_payload_size += 1;
        return;
    };
    if tag.call_id != stream.call {
        counters.wrong_call += 1;
        return;
    }
    counters.accepted += 1;
    stream
        .reception
        .on_rtp(pkt.header.sequence, pkt.header.timestamp, recv_us);
    stream.stats.on_packet(&stats::RxPacket {
        seq: pkt.header.sequence,
        rtp_ts: pkt.header.timestamp,
        marker: pkt.header.marker,
        send_us: tag.send_us,
        recv_us,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vad_schedule_has_spurts_of_the_right_mean_and_markers() {
        let vad = VadModel {
            on: true,
            talk_mean_us: 1e6,
            silence_mean_us: 1.5e6,
        };
        let mut s = TxStream {
            call: 0,
            dir: Direction::AToB,
            socket: 0,
            peer: "127.0.0.1:9".parse().unwrap(),
            ssrc: 1,
            seq: 0,
            ts0: 0,
            offset_us: 7_000,
            next_k: 0,
            rng: SmallRng::seed_from_u64(42),
            talking: true,
            state_end_us: 1_000_000,
            marker_next: true,
            sent: 0,
            send_errors: 0,
            max_lag_us: 0,
            late_sends: 0,
        };
        let duration = 2_000_000_000u64; // 2000 s of schedule, no sockets
        let (mut packets, mut spurts, mut last) = (0u64, 0u64, None);
        while let Some(t) = s.next_due(20_000, duration, &vad) {
            assert_eq!((t - 7_000) % 20_000, 0, "packets stay on the grid");
            if let Some(l) = last {
                assert!(t > l);
            }
            last = Some(t);
            if std::mem::take(&mut s.marker_next) {
                spurts += 1;
            }
            packets += 1;
            s.next_k += 1;
        }
        let activity = packets as f64 / 100_000.0; // grid has 100k slots
        assert!((activity - 0.4).abs() < 0.05, "activity {activity}");
        let mean_spurt_s = packets as f64 * 0.02 / spurts as f64;
        assert!(
            (mean_spurt_s - 1.0).abs() < 0.15,
            "mean spurt {mean_spurt_s}"
        );
    }

    #[test]
    fn cbr_schedule_is_every_interval_with_one_marker() {
        let vad = VadModel {
            on: false,
            talk_mean_us: 1e6,
            silence_mean_us: 1.5e6,
        };
        let mut s = TxStream {
            call: 0,
            dir: Direction::AToB,
            socket: 0,
            peer: "127.0.0.1:9".parse().unwrap(),
            ssrc: 1,
            seq: 0,
            ts0: 0,
            offset_us: 3,
            next_k: 0,
            rng: SmallRng::seed_from_u64(1),
            talking: true,
            state_end_us: u64::MAX,
            marker_next: true,
            sent: 0,
            send_errors: 0,
            max_lag_us: 0,
            late_sends: 0,
        };
        let mut n = 0;
        let mut markers = 0;
        while let Some(t) = s.next_due(20_000, 1_000_000, &vad) {
            assert_eq!(t, 3 + 20_000 * n);
            markers += u32::from(std::mem::take(&mut s.marker_next));
            n += 1;
            s.next_k += 1;
        }
        assert_eq!((n, markers), (50, 1));
    }
}
