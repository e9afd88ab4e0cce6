//! The peer table: peer key -> slot index, looked up once per packet.
//!
//! Owns: finding a peer's slot. An open-addressing table with linear probing
//! and backward-shift deletion, at most half full, whose hash is one multiply
//! of the address bits (Fibonacci hashing). That is the whole per-packet cost
//! of a lookup: a multiply, a shift and usually one key comparison, where a
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
use core::net::IpAddr;

/// Fibonacci-hashing multiplier (2^64 / golden ratio, odd).
const K: u64 = 0x9e37_79b9_7f4a_7c15;

#[derive(Debug, Default)]
pub(crate) struct PeerTable {
    /// Empty, or a power of two at least twice `len`.
    cells: Vec<Option<(PeerKey, u32)>>,
    len: usize,
    /// `64 - log2(cells.len())`: the hash's top bits index the table.
    shift: u32,
}

#[inline]
fn hash(key: &PeerKey) -> u64 {
    let x = match key {
        IpAddr::V4(a) => u64::from(a.to_bits()),
        IpAddr::V6(a) => {
            let b = a.to_bits();
            // Distinct from every IPv4 value's image in the common cases;
            // collisions are only slower, never wrong.
            ((b >> 64) as u64 ^ b as u64).rotate_left(17) ^ 0x6b
        }
    };
    x.wrapping_mul(K)
}

impl PeerTable {
    #[inline]
    fn home(&self, key: &PeerKey) -> usize {
        (hash(key) >> self.shift) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.cells.len() - 1
    }

    /// The slot index of `key`.
    #[inline]
    pub(crate) fn get(&self, key: &PeerKey) -> Option<u32> {
        if self.cells.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut i = self.home(key);
        // At most half full, so an empty cell ends every probe sequence.
        loop {
            match &self.cells[i] {
                Some((k, v)) if k == key => return Some(*v),
                Some(_) => i = (i + 1) & mask,
                None => return None,
            }
        }
    }

    /// Inserts or replaces `key`'s slot index (may allocate: only when a peer is created).
    pub(crate) fn insert(&mut self, key: PeerKey, value: u32) {
        if (self.len + 1) * 2 > self.cells.len() {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(&key);
        loop {
            match &mut self.cells[i] {
                Some((k, v)) if *k == key => {
                    *v = value;
                    return;
                }
                Some(_) => i = (i + 1) & mask,
                cell @ None => {
                    *cell = Some((key, value));
                    self.len += 1;
                    return;
                }
            }
        }
    }

    /// Removes `key`; returns its slot index if it was present.
    pub(crate) fn remove(&mut self, key: &PeerKey) -> Option<u32> {
        if self.cells.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut i = self.home(key);
        let value = loop {
            match &self.cells[i] {
                Some((k, v)) if k == key => break *v,
                Some(_) => i = (i + 1) & mask,
                None => return None,
            }
        };
        self.cells[i] = None;
        self.len -= 1;
        // Backward-shift deletion: move later members of the probe run into
        // the hole when the hole lies on their way from their home cell.
        let mut hole = i;
        let mut j = (i + 1) & mask;
        while let Some((k, _)) = &self.cells[j] {
            let home = self.home(k);
            // Distance from home to j and from home to the hole, cyclically.
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.cells[hole] = self.cells[j].take();
                hole = j;
            }
            j = (j + 1) & mask;
        }
        Some(value)
    }

    /// Every key, in no particular order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &PeerKey> + '_ {
        self.cells.iter().flatten().map(|(k, _)| k)
    }

    /// Doubles the table (at least 8 cells) and re-inserts every entry.
    fn grow(&mut self) {
        let cap = (self.cells.len() * 2).max(8);
        let old = core::mem::replace(&mut self.cells, vec![None; cap]);
        self.shift = 64 - cap.trailing_zeros();
        self.len = 0;
        for (k, v) in old.into_iter().flatten() {
            self.insert(k, v);
        }
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
            assert_eq!(t.len, m.len());
            if step % 997 == 0 {
                // Every key still findable after the shifts of many removals.
                for (k, v) in &m {
                    assert_eq!(t.get(k), Some(*v));
                }
                let mut a: Vec<_> = t.keys().copied().collect();
                let mut b: Vec<_> = m.keys().copied().collect();
                a.sort();
                b.sort();
                assert_eq!(a, b);
                assert!(t.cells.len() >= 2 * t.len);
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
