//! Bundle authentication (issue 11, point 3): with a mesh key
//! (`discovery.key`), every bundle sent carries the trailer of
//! [`airpack_core::wire::sealed`], and a received bundle is taken only when
//! its tag matches and its sequence number is new for its node (one replay
//! window per sending node, bounded; the least recently used window goes
//! when a new node needs room).
//!
//! Owns: this daemon's node number and sequence counter, the replay windows.
//! Must not touch: sockets, the engine, the counters (the caller counts what
//! [`BundleAuth::open`] refuses).

use super::discovery::{epoch_micros, random_u64};
use airpack_core::auth::{Key, ReplayWindow};
use airpack_core::wire::sealed;
use std::collections::HashMap;

/// Why a received bundle was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// No trailer, or a tag that does not match (stranger, other key, damage).
    BadTag,
    /// A valid bundle seen before, or older than its node's window.
    Replayed,
}

pub(super) struct BundleAuth {
    key: Key,
    node: u32,
    seq: u64,
    /// Replay window and last use (a counter) per sending node.
    windows: HashMap<u32, (ReplayWindow, u64)>,
    cap: usize,
    uses: u64,
}

impl BundleAuth {
    /// `cap`: how many sending nodes are remembered (allocated up front).
    pub(super) fn new(key: Key, cap: usize) -> Self {
        let cap = cap.max(1);
        BundleAuth {
            key,
            node: random_u64() as u32,
            // Grows with time, so it does not go back across restarts.
            seq: epoch_micros(),
            windows: HashMap::with_capacity(cap),
            cap,
            uses: 0,
        }
    }

    /// Appends the trailer to the bundle in `buf[..len]`; the new length, or
    /// `None` when `buf` has no room (the engine leaves room: the trailer is
    /// part of each peer's `outer_overhead`).
    pub(super) fn seal(&mut self, buf: &mut [u8], len: usize) -> Option<usize> {
        self.seq = self.seq.wrapping_add(1);
        sealed::seal(&self.key, self.node, self.seq, buf, len)
    }

    /// Checks a received bundle; on success, the length of the bundle
    /// without its trailer.
    pub(super) fn open(&mut self, bytes: &[u8]) -> Result<usize, Refused> {
        let o = sealed::open(&self.key, bytes).map_err(|_| Refused::BadTag)?;
        self.uses += 1;
        if !self.windows.contains_key(&o.node) && self.windows.len() >= self.cap {
            // Only nodes holding the key get here, so this is a restart or
            // churn, not an attack; forget the window used least recently.
            if let Some(old) = self.windows.iter().min_by_key(|e| e.1 .1).map(|e| *e.0) {
                self.windows.remove(&old);
            }
        }
        let w = self.windows.entry(o.node).or_default();
        w.1 = self.uses;
        w.0.check_and_update(o.seq).map_err(|_| Refused::Replayed)?;
        Ok(o.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_bundles_open_once_and_strangers_are_refused() {
        let key = Key::from_bytes([5; 16]);
        let mut a = BundleAuth::new(key.clone(), 4);
        let mut b = BundleAuth::new(key, 2);
        let mut buf = [0u8; 100];
        buf[..10].copy_from_slice(b"0123456789");
        let n = a.seal(&mut buf, 10).unwrap();
        assert_eq!(b.open(&buf[..n]), Ok(10));
        assert_eq!(b.open(&buf[..n]), Err(Refused::Replayed));
        let mut stranger = BundleAuth::new(Key::from_bytes([6; 16]), 2);
        let mut s = [0u8; 100];
        let m = stranger.seal(&mut s, 10).unwrap();
        assert_eq!(b.open(&s[..m]), Err(Refused::BadTag));
        assert_eq!(b.open(&buf[..10]), Err(Refused::BadTag));
        // Windows are bounded: two more senders push out the oldest (a), whose
        // recorded bundle then passes once more; that is the documented cost
        // of a bounded table, reached only by key holders.
        for i in 1..=2 {
            let mut c = BundleAuth::new(Key::from_bytes([5; 16]), 1);
            c.node = a.node.wrapping_add(i);
            let k = c.seal(&mut s, 10).unwrap();
            assert_eq!(b.open(&s[..k]), Ok(10));
        }
        assert_eq!(b.windows.len(), 2);
        assert!(!b.windows.contains_key(&a.node));
        assert_eq!(b.open(&buf[..n]), Ok(10));
        assert!(a.seal(&mut [0u8; 29], 10).is_none());
    }
}
