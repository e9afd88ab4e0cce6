//! Longest-prefix match over IPv4 and IPv6 prefixes: a path-compressed
//! binary trie (one per address family) in a node arena, as WireGuard's
//! allowed-IPs table. Lookup follows at most one node per distinct branch
//! point on the address's path (never a scan of all prefixes); memory is at
//! most two nodes per prefix.
//!
//! Owns: the prefix table. Must not touch: configuration parsing (the daemon
//! builds the table from validated prefixes) or any I/O.

use core::net::IpAddr;

/// A node: the prefix `bits/len` (left-aligned, host bits zero), the value
/// stored for exactly that prefix (branch-only nodes have none), children by
/// the bit after the prefix.
#[derive(Clone, Debug)]
struct Node<V> {
    bits: u128,
    len: u8,
    value: Option<V>,
    child: [u32; 2],
}

/// Marks a missing child (the arena never holds `u32::MAX` nodes).
const NONE: u32 = u32::MAX;

/// Where a node hangs: a family's root or a node's child.
#[derive(Clone, Copy)]
enum Link {
    Root(usize),
    Child(u32, usize),
}

/// Why [`PrefixTable::insert`] refused a prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefixError {
    /// The length is over 32 (IPv4) or 128 (IPv6).
    TooLong,
    /// The table is full (`u32::MAX - 1` nodes).
    Full,
}

/// Longest-prefix match table from IP prefixes to values.
#[derive(Clone, Debug)]
pub struct PrefixTable<V> {
    nodes: Vec<Node<V>>,
    /// Roots: IPv4, IPv6.
    roots: [u32; 2],
    prefixes: usize,
}

impl<V> Default for PrefixTable<V> {
    fn default() -> Self {
        PrefixTable {
            nodes: Vec::new(),
            roots: [NONE; 2],
            prefixes: 0,
        }
    }
}

/// The family index, the address left-aligned in 128 bits, and its width.
fn key(addr: IpAddr) -> (usize, u128, u8) {
    match addr {
        IpAddr::V4(a) => (0, u128::from(u32::from(a)) << 96, 32),
        IpAddr::V6(a) => (1, u128::from(a), 128),
    }
}

fn mask(bits: u128, len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        bits & (u128::MAX << (128 - u32::from(len)))
    }
}

/// Bit `pos` (0 = most significant) of `bits`; `pos < 128`.
fn bit(bits: u128, pos: u8) -> usize {
    ((bits >> (127 - u32::from(pos))) & 1) as usize
}

fn common(a: u128, b: u128) -> u8 {
    (a ^ b).leading_zeros() as u8
}

impl<V: Copy> PrefixTable<V> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of distinct prefixes stored.
    pub fn len(&self) -> usize {
        self.prefixes
    }

    /// True when no prefix is stored.
    pub fn is_empty(&self) -> bool {
        self.prefixes == 0
    }

    fn get(&self, l: Link) -> u32 {
        match l {
            Link::Root(f) => self.roots[f],
            Link::Child(n, b) => self.nodes[n as usize].child[b],
        }
    }

    fn set(&mut self, l: Link, v: u32) {
        match l {
            Link::Root(f) => self.roots[f] = v,
            Link::Child(n, b) => self.nodes[n as usize].child[b] = v,
        }
    }

    fn push(&mut self, bits: u128, len: u8, value: Option<V>) -> Result<u32, PrefixError> {
        let i = u32::try_from(self.nodes.len())
            .ok()
            .filter(|i| *i < NONE)
            .ok_or(PrefixError::Full)?;
        self.nodes.push(Node {
            bits,
            len,
            value,
            child: [NONE; 2],
        });
        Ok(i)
    }

    /// Stores `value` for `addr/len` (host bits of `addr` are ignored),
    /// replacing the value of an equal prefix.
    pub fn insert(&mut self, addr: IpAddr, len: u8, value: V) -> Result<(), PrefixError> {
        let (fam, bits, width) = key(addr);
        if len > width {
            return Err(PrefixError::TooLong);
        }
        let bits = mask(bits, len);
        // Room for a fork and a leaf, checked up front so a refusal changes nothing.
        if self.nodes.len() + 2 > NONE as usize {
            return Err(PrefixError::Full);
        }
        let mut link = Link::Root(fam);
        loop {
            let i = self.get(link);
            if i == NONE {
                let n = self.push(bits, len, Some(value))?;
                self.set(link, n);
                self.prefixes += 1;
                return Ok(());
            }
            let (nbits, nlen) = {
                let n = &self.nodes[i as usize];
                (n.bits, n.len)
            };
            let c = common(nbits, bits).min(nlen).min(len);
            if c == nlen {
                if nlen == len {
                    let n = &mut self.nodes[i as usize];
                    self.prefixes += usize::from(n.value.is_none());
                    n.value = Some(value);
                    return Ok(());
                }
                link = Link::Child(i, bit(bits, nlen));
                continue;
            }
            // The node's prefix is longer than what it shares with the new one.
            let above = if c == len {
                // The new prefix sits above the node.
                self.push(bits, len, Some(value))?
            } else {
                // A branch point at the shared part, the new prefix a leaf under it.
                let f = self.push(mask(bits, c), c, None)?;
                let leaf = self.push(bits, len, Some(value))?;
                self.nodes[f as usize].child[bit(bits, c)] = leaf;
                f
            };
            self.nodes[above as usize].child[bit(nbits, c)] = i;
            self.set(link, above);
            self.prefixes += 1;
            return Ok(());
        }
    }

    /// The value of the longest stored prefix that contains `addr`.
    pub fn lookup(&self, addr: IpAddr) -> Option<V> {
        let (fam, bits, width) = key(addr);
        let mut best = None;
        let mut i = self.roots[fam];
        while i != NONE {
            let n = &self.nodes[i as usize];
            if common(n.bits, bits) < n.len {
                break;
            }
            if n.value.is_some() {
                best = n.value;
            }
            if n.len >= width {
                break;
            }
            i = n.child[bit(bits, n.len)];
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};
    use proptest::prelude::*;

    fn v4(s: &str) -> IpAddr {
        IpAddr::V4(s.parse::<Ipv4Addr>().unwrap())
    }

    #[test]
    fn longest_prefix_wins_and_families_are_apart() {
        let mut t = PrefixTable::new();
        t.insert(v4("10.0.0.0"), 8, 1).unwrap();
        t.insert(v4("10.1.0.0"), 16, 2).unwrap();
        t.insert(v4("10.1.2.3"), 32, 3).unwrap();
        t.insert(v4("0.0.0.0"), 0, 0).unwrap();
        t.insert(IpAddr::V6("fd00::".parse().unwrap()), 8, 6)
            .unwrap();
        assert_eq!(t.lookup(v4("10.1.2.3")), Some(3));
        assert_eq!(t.lookup(v4("10.1.2.4")), Some(2));
        assert_eq!(t.lookup(v4("10.2.0.1")), Some(1));
        assert_eq!(t.lookup(v4("192.0.2.1")), Some(0));
        assert_eq!(t.lookup(IpAddr::V6("fd12::1".parse().unwrap())), Some(6));
        assert_eq!(t.lookup(IpAddr::V6(Ipv6Addr::LOCALHOST)), None);
        // Host bits are ignored; an equal prefix replaces the value.
        t.insert(v4("10.1.99.99"), 16, 22).unwrap();
        assert_eq!(t.lookup(v4("10.1.2.4")), Some(22));
        assert_eq!(t.len(), 5);
        assert_eq!(t.insert(v4("10.0.0.0"), 33, 9), Err(PrefixError::TooLong));
    }

    /// The reference: a linear scan for the longest containing prefix (the
    /// last inserted wins among equal prefixes).
    fn scan(entries: &[(IpAddr, u8, u16)], addr: IpAddr) -> Option<u16> {
        let (fam, bits, _) = key(addr);
        let mut best: Option<(u8, u16)> = None;
        for &(a, len, v) in entries {
            let (f, b, _) = key(a);
            if f == fam && mask(b, len) == mask(bits, len) && best.is_none_or(|(l, _)| len >= l) {
                best = Some((len, v));
            }
        }
        best.map(|(_, v)| v)
    }

    /// Addresses from a small pool so that prefixes nest and share bits.
    fn addr() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            (0u32..16, any::<u8>()).prop_map(|(hi, lo)| IpAddr::V4(Ipv4Addr::from(
                (hi << 28) | (u32::from(lo) << 4) | (hi & 3)
            ))),
            (0u128..16, any::<u16>()).prop_map(|(hi, lo)| IpAddr::V6(Ipv6Addr::from(
                (hi << 124) | (u128::from(lo) << 60) | hi
            ))),
        ]
    }

    proptest! {
        #[test]
        fn matches_a_linear_scan(
            raw in prop::collection::vec((addr(), 0u8..=128, any::<u16>()), 0..40),
            probes in prop::collection::vec(addr(), 1..40),
        ) {
            let mut t = PrefixTable::new();
            let mut entries = Vec::new();
            for (a, len, v) in raw {
                let len = if a.is_ipv4() { len % 33 } else { len };
                t.insert(a, len, v).unwrap();
                entries.push((a, len, v));
            }
            prop_assert!(t.nodes.len() <= 2 * entries.len());
            for (a, len, _) in &entries {
                prop_assert_eq!(t.lookup(*a), scan(&entries, *a), "{}/{}", a, len);
            }
            for p in probes {
                prop_assert_eq!(t.lookup(p), scan(&entries, p));
            }
        }
    }
}
