//! The gateway's TCP Improvement Module (seed 003, section 5.2-5.3) per
//! packet: one decision for each TCP packet the daemon takes out of the
//! forwarding path, in either direction, on top of the parser
//! ([`super::tcp`]), the flow table and window rule ([`super::tcp_flow`])
//! and the segment buffer ([`super::tcp_recovery`]).
//!
//! Owns: the order of those steps, a virtual copy of each flow's queue at
//! the gateway (the kernel's per-flow HTB class drains at the flow's share;
//! the module cannot see the class, so it keeps the same queue draining at
//! the same rate), the client's latest ACK per flow (replayed toward the
//! server when its retransmission is dropped as redundant, so a server
//! whose ACK was lost on the wired side is told again instead of
//! retransmitting into a drop forever), and the counters. Must not touch:
//! sockets, clocks (the caller passes `now`), the rate policy (the caller
//! passes the flow's share).
//!
//! One departure from the seed's Algorithm 3: a flow without SACK (either
//! SYN lacked SACK-permitted) always gets room for q_max segments beyond
//! those in the mesh, never q_min or the midpoint, so that three segments
//! follow any hole and bring the duplicate ACKs its only repair needs (its
//! sender has no RACK and no tail loss probe); its queue still stays within
//! q_max (see `tim_nosack_tests.rs`).
//!
//! Every packet handed in is either forwarded (possibly rewritten: the
//! advertised window of a client ACK, the hop limit of a packet into the
//! mesh) or dropped as a redundant retransmission; [`Tim::on_packet`] says
//! which. Packets it creates (a local retransmission into the mesh, a
//! replayed ACK toward the server) go to the caller's `emit` and are counted
//! apart. A packet it does not understand (not TCP, a fragment, an IPv6
//! extension header it does not walk, a malformed option) or of a flow it
//! does not track (opened before it started, from the wired side, or when
//! the table was full) passes untouched, hop limit aside. Memory is fixed at
//! construction, per flow slot, plus the recovery buffers allocated once per
//! slot on first use (see [`super::tcp_recovery`]): no allocation per packet.

use super::tcp::{self, flags, TcpError};
use super::tcp_flow::{
    rewritten_window_sacked, seq_lt, FlowConfig, FlowCounters, FlowKey, FlowTable, Side,
};
use super::tcp_recovery::{Recovery, RecoveryConfig};
use crate::Micros;

/// Which way a packet crosses the gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the wired side toward the mesh (the server's data).
    IntoMesh,
    /// From the mesh toward the wired side (the client's ACKs).
    FromMesh,
}

/// What to do with the packet handed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send it on (as it is in the buffer now).
    Forward,
    /// Drop it: a retransmission of data the client already acknowledged.
    DropRedundant,
}

/// Largest client ACK kept for replay (IPv6 + 60-byte TCP header + room).
pub const ACK_MAX: usize = 128;

/// Settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimConfig {
    /// Flow table and window thresholds.
    pub flows: FlowConfig,
    /// Segment buffer (its `max_flows` is taken from `flows`).
    pub recovery: RecoveryConfig,
    /// Retransmit from the buffer on the third duplicate ACK.
    pub local_recovery: bool,
    /// Drop the server's retransmissions of acknowledged data.
    pub redundant_drop: bool,
    /// Rewrite the client's advertised window (Algorithm 3).
    pub window_control: bool,
    /// Raise the hop limit of packets into the mesh by one (the caller
    /// writes them back where the kernel forwards them a second time).
    pub compensate_hop: bool,
}

impl Default for TimConfig {
    fn default() -> Self {
        TimConfig {
            flows: FlowConfig::default(),
            recovery: RecoveryConfig::default(),
            local_recovery: true,
            redundant_drop: true,
            window_control: true,
            compensate_hop: false,
        }
    }
}

/// Packets not understood, by the parser's reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotUnderstood {
    /// Bad IP header or lengths.
    pub bad_ip: u64,
    /// IPv4 header checksum wrong.
    pub bad_ip_checksum: u64,
    /// Not TCP.
    pub not_tcp: u64,
    /// A fragment.
    pub fragment: u64,
    /// An IPv6 extension header not walked.
    pub unsupported_extension: u64,
    /// TCP header truncated or its data offset wrong.
    pub bad_tcp_header: u64,
    /// A known TCP option malformed.
    pub bad_option: u64,
}

impl NotUnderstood {
    fn count(&mut self, e: TcpError) {
        let c = match e {
            TcpError::BadIp => &mut self.bad_ip,
            TcpError::BadIpChecksum => &mut self.bad_ip_checksum,
            TcpError::NotTcp => &mut self.not_tcp,
            TcpError::Fragment => &mut self.fragment,
            TcpError::UnsupportedExtension => &mut self.unsupported_extension,
            TcpError::Truncated | TcpError::BadDataOffset => &mut self.bad_tcp_header,
            TcpError::BadOption(_) => &mut self.bad_option,
        };
        *c += 1;
    }

    /// All of them.
    pub fn total(&self) -> u64 {
        self.bad_ip
            + self.bad_ip_checksum
            + self.not_tcp
            + self.fragment
            + self.unsupported_extension
            + self.bad_tcp_header
            + self.bad_option
    }
}

/// Counters. Identity: `into_mesh + from_mesh == forwarded + dropped_redundant`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimCounters {
    /// Packets handed in toward the mesh.
    pub into_mesh: u64,
    /// Packets handed in from the mesh.
    pub from_mesh: u64,
    /// Packets forwarded (rewritten or not).
    pub forwarded: u64,
    /// Redundant retransmissions dropped.
    pub dropped_redundant: u64,
    /// Forwarded untouched because the parser refused them.
    pub not_understood: NotUnderstood,
    /// Client ACKs whose window was lowered.
    pub windows_rewritten: u64,
    /// Client ACKs left as they were because they are signed (TCP-MD5/AO).
    pub signed_untouched: u64,
    /// Of those, lowered to 0 (only while the share is 0).
    pub windows_zero: u64,
    /// Local retransmissions emitted into the mesh.
    pub local_retransmissions: u64,
    /// Client ACKs replayed toward the server after a redundant drop.
    pub ack_replays: u64,
    /// Packets whose hop limit was raised.
    pub hops_compensated: u64,
}

#[derive(Clone, Copy, Debug)]
struct SlotState {
    /// Bytes in the flow's virtual gateway queue, as of `at`.
    queue_bytes: u64,
    at: Micros,
    /// Length of the flow's last data packet (bytes per queued packet).
    packet_len: u32,
    ack: [u8; ACK_MAX],
    ack_len: usize,
}

impl Default for SlotState {
    fn default() -> Self {
        SlotState {
            queue_bytes: 0,
            at: 0,
            packet_len: 1500,
            ack: [0; ACK_MAX],
            ack_len: 0,
        }
    }
}

impl SlotState {
    /// Drain at `share_bps` up to `now`.
    fn drain(&mut self, now: Micros, share_bps: u64) {
        let dt = now.saturating_sub(self.at);
        let bytes = (u128::from(share_bps) * u128::from(dt) / 8_000_000).min(u128::from(u64::MAX));
        self.queue_bytes = self.queue_bytes.saturating_sub(bytes as u64);
        self.at = now;
    }

    fn queue_packets(&self) -> u32 {
        let n = self.queue_bytes.div_ceil(u64::from(self.packet_len.max(1)));
        n.min(u64::from(u32::MAX)) as u32
    }
}

/// The module: flow table, buffers, per-slot state.
#[derive(Debug)]
pub struct Tim {
    cfg: TimConfig,
    flows: FlowTable,
    recovery: Recovery,
    slots: Vec<SlotState>,
    c: TimCounters,
}

fn is_pure_ack(s: &tcp::TcpSegment) -> bool {
    s.payload_len == 0
        && s.has(flags::ACK)
        && !s.has(flags::SYN)
        && !s.has(flags::FIN)
        && !s.has(flags::RST)
}

impl Tim {
    /// A module for `cfg.flows.max_flows` flows.
    pub fn new(cfg: TimConfig) -> Tim {
        let n = cfg.flows.max_flows.max(1);
        let cfg = TimConfig {
            flows: FlowConfig {
                max_flows: n,
                ..cfg.flows
            },
            recovery: RecoveryConfig {
                max_flows: n,
                ..cfg.recovery
            },
            ..cfg
        };
        Tim {
            flows: FlowTable::new(cfg.flows),
            recovery: Recovery::new(cfg.recovery),
            slots: vec![SlotState::default(); n],
            c: TimCounters::default(),
            cfg,
        }
    }

    /// Settings in force.
    pub fn config(&self) -> TimConfig {
        self.cfg
    }

    /// Counters.
    pub fn counters(&self) -> TimCounters {
        self.c
    }

    /// The flow table's counters.
    pub fn flow_counters(&self) -> FlowCounters {
        self.flows.counters()
    }

    /// Flows tracked now.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// Segments buffered for local recovery, all flows.
    pub fn buffered_segments(&self) -> usize {
        (0..self.slots.len())
            .map(|s| self.recovery.buffered(s))
            .sum()
    }

    /// Most memory the buffers and slots can hold, bytes (the bound).
    pub fn memory_bound(&self) -> usize {
        let r = self.cfg.recovery;
        self.slots.len() * (r.segments * (r.max_packet + 24) + std::mem::size_of::<SlotState>())
            + 2 * self.cfg.flows.max_flows * 96
    }

    /// Forget flows past their timeouts (call now and then, e.g. once a second).
    pub fn expire(&mut self, now: Micros) {
        let (rec, slots) = (&mut self.recovery, &mut self.slots);
        self.flows.expire(now, |s| {
            rec.clear(s);
            slots[s] = SlotState::default();
        });
    }

    fn forget(&mut self, slot: usize) {
        self.recovery.clear(slot);
        if let Some(s) = self.slots.get_mut(slot) {
            *s = SlotState::default();
        }
    }

    /// One packet crossing the gateway `dir`, at `now`, for a flow whose
    /// pacing share is `share_bps`. `p` is the whole IP packet and may be
    /// rewritten in place. Packets the module creates go to `emit` with the
    /// direction they must be sent in.
    pub fn on_packet(
        &mut self,
        dir: Direction,
        p: &mut [u8],
        now: Micros,
        share_bps: u64,
        mut emit: impl FnMut(Direction, &[u8]),
    ) -> Verdict {
        match dir {
            Direction::IntoMesh => self.c.into_mesh += 1,
            Direction::FromMesh => self.c.from_mesh += 1,
        }
        let parsed = tcp::parse(p);
        let v = match &parsed {
            Err(e) => {
                self.c.not_understood.count(*e);
                Verdict::Forward
            }
            Ok(s) => match dir {
                Direction::IntoMesh => self.on_into_mesh(p, s, now, share_bps, &mut emit),
                Direction::FromMesh => self.on_from_mesh(p, s, now, share_bps, &mut emit),
            },
        };
        if v == Verdict::DropRedundant {
            self.c.dropped_redundant += 1;
            return v;
        }
        self.c.forwarded += 1;
        if dir == Direction::IntoMesh {
            if self.cfg.compensate_hop && tcp::bump_hop_limit(p) {
                self.c.hops_compensated += 1;
            }
            // Kept as it is sent (hop limit included); offsets and
            // sequence numbers are the same after the bump.
            if let (true, Ok(s)) = (self.cfg.local_recovery, parsed) {
                let key = FlowKey {
                    client: (s.dst, s.dst_port),
                    server: (s.src, s.src_port),
                };
                if let Some(f) = self.flows.get(&key).filter(|f| f.established) {
                    if s.payload_len > 0 && !s.has(flags::SYN) && !s.has(flags::RST) {
                        self.recovery.on_data(f.slot, s.seq, s.seq_len(), p);
                    }
                }
            }
        }
        v
    }

    fn on_into_mesh(
        &mut self,
        p: &[u8],
        s: &tcp::TcpSegment,
        now: Micros,
        share_bps: u64,
        emit: &mut impl FnMut(Direction, &[u8]),
    ) -> Verdict {
        let key = FlowKey {
            client: (s.dst, s.dst_port),
            server: (s.src, s.src_port),
        };
        if self.cfg.redundant_drop && !s.has(flags::SYN) && !s.has(flags::RST) {
            if let Some(f) = self.flows.get(&key).filter(|f| f.established).copied() {
                if Recovery::redundant(s.seq, s.payload_len, f.ack_max, f.snd_max) {
                    let st = &self.slots[f.slot];
                    if st.ack_len > 0 {
                        emit(Direction::FromMesh, &st.ack[..st.ack_len]);
                        self.c.ack_replays += 1;
                    }
                    return Verdict::DropRedundant;
                }
            }
        }
        let (st, ended) = self.flows.on_segment(key, Side::Server, s, now);
        match st {
            Some(f) if ended => self.forget(f.slot),
            Some(f) if f.established && s.payload_len > 0 => {
                let q = &mut self.slots[f.slot];
                q.drain(now, share_bps);
                q.queue_bytes = q.queue_bytes.saturating_add(p.len() as u64);
                q.packet_len = p.len() as u32;
            }
            _ => {}
        }
        Verdict::Forward
    }

    fn on_from_mesh(
        &mut self,
        p: &mut [u8],
        s: &tcp::TcpSegment,
        now: Micros,
        share_bps: u64,
        emit: &mut impl FnMut(Direction, &[u8]),
    ) -> Verdict {
        let key = FlowKey {
            client: (s.src, s.src_port),
            server: (s.dst, s.dst_port),
        };
        let (st, ended) = self.flows.on_segment(key, Side::Client, s, now);
        let Some(f) = st else {
            return Verdict::Forward;
        };
        if ended {
            self.forget(f.slot);
            return Verdict::Forward;
        }
        if !f.established || !s.has(flags::ACK) || s.has(flags::SYN) || s.has(flags::RST) {
            return Verdict::Forward;
        }
        // Data the client holds above the ACK (SACK blocks past it).
        let in_flight = if seq_lt(f.ack_max, f.snd_max) {
            u64::from(f.snd_max.wrapping_sub(f.ack_max))
        } else {
            0
        };
        let o = &s.options;
        let sacked: u64 = o.sack[..usize::from(o.sack_len)]
            .iter()
            .filter(|&&(left, right)| seq_lt(s.ack, left) && seq_lt(left, right))
            .map(|&(left, right)| u64::from(right.wrapping_sub(left)))
            .sum::<u64>()
            .min(in_flight);
        // A signed segment (TCP-MD5, TCP-AO) covers its window: never rewritten.
        if s.options.signed {
            self.c.signed_untouched += 1;
        }
        if self.cfg.window_control && !s.options.signed {
            let slot = &mut self.slots[f.slot];
            slot.drain(now, share_bps);
            let q = slot.queue_packets();
            // In the mesh: sent, not acknowledged, not SACKed, not queued here.
            let mss = u64::from(f.mss.max(1));
            let undelivered = ((in_flight - sacked).div_ceil(mss)).min(u64::from(u32::MAX)) as u32;
            let in_mesh = undelivered.saturating_sub(q);
            let packets = self.flows.window_packets(q, in_mesh, share_bps);
            // A sender without SACK repairs a loss only on the third
            // duplicate ACK (RFC 5681: no RACK, no tail loss probe), and
            // the local recovery waits for the same. Behind a hole come at
            // most window - 1 segments, fewer still when some overtook the
            // hole (segments arriving out of order before the ACK reaches
            // it make duplicates of an earlier ACK): with q_min = 2 there
            // are too few duplicates and the flow waits for the sender's
            // RTO (the netns test: 200 ms for 33 of 80 losses). Such a flow
            // always gets room for q_max segments beyond the mesh (at least
            // threshold + 1): its queue still stays within q_max.
            let packets = if packets > 0 && !f.sack() {
                let floor = self
                    .cfg
                    .flows
                    .q_max
                    .max(self.cfg.recovery.dupack_threshold.max(3) + 1);
                packets.max(floor.saturating_add(in_mesh))
            } else {
                packets
            };
            if let Some(w) = rewritten_window_sacked(&f, s, packets, sacked) {
                if w != s.window && tcp::set_window(p, s, w).is_some() {
                    self.c.windows_rewritten += 1;
                    if w == 0 {
                        self.c.windows_zero += 1;
                    }
                }
            }
        }
        if is_pure_ack(s) {
            if self.cfg.local_recovery {
                if let Some(seg) = self.recovery.on_ack(
                    f.slot,
                    s.ack,
                    s.window,
                    sacked > 0,
                    o.sack_len > 0 && sacked == 0,
                ) {
                    emit(Direction::IntoMesh, seg);
                    self.c.local_retransmissions += 1;
                }
            }
            let slot = &mut self.slots[f.slot];
            if p.len() <= ACK_MAX {
                slot.ack[..p.len()].copy_from_slice(p);
                slot.ack_len = p.len();
            }
        }
        Verdict::Forward
    }
}

#[cfg(test)]
#[path = "tim_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "tim_nosack_tests.rs"]
mod nosack_tests;
