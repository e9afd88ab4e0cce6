//! Message authentication for a mesh with one pre-shared key: a keyed tag
//! (SipHash-2-4, 64- or 128-bit output) and a sliding replay window.
//!
//! Owns: [`Key`], [`tag`] / [`tag128`] over several byte slices, the
//! constant-time [`verify`], the [`Domain`] labels that keep one key's tags
//! for different message kinds apart, and [`ReplayWindow`] (RFC 6479).
//! Must not touch: wire layouts (where the tag and sequence number sit is the
//! job of each wire format, e.g. the hello format in `neighbor::hello`), key storage,
//! clocks or randomness. Pure, allocation-free, no `unsafe`.
//!
//! # Security properties
//!
//! * **What it gives.** SipHash-2-4 is a pseudorandom function keyed with
//!   128 bits (Aumasson and Bernstein, *SipHash: a fast short-input PRF*,
//!   2012). Without the key, an attacker on the radio who sees any number of
//!   tagged messages cannot produce a valid 64-bit tag for a new message with
//!   probability better than about 2^-64 per attempt, and each attempt costs
//!   a packet on the air, which the receiver counts and drops. Recovering the
//!   key needs about 2^128 work. The 128-bit output ([`tag128`], the
//!   reference implementation's `SipHash-2-4-128`) lowers the per-attempt
//!   forgery chance further; its authors call it experimental, so the
//!   64-bit tag is the recommended one.
//! * **Replays.** A tag alone does not stop a recorded message from being sent
//!   again. Every authenticated message carries a 64-bit sequence number
//!   inside the tagged bytes, and the receiver keeps a [`ReplayWindow`] per
//!   sender. Order matters: verify the tag first, then call
//!   [`ReplayWindow::check_and_update`]; a forged message must never move
//!   the window. ([`ReplayWindow::check`] is a cheap pre-filter that changes
//!   nothing.)
//! * **Domain separation.** The tag covers exactly the concatenation of the
//!   slices given: `tag(k, &[a, b]) == tag(k, &[ab])`. A caller's layout must
//!   therefore be unambiguous (fixed-size fields, or lengths inside the
//!   tagged bytes), and should start with a [`Domain`] label so that a hello's
//!   tag can never be presented as a bundle's.
//!
//! # Limits (what it does not do)
//!
//! * No confidentiality: payloads stay in clear; this is authentication only.
//! * One key per mesh: every key holder can forge every other node's
//!   messages. It keeps strangers out, not a compromised member.
//! * Sequence numbers must not go backwards across a sender's restarts; the
//!   sender should start from a value that grows with time (for example
//!   microseconds since the Unix epoch at start-up). A receiver that forgets
//!   a sender's window (the neighbour expired) accepts recorded messages of
//!   that sender newer than the last one it forgot about; keep windows as
//!   long as the table can afford.
//! * Key rotation is the caller's: tags name no key. Wire formats that carry
//!   a key id let a receiver hold two keys during a change-over.
//! * Constant time: SipHash has no secret-dependent branches or table
//!   look-ups, and [`verify`] compares all bytes without an early exit. The
//!   compiler is not told to preserve this (no `black_box` barrier); it is a
//!   best effort, as in most pure-Rust MAC comparisons without `unsafe`.
//! * Keys are not wiped from memory on drop (that would need volatile
//!   writes, i.e. `unsafe`).

use core::fmt;

/// Length of a [`Key`] in bytes.
pub const KEY_LEN: usize = 16;
/// Length of a [`tag`] in bytes (SipHash-2-4, 64-bit output).
pub const TAG_LEN: usize = 8;
/// Length of a [`tag128`] in bytes (SipHash-2-4-128).
pub const TAG128_LEN: usize = 16;

/// A 128-bit pre-shared key. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key {
    k0: u64,
    k1: u64,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

/// Why a key string was refused by [`Key::from_hex`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// Not exactly 32 hexadecimal digits (after removing `:`, `-` and spaces).
    Length,
    /// A character that is not a hexadecimal digit.
    NotHex,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyError::Length => "a key is 32 hexadecimal digits (16 bytes)",
            KeyError::NotHex => "a key may contain only hexadecimal digits",
        })
    }
}

impl Key {
    /// The key from its 16 bytes (read as two little-endian words, as SipHash does).
    pub const fn from_bytes(b: [u8; KEY_LEN]) -> Key {
        let mut lo = [0u8; 8];
        let mut hi = [0u8; 8];
        let mut i = 0;
        while i < 8 {
            lo[i] = b[i];
            hi[i] = b[i + 8];
            i += 1;
        }
        Key {
            k0: u64::from_le_bytes(lo),
            k1: u64::from_le_bytes(hi),
        }
    }

    /// Parses 32 hexadecimal digits (`:`, `-` and whitespace between them are ignored),
    /// e.g. a key from a configuration file.
    pub fn from_hex(s: &str) -> Result<Key, KeyError> {
        let mut b = [0u8; KEY_LEN];
        let mut n = 0usize;
        for c in s.chars() {
            if c == ':' || c == '-' || c.is_whitespace() {
                continue;
            }
            let d = c.to_digit(16).ok_or(KeyError::NotHex)? as u8;
            if n >= 2 * KEY_LEN {
                return Err(KeyError::Length);
            }
            b[n / 2] |= if n % 2 == 0 { d << 4 } else { d };
            n += 1;
        }
        if n != 2 * KEY_LEN {
            return Err(KeyError::Length);
        }
        Ok(Key::from_bytes(b))
    }
}

/// Labels that start the tagged bytes of each kind of message, so one key's
/// tags cannot be moved from one kind to another. Fixed-length within a kind.
pub struct Domain;

impl Domain {
    /// Neighbour hellos (`neighbor::hello`).
    pub const HELLO: &'static [u8] = b"airpack hello v1";
    /// Bundles between peers.
    pub const BUNDLE: &'static [u8] = b"airpack bundle 1";
}

/// SipHash-2-4 state over a stream of bytes; the message is the
/// concatenation of everything written.
#[derive(Clone)]
struct Sip {
    v0: u64,
    v1: u64,
    v2: u64,
    v3: u64,
    /// Bytes not yet absorbed (little-endian, `ntail` of them).
    tail: u64,
    ntail: usize,
    len: u64,
}

impl Sip {
    #[inline]
    fn new(key: &Key, wide: bool) -> Sip {
        let mut s = Sip {
            v0: key.k0 ^ 0x736f_6d65_7073_6575,
            v1: key.k1 ^ 0x646f_7261_6e64_6f6d,
            v2: key.k0 ^ 0x6c79_6765_6e65_7261,
            v3: key.k1 ^ 0x7465_6462_7974_6573,
            tail: 0,
            ntail: 0,
            len: 0,
        };
        if wide {
            s.v1 ^= 0xee;
        }
        s
    }

    #[inline(always)]
    fn round(&mut self) {
        self.v0 = self.v0.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(13);
        self.v1 ^= self.v0;
        self.v0 = self.v0.rotate_left(32);
        self.v2 = self.v2.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(16);
        self.v3 ^= self.v2;
        self.v0 = self.v0.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(21);
        self.v3 ^= self.v0;
        self.v2 = self.v2.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(17);
        self.v1 ^= self.v2;
        self.v2 = self.v2.rotate_left(32);
    }

    #[inline(always)]
    fn absorb(&mut self, m: u64) {
        self.v3 ^= m;
        self.round();
        self.round();
        self.v0 ^= m;
    }

    #[inline]
    fn write(&mut self, mut data: &[u8]) {
        self.len = self.len.wrapping_add(data.len() as u64);
        // Top up a partial word first.
        while self.ntail != 0 && !data.is_empty() {
            self.tail |= u64::from(data[0]) << (8 * self.ntail);
            self.ntail += 1;
            data = &data[1..];
            if self.ntail == 8 {
                let m = self.tail;
                self.absorb(m);
                self.tail = 0;
                self.ntail = 0;
            }
        }
        if self.ntail != 0 {
            return; // `data` ran out inside the partial word
        }
        let mut words = data.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.absorb(u64::from_le_bytes(b));
        }
        for (i, &byte) in words.remainder().iter().enumerate() {
            self.tail |= u64::from(byte) << (8 * i);
        }
        self.ntail = words.remainder().len();
    }

    #[inline]
    fn finish_block(&mut self) {
        let b = ((self.len & 0xff) << 56) | self.tail;
        self.absorb(b);
    }

    #[inline]
    fn finalize(&mut self, xor: u64) -> u64 {
        self.v2 ^= xor;
        for _ in 0..4 {
            self.round();
        }
        self.v0 ^ self.v1 ^ self.v2 ^ self.v3
    }
}

/// SipHash-2-4 of the concatenation of `parts` under `key`: the 8-byte tag,
/// byte for byte as the reference implementation writes it (little-endian).
#[inline]
pub fn tag(key: &Key, parts: &[&[u8]]) -> [u8; TAG_LEN] {
    let mut s = Sip::new(key, false);
    for p in parts {
        s.write(p);
    }
    s.finish_block();
    s.finalize(0xff).to_le_bytes()
}

/// SipHash-2-4-128 of the concatenation of `parts` under `key`: the 16-byte
/// tag as the reference implementation writes it.
#[inline]
pub fn tag128(key: &Key, parts: &[&[u8]]) -> [u8; TAG128_LEN] {
    let mut s = Sip::new(key, true);
    for p in parts {
        s.write(p);
    }
    s.finish_block();
    let a = s.finalize(0xee);
    s.v1 ^= 0xdd;
    let b = s.finalize(0);
    let mut out = [0u8; TAG128_LEN];
    out[..8].copy_from_slice(&a.to_le_bytes());
    out[8..].copy_from_slice(&b.to_le_bytes());
    out
}

/// Compares two byte strings in time that depends only on their lengths.
#[inline]
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    diff == 0
}

/// Whether `expected` is the tag of `parts` under `key`: a [`TAG_LEN`]-byte
/// `expected` is checked against [`tag`], a [`TAG128_LEN`]-byte one against
/// [`tag128`]; any other length is refused. The comparison is constant-time.
#[inline]
pub fn verify(key: &Key, parts: &[&[u8]], expected: &[u8]) -> bool {
    match expected.len() {
        TAG_LEN => ct_eq(&tag(key, parts), expected),
        TAG128_LEN => ct_eq(&tag128(key, parts), expected),
        _ => false,
    }
}

/// Why [`ReplayWindow`] refused a sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replay {
    /// This sequence number was accepted before.
    Duplicate,
    /// Older than the window: it cannot be told from a replay any more.
    TooOld,
}

impl fmt::Display for Replay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Replay::Duplicate => "sequence number seen before (replay)",
            Replay::TooOld => "sequence number older than the replay window",
        })
    }
}

/// Sliding anti-replay window over 64-bit sequence numbers (RFC 6479): a ring
/// of `WORDS` 64-bit blocks; the highest number seen and the
/// `(WORDS - 1) * 64` numbers below it are tracked, anything older is refused.
/// Moving the window forward clears whole blocks, so an update costs at most
/// `WORDS` word writes whatever the jump. The default (16 words, 136 bytes)
/// tracks 960 numbers: reordering across more than that many packets of one
/// sender is reported as [`Replay::TooOld`].
#[derive(Clone, Debug)]
pub struct ReplayWindow<const WORDS: usize = 16> {
    bitmap: [u64; WORDS],
    /// Highest accepted sequence number (meaningless while `empty`).
    top: u64,
    empty: bool,
}

impl<const WORDS: usize> Default for ReplayWindow<WORDS> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const WORDS: usize> ReplayWindow<WORDS> {
    /// How many sequence numbers below the highest one are still told apart.
    pub const WINDOW: u64 = (WORDS as u64 - 1) * 64;

    /// An empty window: the first sequence number is accepted, whatever it is.
    pub const fn new() -> Self {
        assert!(WORDS >= 2, "a replay window needs at least two blocks");
        ReplayWindow {
            bitmap: [0; WORDS],
            top: 0,
            empty: true,
        }
    }

    /// The highest sequence number accepted so far.
    pub fn highest(&self) -> Option<u64> {
        (!self.empty).then_some(self.top)
    }

    #[inline]
    fn slot(seq: u64) -> (usize, u64) {
        (((seq >> 6) % WORDS as u64) as usize, 1u64 << (seq & 63))
    }

    /// Whether `seq` would be accepted, changing nothing.
    #[inline]
    pub fn check(&self, seq: u64) -> Result<(), Replay> {
        if self.empty || seq > self.top {
            return Ok(());
        }
        if self.top - seq >= Self::WINDOW {
            return Err(Replay::TooOld);
        }
        let (block, bit) = Self::slot(seq);
        if self.bitmap[block] & bit != 0 {
            Err(Replay::Duplicate)
        } else {
            Ok(())
        }
    }

    /// Accepts `seq` (and remembers it) or says why not. Call only after the
    /// message's tag has been verified.
    #[inline]
    pub fn check_and_update(&mut self, seq: u64) -> Result<(), Replay> {
        self.check(seq)?;
        if self.empty {
            self.bitmap = [0; WORDS];
            self.top = seq;
            self.empty = false;
        } else if seq > self.top {
            let cur = self.top >> 6;
            let new = seq >> 6;
            let steps = (new - cur).min(WORDS as u64);
            for i in 1..=steps {
                self.bitmap[((cur + i) % WORDS as u64) as usize] = 0;
            }
            self.top = seq;
        }
        let (block, bit) = Self::slot(seq);
        self.bitmap[block] |= bit;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference_key() -> Key {
        let mut k = [0u8; 16];
        for (i, b) in k.iter_mut().enumerate() {
            *b = i as u8;
        }
        Key::from_bytes(k)
    }

    /// The worked example of the SipHash paper, appendix A: 15-byte message
    /// 00..0e under key 00..0f gives 0xa129ca6149be45e5.
    #[test]
    fn paper_appendix_a() {
        let msg: [u8; 15] = core::array::from_fn(|i| i as u8);
        let t = tag(&reference_key(), &[&msg]);
        assert_eq!(u64::from_le_bytes(t), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn split_points_do_not_change_the_tag() {
        let msg: [u8; 40] = core::array::from_fn(|i| (i * 7) as u8);
        let k = reference_key();
        let whole = tag(&k, &[&msg]);
        let whole128 = tag128(&k, &[&msg]);
        for a in 0..=msg.len() {
            for b in a..=msg.len() {
                let parts: [&[u8]; 4] = [&msg[..a], &[], &msg[a..b], &msg[b..]];
                assert_eq!(tag(&k, &parts), whole, "split {a} {b}");
                assert_eq!(tag128(&k, &parts), whole128, "split {a} {b}");
            }
        }
    }

    #[test]
    fn verify_accepts_only_the_right_tag() {
        let k = reference_key();
        let t = tag(&k, &[b"hello"]);
        assert!(verify(&k, &[b"hello"], &t));
        assert!(!verify(&k, &[b"hellp"], &t));
        let other = Key::from_bytes([0x55; 16]);
        assert!(!verify(&other, &[b"hello"], &t));
        for i in 0..TAG_LEN {
            let mut bad = t;
            bad[i] ^= 1;
            assert!(!verify(&k, &[b"hello"], &bad));
        }
        assert!(!verify(&k, &[b"hello"], &t[..7]));
        assert!(!verify(&k, &[b"hello"], &[]));
        let t128 = tag128(&k, &[b"hello"]);
        assert!(verify(&k, &[b"hello"], &t128));
        assert!(!verify(&k, &[b"hello!"], &t128));
    }

    #[test]
    fn key_from_hex() {
        let k = Key::from_hex("00010203 04050607-08090a0b:0C0D0E0F").unwrap();
        assert_eq!(k, reference_key());
        assert_eq!(Key::from_hex("0001"), Err(KeyError::Length));
        assert_eq!(
            Key::from_hex("000102030405060708090a0b0c0d0e0f00"),
            Err(KeyError::Length)
        );
        assert_eq!(
            Key::from_hex("000102030405060708090a0b0c0d0e0g"),
            Err(KeyError::NotHex)
        );
        assert_eq!(format!("{k:?}"), "Key(<redacted>)");
    }

    #[test]
    fn replay_window_basics() {
        let mut w = ReplayWindow::<16>::new();
        assert_eq!(w.highest(), None);
        assert_eq!(w.check_and_update(1000), Ok(()));
        assert_eq!(w.check_and_update(1000), Err(Replay::Duplicate));
        assert_eq!(w.check_and_update(999), Ok(()));
        assert_eq!(w.check_and_update(1001), Ok(()));
        assert_eq!(w.highest(), Some(1001));
        // 1001 - 960 = 41 is the oldest still told apart.
        assert_eq!(w.check(1001 - 960), Err(Replay::TooOld));
        assert_eq!(w.check_and_update(1001 - 959), Ok(()));
        assert_eq!(w.check_and_update(1001 - 959), Err(Replay::Duplicate));
        // A jump far ahead forgets everything below the new window.
        assert_eq!(w.check_and_update(1_000_000), Ok(()));
        assert_eq!(w.check(1001), Err(Replay::TooOld));
        assert_eq!(w.check_and_update(1_000_000 - 1), Ok(()));
        assert_eq!(w.check_and_update(u64::MAX), Ok(()));
        assert_eq!(w.check_and_update(u64::MAX), Err(Replay::Duplicate));
    }
}
