//! Talk-spurt consistency for [`super::LinkMode::Adaptive`]: the first
//! packet of a flow's talk spurt waits its full hold limit at this node, so
//! that no later packet of the spurt waits longer here than it did.
//!
//! Why: a voice receiver sets its playout point per talk spurt from the
//! spurt's first packet (its one-way delay plus a fixed buffer); a later
//! packet whose delay exceeds that is late, i.e. lost for the listener.
//! Under the adaptive hold a packet waits until its queue's deadline, which
//! depends on where the packet falls in the queue's cycle (0 to the full
//! limit at each holding hop). When a spurt's first packet happens to join a
//! queue just before it leaves, the spurt's playout point is set early and
//! its later packets, held up to the full limit, arrive up to one limit per
//! holding hop behind it on top of the MAC's own jitter (string:3 on the ns-3
//! air: spurt-first packets 20 ms ahead of their successors, late loss; see
//! `docs/results.md`). Holding the first packet its full limit makes its hold
//! the largest of the spurt at every node, so holds alone can no longer make
//! a packet late.
//!
//! Owns: the per-flow table that recognises a spurt's first packet
//! (`SpurtTable`) and the cut of a queue served on its deadline
//! (`spurt_cut`), plus the exact recomputation of a queue's budget after a
//! partial send (`budget_due`). Must not touch: clocks, I/O, the heaps
//! (the engine refreshes the slot after serving it).
//!
//! A packet starts a spurt when its flow (by [`super::policy::flow_hash`])
//! was not seen at this node for [`SPURT_GAP_HOLDS`] hold times. The table
//! is direct-mapped with a 32-bit tag. An entry belongs to the flow that
//! last used it until that flow falls silent for the gap; a second flow
//! hashed to an entry whose owner is still active is not recognised (its
//! packets are never flagged: they are held as without this rule). Letting
//! the two take the entry in turn would flag every packet of both, and each
//! flag may split a bundle: with 256 entries and the RTP and RTCP flows of
//! seed 001's relay at 16-28 calls that cost 17-25 % more frames on the air
//! in the lab.
//! A first packet is left behind only when the queue leaves on its deadline
//! (`Reason::Timeout`) and no packet behind it is due: a full queue (size),
//! an idle link, a flush, or a later packet whose own limit has run out
//! still take it along.

use super::fifo::Ring;
use super::slot::Entry;
use crate::Micros;

/// A flow silent for this many hold times (80 ms at the usual 20 ms) starts
/// a new talk spurt. Voice silences last hundreds of ms (the lab's model:
/// exponential, mean 1.5 s); a gap of several packet intervals inside a
/// spurt (MAC stalls at a relay) is taken for a new spurt, which only holds
/// that packet its full limit.
pub const SPURT_GAP_HOLDS: Micros = 4;

/// Entries of the spurt table (per engine; 16 bytes each): with 50 active
/// flows, about 1 in 20 shares its entry with another active flow.
pub const SPURT_SLOTS: usize = 1024;

/// `Entry::limit` of a packet without a limit (not queued in adaptive mode).
pub(super) const NO_LIMIT: u32 = u32::MAX;

/// When each recently seen flow was last seen: direct-mapped, tagged, grown
/// to [`SPURT_SLOTS`] entries on first use (never per packet).
#[derive(Clone, Debug, Default)]
pub(super) struct SpurtTable {
    /// (tag, last seen); `Micros::MAX`: never.
    t: Vec<(u32, Micros)>,
}

impl SpurtTable {
    /// Notes a packet of flow `hash` at `now`; answers whether it starts a
    /// talk spurt: its entry is free, or silent for `gap` (whoever owned
    /// it), and is now this flow's. A flow whose entry another flow used
    /// within `gap` is not recognised (false; the entry stays the other's).
    #[inline]
    pub(super) fn starts(&mut self, now: Micros, hash: u64, gap: Micros) -> bool {
        if self.t.is_empty() {
            self.t.resize(SPURT_SLOTS, (0, Micros::MAX));
        }
        let tag = (hash >> 32) as u32;
        let e = &mut self.t[(hash as usize >> 8) % SPURT_SLOTS];
        let silent = e.1 == Micros::MAX || now.saturating_sub(e.1) >= gap;
        if e.0 == tag || silent {
            *e = (tag, now);
        }
        silent
    }
}

/// When a queued packet must have left: its arrival plus its limit, and
/// never later than its arrival plus the hold time.
#[inline]
pub(super) fn due(e: &Entry, hold: Micros) -> Micros {
    let limit = if e.limit == NO_LIMIT {
        hold
    } else {
        hold.min(Micros::from(e.limit))
    };
    e.arrival.saturating_add(limit)
}

/// How many packets from the front of `q` leave when the queue is served on
/// its deadline at `now`: up to (not including) the first spurt-start packet
/// behind which no packet is due, else all (at least one).
pub(super) fn spurt_cut(q: &Ring<Entry>, now: Micros, hold: Micros) -> usize {
    let mut cut = None;
    for (i, e) in q.iter().enumerate() {
        if due(e, hold) <= now {
            // This one leaves now, and with it everything in front of it.
            cut = None;
        } else if e.spurt && i > 0 && cut.is_none() {
            cut = Some(i);
        }
    }
    cut.unwrap_or(q.len())
}

/// The earliest time a packet of `q` reaches its limit (`Micros::MAX` when
/// empty): the queue's exact `budget_due`.
pub(super) fn budget_due(q: &Ring<Entry>) -> Micros {
    q.iter()
        .map(|e| {
            if e.limit == NO_LIMIT {
                Micros::MAX
            } else {
                e.arrival.saturating_add(Micros::from(e.limit))
            }
        })
        .min()
        .unwrap_or(Micros::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(arrival: Micros, limit: u32, spurt: bool) -> Entry {
        Entry {
            arrival,
            limit,
            spurt,
            ..Entry::default()
        }
    }

    fn ring(es: &[Entry]) -> Ring<Entry> {
        let mut q = Ring::default();
        for &e in es {
            q.push_back(e);
        }
        q
    }

    #[test]
    fn table_sees_spurts_after_a_gap() {
        let mut t = SpurtTable::default();
        let (a, b) = (0x1234_5678_0000_0100u64, 0x9999_0000_0000_0200u64);
        assert!(t.starts(0, a, 80_000), "first packet of a flow");
        assert!(!t.starts(20_000, a, 80_000));
        assert!(!t.starts(99_000, a, 80_000), "79 ms gap: same spurt");
        assert!(t.starts(179_000, a, 80_000), "80 ms gap: new spurt");
        assert!(t.starts(180_000, b, 80_000));
        assert!(!t.starts(181_000, a, 80_000), "other entry");
        // Same entry, other tag, owner active: not recognised, and the
        // owner keeps the entry (its next packet is no spurt start).
        let c = (a & 0xffff_ffff) | 0x0bad_0000_0000_0000;
        assert!(!t.starts(182_000, c, 80_000));
        assert!(!t.starts(183_000, c, 80_000));
        assert!(!t.starts(190_000, a, 80_000));
        // The owner falls silent for the gap: the other flow takes the entry.
        assert!(t.starts(270_000, c, 80_000));
        assert!(!t.starts(290_000, c, 80_000));
        assert!(!t.starts(300_000, a, 80_000), "now c's");
        assert_eq!(t.t.len(), SPURT_SLOTS);
    }

    #[test]
    fn cut_leaves_a_spurt_start_behind_unless_something_after_it_is_due() {
        let hold = 20_000;
        // Front due at 20 ms; a spurt start at 15 ms (due 35 ms): cut before it.
        let q = ring(&[
            entry(0, 20_000, false),
            entry(5_000, 20_000, false),
            entry(15_000, 20_000, true),
            entry(16_000, 20_000, false),
        ]);
        assert_eq!(spurt_cut(&q, 20_000, hold), 2);
        // A packet behind it with a spent budget: everything leaves.
        let q = ring(&[
            entry(0, 20_000, false),
            entry(15_000, 20_000, true),
            entry(16_000, 0, false),
        ]);
        assert_eq!(spurt_cut(&q, 20_000, hold), 3);
        // A spurt start at the front is never left behind (one packet leaves).
        let q = ring(&[entry(0, 20_000, true), entry(1_000, 20_000, true)]);
        assert_eq!(spurt_cut(&q, 20_000, hold), 1);
        // A spurt start that is due itself leaves.
        let q = ring(&[entry(0, 20_000, false), entry(1_000, 0, true)]);
        assert_eq!(spurt_cut(&q, 20_000, hold), 2);
        // The limit never exceeds the hold time.
        let q = ring(&[entry(0, 20_000, false), entry(1_000, NO_LIMIT, true)]);
        assert_eq!(spurt_cut(&q, 21_000, hold), 2);
        assert_eq!(spurt_cut(&q, 20_000, hold), 1);
        assert_eq!(budget_due(&q), 20_000);
        assert_eq!(budget_due(&ring(&[])), Micros::MAX);
    }
}
