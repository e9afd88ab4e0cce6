//! Wire formats: strict, zero-copy parsers and writers over byte slices.
//!
//! Owns: the bundle encodings ([`native`], [`kau`], [`simplemux`]), the IP
//! header views the parsers and the classifier need ([`ip`]), and the typed
//! [`DecodeError`]s. One module per format, in the manner of smoltcp.
//!
//! A *bundle payload* is what follows the outer IP (or UDP) header. The outer
//! header itself is the transport's job (the daemon's raw socket, the lab, a
//! simulator); [`ip::emit_ipv4_header`] builds one where a whole packet is
//! wanted (golden vectors, the `kau` layout of seed 001).
//!
//! Must not touch: queues, time, policy (that is [`crate::engine`]), or any I/O.
//! Parsers never panic, never loop without bound and never allocate in
//! proportion to an attacker-chosen length.

mod bundle;
pub mod ip;
pub mod kau;
pub mod native;
pub mod sealed;
pub mod simplemux;

pub(crate) use bundle::check_inner;
pub use bundle::{Bundle, Packets, RxContext};
use core::fmt;
use core::str::FromStr;

/// IP protocol number for bundles by default (RFC 3692 experimental, as in seed 001).
pub const DEFAULT_PROTOCOL: u8 = 253;

/// The largest bundle payload any encoding produces or accepts.
pub const MAX_BUNDLE: usize = 65_535;

/// How a bundle is laid out on the wire; chosen per peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Encoding {
    /// airpack's own versioned, extensible format ([`native`]).
    #[default]
    Native,
    /// Seed 001/000 layout: inner IPv4 packets back to back ([`kau`]).
    Kau,
    /// Simplemux "normal" flavour, draft-saldana-tsvwg-simplemux ([`simplemux`]).
    Simplemux,
}

impl Encoding {
    /// All encodings, for tests and tables.
    pub const ALL: [Encoding; 3] = [Encoding::Native, Encoding::Kau, Encoding::Simplemux];

    /// The name used in configuration files and statistics.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Native => "native",
            Encoding::Kau => "kau",
            Encoding::Simplemux => "simplemux",
        }
    }

    /// Whether a bundle in this encoding can carry `packet` (e.g. `kau` is IPv4 only).
    pub fn can_carry(self, packet: &[u8]) -> bool {
        match self {
            Encoding::Native => native::can_carry(packet),
            Encoding::Kau => kau::can_carry(packet),
            Encoding::Simplemux => simplemux::can_carry(packet),
        }
    }

    /// Like [`Encoding::can_carry`], for a packet that already passed
    /// [`ip::inspect`] (whose summary is `info`): no second header walk or
    /// checksum. `can_carry(p) == matches!(ip::inspect(p), Ok(i) if can_carry_info(&i))`.
    pub fn can_carry_info(self, info: &ip::PacketInfo) -> bool {
        if ip::is_bundle_protocol(info.protocol) || info.len > ip::MAX_PACKET {
            return false;
        }
        match self {
            Encoding::Native | Encoding::Simplemux => true,
            Encoding::Kau => info.version == 4,
        }
    }

    /// The separator that precedes `packet` in a bundle of this encoding
    /// when it is not the first packet: `(bytes, length)`, the separator being
    /// `bytes[..length]` (`length == cost - packet.len()`, at most
    /// [`MAX_SEPARATOR`]). The engine queues packets in this form so a bundle
    /// body is copied in one piece ([`BundleWriter::push_encoded`]).
    #[inline]
    pub(crate) fn later_separator(self, packet: &[u8]) -> ([u8; MAX_SEPARATOR], usize) {
        let mut sep = [0u8; MAX_SEPARATOR];
        let len = packet.len();
        let n = match self {
            Encoding::Native => {
                let n = native::prefix_len(len);
                native::write_separator(&mut sep[..n], len);
                n
            }
            Encoding::Kau => 0,
            Encoding::Simplemux => {
                let n = simplemux::length_bytes(len, false) + 1;
                simplemux::write_separator(&mut sep[..n], packet, false);
                n
            }
        };
        (sep, n)
    }

    /// Whether the first packet of a bundle is written exactly as a later one
    /// (`native`: the same length prefix; `kau`: no separator), so that
    /// packets kept in their later-packet form can be copied into a bundle
    /// from the first one on ([`BundleWriter::push_encoded`]).
    #[inline]
    pub(crate) fn first_as_later(self) -> bool {
        matches!(self, Encoding::Native | Encoding::Kau)
    }

    /// Parses a bundle payload: its framing (format header, every
    /// separator, lengths that add up to the payload, the packet-count
    /// bound) must be intact, else the whole bundle is refused with the
    /// error. Each inner packet is then checked on its own (`ip::validate_inner`;
    /// Simplemux: a Protocol label of 4 or 41, the packet's version nibble
    /// deciding between IPv4 and IPv6); one that fails is refused alone
    /// (see [`Bundle::refused`]) and the others are delivered.
    pub fn decode(self, payload: &[u8]) -> Result<Bundle<'_>, DecodeError> {
        match self {
            Encoding::Native => native::decode(payload),
            Encoding::Kau => kau::decode(payload),
            Encoding::Simplemux => simplemux::decode(payload),
        }
    }

    /// [`Encoding::decode`] for a bundle received with `rx`: RFC 6040's
    /// decapsulation is applied to the inner packets in place (outer CE:
    /// ECT(0)/ECT(1) inner packets become CE, their IPv4 checksum updated, and
    /// a Not-ECT inner packet is refused as [`DecodeError::CeOnNotEct`]; outer
    /// ECT(1): ECT(0) inner packets become ECT(1)), and inner UDP packets to
    /// `rx.udp_port` are refused as [`DecodeError::Nested`]. Refused packets
    /// are left unchanged.
    pub fn decode_rx(self, payload: &mut [u8], rx: RxContext) -> Result<Bundle<'_>, DecodeError> {
        bundle::decode_rx(self, payload, rx)
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Encoding {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Encoding::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| format!("unknown encoding {s:?} (expected native, kau or simplemux)"))
    }
}

/// Why a bundle (or an inner packet) was rejected. Every variant is a
/// statistics counter, so the set is closed and indexable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecodeError {
    /// Nothing to parse.
    Empty,
    /// A length field points past the end of the input.
    Truncated,
    /// A length field is larger than any valid value (e.g. > 65535, or a
    /// length encoding longer than the format allows).
    Overlong,
    /// An inner packet of length zero, or shorter than its own header.
    ZeroLength,
    /// Unknown bundle format version, or an inner packet whose IP version is not 4 or 6.
    BadVersion,
    /// An inner IPv4 header whose checksum does not verify.
    BadIpv4Checksum,
    /// An inner packet is itself a bundle (its protocol is a bundle protocol).
    Nested,
    /// Bytes left over after the last complete inner packet.
    TrailingGarbage,
    /// A protocol or feature the format names but this implementation does not carry.
    Unsupported,
    /// An inner IP header is malformed (bad IHL, total length inconsistent with the separator, ...).
    BadInnerHeader,
    /// More inner packets than [`MAX_PACKETS_PER_BUNDLE`].
    TooManyPackets,
    /// An inner packet that is not ECN-capable under an outer header marked
    /// CE (RFC 6040: dropped, as the congestion mark cannot be passed on).
    CeOnNotEct,
}

/// Upper bound on inner packets in one bundle, for parsers and writers alike.
pub const MAX_PACKETS_PER_BUNDLE: usize = 1024;

/// Longest separator any encoding puts before a packet that is not the first
/// (`native`: 3 bytes; `simplemux`: 3 length bytes + 1 protocol byte).
pub(crate) const MAX_SEPARATOR: usize = 4;

impl DecodeError {
    /// Number of variants (size of counter arrays).
    pub const COUNT: usize = 12;
    /// All variants, in [`DecodeError::index`] order.
    pub const ALL: [DecodeError; DecodeError::COUNT] = [
        DecodeError::Empty,
        DecodeError::Truncated,
        DecodeError::Overlong,
        DecodeError::ZeroLength,
        DecodeError::BadVersion,
        DecodeError::BadIpv4Checksum,
        DecodeError::Nested,
        DecodeError::TrailingGarbage,
        DecodeError::Unsupported,
        DecodeError::BadInnerHeader,
        DecodeError::TooManyPackets,
        DecodeError::CeOnNotEct,
    ];

    /// Dense index for counter arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Short snake_case reason, used as a statistics label.
    pub fn reason(self) -> &'static str {
        match self {
            DecodeError::Empty => "empty",
            DecodeError::Truncated => "truncated",
            DecodeError::Overlong => "overlong",
            DecodeError::ZeroLength => "zero_length",
            DecodeError::BadVersion => "bad_version",
            DecodeError::BadIpv4Checksum => "bad_ipv4_checksum",
            DecodeError::Nested => "nested",
            DecodeError::TrailingGarbage => "trailing_garbage",
            DecodeError::Unsupported => "unsupported",
            DecodeError::BadInnerHeader => "bad_inner_header",
            DecodeError::TooManyPackets => "too_many_packets",
            DecodeError::CeOnNotEct => "ce_on_not_ect",
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for DecodeError {}

/// Why a packet could not be appended to a bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The packet (with its separator) does not fit in what remains of the buffer.
    NoRoom,
    /// This encoding cannot carry this packet (see [`Encoding::can_carry`]).
    Unsupported,
}

/// Writes one bundle payload, packet by packet, into a caller's buffer (no allocation).
///
/// The buffer's length is the size limit: the engine passes a slice as long as
/// the peer's maximum bundle payload.
#[derive(Debug)]
pub struct BundleWriter<'a> {
    encoding: Encoding,
    buf: &'a mut [u8],
    len: usize,
    count: usize,
}

impl<'a> BundleWriter<'a> {
    /// Starts a bundle; reserves the format header, if any.
    ///
    /// Returns `None` when `buf` cannot even hold the format header. Only the
    /// first [`MAX_BUNDLE`] bytes of a longer `buf` are used, so no writer
    /// produces a payload a decoder would refuse as too long.
    pub fn new(encoding: Encoding, buf: &'a mut [u8]) -> Option<Self> {
        let usable = buf.len().min(MAX_BUNDLE);
        let buf = &mut buf[..usable];
        let hdr = match encoding {
            Encoding::Native => native::HEADER_LEN,
            Encoding::Kau => kau::HEADER_LEN,
            Encoding::Simplemux => simplemux::HEADER_LEN,
        };
        if buf.len() < hdr {
            return None;
        }
        Some(BundleWriter {
            encoding,
            buf,
            len: hdr,
            count: 0,
        })
    }

    /// Bytes that appending a packet of `packet_len` bytes would add (separator + packet).
    #[inline]
    pub fn cost(&self, packet_len: usize) -> usize {
        match self.encoding {
            Encoding::Native => native::cost(packet_len, self.count == 0),
            Encoding::Kau => kau::cost(packet_len, self.count == 0),
            Encoding::Simplemux => simplemux::cost(packet_len, self.count == 0),
        }
    }

    /// Bytes still free in the buffer.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.len
    }

    /// Appends one whole IP packet.
    ///
    /// Checks the packet with [`Encoding::can_carry`] first, so a bundle built
    /// with `push` always decodes; see [`BundleWriter::push_checked`] for the
    /// hot path.
    pub fn push(&mut self, packet: &[u8]) -> Result<(), EncodeError> {
        if !self.encoding.can_carry(packet) {
            return Err(EncodeError::Unsupported);
        }
        self.push_checked(packet)
    }

    /// Appends a packet the caller has already checked with
    /// [`Encoding::can_carry`] or [`Encoding::can_carry_info`] (the engine does
    /// so when it queues a packet), skipping the second header check; room and
    /// the packet-count bound are still checked. A packet that was not checked
    /// cannot corrupt memory, but may make the whole bundle undecodable.
    #[inline]
    pub fn push_checked(&mut self, packet: &[u8]) -> Result<(), EncodeError> {
        if self.count >= MAX_PACKETS_PER_BUNDLE || packet.len() > ip::MAX_PACKET {
            return Err(EncodeError::Unsupported);
        }
        let cost = self.cost(packet.len());
        let free = &mut self.buf[self.len..];
        if cost > free.len() {
            return Err(EncodeError::NoRoom);
        }
        let out = &mut free[..cost];
        let first = self.count == 0;
        match self.encoding {
            Encoding::Native => native::write_packet(out, packet, first),
            Encoding::Kau => kau::write_packet(out, packet, first),
            Encoding::Simplemux => simplemux::write_packet(out, packet, first),
        }
        self.len += cost;
        self.count += 1;
        Ok(())
    }

    /// Appends `count` packets already written in their later-packet form
    /// (each one [`Encoding::later_separator`] followed by the packet, back to
    /// back), in one copy. The caller has checked each packet as for
    /// [`BundleWriter::push_checked`]; unless the encoding writes its first
    /// packet as a later one ([`Encoding::first_as_later`]), at least one
    /// packet must already be in the bundle (the first packet's separator
    /// differs). On error nothing is written.
    #[inline]
    pub(crate) fn push_encoded(&mut self, encoded: &[u8], count: usize) -> Result<(), EncodeError> {
        if (self.count == 0 && !self.encoding.first_as_later())
            || count > MAX_PACKETS_PER_BUNDLE - self.count
        {
            return Err(EncodeError::Unsupported);
        }
        let free = &mut self.buf[self.len..];
        if encoded.len() > free.len() {
            return Err(EncodeError::NoRoom);
        }
        free[..encoded.len()].copy_from_slice(encoded);
        self.len += encoded.len();
        self.count += count;
        Ok(())
    }

    /// Packets written so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Bytes written so far, format header included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True before the first packet.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Completes the format header and returns the payload length.
    pub fn finish(self) -> usize {
        match self.encoding {
            Encoding::Native => native::write_header(&mut self.buf[..self.len], self.count),
            Encoding::Kau => kau::write_header(&mut self.buf[..self.len], self.count),
            Encoding::Simplemux => simplemux::write_header(&mut self.buf[..self.len], self.count),
        }
        self.len
    }
}

/// Tests: decodes `payload` (its framing must hold) and returns the reasons
/// of the refused inner packets, checking that the delivered ones and the
/// refused ones add up to the framed ones.
#[cfg(test)]
pub(crate) fn refused(enc: Encoding, payload: &[u8]) -> Vec<DecodeError> {
    let b = enc
        .decode(payload)
        .unwrap_or_else(|e| panic!("{enc}: framing refused: {e}"));
    let r: Vec<DecodeError> = b.refused().collect();
    assert_eq!(b.iter().count(), b.len());
    assert_eq!(b.len() + r.len(), b.framed());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_encoded_matches_push_checked() {
        // A bundle whose later packets are appended pre-encoded (separator from
        // `later_separator`, then the packet) is byte for byte the bundle
        // `push_checked` builds, for every encoding and separator length.
        let mut x: u32 = 0x51f1_5eed;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as usize
        };
        for round in 0..300 {
            let enc = Encoding::ALL[round % 3];
            let n = 2 + rnd() % 6;
            let pkts: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    let len = [20, 60, 127, 128, 200, 16_383, 16_384, 20_000][rnd() % 8];
                    let mut p: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
                    p[0] = if rnd() % 2 == 0 { 0x45 } else { 0x60 };
                    p
                })
                .collect();
            let mut a = vec![0u8; MAX_BUNDLE];
            let mut w = BundleWriter::new(enc, &mut a).unwrap();
            let mut fit = 0;
            for p in &pkts {
                if w.push_checked(p).is_err() {
                    break;
                }
                fit += 1;
            }
            let la = w.finish();
            let mut b = vec![0u8; MAX_BUNDLE];
            let mut w = BundleWriter::new(enc, &mut b).unwrap();
            if !enc.first_as_later() {
                assert_eq!(
                    w.push_encoded(&[], 0),
                    Err(EncodeError::Unsupported),
                    "not as the first packet"
                );
            } else {
                // Every packet pre-encoded, the first one included.
                let mut c = vec![0u8; MAX_BUNDLE];
                let mut v = BundleWriter::new(enc, &mut c).unwrap();
                let mut all = Vec::new();
                for p in &pkts[..fit] {
                    let (sep, k) = enc.later_separator(p);
                    all.extend_from_slice(&sep[..k]);
                    all.extend_from_slice(p);
                }
                v.push_encoded(&all, fit).unwrap();
                let lc = v.finish();
                assert_eq!(a[..la], c[..lc], "{enc}, {fit} packets, all pre-encoded");
            }
            w.push_checked(&pkts[0]).unwrap();
            let mut later = Vec::new();
            for p in &pkts[1..fit] {
                let (sep, k) = enc.later_separator(p);
                assert!(k <= MAX_SEPARATOR);
                assert_eq!(k + p.len(), w.cost(p.len()), "{enc} separator length");
                later.extend_from_slice(&sep[..k]);
                later.extend_from_slice(p);
            }
            w.push_encoded(&later, fit - 1).unwrap();
            assert_eq!(w.count(), fit);
            let lb = w.finish();
            assert_eq!(a[..la], b[..lb], "{enc}, {fit} packets");
        }
    }

    #[test]
    fn push_encoded_checks_room_and_count() {
        let p = [0x45u8; 40];
        let (sep, k) = Encoding::Native.later_separator(&p);
        let mut one = sep[..k].to_vec();
        one.extend_from_slice(&p);
        let mut buf = [0u8; 2 + 41 + 41];
        let mut w = BundleWriter::new(Encoding::Native, &mut buf).unwrap();
        w.push_checked(&p).unwrap();
        assert_eq!(
            w.push_encoded(&[one.clone(), one.clone()].concat(), 2),
            Err(EncodeError::NoRoom)
        );
        assert_eq!(w.len(), 43, "nothing written on error");
        assert_eq!(
            w.push_encoded(&one, MAX_PACKETS_PER_BUNDLE),
            Err(EncodeError::Unsupported)
        );
        w.push_encoded(&one, 1).unwrap();
        assert_eq!((w.count(), w.remaining()), (2, 0));
    }
}
