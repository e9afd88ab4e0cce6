//! The hold-time deadlines of the peer queues: which queue's oldest packet is
//! due first ([`Deadlines`]).
//!
//! Owns: the order of `(deadline, slot, generation)` entries. A deadline is
//! the arrival of a queue's oldest packet plus the peer's hold time, and the
//! engine's clock never goes back, so while the peers share one hold time
//! (the usual configuration) deadlines are created in order. An entry that is
//! not earlier than the last one appended goes to a FIFO (O(1) to add and to
//! remove); any other entry (a peer with a shorter hold time) goes to a binary
//! heap (O(log n)). The earliest entry is the smaller of the FIFO's front and
//! the heap's top. Entries are invalidated lazily by the caller (a slot's
//! generation moves on); stale entries are dropped when they reach the front
//! or by [`Deadlines::retain`].
//!
//! Must not touch: slots, queues or time (the engine decides which entries are
//! valid and when one is due).

use super::fifo::Ring;
use crate::Micros;
use core::cmp::Reverse;
use std::collections::BinaryHeap;

/// `(deadline, slot, generation)`: earliest deadline first (equal deadlines
/// in no particular order).
pub(crate) type Item = (Micros, u32, u32);

/// A min-priority queue of [`Item`]s, optimised for items added in order.
#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    /// Non-decreasing deadlines, front first.
    fifo: Ring<Item>,
    /// The deadline of the FIFO's last entry (meaningful while it is not empty).
    back: Micros,
    heap: BinaryHeap<Reverse<Item>>,
}

impl Deadlines {
    /// Adds an entry.
    #[inline]
    pub(crate) fn push(&mut self, item: Item) {
        if self.fifo.is_empty() || item.0 >= self.back {
            self.back = item.0;
            self.fifo.push_back(item);
        } else {
            self.heap.push(Reverse(item));
        }
    }

    /// An entry with the earliest deadline.
    #[inline]
    pub(crate) fn peek(&self) -> Option<Item> {
        match (self.fifo.front(), self.heap.peek()) {
            (Some(&a), Some(&Reverse(b))) => Some(a.min(b)),
            (Some(&a), None) => Some(a),
            (None, Some(&Reverse(b))) => Some(b),
            (None, None) => None,
        }
    }

    /// Removes the entry [`Deadlines::peek`] returns.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Item> {
        let from_fifo = match (self.fifo.front(), self.heap.peek()) {
            (Some(a), Some(Reverse(b))) => a <= b,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if from_fifo {
            self.fifo.pop_front()
        } else {
            self.heap.pop().map(|Reverse(b)| b)
        }
    }

    /// Entries held, stale ones included.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.fifo.len() + self.heap.len()
    }

    /// Keeps only the entries for which `keep` is true (order is kept).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Item) -> bool) {
        self.fifo.retain(&mut keep);
        self.heap.retain(|Reverse(b)| keep(b));
    }
}

#[cfg(test)]
mod tests {
    use super::{Deadlines, Item};
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Against a sorted set as the model: any mix of pushes (mostly in
        /// order, as the engine makes them, sometimes earlier), pops and
        /// retains gives an entry with the earliest deadline at every step.
        #[test]
        fn behaves_like_a_sorted_set(ops in prop::collection::vec((0u8..8, 0u64..50, 0u32..8), 0..300)) {
            let mut d = Deadlines::default();
            let mut m = BTreeSet::<Item>::new();
            let mut clock = 0u64;
            for (n, (op, x, slot)) in ops.into_iter().enumerate() {
                let gen = n as u32;
                match op {
                    0..=3 => {
                        clock += x % 5;
                        let it = (clock + 20, slot, gen);
                        d.push(it);
                        m.insert(it);
                    }
                    4 => {
                        let it = (clock + x % 20, slot, gen);
                        d.push(it);
                        m.insert(it);
                    }
                    5 | 6 => {
                        // Equal deadlines may come out in any order; the
                        // entry removed is one of the earliest.
                        let got = d.pop();
                        prop_assert_eq!(got.map(|g| g.0), m.iter().next().map(|w| w.0));
                        if let Some(g) = got {
                            prop_assert!(m.remove(&g), "popped {:?}, never pushed", g);
                        }
                    }
                    _ => {
                        d.retain(|it| it.1 != slot);
                        m.retain(|it| it.1 != slot);
                    }
                }
                prop_assert_eq!(d.peek().map(|p| p.0), m.iter().next().map(|w| w.0));
                if let Some(p) = d.peek() {
                    prop_assert!(m.contains(&p));
                }
                prop_assert_eq!(d.len(), m.len());
            }
        }
    }
}
