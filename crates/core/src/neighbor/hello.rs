//! The hello message between airpack daemons on one link (version 1).
//!
//! Owns: the byte layout ([`Hello::parse`], [`HelloWriter`]), its typed
//! [`HelloError`]s and the optional authentication trailer (a SipHash-2-4
//! tag from [`crate::auth`] over the whole message). Layout, byte by byte:
//! `docs/wire-format.md`, section "Hello". Must not touch: neighbour state,
//! time, sockets (that is [`super::table`] and the daemon). The parser is
//! strict (every length checked, no trailing bytes) and never panics; the
//! writer never writes past its buffer; neither allocates.

use crate::auth::{self, Domain, Key, TAG_LEN};
use crate::wire::Encoding;
use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The only version this module reads and writes.
pub const VERSION: u8 = 1;
/// Bytes before the first neighbour entry.
pub const HEADER_LEN: usize = 22;
/// Bytes of the authentication trailer: key id + 8-byte tag.
pub const TRAILER_LEN: usize = 1 + TAG_LEN;
/// Most neighbour entries one hello can carry (the count is one byte).
pub const MAX_ENTRIES: usize = 255;
/// Largest hello: header, 255 IPv6 entries with radio figures, trailer.
pub const MAX_HELLO: usize = HEADER_LEN + MAX_ENTRIES * 30 + TRAILER_LEN;

/// Header flag: an authentication trailer ends the message.
pub const FLAG_AUTH: u8 = 0x01;
/// Header flags a receiver must understand (bits 1-3 are reserved, must be 0).
const FLAGS_CRITICAL: u8 = 0x0f;
/// Entry kind: the entry carries signal and noise (dBm) after the address.
const KIND_RADIO: u8 = 0x80;
/// Entry kind bits that are reserved and must be 0.
const KIND_RESERVED: u8 = 0x70;

/// Why a hello was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloError {
    /// Shorter than its header, its entries or its trailer say.
    Truncated,
    /// Version other than [`VERSION`].
    BadVersion,
    /// A must-understand flag or entry bit this version does not know, or an
    /// address family other than IPv4/IPv6.
    Unsupported,
    /// A field with a value the format forbids (hello interval 0).
    BadField,
    /// Bytes after the last entry (and trailer).
    TrailingGarbage,
}

impl HelloError {
    /// Statistics label.
    pub fn reason(self) -> &'static str {
        match self {
            HelloError::Truncated => "truncated",
            HelloError::BadVersion => "bad_version",
            HelloError::Unsupported => "unsupported",
            HelloError::BadField => "bad_field",
            HelloError::TrailingGarbage => "trailing_garbage",
        }
    }
}

impl fmt::Display for HelloError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

/// The set of bundle encodings a node accepts, one bit each (bit 0 native,
/// bit 1 kau, bit 2 simplemux). Unknown bits are kept (a newer peer's
/// encodings) but never match an [`Encoding`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct Encodings(pub u8);

impl Encodings {
    fn bit(e: Encoding) -> u8 {
        match e {
            Encoding::Native => 0x01,
            Encoding::Kau => 0x02,
            Encoding::Simplemux => 0x04,
        }
    }

    /// The set holding exactly `list`.
    pub fn of(list: &[Encoding]) -> Encodings {
        Encodings(list.iter().fold(0, |acc, &e| acc | Self::bit(e)))
    }

    /// Whether `e` is in the set.
    pub fn contains(self, e: Encoding) -> bool {
        self.0 & Self::bit(e) != 0
    }

    /// The first encoding of the set in order of preference (native, then
    /// simplemux, then kau), if any.
    pub fn preferred(self) -> Option<Encoding> {
        [Encoding::Native, Encoding::Simplemux, Encoding::Kau]
            .into_iter()
            .find(|&e| self.contains(e))
    }

    /// The encoding two nodes use between them: the preferred one both
    /// accept. Symmetric, so each side knows what the other sends without
    /// asking.
    pub fn common(self, other: Encodings) -> Option<Encoding> {
        Encodings(self.0 & other.0).preferred()
    }
}

/// Signal and noise of a neighbour's frames as the sender's radio reports
/// them (dBm).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Radio {
    /// Received signal strength, dBm.
    pub signal_dbm: i8,
    /// Noise floor, dBm.
    pub noise_dbm: i8,
}

/// What a hello says about one neighbour its sender hears.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighborEntry {
    /// The neighbour's sender id.
    pub id: u64,
    /// The address the neighbour's hellos come from.
    pub addr: IpAddr,
    /// Share of the neighbour's hellos received recently, 0..=255 (255 = all).
    pub rx_ratio: u8,
    /// Largest bundle (outer IP datagram, bytes) the sender wants from this
    /// neighbour; 0 = send no bundles, only plain packets.
    pub max_bundle: u16,
    /// Radio figures for the neighbour's frames, when the radio reports them.
    pub radio: Option<Radio>,
}

impl NeighborEntry {
    /// Bytes this entry takes on the wire.
    pub fn wire_len(&self) -> usize {
        12 + match self.addr {
            IpAddr::V4(_) => 4,
            IpAddr::V6(_) => 16,
        } + if self.radio.is_some() { 2 } else { 0 }
    }
}

/// The fixed fields of a hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelloHeader {
    /// The sender's id (random, chosen at start-up; the same on all its links).
    pub sender: u64,
    /// Sequence number, +1 per hello; must grow across restarts when
    /// authenticated (see [`crate::auth`]).
    pub seq: u64,
    /// The sender's hello interval, milliseconds (1..=65535).
    pub interval_ms: u16,
    /// The encodings the sender accepts.
    pub encodings: Encodings,
}

/// A parsed, validated hello; entries are decoded on iteration.
#[derive(Clone, Copy, Debug)]
pub struct Hello<'a> {
    /// The fixed fields.
    pub header: HelloHeader,
    count: u8,
    entries: &'a [u8],
    /// Key id and tag, when the sender authenticated the hello.
    pub auth: Option<(u8, &'a [u8])>,
    /// The bytes the tag covers (everything before it).
    signed: &'a [u8],
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Reads one entry at the start of `b`: the entry and its length.
fn read_entry(b: &[u8]) -> Result<(NeighborEntry, usize), HelloError> {
    if b.len() < 12 {
        return Err(HelloError::Truncated);
    }
    let kind = b[8];
    if kind & KIND_RESERVED != 0 {
        return Err(HelloError::Unsupported);
    }
    let alen = match kind & 0x0f {
        4 => 4,
        6 => 16,
        _ => return Err(HelloError::Unsupported),
    };
    let radio = kind & KIND_RADIO != 0;
    let len = 12 + alen + if radio { 2 } else { 0 };
    if b.len() < len {
        return Err(HelloError::Truncated);
    }
    let a = &b[12..12 + alen];
    let addr = if alen == 4 {
        IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
    } else {
        let mut o = [0u8; 16];
        o.copy_from_slice(a);
        IpAddr::V6(Ipv6Addr::from(o))
    };
    let entry = NeighborEntry {
        id: be64(b),
        addr,
        rx_ratio: b[9],
        max_bundle: be16(&b[10..]),
        radio: radio.then(|| Radio {
            signal_dbm: b[12 + alen] as i8,
            noise_dbm: b[13 + alen] as i8,
        }),
    };
    Ok((entry, len))
}

impl<'a> Hello<'a> {
    /// Parses and validates a whole hello (the UDP payload). Errors, in the
    /// order checked: no byte or header cut short: `truncated`; version:
    /// `bad_version`; reserved flag: `unsupported`; interval 0: `bad_field`;
    /// then each entry (cut short: `truncated`, reserved kind bit or unknown
    /// family: `unsupported`); trailer cut short: `truncated`; bytes left:
    /// `trailing_garbage`.
    pub fn parse(b: &'a [u8]) -> Result<Hello<'a>, HelloError> {
        if b.is_empty() {
            return Err(HelloError::Truncated);
        }
        if b[0] != VERSION {
            return Err(HelloError::BadVersion);
        }
        if b.len() < HEADER_LEN {
            return Err(HelloError::Truncated);
        }
        let flags = b[1];
        if flags & FLAGS_CRITICAL & !FLAG_AUTH != 0 {
            return Err(HelloError::Unsupported);
        }
        let interval_ms = be16(&b[2..]);
        if interval_ms == 0 {
            return Err(HelloError::BadField);
        }
        let header = HelloHeader {
            sender: be64(&b[4..]),
            seq: be64(&b[12..]),
            interval_ms,
            encodings: Encodings(b[20]),
        };
        let count = b[21];
        let mut off = HEADER_LEN;
        for _ in 0..count {
            let (_, n) = read_entry(&b[off..])?;
            off += n;
        }
        let entries = &b[HEADER_LEN..off];
        let (auth, signed) = if flags & FLAG_AUTH != 0 {
            if b.len() < off + TRAILER_LEN {
                return Err(HelloError::Truncated);
            }
            let end = off + TRAILER_LEN;
            (Some((b[off], &b[off + 1..end])), &b[..off + 1])
        } else {
            (None, &b[..off])
        };
        let end = signed.len() + auth.map_or(0, |_| TAG_LEN);
        if b.len() != end {
            return Err(HelloError::TrailingGarbage);
        }
        Ok(Hello {
            header,
            count,
            entries,
            auth,
            signed,
        })
    }

    /// Number of neighbour entries.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether the hello lists no neighbour.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The neighbour entries, in wire order.
    pub fn neighbors(&self) -> Neighbors<'a> {
        Neighbors {
            rest: self.entries,
            left: self.count,
        }
    }

    /// Whether the trailer carries `key_id` and a valid tag under `key`
    /// (false when the hello has no trailer). Constant-time in the tag.
    pub fn verify(&self, key_id: u8, key: &Key) -> bool {
        match self.auth {
            Some((id, tag)) => {
                id == key_id && auth::verify(key, &[Domain::HELLO, self.signed], tag)
            }
            None => false,
        }
    }
}

/// Iterator over a parsed hello's entries.
#[derive(Clone, Debug)]
pub struct Neighbors<'a> {
    rest: &'a [u8],
    left: u8,
}

impl Iterator for Neighbors<'_> {
    type Item = NeighborEntry;

    fn next(&mut self) -> Option<NeighborEntry> {
        if self.left == 0 {
            return None;
        }
        // Validated by `parse`; an error here cannot happen, and ends the walk.
        let (e, n) = read_entry(self.rest).ok()?;
        self.rest = &self.rest[n..];
        self.left -= 1;
        Some(e)
    }
}

/// Why [`HelloWriter`] could not write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteError {
    /// The buffer cannot hold the header (and trailer), or this entry.
    BufferTooSmall,
    /// Already [`MAX_ENTRIES`] entries.
    TooManyEntries,
    /// The header's interval is 0.
    BadField,
}

/// Writes a hello into a caller's buffer: [`HelloWriter::new`], one
/// [`HelloWriter::push`] per neighbour, [`HelloWriter::finish`].
pub struct HelloWriter<'b, 'k> {
    buf: &'b mut [u8],
    len: usize,
    count: u8,
    auth: Option<(u8, &'k Key)>,
}

impl<'b, 'k> HelloWriter<'b, 'k> {
    /// Starts a hello; with `auth`, room for the trailer is kept back.
    pub fn new(
        buf: &'b mut [u8],
        header: &HelloHeader,
        auth: Option<(u8, &'k Key)>,
    ) -> Result<Self, WriteError> {
        if header.interval_ms == 0 {
            return Err(WriteError::BadField);
        }
        let reserve = if auth.is_some() { TRAILER_LEN } else { 0 };
        if buf.len() < HEADER_LEN + reserve {
            return Err(WriteError::BufferTooSmall);
        }
        buf[0] = VERSION;
        buf[1] = if auth.is_some() { FLAG_AUTH } else { 0 };
        buf[2..4].copy_from_slice(&header.interval_ms.to_be_bytes());
        buf[4..12].copy_from_slice(&header.sender.to_be_bytes());
        buf[12..20].copy_from_slice(&header.seq.to_be_bytes());
        buf[20] = header.encodings.0;
        buf[21] = 0;
        Ok(HelloWriter {
            buf,
            len: HEADER_LEN,
            count: 0,
            auth,
        })
    }

    /// Entries written so far.
    pub fn count(&self) -> usize {
        self.count as usize
    }

    /// Appends one entry, or says why not (the hello so far stays valid).
    pub fn push(&mut self, e: &NeighborEntry) -> Result<(), WriteError> {
        if self.count as usize >= MAX_ENTRIES {
            return Err(WriteError::TooManyEntries);
        }
        let reserve = if self.auth.is_some() { TRAILER_LEN } else { 0 };
        let n = e.wire_len();
        if self.buf.len() < self.len + n + reserve {
            return Err(WriteError::BufferTooSmall);
        }
        let b = &mut self.buf[self.len..self.len + n];
        b[..8].copy_from_slice(&e.id.to_be_bytes());
        let radio = if e.radio.is_some() { KIND_RADIO } else { 0 };
        b[9] = e.rx_ratio;
        b[10..12].copy_from_slice(&e.max_bundle.to_be_bytes());
        let alen = match e.addr {
            IpAddr::V4(a) => {
                b[8] = 4 | radio;
                b[12..16].copy_from_slice(&a.octets());
                4
            }
            IpAddr::V6(a) => {
                b[8] = 6 | radio;
                b[12..28].copy_from_slice(&a.octets());
                16
            }
        };
        if let Some(r) = e.radio {
            b[12 + alen] = r.signal_dbm as u8;
            b[13 + alen] = r.noise_dbm as u8;
        }
        self.len += n;
        self.count += 1;
        self.buf[21] = self.count;
        Ok(())
    }

    /// Adds the trailer (when authenticating) and returns the hello's length.
    pub fn finish(self) -> usize {
        match self.auth {
            None => self.len,
            Some((key_id, key)) => {
                // `new` and `push` kept TRAILER_LEN bytes free.
                self.buf[self.len] = key_id;
                let signed = self.len + 1;
                let t = auth::tag(key, &[Domain::HELLO, &self.buf[..signed]]);
                self.buf[signed..signed + TAG_LEN].copy_from_slice(&t);
                signed + TAG_LEN
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> HelloHeader {
        HelloHeader {
            sender: 0x0102_0304_0506_0708,
            seq: 42,
            interval_ms: 1000,
            encodings: Encodings::of(&[Encoding::Native, Encoding::Simplemux]),
        }
    }

    fn entry4() -> NeighborEntry {
        NeighborEntry {
            id: 7,
            addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            rx_ratio: 255,
            max_bundle: 1500,
            radio: None,
        }
    }

    fn write(entries: &[NeighborEntry], auth: Option<(u8, &Key)>) -> Vec<u8> {
        let mut buf = [0u8; MAX_HELLO];
        let mut w = HelloWriter::new(&mut buf, &header(), auth).unwrap();
        for e in entries {
            w.push(e).unwrap();
        }
        let n = w.finish();
        buf[..n].to_vec()
    }

    #[test]
    fn each_error_reason() {
        let good = write(&[entry4()], None);
        assert!(Hello::parse(&good).is_ok());
        assert_eq!(Hello::parse(&[]).unwrap_err(), HelloError::Truncated);
        assert_eq!(
            Hello::parse(&good[..21]).unwrap_err(),
            HelloError::Truncated
        );
        assert_eq!(
            Hello::parse(&good[..30]).unwrap_err(),
            HelloError::Truncated
        );
        let mut b = good.clone();
        b[0] = 2;
        assert_eq!(Hello::parse(&b).unwrap_err(), HelloError::BadVersion);
        let mut b = good.clone();
        b[1] = 0x02;
        assert_eq!(Hello::parse(&b).unwrap_err(), HelloError::Unsupported);
        let mut b = good.clone();
        b[1] = 0x10; // may-ignore flag
        assert!(Hello::parse(&b).is_ok());
        let mut b = good.clone();
        b[2] = 0;
        b[3] = 0;
        assert_eq!(Hello::parse(&b).unwrap_err(), HelloError::BadField);
        let mut b = good.clone();
        b[HEADER_LEN + 8] = 5;
        assert_eq!(Hello::parse(&b).unwrap_err(), HelloError::Unsupported);
        let mut b = good.clone();
        b[HEADER_LEN + 8] = 0x14;
        assert_eq!(Hello::parse(&b).unwrap_err(), HelloError::Unsupported);
        let mut b = good.clone();
        b.push(0);
        assert_eq!(Hello::parse(&b).unwrap_err(), HelloError::TrailingGarbage);
        let mut b = good.clone();
        b[1] = FLAG_AUTH; // claims a trailer it does not have
        assert_eq!(Hello::parse(&b).unwrap_err(), HelloError::Truncated);
    }

    #[test]
    fn auth_trailer_verifies_only_with_the_right_key_and_id() {
        let key = Key::from_bytes([9; 16]);
        let b = write(&[entry4()], Some((3, &key)));
        assert_eq!(b.len(), HEADER_LEN + 16 + TRAILER_LEN);
        let h = Hello::parse(&b).unwrap();
        assert!(h.verify(3, &key));
        assert!(!h.verify(4, &key));
        assert!(!h.verify(3, &Key::from_bytes([8; 16])));
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x40;
            if let Ok(h) = Hello::parse(&bad) {
                assert!(!h.verify(3, &key), "byte {i} changed, still verified");
            }
        }
        let plain = write(&[entry4()], None);
        assert!(!Hello::parse(&plain).unwrap().verify(3, &key));
    }

    #[test]
    fn common_encoding_is_symmetric() {
        let all = Encodings::of(&Encoding::ALL);
        let kau = Encodings::of(&[Encoding::Kau]);
        let sm = Encodings::of(&[Encoding::Simplemux, Encoding::Kau]);
        assert_eq!(all.common(all), Some(Encoding::Native));
        assert_eq!(all.common(sm), Some(Encoding::Simplemux));
        assert_eq!(sm.common(all), Some(Encoding::Simplemux));
        assert_eq!(kau.common(sm), Some(Encoding::Kau));
        assert_eq!(
            Encodings(0x08).common(all),
            None,
            "unknown bits never match"
        );
    }

    #[test]
    fn writer_respects_its_buffer() {
        let key = Key::from_bytes([1; 16]);
        let mut small = [0u8; HEADER_LEN + 8];
        assert_eq!(
            HelloWriter::new(&mut small, &header(), Some((1, &key))).err(),
            Some(WriteError::BufferTooSmall)
        );
        let mut buf = [0u8; HEADER_LEN + 20];
        let mut w = HelloWriter::new(&mut buf, &header(), None).unwrap();
        w.push(&entry4()).unwrap();
        assert_eq!(w.push(&entry4()), Err(WriteError::BufferTooSmall));
        let n = w.finish();
        let h = Hello::parse(&buf[..n]).unwrap();
        assert_eq!(h.neighbors().collect::<Vec<_>>(), vec![entry4()]);
    }
}
