//! Authenticated bundles: when a mesh key is set, every bundle (in any
//! encoding) carries a 20-byte trailer after its last byte:
//!
//! ```text
//! bundle bytes (native / kau / simplemux, unchanged)
//!   | node: u32 BE | seq: u64 BE | tag: 8 bytes
//! tag = SipHash-2-4(key, "airpack bundle 1" | node | seq | bundle bytes)
//! ```
//!
//! `node` names the sending daemon (random at its start), `seq` grows by one
//! per bundle from a start that grows with time, and the receiver keeps an
//! [`crate::auth::ReplayWindow`] per node. The replay window is keyed by the
//! tagged node, not by the outer source address, so a recorded bundle sent
//! again under another source address is still a replay of its node. (The
//! sender does not know which source address the kernel will put on a raw
//! datagram, so the address itself is not tagged.) A trailer, not a header,
//! so the bundle's own layout and the engine's parsers do not change; the
//! receiver strips it after the check.
//!
//! Owns: the trailer layout. Must not touch: keys' storage, replay windows'
//! lifetime (the daemon's), or the bundle encodings.

use crate::auth::{tag, verify, Domain, Key, TAG_LEN};

/// Bytes the trailer adds to a bundle.
pub const TRAILER_LEN: usize = 4 + 8 + TAG_LEN;

/// Why [`open`] refused a bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SealError {
    /// Shorter than a trailer plus one byte of bundle.
    Short,
    /// The tag does not match (no key, another key, another sender, or changed bytes).
    BadTag,
}

impl core::fmt::Display for SealError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            SealError::Short => "too short for an authentication trailer",
            SealError::BadTag => "authentication tag does not match",
        })
    }
}

/// Appends the trailer to the bundle in `buf[..len]` and returns the new
/// length, or `None` (nothing written) when `buf` has no room for it.
pub fn seal(key: &Key, node: u32, seq: u64, buf: &mut [u8], len: usize) -> Option<usize> {
    let end = len.checked_add(TRAILER_LEN).filter(|e| *e <= buf.len())?;
    let mut ns = [0u8; 12];
    ns[..4].copy_from_slice(&node.to_be_bytes());
    ns[4..].copy_from_slice(&seq.to_be_bytes());
    let t = tag(key, &[Domain::BUNDLE, &ns, &buf[..len]]);
    buf[len..len + 12].copy_from_slice(&ns);
    buf[len + 12..end].copy_from_slice(&t);
    Some(end)
}

/// A checked trailer: who sent the bundle, its sequence number, and the
/// length of the bundle before the trailer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opened {
    /// The sending daemon's node number.
    pub node: u32,
    /// The bundle's sequence number (check it against `node`'s replay window).
    pub seq: u64,
    /// Bytes of bundle before the trailer.
    pub len: usize,
}

/// Checks the trailer of `bytes`. The caller then checks `seq` against the
/// node's replay window (after the tag, never before: a forged bundle must
/// not move the window).
pub fn open(key: &Key, bytes: &[u8]) -> Result<Opened, SealError> {
    let len = bytes
        .len()
        .checked_sub(TRAILER_LEN)
        .filter(|l| *l > 0)
        .ok_or(SealError::Short)?;
    let ns = &bytes[len..len + 12];
    if !verify(
        key,
        &[Domain::BUNDLE, ns, &bytes[..len]],
        &bytes[len + 12..],
    ) {
        return Err(SealError::BadTag);
    }
    Ok(Opened {
        node: u32::from_be_bytes(ns[..4].try_into().expect("4 bytes")),
        seq: u64::from_be_bytes(ns[4..].try_into().expect("8 bytes")),
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(b: u8) -> Key {
        Key::from_bytes([b; 16])
    }

    /// The layout, spelled out, so it cannot change unnoticed (the SipHash
    /// itself is checked against the reference vectors in `auth`).
    #[test]
    fn layout() {
        let mut buf = [0u8; 64];
        buf[..5].copy_from_slice(b"hello");
        let n = seal(&key(7), 0x0a0b_0c0d, 0x0102_0304_0506_0708, &mut buf, 5).unwrap();
        assert_eq!(n, 5 + TRAILER_LEN);
        assert_eq!(&buf[5..17], &[10, 11, 12, 13, 1, 2, 3, 4, 5, 6, 7, 8]);
        let t = tag(
            &key(7),
            &[
                b"airpack bundle 1",
                &[10, 11, 12, 13, 1, 2, 3, 4, 5, 6, 7, 8],
                b"hello",
            ],
        );
        assert_eq!(&buf[17..25], &t);
        let o = open(&key(7), &buf[..n]).unwrap();
        assert_eq!(
            (o.node, o.seq, o.len),
            (0x0a0b_0c0d, 0x0102_0304_0506_0708, 5)
        );
    }

    #[test]
    fn no_room_writes_nothing() {
        let mut buf = [9u8; 24];
        assert_eq!(seal(&key(1), 1, 1, &mut buf, 5), None);
        assert_eq!(buf, [9u8; 24]);
        assert_eq!(open(&key(1), &buf[..20]), Err(SealError::Short));
        assert_eq!(open(&key(1), &buf[..21]), Err(SealError::BadTag));
    }

    proptest! {
        /// A sealed bundle opens under the same key only; any changed byte
        /// or another key is refused.
        #[test]
        fn round_trip_and_tamper(
            body in prop::collection::vec(any::<u8>(), 1..300),
            node in any::<u32>(),
            seq in any::<u64>(),
            flip in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let mut buf = vec![0u8; body.len() + TRAILER_LEN];
            buf[..body.len()].copy_from_slice(&body);
            let n = seal(&key(3), node, seq, &mut buf, body.len()).unwrap();
            prop_assert_eq!(open(&key(3), &buf[..n]), Ok(Opened { node, seq, len: body.len() }));
            prop_assert_eq!(open(&key(4), &buf[..n]), Err(SealError::BadTag));
            let i = flip.index(n);
            buf[i] ^= 1 << bit;
            prop_assert_eq!(open(&key(3), &buf[..n]), Err(SealError::BadTag));
        }
    }
}
