//! The peer table: peer key -> slot index, looked up once per packet.
//!
//! Owns: finding a peer's slot. One open-addressing table per address family
//! (IPv4 keys are `u32`, IPv6 keys `u128`), with linear probing and
//! backward-shift deletion, at most half full, whose hash is one multiply of
//! the address bits (Fibonacci hashing). That is the whole per-packet cost of
//! a lookup: a multiply, a shift and usually one integer comparison, where a
//! general-purpose map spends several times as many instructions on hashing
//! and SIMD group probing.
//!
//! Peer keys are next hops or tunnel endpoints chosen by routing and
//! configuration, not by remote senders, and the table is bounded by the
//! engine's `max_peers`, so an unkeyed hash is adequate: the worst case is a
//! probe sequence as long as the table, not unbounded work.
//!
//! Must not touch: slots, queues or policy.

use super::PeerKey;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Fibonacci-hashing multiplier (2^64 / golden ratio, odd).
const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// A cell's value when it is empty (never a slot index: slots are far fewer).
const EMPTY: u32 = u32::MAX;

/// A key of one address family: the address bits.
trait Key: Copy + Eq + Default {
    fn hash(self) -> u64;
}

impl Key for u32 {
    #[inline(always)]
    fn hash(self) -> u64 {
        u64::from(self).wrapping_mul(K)
    }
}

impl Key for u128 {
    #[inline]
    fn hash(self) -> u64 {
        ((self >> 64) as u64 ^ self as u64)
            .rotate_left(17)
            .wrapping_mul(K)
    }
}

/// One family's table: `(key, value)` cells, a value of [`EMPTY`] marking an
/// empty cell.
#[derive(Debug, Default)]
struct Family<T> {
    /// Empty, or a power of two at least twice `len`.
    cells: Vec<(T, u32)>,
    len: usize,
    /// `64 - log2(cells.len())`: the hash's top bits index the table.
    shift: u32,
}

impl<T: Key> Family<T> {
    #[inline(always)]
    fn home(&self, key: T) -> usize {
        (key.hash() >> self.shift) as usize
    }

    #[inline(always)]
    fn get(&self, key: T) -> Option<u32> {
        let mask = self.cells.len().wrapping_sub(1);
        let mut i = self.home(key);
        // At most half full, so an empty cell ends every probe sequence.
        loop {
            let (k, v) = *self.cells.get(i)?;
            if v == EMPTY {
                return None;
            }
            if k == key {
                return Some(v);
            }
            i = (i + 1) & mask;
        }
    }

    fn insert(&mut self, key: T, value: u32) {
        assert!(value != EMPTY, "slot index {value} out of range");
        if (self.len + 1) * 2 > self.cells.len() {
            self.grow();
        }
        let mask = self.cells.len() - 1;
        let mut i = self.home(key);
        loop {
            let cell = &mut self.cells[i];
            if cell.1 == EMPTY {
                *cell = (key, value);
                self.len += 1;
                return;
            }
            if cell.0 == key {
                cell.1 = value;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    fn remove(&mut self, key: T) -> Option<u32> {
        let mask = self.cells.len().wrapping_sub(1);
        let mut i = self.home(key);
        let value = loop {
            let (k, v) = *self.cells.get(i)?;
            if v == EMPTY {
                return None;
            }
            if k == key {
                break v;
            }
            i = (i + 1) & mask;
        };
        self.cells[i] = (T::default(), EMPTY);
        self.len -= 1;
        // Backward-shift deletion: move later members of the probe run into
        // the hole when the hole lies on their way from their home cell.
        let mut hole = i;
        let mut j = (i + 1) & mask;
        while self.cells[j].1 != EMPTY {
            let home = self.home(self.cells[j].0);
            // Distance from home to j and from home to the hole, cyclically.
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.cells[hole] = self.cells[j];
                self.cells[j] = (T::default(), EMPTY);
                hole = j;
            }
            j = (j + 1) & mask;
        }
        Some(value)
    }

    fn keys(&self) -> impl Iterator<Item = T> + '_ {
        self.cells.iter().filter(|c| c.1 != EMPTY).map(|c| c.0)
    }

    /// Doubles the table (at least 8 cells) and re-inserts every entry.
    fn grow(&mut self) {
        let cap = (self.cells.len() * 2).max(8);
        let old = core::mem::replace(&mut self.cells, vec![(T::default(), EMPTY); cap]);
        self.shift = 64 - cap.trailing_zeros();
        self.len = 0;
        for (k, v) in old {
            if v != EMPTY {
                self.insert(k, v);
            }
        }
    }
}

/// Peer key -> slot index: one table per address family, so that an IPv4
/// lookup hashes and compares a `u32`.
#[derive(Debug, Default)]
pub(crate) struct PeerTable {
    v4: Family<u32>,
    v6: Family<u128>,
}

impl PeerTable {
    /// The slot index of `key`.
    #[inline(always)]
    pub(crate) fn get(&self, key: &PeerKey) -> Option<u32> {
        match key {
            IpAddr::V4(a) => self.v4.get(a.to_bits()),
            IpAddr::V6(a) => self.v6.get(a.to_bits()),
        }
    }

    /// Inserts or replaces `key`'s slot index (may allocate: only when a peer is created).
    pub(crate) fn insert(&mut self, key: PeerKey, value: u32) {
        match key {
            IpAddr::V4(a) => self.v4.insert(a.to_bits(), value),
            IpAddr::V6(a) => self.v6.insert(a.to_bits(), value),
        }
    }

    /// Removes `key`; returns its slot index if it was present.
    pub(crate) fn remove(&mut self, key: &PeerKey) -> Option<u32> {
        match key {
            IpAddr::V4(a) => self.v4.remove(a.to_bits()),
            IpAddr::V6(a) => self.v6.remove(a.to_bits()),
        }
    }

    /// Every key, in no particular order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = PeerKey> + '_ {
        let v4 = self.v4.keys().map(|k| IpAddr::V4(Ipv4Addr::from_bits(k)));
        let v6 = self.v6.keys().map(|k| IpAddr::V6(Ipv6Addr::from_bits(k)));
        v4.chain(v6)
    }

    /// Keys stored.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.v4.len + self.v6.len
    }
}

#[cfg(test)]
mod tests {
    use super::PeerTable;
    use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use std::collections::HashMap;

    fn key(n: u32) -> IpAddr {
        if n % 3 == 0 {
            IpAddr::V6(Ipv6Addr::from(u128::from(n) << 64 | 0xfd00))
        } else {
            // Sequential and strided addresses: the clustering cases.
            IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + (n % 7) * 0x100 + n))
        }
    }

    #[test]
    fn matches_hashmap_model() {
        let mut t = PeerTable::default();
        let mut m: HashMap<IpAddr, u32> = HashMap::new();
        let mut x = 0x2545_f491u32;
        for step in 0..50_000u32 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let k = key(x % 600);
            match x % 5 {
                0 | 1 => {
                    t.insert(k, step);
                    m.insert(k, step);
                }
                2 => assert_eq!(t.remove(&k), m.remove(&k), "remove {k}"),
                _ => {}
            }
            assert_eq!(t.get(&k), m.get(&k).copied(), "get {k} at step {step}");
            assert_eq!(t.len(), m.len());
            if step % 997 == 0 {
                // Every key still findable after the shifts of many removals.
                for (k, v) in &m {
                    assert_eq!(t.get(k), Some(*v));
                }
                let mut a: Vec<_> = t.keys().collect();
                let mut b: Vec<_> = m.keys().copied().collect();
                a.sort();
                b.sort();
                assert_eq!(a, b);
                assert!(t.v4.cells.len() >= 2 * t.v4.len);
                assert!(t.v6.cells.len() >= 2 * t.v6.len);
            }
        }
    }

    #[test]
    fn empty_table() {
        let mut t = PeerTable::default();
        let k = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(t.get(&k), None);
        assert_eq!(t.remove(&k), None);
        assert_eq!(t.keys().count(), 0);
    }
}
