//! The medium-aware hold policy, [`LinkMode::Adaptive`] (issue 11 point 7):
//! hold a packet only while holding is free or cheap and can bundle
//! something, never beyond the peer's hold time nor the packet's share of a
//! per-flow delay budget.
//!
//! Owns: the mode's parameters ([`AdaptiveHold`]), the hop estimate from the
//! TTL / hop limit ([`hops_crossed`]), the per-packet hold limit
//! ([`hold_limit`]), the smoothed utilisation ([`Utilisation`]), the
//! per-peer flow sketch ([`FlowSketch`], [`flow_hash`]) and the engine's
//! medium input ([`Engine::set_medium`]).
//!
//! Must not touch: queues, heaps or bundle layout beyond setting a slot's
//! `budget_due` and asking the engine to refresh it; no clocks or I/O (the
//! driver measures the medium and hands in numbers).
//!
//! ## Policy
//! * The link counts as busy when the driver's busy signal is set (own
//!   unsent bytes, radio queue backlog, the radio transmitting) or the
//!   medium's **smoothed** utilisation is at least
//!   [`AdaptiveHold::busy_utilisation`] (and, once so, until it falls below
//!   half of that: hysteresis). Otherwise the link is idle and a queue leaves
//!   at once (as in [`LinkMode::HoldWhileBusy`]): on an idle medium no packet
//!   waits. The driver reports the utilisation of short windows (the lab's
//!   counters, every 20 ms); the engine smooths it with a time-weighted
//!   exponential average of time constant [`UTILISATION_TAU`], so one quiet
//!   window under load (voice traffic bundled into a few frames per 20 ms is
//!   bursty) does not release every queue.
//! * Why utilisation: a frame handed to a radio whose medium is busy a
//!   fraction `u` of the time finds it busy with probability about `u` and
//!   then defers anyway, so holding costs little delay, while every frame
//!   saved removes one channel access (DIFS, backoff, preamble, ACK: about
//!   100-200 µs on 802.11a/g/n, 950 µs at 802.11b 2 Mb/s, against about
//!   10-80 µs of a G.729 payload). The threshold is a tunable, not a derived
//!   optimum.
//! * Company: holding saves a frame only if another packet for the same
//!   peer arrives within the hold. A peer that carried a single flow (by
//!   addresses, protocol and ports) over the last one to two hold times has
//!   no company in sight: its packets leave at once even on a busy link
//!   (one call's voice, or the only flow a relay forwards to a next hop,
//!   waits nothing). The flows are counted in a 64-bit sketch per peer
//!   ([`FlowSketch`]): a hash collision can only hide company.
//! * Saturation: when the smoothed utilisation reaches
//!   [`SATURATED_FACTOR`] times the threshold and the peer carried another
//!   flow within the last [`LATELY_WINDOWS`] to twice that many hold times
//!   (it serves several calls, some silent now), a packet without company
//!   is held too: with a hold of one packet interval it may leave with its
//!   own flow's next packet, halving that flow's frames, as the fixed hold
//!   does. One call (one flow per peer) is never held by this rule.
//! * Delay budget: a packet that crossed `h` hops before this node (see
//!   [`hops_crossed`]) may wait here at most
//!   `min(hold_time, delay_budget - h * hold_time)` (saturating at 0), the
//!   worst case being every earlier hop holding it its full hold time. With
//!   the same hold time on every node the sum over any path stays within
//!   `delay_budget`: each hop gets its share until the budget is spent, after
//!   which packets pass without waiting.
//! * Talk spurts: the first packet of a flow's talk spurt waits its full
//!   limit instead of leaving with the queue in front of it (the queue leaves
//!   without it), so a voice receiver's per-spurt playout point is not set by
//!   a packet that happened to wait less than its successors; see
//!   [`super::spurt`].

use super::spurt::{SpurtTable, SPURT_GAP_HOLDS};
use super::{Engine, LinkMode};
use crate::Micros;

/// Parameters of [`LinkMode::Adaptive`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveHold {
    /// Total time a packet may accumulate in aggregation queues along its
    /// path (µs), split across hops (see the module documentation).
    pub delay_budget: Micros,
    /// Smoothed medium utilisation, in thousandths, at or above which
    /// holding counts as cheap even when the busy signal is clear.
    pub busy_utilisation: u16,
}

impl Default for AdaptiveHold {
    fn default() -> Self {
        AdaptiveHold {
            delay_budget: 40_000,
            busy_utilisation: 100,
        }
    }
}

/// Time constant of the utilisation average (µs): five of the lab's 20 ms
/// counter windows, i.e. a step in load is followed within about 60 ms
/// (three windows) across a 0.3 threshold, while one quiet window under load
/// moves the average by a sixth of the dip.
pub const UTILISATION_TAU: Micros = 100_000;

/// The long flow sketch's window, in hold times: a peer that carried
/// another flow within the last 8 to 16 hold times (160-320 ms at 20 ms)
/// serves several calls.
pub const LATELY_WINDOWS: Micros = 8;

/// On a medium whose smoothed utilisation reaches this many times
/// [`AdaptiveHold::busy_utilisation`], airtime is scarce: a packet without
/// company now is held as well (it may be bundled with its own flow's next
/// packet, as the fixed hold does) if its peer serves several flows.
pub const SATURATED_FACTOR: u16 = 2;

/// Hops a packet crossed before reaching this node, estimated from its TTL
/// (IPv4) or hop limit (IPv6) against the usual initial values 64 (Linux,
/// macOS, Android, iOS), 128 (Windows) and 255 (many routers and RTOSes):
/// the smallest of them not below the observed value, minus that value.
/// A host with another initial value (e.g. 32) is misjudged to have crossed
/// more hops, which only shortens its hold. Neither IPv4 nor IPv6: 0.
#[inline]
pub fn hops_crossed(packet: &[u8]) -> u32 {
    let ttl = match packet.first().map(|b| b >> 4) {
        Some(4) => packet.get(8),
        Some(6) => packet.get(7),
        _ => None,
    };
    let Some(&ttl) = ttl else { return 0 };
    let initial: u32 = if ttl <= 64 {
        64
    } else if ttl <= 128 {
        128
    } else {
        255
    };
    initial - u32::from(ttl)
}

/// The longest a packet that crossed `hops` hops may wait at this node:
/// `min(hold_time, delay_budget - hops * hold_time)`, saturating at 0.
#[inline]
pub fn hold_limit(hold_time: Micros, delay_budget: Micros, hops: u32) -> Micros {
    let spent = hold_time.saturating_mul(Micros::from(hops));
    hold_time.min(delay_budget.saturating_sub(spent))
}

/// A hash of a packet's flow: source and destination addresses, protocol
/// (IPv4) or next header (IPv6), and the first four bytes after the IP
/// header (the ports of UDP, TCP, SCTP, ...) when present. Neither IPv4 nor
/// IPv6: the hash of the first bytes. Not keyed: a sender can make its
/// flows collide, which only makes the policy hold its packets less.
#[inline]
pub fn flow_hash(packet: &[u8]) -> u64 {
    #[inline(always)]
    fn word(p: &[u8], at: usize) -> u64 {
        match p.get(at..at + 4) {
            Some(w) => u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])),
            None => 0,
        }
    }
    #[inline(always)]
    fn mix(h: u64, w: u64) -> u64 {
        (h ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29)
    }
    let (fields, ports): (core::ops::Range<usize>, usize) = match packet.first().map(|b| b >> 4) {
        // addresses 12..20, protocol at 9, ports after the options
        Some(4) => (12..20, usize::from(packet[0] & 0x0f) * 4),
        // addresses 8..40, next header at 6, ports at 40
        Some(6) => (8..40, 40),
        _ => (0..8, usize::MAX - 4),
    };
    let proto = match packet.first().map(|b| b >> 4) {
        Some(4) => packet.get(9),
        Some(6) => packet.get(6),
        _ => None,
    };
    let mut h = proto.map_or(0, |&p| u64::from(p));
    let mut at = fields.start;
    while at < fields.end {
        h = mix(h, word(packet, at));
        at += 4;
    }
    h = mix(h, word(packet, ports));
    h ^ (h >> 32)
}

/// Which flows a peer's queue carried recently: one bit per flow hash (64
/// bits) for the current window of one hold time and the previous one, so
/// the union covers the last one to two hold times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowSketch {
    cur: u64,
    prev: u64,
    /// Start of the current window.
    since: Micros,
}

impl FlowSketch {
    /// Notes a packet of flow `hash` at `now` (windows of `window` µs) and
    /// answers whether another flow was seen within the last one to two
    /// windows: company a hold could bundle this packet with.
    #[inline]
    pub fn note(&mut self, now: Micros, window: Micros, hash: u64) -> bool {
        let window = window.max(1);
        if now.saturating_sub(self.since) >= window {
            self.prev = if now.saturating_sub(self.since) >= 2 * window {
                0
            } else {
                self.cur
            };
            self.cur = 0;
            self.since = now;
        }
        let bit = 1u64 << (hash >> 58);
        self.cur |= bit;
        (self.cur | self.prev) != bit
    }

    /// Distinct flows in the sketch (a lower bound: collisions merge flows).
    pub fn flows(&self) -> u32 {
        (self.cur | self.prev).count_ones()
    }
}

/// A time-weighted exponential average of the utilisation reports: each
/// report is taken to describe the medium since the previous one, and
/// weighs `dt / (dt + tau)`; a report more than `16 tau` after the previous
/// one replaces the average. A driver should report every window it
/// measures (also when the value repeats), so the average follows an idle
/// medium down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Utilisation {
    /// The average, thousandths × 1024.
    avg: u32,
    /// Time of the last report; `None` before the first.
    at: Option<Micros>,
}

impl Utilisation {
    /// Takes the report `u` (thousandths, at most 1000) at `now`; returns
    /// the new average (thousandths).
    pub fn report(&mut self, now: Micros, u: u16, tau: Micros) -> u16 {
        let target = i64::from(u.min(1000)) << 10;
        self.avg = match self.at {
            // No history, or none worth keeping (over 16 time constants:
            // its weight would be under 6 %).
            Some(at) if now.saturating_sub(at) < tau.saturating_mul(16) => {
                let dt = now.saturating_sub(at);
                let w = ((dt << 10) / (dt + tau).max(1)) as i64;
                let avg = i64::from(self.avg);
                (avg + ((target - avg) * w) / 1024) as u32
            }
            _ => target as u32,
        };
        self.at = Some(self.at.map_or(now, |a| a.max(now)));
        self.value()
    }

    /// The average, thousandths.
    pub fn value(&self) -> u16 {
        ((self.avg + 512) >> 10) as u16
    }
}

/// The engine's state for [`LinkMode::Adaptive`]: the smoothed utilisation
/// and one flow sketch per peer slot (grown when a slot is first used, never
/// per packet).
#[derive(Clone, Debug, Default)]
pub(super) struct AdaptiveState {
    utilisation: Utilisation,
    /// Per slot: flows of the last one to two hold times, and of the last
    /// [`LATELY_WINDOWS`] to twice that many.
    flows: Vec<[FlowSketch; 2]>,
    /// When each flow was last seen: recognises a talk spurt's first packet.
    spurts: SpurtTable,
}

impl Engine {
    /// Tells the engine the state of the medium below: `busy` as for
    /// [`Engine::set_link_busy`] (own backlog, radio queue, radio
    /// transmitting), and the medium's utilisation over the driver's last
    /// window in thousandths (clamped to 1000). Report every window (the
    /// engine averages them, see [`Utilisation`]). In
    /// [`LinkMode::Adaptive`] an average at or above
    /// [`AdaptiveHold::busy_utilisation`] counts as busy, and keeps counting
    /// until it falls below half of it; other modes use `busy` only.
    pub fn set_medium(&mut self, now: Micros, utilisation: u16, busy: bool) {
        self.medium_busy = busy;
        let u = self
            .adaptive_state
            .utilisation
            .report(now, utilisation, UTILISATION_TAU);
        self.utilisation_high = match self.config.link_mode {
            // Hysteresis: once utilised, the medium counts as such until the
            // average falls below half the threshold.
            LinkMode::Adaptive(a) if self.utilisation_high => u >= a.busy_utilisation / 2,
            LinkMode::Adaptive(a) => u >= a.busy_utilisation,
            _ => false,
        };
        self.apply_link_busy(now, busy || self.utilisation_high);
    }

    /// Whether the link counts as busy because of the medium's utilisation
    /// alone (the last `set_medium`, [`LinkMode::Adaptive`] only).
    pub fn utilisation_high(&self) -> bool {
        self.utilisation_high
    }

    /// The smoothed utilisation (thousandths) as of the last `set_medium`.
    pub fn utilisation(&self) -> u16 {
        self.adaptive_state.utilisation.value()
    }

    #[inline(always)]
    pub(super) fn adaptive(&self) -> bool {
        matches!(self.config.link_mode, LinkMode::Adaptive(_))
    }

    /// [`LinkMode::Adaptive`]: `packet` was just queued on slot `i` (alone
    /// when `front_changed`); bounds the queue's deadline by the packet's
    /// hold limit (0 without company) and refreshes the slot.
    #[inline(never)]
    pub(super) fn note_budget(&mut self, i: usize, packet: &[u8], front_changed: bool) {
        let LinkMode::Adaptive(a) = self.config.link_mode else {
            return self.refresh(i, front_changed);
        };
        let flows = &mut self.adaptive_state.flows;
        if flows.len() <= i {
            flows.resize(self.slots.len().max(i + 1), Default::default());
        }
        let s = &mut self.slots[i];
        let hash = flow_hash(packet);
        let hold = s.cfg.hold_time;
        let [recent, lately] = &mut flows[i];
        let company = recent.note(self.now, hold, hash);
        let several = lately.note(self.now, hold.saturating_mul(LATELY_WINDOWS), hash);
        let saturated = self.adaptive_state.utilisation.value()
            >= a.busy_utilisation.saturating_mul(SATURATED_FACTOR);
        // Without company the packet leaves at once: on a busy link by a
        // zero limit (Timeout), on an idle one by the idle rule (Idle).
        let limit = if company || (several && saturated) || !self.link_busy {
            hold_limit(hold, a.delay_budget, hops_crossed(packet))
        } else {
            0
        };
        // A talk spurt's first packet waits its full limit (see `spurt`;
        // voice, i.e. the bundle class: not the opportunistic TCP class).
        let starts =
            self.adaptive_state
                .spurts
                .starts(self.now, hash, hold.saturating_mul(SPURT_GAP_HOLDS));
        if let Some(e) = s.q.back_mut() {
            e.limit = u32::try_from(limit).unwrap_or(u32::MAX - 1);
            e.spurt = starts && limit > 0 && !e.opportunistic;
        }
        let due = self.now.saturating_add(limit);
        let lowered = if front_changed {
            s.budget_due = due;
            false
        } else {
            let old = s.deadline();
            s.budget_due = s.budget_due.min(due);
            s.deadline() < old
        };
        self.refresh(i, front_changed || lowered);
    }

    /// The link mode is no longer adaptive (reconfiguration): budgets and
    /// the utilisation signal no longer apply.
    pub(super) fn leave_adaptive(&mut self) {
        for s in &mut self.slots {
            s.budget_due = Micros::MAX;
        }
        self.adaptive_state = AdaptiveState::default();
        if self.utilisation_high {
            self.utilisation_high = false;
            self.apply_link_busy(self.now, self.medium_busy);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(ttl: u8) -> [u8; 20] {
        let mut p = [0u8; 20];
        p[0] = 0x45;
        p[8] = ttl;
        p
    }

    #[test]
    fn hops_from_ttl_and_hop_limit() {
        assert_eq!(hops_crossed(&v4(64)), 0);
        assert_eq!(hops_crossed(&v4(61)), 3);
        assert_eq!(hops_crossed(&v4(1)), 63);
        assert_eq!(hops_crossed(&v4(128)), 0);
        assert_eq!(hops_crossed(&v4(65)), 63);
        assert_eq!(hops_crossed(&v4(250)), 5);
        assert_eq!(hops_crossed(&v4(0)), 64);
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        v6[7] = 62;
        assert_eq!(hops_crossed(&v6), 2);
        // Too short or not IP: no estimate.
        assert_eq!(hops_crossed(&[0x45, 0, 0]), 0);
        assert_eq!(hops_crossed(&[]), 0);
        assert_eq!(hops_crossed(&[0x10; 20]), 0);
    }

    #[test]
    fn limit_splits_the_budget() {
        assert_eq!(hold_limit(5_000, 40_000, 0), 5_000);
        assert_eq!(hold_limit(5_000, 40_000, 7), 5_000);
        assert_eq!(hold_limit(5_000, 12_000, 2), 2_000);
        assert_eq!(hold_limit(5_000, 12_000, 3), 0);
        assert_eq!(hold_limit(20_000, 40_000, 1), 20_000);
        assert_eq!(hold_limit(20_000, 40_000, 2), 0);
        assert_eq!(hold_limit(Micros::MAX, 40_000, u32::MAX), 0);
        // The limits over a path never sum beyond the budget.
        for hold in [1_000, 5_000, 7_000, 20_000, 50_000] {
            let total: Micros = (0..100).map(|h| hold_limit(hold, 40_000, h)).sum();
            assert!(total <= 40_000, "hold {hold}: {total}");
        }
    }
    #[test]
    fn utilisation_average_is_time_weighted() {
        let tau = UTILISATION_TAU;
        let mut u = Utilisation::default();
        assert_eq!(
            u.report(0, 800, tau),
            800,
            "the first report is the average"
        );
        // One 20 ms window at 0 weighs 20 / 120: 800 * 5/6 = 666.7.
        assert_eq!(u.report(20_000, 0, tau), 667);
        // A repeated report at the same time weighs nothing.
        assert_eq!(u.report(20_000, 1000, tau), 667);
        // Windows of 20 ms at 0: (5/6)^n falls below half in 4 windows.
        let mut t = 20_000;
        let mut n = 0;
        while u.value() >= 400 {
            t += 20_000;
            n += 1;
            u.report(t, 0, tau);
        }
        assert_eq!(n, 3);
        // Twice as many reports of half the window length: about the same.
        let mut v = Utilisation::default();
        v.report(0, 800, tau);
        for k in 1..=8 {
            v.report(k * 10_000, 0, tau);
        }
        let mut w = Utilisation::default();
        w.report(0, 800, tau);
        for k in 1..=4 {
            w.report(k * 20_000, 0, tau);
        }
        assert!(
            v.value().abs_diff(w.value()) <= 20,
            "{} vs {}",
            v.value(),
            w.value()
        );
        // A report after 16 time constants replaces the average; values clamp.
        assert_eq!(u.report(t + 16 * tau, 1200, tau), 1000);
        // Time going back counts as no time.
        assert_eq!(u.report(t, 0, tau), 1000);
    }

    fn udp4(src: [u8; 4], sport: u16, dport: u16, ttl: u8) -> [u8; 28] {
        let mut p = [0u8; 28];
        p[0] = 0x45;
        p[8] = ttl;
        p[9] = 17;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&[10, 0, 0, 9]);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    #[test]
    fn flow_hash_keys_on_addresses_protocol_and_ports() {
        let a = udp4([10, 0, 0, 1], 16000, 16002, 64);
        // TTL, length, payload: same flow.
        let mut b = udp4([10, 0, 0, 1], 16000, 16002, 61);
        b[2] = 9;
        b[27] = 1;
        assert_eq!(flow_hash(&a), flow_hash(&b));
        let others = [
            udp4([10, 0, 0, 2], 16000, 16002, 64),
            udp4([10, 0, 0, 1], 16002, 16002, 64),
            udp4([10, 0, 0, 1], 16000, 16004, 64),
            {
                let mut p = a;
                p[9] = 6;
                p
            },
        ];
        for o in &others {
            assert_ne!(flow_hash(&a), flow_hash(o));
        }
        // Ports after IPv4 options count; IPv6 addresses and ports count.
        let mut opt = [0u8; 32];
        opt[0] = 0x46;
        opt[24..26].copy_from_slice(&7u16.to_be_bytes());
        let mut opt2 = opt;
        opt2[24..26].copy_from_slice(&8u16.to_be_bytes());
        assert_ne!(flow_hash(&opt), flow_hash(&opt2));
        let mut v6 = [0u8; 48];
        v6[0] = 0x60;
        v6[6] = 17;
        let mut v6b = v6;
        v6b[39] = 1;
        let mut v6c = v6;
        v6c[41] = 1;
        assert_ne!(flow_hash(&v6), flow_hash(&v6b));
        assert_ne!(flow_hash(&v6), flow_hash(&v6c));
        // Truncated or foreign input hashes without panicking.
        for n in 0..28 {
            let _ = flow_hash(&a[..n]);
            let _ = flow_hash(&v6[..n]);
        }
        let _ = flow_hash(&[0xff; 3]);
        // 64 ports on one pair of hosts spread over many sketch bits.
        let bits: std::collections::BTreeSet<u64> = (0..64)
            .map(|k| flow_hash(&udp4([10, 0, 0, 1], 16000 + 2 * k, 16002, 64)) >> 58)
            .collect();
        assert!(bits.len() >= 30, "{} bits", bits.len());
    }

    #[test]
    fn sketch_sees_company_within_one_to_two_windows() {
        let h = |k: u16| flow_hash(&udp4([10, 0, 0, 1], k, 16002, 64));
        assert_ne!(h(1) >> 58, h(2) >> 58, "test flows must not collide");
        let mut s = FlowSketch::default();
        // One flow every 20 ms, window 20 ms: never company.
        for k in 0..10 {
            assert!(!s.note(k * 20_000, 20_000, h(1)));
        }
        assert_eq!(s.flows(), 1);
        // A second flow 5 ms later: company for both, from then on.
        assert!(s.note(185_000, 20_000, h(2)));
        assert!(s.note(200_000, 20_000, h(1)));
        assert!(s.note(205_000, 20_000, h(2)));
        // Flow 2 falls silent: after two windows flow 1 is alone again.
        assert!(s.note(220_000, 20_000, h(1)));
        assert!(!s.note(240_000, 20_000, h(1)));
        // A gap of two windows forgets everything.
        assert!(s.note(250_000, 20_000, h(2)));
        assert!(!s.note(300_000, 20_000, h(1)));
        assert_eq!(s.flows(), 1);
    }
}
