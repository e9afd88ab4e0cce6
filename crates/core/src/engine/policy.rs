//! The medium-aware hold policy, [`LinkMode::Adaptive`] (issue 11 point 7):
//! hold a packet only while holding is free or cheap, never beyond the
//! peer's hold time nor the packet's share of a per-flow delay budget.
//!
//! Owns: the mode's parameters ([`AdaptiveHold`]), the hop estimate from the
//! TTL / hop limit ([`hops_crossed`]), the per-packet hold limit
//! ([`hold_limit`]), and the engine's medium input ([`Engine::set_medium`]).
//!
//! Must not touch: queues, heaps or bundle layout beyond setting a slot's
//! `budget_due` and asking the engine to refresh it; no clocks or I/O (the
//! driver measures the medium and hands in numbers).
//!
//! ## Policy
//! * The link counts as busy (hold) when the driver's busy signal is set
//!   (own unsent bytes, radio queue backlog, the radio transmitting) or the
//!   medium's utilisation over the driver's last window is at least
//!   [`AdaptiveHold::busy_utilisation`] (and, once so, until it falls below
//!   half of that: hysteresis). Otherwise the link is idle and a
//!   queue leaves at once (as in [`LinkMode::HoldWhileBusy`]): on an idle
//!   medium no packet waits.
//! * Why utilisation: a frame handed to a radio whose medium is busy a
//!   fraction `u` of the time finds it busy with probability about `u` and
//!   then defers anyway, so holding costs little delay, while every frame
//!   saved removes one channel access (DIFS, backoff, preamble, ACK: about
//!   100-200 µs on 802.11a/g/n against about 10 µs of a G.729 payload at
//!   24 Mb/s). The threshold is a tunable, not a derived optimum.
//! * Delay budget: a packet that crossed `h` hops before this node (see
//!   [`hops_crossed`]) may wait here at most
//!   `min(hold_time, delay_budget - h * hold_time)` (saturating at 0), the
//!   worst case being every earlier hop holding it its full hold time. With
//!   the same hold time on every node the sum over any path stays within
//!   `delay_budget`: each hop gets its share until the budget is spent, after
//!   which packets pass without waiting.

use super::{Engine, LinkMode};
use crate::Micros;

/// Parameters of [`LinkMode::Adaptive`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveHold {
    /// Total time a packet may accumulate in aggregation queues along its
    /// path (µs), split across hops (see the module documentation).
    pub delay_budget: Micros,
    /// Medium utilisation, in thousandths, at or above which holding counts
    /// as cheap even when the busy signal is clear.
    pub busy_utilisation: u16,
}

impl Default for AdaptiveHold {
    fn default() -> Self {
        AdaptiveHold {
            delay_budget: 40_000,
            busy_utilisation: 300,
        }
    }
}

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

impl Engine {
    /// Tells the engine the state of the medium below: `busy` as for
    /// [`Engine::set_link_busy`] (own backlog, radio queue, radio
    /// transmitting), and the medium's utilisation over the driver's last
    /// window in thousandths (clamped to 1000). In [`LinkMode::Adaptive`] a
    /// utilisation at or above [`AdaptiveHold::busy_utilisation`] counts as
    /// busy, and keeps counting until it falls below half of it; other
    /// modes use `busy` only.
    pub fn set_medium(&mut self, now: Micros, utilisation: u16, busy: bool) {
        self.medium_busy = busy;
        let u = utilisation.min(1000);
        self.utilisation_high = match self.config.link_mode {
            // Hysteresis: once utilised, the medium counts as such until the
            // utilisation falls below half the threshold, so one window's dip
            // does not release every queue at once.
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

    #[inline(always)]
    pub(super) fn adaptive(&self) -> bool {
        matches!(self.config.link_mode, LinkMode::Adaptive(_))
    }

    /// [`LinkMode::Adaptive`]: `packet` was just queued on slot `i` (alone
    /// when `front_changed`); bounds the queue's deadline by the packet's
    /// hold limit and refreshes the slot.
    #[inline(never)]
    pub(super) fn note_budget(&mut self, i: usize, packet: &[u8], front_changed: bool) {
        let LinkMode::Adaptive(a) = self.config.link_mode else {
            return self.refresh(i, front_changed);
        };
        let s = &mut self.slots[i];
        let limit = hold_limit(s.cfg.hold_time, a.delay_budget, hops_crossed(packet));
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
}
