//! Per-flow TCP state of the gateway's TCP Improvement Module: window
//! scales from the handshake, sequence space with wrap-around arithmetic, a
//! bounded flow table with expiry, and the queue-aware advertised window of
//! seed 003 (Algorithm 3) applied to the ACKs going back to the sender.
//!
//! Owns: which flows are known and what the gateway may write into their
//! ACKs. Must not touch: header bytes (see [`super::tcp`]), queues (the
//! caller passes the flow's queue length), clocks.
//!
//! Orientation: the *server* is the wired-side sender of data into the
//! mesh; the *client* is the mesh-side receiver whose ACKs carry the window
//! the gateway rewrites. A flow enters the table only with a client SYN
//! (then completes with the server's SYN-ACK); mid-stream flows, flows seen
//! when the table is full, and anything unparsable pass untouched. Window
//! scaling is used only when both SYNs carried the option (RFC 7323); the
//! window is only ever lowered, never raised above what the client offered,
//! and never written on a SYN. Flows end on RST or when both FINs were seen;
//! half-open flows (SYN only) expire after `syn_timeout_us`, others after
//! `idle_timeout_us`, so a SYN flood cannot hold the table.

use std::collections::HashMap;
use std::net::IpAddr;

use super::tcp::{flags, TcpSegment};
use crate::Micros;

/// `a < b` in sequence space (RFC 793 / 1982 serial arithmetic).
pub fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}
/// `a <= b` in sequence space.
pub fn seq_le(a: u32, b: u32) -> bool {
    !seq_lt(b, a)
}
/// The later of two sequence numbers.
pub fn seq_max(a: u32, b: u32) -> u32 {
    if seq_lt(a, b) {
        b
    } else {
        a
    }
}

/// A flow, oriented client (mesh) <-> server (wired).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Mesh-side address and port.
    pub client: (IpAddr, u16),
    /// Wired-side address and port.
    pub server: (IpAddr, u16),
}

/// Settings of the table and the window rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowConfig {
    /// Most flows tracked (also the pacer's flow slots).
    pub max_flows: usize,
    /// A handshake not completed within this is forgotten.
    pub syn_timeout_us: Micros,
    /// An established flow silent this long is forgotten.
    pub idle_timeout_us: Micros,
    /// Queue-aware window thresholds (packets per flow): seed 2 and 6.
    pub q_min: u32,
    /// See [`FlowConfig::q_min`].
    pub q_max: u32,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            max_flows: 4096,
            syn_timeout_us: 5_000_000,
            idle_timeout_us: 120_000_000,
            q_min: 2,
            q_max: 6,
        }
    }
}

/// What the gateway knows of one flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowState {
    /// Slot 0..max_flows (pacer flow index), stable for the flow's life.
    pub slot: usize,
    /// Window scale the client announced (applies to its windows).
    pub client_wscale: Option<u8>,
    /// Window scale the server announced.
    pub server_wscale: Option<u8>,
    /// The client's SYN carried SACK-permitted.
    pub client_sack: bool,
    /// The server's SYN-ACK carried SACK-permitted.
    pub server_sack: bool,
    /// Both SYNs seen (handshake complete from the gateway's view).
    pub established: bool,
    /// MSS of the data toward the client: what the client announced in its
    /// SYN (536 if nothing, RFC 879).
    pub mss: u16,
    /// Highest sequence number the server sent + its length.
    pub snd_max: u32,
    /// Highest acknowledgement from the client.
    pub ack_max: u32,
    /// FINs seen from client and server.
    pub fin_client: bool,
    /// See [`FlowState::fin_client`].
    pub fin_server: bool,
    /// Last packet (µs).
    pub last_seen: Micros,
}

impl FlowState {
    /// Shift applied to the client's windows (0 unless both sides scale).
    pub fn client_shift(&self) -> u8 {
        match (self.client_wscale, self.server_wscale) {
            (Some(c), Some(_)) => c,
            _ => 0,
        }
    }

    /// SACK in use: both SYNs carried SACK-permitted (RFC 2018).
    pub fn sack(&self) -> bool {
        self.client_sack && self.server_sack
    }

    /// Data packets in flight over the mesh: (snd_max - ack_max) / MSS,
    /// rounded up (the seed's M_i).
    pub fn in_flight_packets(&self) -> u32 {
        let bytes = if seq_lt(self.ack_max, self.snd_max) {
            self.snd_max.wrapping_sub(self.ack_max)
        } else {
            0
        };
        bytes.div_ceil(u32::from(self.mss.max(1)))
    }
}

/// Counters of the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowCounters {
    /// Flows created (client SYN).
    pub created: u64,
    /// SYNs refused because the table was full of live flows.
    pub table_full: u64,
    /// Flows ended by RST or FINs.
    pub ended: u64,
    /// Flows forgotten after a timeout.
    pub expired: u64,
    /// Packets of flows not in the table (passed untouched).
    pub unknown: u64,
}

/// Which side sent a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The mesh-side client (ACKs to rewrite).
    Client,
    /// The wired-side server (data into the mesh).
    Server,
}

/// Bounded flow table.
#[derive(Debug)]
pub struct FlowTable {
    cfg: FlowConfig,
    flows: HashMap<FlowKey, FlowState>,
    free: Vec<usize>,
    counters: FlowCounters,
}

impl FlowTable {
    /// New table, allocated once for `max_flows`.
    pub fn new(cfg: FlowConfig) -> Self {
        let n = cfg.max_flows.max(1);
        FlowTable {
            cfg: FlowConfig {
                max_flows: n,
                ..cfg
            },
            // Twice the bound: with at most `n` entries the map never grows
            // (a full map of tombstones is rehashed in place), so no
            // insertion allocates.
            flows: HashMap::with_capacity(2 * n),
            free: (0..n).rev().collect(),
            counters: FlowCounters::default(),
        }
    }

    /// Counters.
    pub fn counters(&self) -> FlowCounters {
        self.counters
    }

    /// Flows tracked.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// No flow tracked.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// A flow's state.
    pub fn get(&self, key: &FlowKey) -> Option<&FlowState> {
        self.flows.get(key)
    }

    /// Forget flows past their timeout; returns the slots freed (the caller
    /// clears their pacer queues).
    pub fn expire(&mut self, now: Micros, mut freed: impl FnMut(usize)) {
        let cfg = self.cfg;
        let free = &mut self.free;
        let mut n = 0;
        self.flows.retain(|_, f| {
            let limit = if f.established {
                cfg.idle_timeout_us
            } else {
                cfg.syn_timeout_us
            };
            let keep = now.saturating_sub(f.last_seen) <= limit;
            if !keep {
                free.push(f.slot);
                freed(f.slot);
                n += 1;
            }
            keep
        });
        self.counters.expired += n;
    }

    fn remove(&mut self, key: &FlowKey) -> Option<usize> {
        let f = self.flows.remove(key)?;
        self.free.push(f.slot);
        self.counters.ended += 1;
        Some(f.slot)
    }

    /// Account for one segment of `key` sent by `side` at `now`. Returns the
    /// flow's state after it (`None`: not tracked, pass untouched), and
    /// whether the flow ended with it (its slot is free again).
    pub fn on_segment(
        &mut self,
        key: FlowKey,
        side: Side,
        s: &TcpSegment,
        now: Micros,
    ) -> (Option<FlowState>, bool) {
        let syn = s.has(flags::SYN);
        if !self.flows.contains_key(&key) {
            if !(syn && !s.has(flags::ACK) && side == Side::Client) {
                self.counters.unknown += 1;
                return (None, false);
            }
            if self.free.is_empty() {
                self.expire(now, |_| {});
            }
            let Some(slot) = self.free.pop() else {
                self.counters.table_full += 1;
                return (None, false);
            };
            self.counters.created += 1;
            self.flows.insert(
                key,
                FlowState {
                    slot,
                    client_wscale: s.options.wscale,
                    server_wscale: None,
                    client_sack: s.options.sack_permitted,
                    server_sack: false,
                    established: false,
                    mss: s.options.mss.unwrap_or(536),
                    snd_max: 0,
                    ack_max: 0,
                    fin_client: false,
                    fin_server: false,
                    last_seen: now,
                },
            );
        }
        if s.has(flags::RST) {
            let st = self.flows.get(&key).copied();
            self.remove(&key);
            return (st, true);
        }
        let Some(f) = self.flows.get_mut(&key) else {
            return (None, false);
        };
        f.last_seen = now;
        match side {
            Side::Client => {
                if syn && !s.has(flags::ACK) {
                    // A retransmitted SYN may carry other options: the last wins.
                    f.client_wscale = s.options.wscale;
                    f.client_sack = s.options.sack_permitted;
                    f.mss = s.options.mss.unwrap_or(536);
                }
                if s.has(flags::ACK) && f.established {
                    f.ack_max = seq_max(f.ack_max, s.ack);
                }
                f.fin_client |= s.has(flags::FIN);
            }
            Side::Server => {
                if syn && s.has(flags::ACK) {
                    f.server_wscale = s.options.wscale;
                    f.server_sack = s.options.sack_permitted;
                    f.established = true;
                    f.snd_max = s.seq.wrapping_add(1);
                    f.ack_max = s.seq.wrapping_add(1);
                } else if f.established {
                    f.snd_max = seq_max(f.snd_max, s.seq.wrapping_add(s.seq_len()));
                }
                f.fin_server |= s.has(flags::FIN);
            }
        }
        let st = *f;
        if st.fin_client && st.fin_server {
            self.remove(&key);
            return (Some(st), true);
        }
        (Some(st), false)
    }

    /// The seed's Algorithm 3: the advertised window (packets) for a flow
    /// with `queue` packets waiting at the gateway, `in_flight` packets in
    /// the mesh, and a TCP share of `share_bps`.
    pub fn window_packets(&self, queue: u32, in_flight: u32, share_bps: u64) -> u32 {
        let (q_min, q_max) = (self.cfg.q_min, self.cfg.q_max);
        if queue < q_min {
            q_max.saturating_add(in_flight)
        } else if queue > q_max && share_bps > 0 {
            q_min.saturating_add(in_flight)
        } else if queue > q_max {
            0
        } else {
            ((q_min + q_max) / 2).saturating_add(in_flight)
        }
    }
}

/// The 16-bit window to write into a client ACK: `packets * mss` bytes,
/// scaled by the client's shift, rounded up so a non-zero window never
/// becomes 0, and never above what the client advertised (`offered`).
/// `None` when the segment must not be rewritten (a SYN).
pub fn rewritten_window(state: &FlowState, s: &TcpSegment, packets: u32) -> Option<u16> {
    rewritten_window_sacked(state, s, packets, 0)
}

/// [`rewritten_window`] plus `sacked` bytes: the data above the ACK the
/// client has already SACKed. A window counts from the ACK, so during a
/// loss the delivered data past the hole would otherwise eat the window
/// meant for packets still to come and stop the sender (and with it the
/// duplicate ACKs that drive recovery). Zero packets stay a zero window.
pub fn rewritten_window_sacked(
    state: &FlowState,
    s: &TcpSegment,
    packets: u32,
    sacked: u64,
) -> Option<u16> {
    if s.has(flags::SYN) || !s.has(flags::ACK) {
        return None;
    }
    let bytes = match packets {
        0 => 0,
        n => u64::from(n) * u64::from(state.mss.max(1)) + sacked,
    };
    let shift = state.client_shift();
    let scaled = bytes.div_ceil(1u64 << shift);
    let w = scaled.min(u64::from(u16::MAX)) as u16;
    Some(w.min(s.window))
}

#[cfg(test)]
#[path = "tcp_flow_tests.rs"]
mod tests;
