//! The search controller's memory of good rates per number of calls
//! (issue 12 point 8: the rate after calls join or leave; docs/gateway.md,
//! "The search controller", rule 6).
//!
//! Owns: a small fixed table (no allocation) of the last rate known good
//! for a number of active calls, and when it was learnt. Must not touch:
//! when a rate counts as good or what the search does with a remembered one
//! (that is [`super::search`]'s), clocks (time comes in as [`Micros`]).
//!
//! What a rate remembered for `n` calls tells: every rate known good with
//! at least `n` calls active is a rate the mesh carried beside more (or as
//! many) calls, so it is safe for `n` (the calls' load on the air grows with
//! their number). [`GoodRates::recall`] answers the highest such rate; with
//! the lab's calls (one codec, one path) that is the one remembered for `n`
//! itself when there is one. A rate learnt long ago may no longer hold (a
//! link got slower): entries older than [`GOOD_MEMORY_US`] are not used.

use crate::Micros;

/// Numbers of calls whose last good rate is remembered; when the table is
/// full the oldest entry goes.
pub const GOOD_RATES: usize = 8;

/// A remembered good rate is used for this long after it was learnt
/// (5 minutes: long enough for calls to come back after a break, short
/// enough that a mesh whose links changed is searched again).
pub const GOOD_MEMORY_US: Micros = 300_000_000;

/// The table: per number of calls, the last rate known good and when.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoodRates {
    entries: [Option<(usize, u64, Micros)>; GOOD_RATES],
}

impl GoodRates {
    /// `bps` was known good with `calls` active calls at `now` (replaces
    /// what was remembered for that number; calls 0: nothing to protect,
    /// not remembered).
    pub fn remember(&mut self, calls: usize, bps: u64, now: Micros) {
        if calls == 0 {
            return;
        }
        let slot = self
            .entries
            .iter()
            .position(|e| e.is_some_and(|(n, _, _)| n == calls))
            .or_else(|| self.entries.iter().position(Option::is_none))
            .unwrap_or_else(|| {
                // Full: the oldest goes.
                (0..GOOD_RATES)
                    .min_by_key(|&i| self.entries[i].map_or(0, |(_, _, at)| at))
                    .unwrap_or(0)
            });
        self.entries[slot] = Some((calls, bps, now));
    }

    /// The highest rate known good at `now` with at least `calls` calls
    /// active, learnt within [`GOOD_MEMORY_US`], and with how many calls
    /// (the fewest of equal rates).
    pub fn recall(&self, calls: usize, now: Micros) -> Option<(u64, usize)> {
        self.entries
            .iter()
            .flatten()
            .filter(|&&(n, _, at)| n >= calls && now.saturating_sub(at) <= GOOD_MEMORY_US)
            .map(|&(n, bps, _)| (bps, n))
            .max_by_key(|&(bps, n)| (bps, std::cmp::Reverse(n)))
    }

    /// The numbers of calls remembered (for tests and stats).
    pub fn len(&self) -> usize {
        self.entries.iter().flatten().count()
    }

    /// Nothing remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recalls_the_rate_for_as_many_calls_or_more() {
        let mut m = GoodRates::default();
        assert_eq!(m.recall(8, 0), None);
        m.remember(16, 300_000, 0);
        m.remember(8, 880_000, 1);
        assert_eq!(m.recall(16, 2), Some((300_000, 16)));
        assert_eq!(m.recall(8, 2), Some((880_000, 8)));
        // 12 calls: only what 16 carried is known safe.
        assert_eq!(m.recall(12, 2), Some((300_000, 16)));
        assert_eq!(m.recall(17, 2), None);
        // The same number again replaces its entry.
        m.remember(16, 320_000, 3);
        assert_eq!((m.recall(16, 4), m.len()), (Some((320_000, 16)), 2));
        // Of equal rates, the one learnt with the fewest calls.
        m.remember(20, 320_000, 4);
        assert_eq!(m.recall(12, 5), Some((320_000, 16)));
        // No calls: nothing remembered.
        m.remember(0, 5_000_000, 5);
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn old_entries_are_not_used_and_a_full_table_drops_the_oldest() {
        let mut m = GoodRates::default();
        m.remember(16, 300_000, 0);
        assert_eq!(m.recall(16, GOOD_MEMORY_US), Some((300_000, 16)));
        assert_eq!(m.recall(16, GOOD_MEMORY_US + 1), None);
        for n in 1..=GOOD_RATES {
            m.remember(100 + n, 1_000 * n as u64, 10 + n as Micros);
        }
        assert_eq!(m.len(), GOOD_RATES);
        assert_eq!(
            m.recall(16, 20),
            Some((8_000, 108)),
            "16's (the oldest) went"
        );
        assert_eq!(m.recall(108, 20), Some((8_000, 108)));
        assert_eq!(m.recall(109, 20), None);
    }
}
