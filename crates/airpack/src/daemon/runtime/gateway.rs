//! The gateway role (`[gateway]`, issue 12, seed 003's VAGP pacer) in the
//! daemon's one event loop.
//!
//! Owns: the two observation sockets on the mesh interface
//! ([`crate::linux::packet`]: voice packets selected by the voice rules'
//! classic BPF program, TCP SYN/FIN/RST by a small fixed one; the kernel
//! copies them, nothing is delayed), the Voice Protection Module fed from
//! them (`airpack_voice::vpm`: upstream RTP = received on the mesh
//! interface, downstream = sent out of it; RTCP told apart by its packet
//! type, keyed to its call by the even port), the rate controller
//! (`airpack_core::gateway::rate`, the `search` or the `seed` controller)
//! stepped once per period with the network MOS and the number of calls it
//! was taken over, the bounded table of paced TCP flows (slots; a flow enters on its
//! SYN, leaves after FIN/RST once its class is idle, or when its class moved
//! no byte for `flow_idle_ms`), and the kernel HTB tree that paces them
//! ([`crate::linux::htb`], driven from a helper thread once per period).
//!
//! Pacing in the kernel, not in the daemon: TCP enters the daemon only
//! with the TCP Improvement Module on (`tcp_improvement`, [`super::gateway_tim`],
//! started by [`Gateway::start_tim`], fed the current share), and even then
//! the kernel paces what it writes back (docs/gateway.md has the measurements). Flows beyond `max_flows`, and flows already open
//! when the daemon started, are paced together in one shared class (their
//! SYN was not seen or found no slot) and count as one flow in the share.
//!
//! Must not touch: the rate policy and the E-model (the core and the voice
//! crate), the aggregation engine, packets' bytes (observation only).

use super::gateway_tim::{TimPath, TOK_TIM_IN, TOK_TIM_OUT};
use super::Daemon;
use crate::daemon::config::gateway::GatewayPlan;
use crate::linux::htb::{self, Desired, FlowMatch, Layout, TcWorker};
use crate::linux::packet::{tcp_control_filter, PacketSocket};
use crate::linux::{cbpf, monotonic_micros};
use airpack_core::engine::Rule;
use airpack_core::gateway::rate::{Band, Mode, RateController};
use airpack_core::wire::ip::{self, PacketInfo};
use airpack_core::Micros;
use airpack_voice::vpm::{CallKey, Spread, Vpm};
use anyhow::Context;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use tracing::{error, info, warn};

/// Poll token of the voice observation socket.
pub(super) const TOK_GW_VOICE: u64 = 90;
/// Poll token of the TCP control observation socket.
pub(super) const TOK_GW_TCP: u64 = 91;
/// Packets read per socket per wakeup.
const RX_BATCH: usize = 64;
/// Copy buffer (voice packets are small; longer ones are truncated and ignored).
const BUF: usize = 2048;
/// One controller step in `gateway.history`: (band, MOS, rate after, the
/// calls' spread, calls heard).
type HistoryStep = (Band, Option<f64>, u64, Option<Spread>, usize);

/// Controller steps kept for `airpack stats` (`gateway.history`): two
/// minutes at the default period, a whole lab point.
const HISTORY: usize = 128;

/// Observed packets the daemon could not use, by reason.
#[derive(Clone, Copy, Debug, Default)]
struct Ignored {
    /// Not a valid IP packet, or truncated by the copy.
    malformed: u64,
    /// A voice-rule packet that is not UDP, or an IPv6 packet with extension headers.
    not_udp: u64,
    /// UDP payload that is neither RTP nor RTCP version 2.
    not_rtp: u64,
    /// A TCP control packet whose headers could not be read.
    bad_tcp: u64,
    /// A SYN of a flow the `[[gateway.tcp]]` rules do not pace.
    tcp_not_paced: u64,
    /// A SYN that found the flow table full (the flow is paced in the shared class).
    flow_table_full: u64,
    /// Socket read errors other than nothing queued.
    read_errors: u64,
}

/// A paced flow.
#[derive(Clone, Copy, Debug)]
struct Flow {
    key: FlowMatch,
    /// Class bytes at the last read and when they last moved.
    bytes: u64,
    moved_at: Micros,
    /// Its queue's drops at the last read.
    dropped: u64,
    /// FIN or RST seen.
    closing: bool,
}

/// The gateway role's state.
pub(super) struct Gateway {
    plan: GatewayPlan,
    voice_sock: PacketSocket,
    tcp_sock: PacketSocket,
    vpm: Vpm,
    rate: RateController,
    slots: Vec<Option<Flow>>,
    index: HashMap<FlowMatch, usize>,
    tc: Option<TcWorker>,
    last_reads: u64,
    /// Shared class bytes at the last read and when they last moved.
    shared_bytes: u64,
    shared_moved_at: Micros,
    share_bps: u64,
    active_flows: usize,
    network_mos: Option<f64>,
    calls_with_mos: usize,
    /// Calls heard (from their first packet; the controller's number of calls).
    calls_heard: usize,
    /// New calls that brought the controller's next step forward.
    joins_early: u64,
    last_band: Option<Band>,
    decisions: [u64; 5],
    /// The last steps.
    history: VecDeque<HistoryStep>,
    rtp_up: u64,
    rtp_down: u64,
    rtcp_up: u64,
    rtcp_down: u64,
    tcp_control: u64,
    flows_added: u64,
    flows_expired: u64,
    flows_closed: u64,
    tc_skipped: u64,
    /// Queue drops of the classes of flows already forgotten (the counter
    /// stays monotonic when a class is removed).
    retired_flow_drops: u64,
    socket_drops: u64,
    ignored: Ignored,
    buf: Vec<u8>,
    /// The TCP Improvement Module in the data path (`tcp_improvement`),
    /// started after the aggregation's steering ([`Gateway::start_tim`]).
    tim: Option<TimPath>,
}

fn band_index(b: Band) -> usize {
    match b {
        Band::Good => 0,
        Band::Fair => 1,
        Band::Hold => 2,
        Band::Poor => 3,
        Band::Choke => 4,
    }
}

const BAND_NAMES: [&str; 5] = ["good", "fair", "hold", "poor", "choke"];

/// Addresses, ports and the UDP payload offset (or TCP flags) of an IP
/// packet's first bytes, without requiring the whole packet.
struct Headers {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    /// Offset of the transport header.
    l4: usize,
}

fn headers(p: &[u8], want_proto: u8) -> Option<Headers> {
    let v = *p.first()? >> 4;
    let (src, dst, l4) = match v {
        4 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            if ihl < 20 || p.len() < ihl + 14 || p[9] != want_proto {
                return None;
            }
            // Later fragments carry no ports.
            if u16::from_be_bytes([p[6], p[7]]) & 0x1fff != 0 {
                return None;
            }
            let s: [u8; 4] = p[12..16].try_into().ok()?;
            let d: [u8; 4] = p[16..20].try_into().ok()?;
            (IpAddr::from(s), IpAddr::from(d), ihl)
        }
        6 => {
            if p.len() < 40 + 14 || p[6] != want_proto {
                return None;
            }
            let s: [u8; 16] = p[8..24].try_into().ok()?;
            let d: [u8; 16] = p[24..40].try_into().ok()?;
            (IpAddr::from(s), IpAddr::from(d), 40)
        }
        _ => return None,
    };
    Some(Headers {
        src,
        dst,
        sport: u16::from_be_bytes([p[l4], p[l4 + 1]]),
        dport: u16::from_be_bytes([p[l4 + 2], p[l4 + 3]]),
        l4,
    })
}

impl Gateway {
    /// Sets up the HTB tree, opens the observation sockets, starts the tc thread.
    pub(super) fn open(
        plan: &GatewayPlan,
        bypass_mark: u32,
        now: Micros,
    ) -> anyhow::Result<Gateway> {
        let ifindex = nix::net::if_::if_nametoindex(plan.interface.as_str())
            .with_context(|| format!("gateway.interface {:?} does not exist", plan.interface))?;
        let voice_prog = cbpf::compile(bypass_mark, &plan.voice_matches)
            .context("compiling the voice rules into a classic BPF program")?;
        let tcp_prog = cbpf::compile(bypass_mark, &plan.tcp_matches)
            .context("compiling the TCP rules into a classic BPF program")?;
        let layout = Layout {
            dev: plan.interface.clone(),
            link_bps: plan.link_rate_bps,
            queue_packets: plan.flow_queue_packets,
            voice_bytecode: cbpf::bytecode(&voice_prog),
            tcp_bytecode: cbpf::bytecode(&tcp_prog),
        };
        let mut rate = RateController::new(plan.rate)
            .map_err(|e| anyhow::anyhow!("gateway rate settings refused: {e:?}"))?;
        // The first call starts the clock: the first step is one period away.
        rate.on_timeout(now, None, 0);
        let r0 = rate.rate_bps();
        htb::run_batch(&htb::setup_script(&layout, r0)).map_err(|e| {
            anyhow::anyhow!(
                "setting up the gateway's HTB qdisc on {} (needs tc, sch_htb, cls_bpf, cls_u32): {e}",
                plan.interface
            )
        })?;
        let voice_sock = PacketSocket::open(ifindex, &voice_prog)
            .context("opening the voice observation socket (AF_PACKET)")?;
        let tcp_sock = PacketSocket::open(ifindex, &tcp_control_filter())
            .context("opening the TCP observation socket (AF_PACKET)")?;
        let tc = TcWorker::start(layout, r0).context("starting the tc thread")?;
        info!(
            interface = %plan.interface,
            rate_bps = r0,
            period_us = plan.rate.period_us,
            max_flows = plan.max_flows,
            "gateway pacer running (HTB 1a0: on the mesh interface)"
        );
        Ok(Gateway {
            vpm: Vpm::new(plan.vpm),
            rate,
            slots: vec![None; plan.max_flows],
            index: HashMap::with_capacity(plan.max_flows),
            tc: Some(tc),
            last_reads: 0,
            shared_bytes: 0,
            shared_moved_at: 0,
            share_bps: r0,
            active_flows: 0,
            network_mos: None,
            calls_with_mos: 0,
            calls_heard: 0,
            joins_early: 0,
            last_band: None,
            decisions: [0; 5],
            history: VecDeque::with_capacity(HISTORY),
            rtp_up: 0,
            rtp_down: 0,
            rtcp_up: 0,
            rtcp_down: 0,
            tcp_control: 0,
            flows_added: 0,
            flows_expired: 0,
            flows_closed: 0,
            tc_skipped: 0,
            retired_flow_drops: 0,
            socket_drops: 0,
            ignored: Ignored::default(),
            buf: vec![0; BUF],
            tim: None,
            voice_sock,
            tcp_sock,
            plan: plan.clone(),
        })
    }

    /// Descriptors and their poll tokens.
    pub(super) fn fds(&self) -> [(RawFd, u64); 2] {
        [
            (self.voice_sock.as_raw_fd(), TOK_GW_VOICE),
            (self.tcp_sock.as_raw_fd(), TOK_GW_TCP),
        ]
    }

    /// Starts the TCP Improvement Module when configured (after the
    /// aggregation's steering is installed); returns its descriptors.
    pub(super) fn start_tim(&mut self, bypass_mark: u32) -> anyhow::Result<Vec<(RawFd, u64)>> {
        let Some(t) = &self.plan.tim else {
            return Ok(Vec::new());
        };
        let path = TimPath::open(t, &self.plan.interface, bypass_mark, &self.plan.tcp_matches)?;
        info!(
            interface = %self.plan.interface,
            tun = %t.tun,
            "TCP improvement module in the data path (tcx egress + ingress)"
        );
        let fds = path.fds().to_vec();
        self.tim = Some(path);
        Ok(fds)
    }

    /// Whether a poll token is the gateway's.
    pub(super) fn owns(token: u64) -> bool {
        matches!(token, TOK_GW_VOICE | TOK_GW_TCP | TOK_TIM_IN | TOK_TIM_OUT)
    }

    /// When the next control period ends.
    pub(super) fn deadline(&self) -> Option<Micros> {
        self.rate.poll_timeout()
    }

    /// Reads what one socket or TUN has queued (bounded).
    fn read(&mut self, token: u64) {
        if token == TOK_TIM_IN || token == TOK_TIM_OUT {
            if let Some(t) = self.tim.as_mut() {
                t.read(token, self.share_bps);
            }
            return;
        }
        // Kernel timestamps are CLOCK_REALTIME; the VPM's clock is the
        // monotonic one: one offset per wakeup.
        let mono = monotonic_micros();
        let real = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        for _ in 0..RX_BATCH {
            let sock = if token == TOK_GW_VOICE {
                &self.voice_sock
            } else {
                &self.tcp_sock
            };
            let c = match sock.recv(&mut self.buf) {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.ignored.read_errors += 1;
                    return;
                }
            };
            // Arrival time (jitter and late loss): when the kernel saw the
            // packet, not when the daemon read it; never after `mono`.
            let now = match c.kernel_ns {
                Some(ns) => mono.saturating_sub(real.saturating_sub(ns / 1000)),
                None => monotonic_micros(),
            };
            if token == TOK_GW_VOICE {
                self.on_voice(c.len, c.wire_len, c.outgoing, now);
            } else {
                self.on_tcp_control(c.len, c.outgoing, now);
            }
        }
    }

    fn on_voice(&mut self, len: usize, wire_len: usize, outgoing: bool, now: Micros) {
        if len < wire_len {
            self.ignored.malformed += 1;
            return;
        }
        let p = &self.buf[..len];
        if ip::inspect(p).is_err() {
            self.ignored.malformed += 1;
            return;
        }
        let Some(h) = headers(p, 17) else {
            self.ignored.not_udp += 1;
            return;
        };
        let payload = &p[(h.l4 + 8).min(p.len())..];
        if payload.len() < 2 || payload[0] >> 6 != 2 {
            self.ignored.not_rtp += 1;
            return;
        }
        // RFC 5761: RTCP packet types 200-204 (SR, RR, SDES, BYE, APP).
        let rtcp = (200..=204).contains(&payload[1]);
        let even = |port: u16| if rtcp { port & !1 } else { port };
        // Outgoing on the mesh interface = downstream (wired -> mesh).
        let key = if outgoing {
            CallKey {
                mesh: h.dst,
                mesh_port: even(h.dport),
                wired: h.src,
                wired_port: even(h.sport),
            }
        } else {
            CallKey {
                mesh: h.src,
                mesh_port: even(h.sport),
                wired: h.dst,
                wired_port: even(h.dport),
            }
        };
        match (rtcp, outgoing) {
            (false, false) => {
                self.rtp_up += 1;
                let started = self.vpm.counters().started;
                self.vpm.on_rtp_upstream(key, payload, now);
                // A new call's first packet (a new flow, or a new source on
                // a known one): the controller hears the join early
                // (`RateController::bring_forward`).
                if self.vpm.counters().started > started
                    && self.vpm.heard_calls(now) > self.calls_heard
                {
                    self.rate.bring_forward(now);
                    self.joins_early += 1;
                }
            }
            (false, true) => {
                self.rtp_down += 1;
                self.vpm.on_rtp_downstream(key, payload, now);
            }
            (true, false) => {
                self.rtcp_up += 1;
                self.vpm.on_rtcp_upstream(key, payload, now);
            }
            (true, true) => {
                self.rtcp_down += 1;
                self.vpm.on_rtcp_downstream(key, payload, now);
            }
        }
    }

    fn on_tcp_control(&mut self, len: usize, outgoing: bool, now: Micros) {
        self.tcp_control += 1;
        let p = &self.buf[..len];
        let Some(h) = headers(p, 6) else {
            self.ignored.bad_tcp += 1;
            return;
        };
        let Some(&flags) = p.get(h.l4 + 13) else {
            self.ignored.bad_tcp += 1;
            return;
        };
        // The direction into the mesh: as sent out of the mesh interface.
        let key = if outgoing {
            FlowMatch {
                src: h.src,
                dst: h.dst,
                sport: h.sport,
                dport: h.dport,
            }
        } else {
            FlowMatch {
                src: h.dst,
                dst: h.src,
                sport: h.dport,
                dport: h.sport,
            }
        };
        let (syn, fin, rst) = (flags & 0x02 != 0, flags & 0x01 != 0, flags & 0x04 != 0);
        if let Some(&slot) = self.index.get(&key) {
            if let Some(f) = self.slots[slot].as_mut() {
                if fin || rst {
                    f.closing = true;
                } else if syn {
                    // A new connection on the same ports.
                    f.closing = false;
                    f.moved_at = now;
                }
            }
            return;
        }
        // Only a connection's first SYN (no ACK) opens a flow: its SYN-ACK
        // then finds it, and a SYN-ACK alone does not count twice.
        if !syn || rst || fin || flags & 0x10 != 0 {
            return;
        }
        if !self.paced(&key, p) {
            self.ignored.tcp_not_paced += 1;
            return;
        }
        let Some(slot) = self.slots.iter().position(Option::is_none) else {
            self.ignored.flow_table_full += 1;
            return;
        };
        self.slots[slot] = Some(Flow {
            key,
            bytes: 0,
            moved_at: now,
            dropped: 0,
            closing: false,
        });
        self.index.insert(key, slot);
        self.flows_added += 1;
    }

    /// Whether the `[[gateway.tcp]]` rules pace a flow (matched in its
    /// direction into the mesh).
    fn paced(&self, key: &FlowMatch, p: &[u8]) -> bool {
        let dscp = match p[0] >> 4 {
            4 => p[1] >> 2,
            _ => ((u16::from_be_bytes([p[0], p[1]]) >> 6) & 0x3f) as u8,
        };
        let info = PacketInfo {
            version: if key.src.is_ipv4() { 4 } else { 6 },
            protocol: 6,
            src: key.src,
            dst: key.dst,
            dscp,
            len: p.len(),
            fragment: false,
            src_port: Some(key.sport),
            dst_port: Some(key.dport),
            tcp_flags: None,
        };
        self.plan
            .tcp_rules
            .iter()
            .any(|r: &Rule| r.matches(&info, 0))
    }

    /// Once per period: read the kernel's counters, expire flows, step the
    /// controller with the network MOS, hand the new state to the tc thread.
    fn tick(&mut self, now: Micros) {
        let Some(due) = self.rate.poll_timeout() else {
            return;
        };
        if now < due {
            return;
        }
        if let Some(t) = self.tim.as_mut() {
            t.tick(now);
        }
        let report = self.tc.as_ref().map(|t| t.report()).unwrap_or_default();
        let fresh = report.reads != self.last_reads;
        self.last_reads = report.reads;
        let mut active = 0usize;
        let idle = self.plan.flow_idle_us;
        let period = self.plan.rate.period_us;
        for slot in 0..self.slots.len() {
            let Some(f) = self.slots[slot].as_mut() else {
                continue;
            };
            if fresh {
                if let Some(c) = report.classes.get(&(htb::FLOW_BASE + slot as u16)) {
                    if c.bytes != f.bytes {
                        f.bytes = c.bytes;
                        f.moved_at = now;
                    }
                    f.dropped = c.dropped;
                }
            }
            let quiet = now.saturating_sub(f.moved_at);
            let gone = if f.closing {
                quiet >= period
            } else {
                quiet >= idle
            };
            if gone {
                let key = f.key;
                self.retired_flow_drops += f.dropped;
                if f.closing {
                    self.flows_closed += 1;
                } else {
                    self.flows_expired += 1;
                }
                self.slots[slot] = None;
                self.index.remove(&key);
                continue;
            }
            if quiet <= 2 * period {
                active += 1;
            }
        }
        if fresh {
            if let Some(c) = report.classes.get(&htb::TCP_SHARED) {
                if c.bytes != self.shared_bytes {
                    self.shared_bytes = c.bytes;
                    self.shared_moved_at = now;
                }
            }
        }
        if self.shared_moved_at > 0 && now.saturating_sub(self.shared_moved_at) <= 2 * period {
            active += 1;
        }
        self.active_flows = active;
        let mos = self.vpm.network_mos(now);
        self.network_mos = mos;
        self.calls_with_mos = self.vpm.active_calls(now);
        // The controller's joins and leaves count calls from their first
        // packet (a joining call is judged only after 1 s of packets, and
        // meanwhile runs at the rate of fewer calls); the MOS stays over the
        // judged calls.
        self.calls_heard = self.vpm.heard_calls(now);
        let band = self.rate.config().band(mos);
        let rate = self.rate.on_timeout(now, mos, self.calls_heard);
        if self.rate.poll_timeout() != Some(due) {
            self.decisions[band_index(band)] += 1;
            self.last_band = Some(band);
            if self.history.len() == HISTORY {
                self.history.pop_front();
            }
            let spread = self.vpm.spread(now);
            self.history
                .push_back((band, mos, rate, spread, self.calls_heard));
        }
        self.share_bps = (rate / active.max(1) as u64).max(1);
        self.socket_drops += self.voice_sock.drops() + self.tcp_sock.drops();
        let want = Desired {
            rate_bps: rate,
            share_bps: self.share_bps,
            flows: self
                .slots
                .iter()
                .enumerate()
                .filter_map(|(i, f)| f.map(|f| (i, f.key)))
                .collect(),
        };
        if let Some(tc) = &self.tc {
            if !tc.submit(want) {
                self.tc_skipped += 1;
            }
        }
    }

    /// Stops the tc thread and removes the HTB tree (once).
    fn stop(&mut self) {
        let Some(tc) = self.tc.take() else {
            return;
        };
        tc.stop();
        if let Err(e) = htb::run_batch(&htb::teardown_script(&self.plan.interface)) {
            warn!(interface = %self.plan.interface, "removing the gateway's HTB qdisc: {e}");
        }
    }

    /// The `gateway` object of `airpack stats`.
    /// A reload's new settings for the controller and the voice protection
    /// module (the rest of `[gateway]` needs a restart; see
    /// `Daemon::reload_gateway`). Takes effect from the next period on.
    pub(super) fn retune(&mut self, plan: &GatewayPlan) -> Result<(), String> {
        self.rate
            .reconfigure(plan.rate)
            .map_err(|e| format!("gateway rate settings refused: {e:?}"))?;
        self.vpm.retune(&plan.vpm);
        self.plan.rate = plan.rate;
        self.plan.vpm = self.vpm.config().to_owned();
        Ok(())
    }

    pub(super) fn json(&self) -> Value {
        let report = self.tc.as_ref().map(|t| t.report()).unwrap_or_default();
        let class = |m: u16| report.classes.get(&m).copied().unwrap_or_default();
        let flows_dropped: u64 =
            self.retired_flow_drops + self.slots.iter().flatten().map(|f| f.dropped).sum::<u64>();
        let decisions: serde_json::Map<String, Value> = BAND_NAMES
            .iter()
            .zip(self.decisions)
            .map(|(n, v)| ((*n).to_owned(), v.into()))
            .collect();
        let v = self.vpm.counters();
        let rc = self.rate.config();
        let sv = self.rate.search_view();
        let ms = |us: Option<u64>| us.map(|u| u / 1000);
        let controller = match rc.mode {
            Mode::Seed => json!({ "mode": "seed" }),
            Mode::Search => json!({
                "mode": "search",
                "phase": sv.phase.name(),
                "good_bps": sv.good_bps,
                "bad_bps": sv.bad_bps,
                "bad_now_bps": sv.bad_now_bps,
                "bad_age_ms": ms(sv.bad_age_us),
                "since_change_ms": ms(sv.since_change_us),
                "window_peak_bps": sv.window_peak_bps,
                "calls": sv.calls,
                "cuts": sv.cuts,
                "recuts": sv.recuts,
                "held_off": sv.held_off,
            }),
        };
        let mut out = json!({
            "interface": self.plan.interface,
            "controller": controller,
            "config": {
                "controller": match rc.mode { Mode::Seed => "seed", Mode::Search => "search" },
                "settle_us": rc.search.settle_us,
                "probe_us": rc.search.probe_us,
                "fast_up": rc.search.fast_up,
                "first_up": rc.search.first_up,
                "start_per_call_bps": rc.search.start_per_call_bps,
                "near": rc.search.near,
                "bad_memory_us": rc.search.bad_memory_us,
                "initial_bps": rc.initial_bps,
                "period_us": self.rate.config().period_us,
                "floor_bps": self.rate.config().floor_bps,
                "ceiling_bps": self.rate.config().ceiling_bps,
                "bands": [self.rate.config().q_good, self.rate.config().q_fair,
                          self.rate.config().q_poor, self.rate.config().q_choke],
                "steps": [self.rate.config().r_good, self.rate.config().r_fair,
                          self.rate.config().r_poor, self.rate.config().r_choke],
                "mos_window_us": self.vpm.config().window_us,
                "mos_percentile": self.vpm.config().percentile,
                "mos_rank_base": self.vpm.config().rank_base,
            },
            "network_mos": self.network_mos,
            "calls": self.vpm.calls(),
            "calls_with_mos": self.calls_with_mos,
            "calls_heard": self.calls_heard,
            "joins_early": self.joins_early,
            "tcp_rate_bps": self.rate.rate_bps(),
            "tcp_share_bps": self.share_bps,
            "htb_tcp_rate_bps": class(htb::TCP).rate_bps,
            "last_band": self.last_band.map(|b| BAND_NAMES[band_index(b)]),
            "decisions": decisions,
            "history": self.history.iter().map(|(b, m, r, sp, heard)| json!({
                "band": BAND_NAMES[band_index(*b)],
                "calls_heard": heard,
                "mos": m,
                "rate_bps": r,
                "spread": sp.map(|s| json!({
                    "calls": s.calls,
                    "worst": s.worst,
                    "p10": s.p10,
                    "p25": s.p25,
                    "median": s.median,
                    "up_loss_mean": s.up_loss_mean,
                    "up_loss_max": s.up_loss_max,
                    "down_reports": s.down_reports,
                    "down_loss_mean": s.down_loss_mean,
                    "down_loss_max": s.down_loss_max,
                })),
            })).collect::<Vec<_>>(),
            "flows_paced": self.index.len(),
            "flows_active": self.active_flows,
            "flows": {
                "added": self.flows_added,
                "closed": self.flows_closed,
                "expired": self.flows_expired,
            },
            "observed": {
                "rtp_up": self.rtp_up,
                "rtp_down": self.rtp_down,
                "rtcp_up": self.rtcp_up,
                "rtcp_down": self.rtcp_down,
                "calls_ended_by_bye": v.byes,
                "calls_started": v.started,
                "tcp_control": self.tcp_control,
            },
            "ignored": {
                "malformed": self.ignored.malformed,
                "not_udp": self.ignored.not_udp,
                "not_rtp": self.ignored.not_rtp + v.not_rtp,
                "bad_rtcp": v.bad_rtcp,
                "rtcp_unknown_call": v.rtcp_unknown_call,
                "rtcp_wrong_ssrc": v.rtcp_wrong_ssrc,
                "call_table_full": v.table_full,
                "rtp_after_bye": v.rtp_after_bye,
                "bad_tcp": self.ignored.bad_tcp,
                "tcp_not_paced": self.ignored.tcp_not_paced,
                "flow_table_full": self.ignored.flow_table_full,
                "read_errors": self.ignored.read_errors,
            },
            "dropped": {
                "tcp_flow_queue": flows_dropped,
                "tcp_shared_queue": class(htb::TCP_SHARED).dropped,
                "voice_queue": class(htb::VOICE).dropped,
                "other_queue": class(htb::OTHER).dropped,
                "observation_copies": self.socket_drops,
            },
            "tc": {
                "updates": report.updates,
                "reads": report.reads,
                "failures": report.failures,
                "skipped": self.tc_skipped,
                "last_error": report.last_error,
            },
        });
        if let Some(t) = &self.tim {
            out["tcp_improvement"] = t.json();
        }
        out
    }
}

impl Drop for Gateway {
    /// A start that fails after the gateway was set up (steering, say)
    /// leaves no qdisc behind.
    fn drop(&mut self) {
        self.stop();
    }
}

impl Daemon {
    /// A gateway observation socket is readable.
    pub(super) fn on_gateway(&mut self, token: u64) {
        if let Some(g) = self.gateway.as_mut() {
            g.read(token);
        }
    }

    /// The gateway's periodic work, when due.
    pub(super) fn gateway_poll(&mut self, now: Micros) {
        if let Some(g) = self.gateway.as_mut() {
            g.tick(now);
        }
    }

    /// A reload of `[gateway]`: the controller's and the voice protection
    /// module's settings (bands, steps, period, rate bounds, MOS window,
    /// percentile, playout, wired delay, call idle time) apply in place; the
    /// keys that shape the HTB tree, the observation sockets, the tables or
    /// the TCP Improvement Module keep their running values (a restart
    /// applies them), as does `enabled`. Edits `new` to what runs.
    pub(super) fn reload_gateway(&mut self, new: &mut crate::daemon::config::Plan) {
        let old = &self.plan.config.gateway;
        let n = &mut new.config.gateway;
        let mut kept = Vec::new();
        macro_rules! keep {
            ($($f:ident),+) => {$(
                if old.$f != n.$f {
                    kept.push(concat!("gateway.", stringify!($f)));
                    n.$f = old.$f.clone();
                }
            )+};
        }
        keep!(enabled, interface, link_rate_mbps, max_calls, max_flows);
        keep!(
            flow_idle_ms,
            flow_queue_packets,
            tcp_improvement,
            tcp_tun,
            q_min,
            q_max
        );
        keep!(
            recovery_segments,
            local_recovery,
            redundant_drop,
            window_control,
            voice,
            tcp
        );
        if !kept.is_empty() {
            warn!(
                "reload: {} only take effect after a restart; keeping the running values",
                kept.join(", ")
            );
        }
        // What runs: the running plan with the new tunables (the new plan was
        // derived and checked from the new section; the kept keys above are
        // the old plan's).
        let mut plan = self.plan.gateway.clone();
        if let (Some(p), Some(np)) = (plan.as_mut(), new.gateway.as_ref()) {
            // (`initial_rate_kbps` is taken too: it must lie within the new
            // bounds, and only a restart starts from it.)
            p.rate = np.rate;
            p.vpm = airpack_voice::vpm::VpmConfig {
                max_calls: p.vpm.max_calls,
                ..np.vpm
            };
        }
        if let (Some(g), Some(p)) = (self.gateway.as_mut(), plan.as_ref()) {
            if let Err(e) = g.retune(p) {
                self.counters.reload_errors += 1;
                error!("reload: {e}; keeping the running gateway settings");
                new.config.gateway = self.plan.config.gateway.clone();
                plan = self.plan.gateway.clone();
            }
        }
        new.gateway = plan;
    }

    /// Removes the gateway's qdisc at stop.
    pub(super) fn gateway_stop(&mut self) {
        if let Some(g) = self.gateway.as_mut() {
            g.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_of_v4_v6_and_refusals() {
        let mut v4 = vec![0u8; 40];
        v4[0] = 0x45;
        v4[9] = 17;
        v4[12..16].copy_from_slice(&[10, 0, 0, 1]);
        v4[16..20].copy_from_slice(&[10, 0, 0, 2]);
        v4[20..24].copy_from_slice(&[0x40, 0x00, 0x40, 0x01]);
        let h = headers(&v4, 17).unwrap();
        assert_eq!((h.sport, h.dport, h.l4), (16384, 16385, 20));
        assert_eq!(h.src, IpAddr::from([10, 0, 0, 1]));
        assert!(headers(&v4, 6).is_none(), "other protocol");
        let mut frag = v4.clone();
        frag[7] = 1;
        assert!(headers(&frag, 17).is_none(), "later fragment");
        assert!(headers(&v4[..30], 17).is_none(), "short");
        let mut v6 = vec![0u8; 60];
        v6[0] = 0x60;
        v6[6] = 6;
        v6[40..44].copy_from_slice(&[0, 80, 0x9c, 0x40]);
        let h = headers(&v6, 6).unwrap();
        assert_eq!((h.sport, h.dport, h.l4), (80, 40_000, 40));
        v6[6] = 0;
        assert!(headers(&v6, 6).is_none(), "extension header");
        assert!(headers(&[0x50; 60], 6).is_none(), "version 5");
        assert!(headers(&[], 6).is_none());
    }
}
