//! airpack's compact downlink frame (version 1): a 4-byte frame header
//! (version, stream-table epoch, frame sequence number), then one entry per
//! packet naming its stream by the id assigned at registration instead of
//! repeating addresses, with an optional RTP header compression whose
//! reference survives lost frames (context generation + LSB fields).
//!
//! Owns: the byte layout of a frame and of each entry ([`Entry`]), its
//! strict parser ([`decode`]) and writer ([`CompactWriter`]). Must not touch:
//! the compression decisions and contexts (compressor: [`super::mux`],
//! decompressor: [`super::demux`]), IP header rebuilding, I/O.
//! Byte-by-byte description and costs: `docs/wire-format.md`, "Downlink
//! multiplexing", "compact".
//!
//! ```text
//! frame:  | 0x10 | epoch | frame seq (2) | entry | entry | ...
//! or, with the repeat flag (redundancy, optional):
//!         | 0x11 | epoch | frame seq (2) | repeat length (2) | the previous
//!         frame's entries (repeat length bytes) | entry | entry | ...
//! or, with the repeat and depth flags (redundancy depth >= 2):
//!         | 0x13 | epoch | frame seq (2) | n (2-4) | length (2) | frame
//!         seq-n's entries | ... | length (2) | frame seq-1's entries |
//!         entry | entry | ...
//! entry:  | sid (1-2) | ctl | len (1-2) | [static block] | [IP ID 1-2] | [seq LSB] | payload (len) |
//! ctl:    F ggg R M ii   F: static block present   ggg: context generation
//!                        R: RTP header compressed  M: RTP marker   ii: IPv4 ID mode
//! static: sflags | tos | ttl | [flow label 3, IPv6] | src addr 4/16 | src port 2 |
//!         [R: PT | SSRC 4 | TS stride 2 | seq 2 | timestamp 4]
//! ```

use super::{
    be16, be32, FrameError, StreamId, WriteError, MAX_FRAME, MAX_PACKETS_PER_FRAME, MAX_STREAM_ID,
};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Format version (high nibble of byte 0).
pub const VERSION: u8 = 1;
/// Bytes of the frame header.
pub const HEADER_LEN: usize = 4;
/// Flag in byte 0: a repeat block (the entries of frame `seq - 1`, as
/// that frame carried them) follows the header, after its 2-byte length.
pub const FLAG_REPEAT: u8 = 0x01;
/// Bytes of the repeat block's length field.
pub const REPEAT_LEN: usize = 2;
/// Flag in byte 0, only with [`FLAG_REPEAT`]: a one-byte count `n`
/// (2..=[`MAX_DEPTH`]) follows the header, then `n` repeat blocks, each
/// with its length, for frames `seq - n` .. `seq - 1` (oldest first).
pub const FLAG_DEPTH: u8 = 0x02;
/// Most repeat blocks one frame carries (redundancy depth).
pub const MAX_DEPTH: usize = 4;
/// Largest payload length an entry can state (two-byte form).
pub const MAX_LEN: usize = 16_383;
/// Bytes of a compressed RTP header that an entry with `R` set replaces.
pub const RTP_HEADER_LEN: usize = 12;

const CTL_FULL: u8 = 0x80;
const CTL_RTP: u8 = 0x08;
const CTL_MARKER: u8 = 0x04;
const SF_V6: u8 = 0x80;
const SF_DF: u8 = 0x40;
const SF_CSUM0: u8 = 0x20;

/// The frame header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameHeader {
    /// The AP's stream-table epoch (stated in every registration answer):
    /// stream ids are only meaningful within one epoch.
    pub epoch: u8,
    /// Frame sequence number, +1 per frame the AP closes (wrapping), so a
    /// station sees lost frames as gaps.
    pub seq: u16,
}

/// How an entry carries the IPv4 Identification field (`ii` in `ctl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpId {
    /// ID 0 (and always for IPv6, which has none). `ii = 00`.
    Zero,
    /// The low 8 bits; the high bits come from the stream's previous ID
    /// (compressed entries only). `ii = 01`.
    Lsb(u8),
    /// The whole ID. `ii = 10`.
    Full(u16),
}

impl IpId {
    fn code(self) -> u8 {
        match self {
            IpId::Zero => 0,
            IpId::Lsb(_) => 1,
            IpId::Full(_) => 2,
        }
    }
    fn len(self) -> usize {
        self.code() as usize
    }
}

/// RTP fields of a static block (entries with `R` and `F`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtpStatic {
    /// Payload type (7 bits).
    pub pt: u8,
    /// Synchronisation source.
    pub ssrc: u32,
    /// Timestamp units per sequence number within this context generation
    /// (0: no compressed entry follows in this generation).
    pub stride: u16,
    /// Sequence number of this packet.
    pub seq: u16,
    /// Timestamp of this packet.
    pub ts: u32,
}

/// The static block: every field of the original headers that is not
/// computed (lengths, checksums) and not in the per-packet part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Static {
    /// IPv4 Don't Fragment flag (always false for IPv6).
    pub df: bool,
    /// The original UDP checksum was 0 (IPv4 only: "no checksum").
    pub udp_csum_zero: bool,
    /// IPv4 TOS / IPv6 traffic class (DSCP and ECN), as intercepted.
    pub tos: u8,
    /// TTL / hop limit, after the AP's forwarding decrement.
    pub ttl: u8,
    /// IPv6 flow label (20 bits; 0 for IPv4).
    pub flow: u32,
    /// The original source address (the remote peer); its family is the packet's.
    pub src: IpAddr,
    /// The original UDP source port.
    pub src_port: u16,
    /// RTP fields, when the entry compresses the RTP header.
    pub rtp: Option<RtpStatic>,
}

impl Static {
    fn len(&self) -> usize {
        let ip = match self.src {
            IpAddr::V4(_) => 3 + 4,
            IpAddr::V6(_) => 3 + 3 + 16,
        };
        ip + 2 + if self.rtp.is_some() { 13 } else { 0 }
    }
}

/// One packet of a compact frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The stream (a station's destination address and port) it belongs to.
    pub sid: StreamId,
    /// Context generation (3 bits): a compressed entry is only expanded
    /// against a context of the same generation.
    pub gen: u8,
    /// The RTP header is compressed (`payload` is what follows it); else
    /// `payload` is the whole UDP payload.
    pub rtp: bool,
    /// RTP marker bit (false when `!rtp`).
    pub marker: bool,
    /// IPv4 Identification.
    pub id: IpId,
    /// The static block (a "full" entry, decodable without context).
    pub full: Option<Static>,
    /// Low 8 bits of the RTP sequence number (compressed RTP entries only;
    /// ignored by the writer otherwise).
    pub seq_lsb: u8,
    /// RTP payload (`rtp`) or UDP payload.
    pub payload: &'a [u8],
}

impl Entry<'_> {
    /// Bytes this entry takes in a frame.
    pub fn wire_len(&self) -> usize {
        let sid = if self.sid < 128 { 1 } else { 2 };
        let len = if self.payload.len() < 128 { 1 } else { 2 };
        let stat = self.full.as_ref().map_or(0, Static::len);
        let lsb = usize::from(self.rtp && self.full.is_none());
        sid + 1 + len + stat + self.id.len() + lsb + self.payload.len()
    }
}

/// A fully validated compact frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactFrame<'a> {
    /// The frame header.
    pub header: FrameHeader,
    body: &'a [u8],
    count: usize,
    /// The repeat blocks, each with its 2-byte length (oldest first).
    repeat: &'a [u8],
    repeat_count: usize,
    depth: usize,
}

impl<'a> CompactFrame<'a> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.count
    }
    /// Never true for a decoded frame (a frame without entries is refused).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// The entries in frame order.
    pub fn iter(&self) -> EntryIter<'a> {
        EntryIter { rest: self.body }
    }
    /// Entries of every repeat block, oldest block first (none when the
    /// frame has no repeat block).
    pub fn repeated(&self) -> impl Iterator<Item = Entry<'a>> {
        self.blocks().flat_map(|(_, b)| b)
    }
    /// Number of repeated entries.
    pub fn repeated_len(&self) -> usize {
        self.repeat_count
    }
    /// Number of repeat blocks (0, 1, or 2..=[`MAX_DEPTH`]).
    pub fn depth(&self) -> usize {
        self.depth
    }
    /// The repeat blocks, oldest first, each with its age: block `(j, e)`
    /// holds the entries of frame `seq - j`, byte for byte.
    pub fn blocks(&self) -> BlockIter<'a> {
        BlockIter {
            rest: self.repeat,
            age: self.depth,
        }
    }
}

/// Iterator over a validated frame's repeat blocks (oldest first).
#[derive(Clone, Debug)]
pub struct BlockIter<'a> {
    rest: &'a [u8],
    age: usize,
}

impl<'a> Iterator for BlockIter<'a> {
    type Item = (usize, EntryIter<'a>);
    fn next(&mut self) -> Option<Self::Item> {
        if self.age == 0 || self.rest.len() < REPEAT_LEN {
            return None;
        }
        let len = usize::from(be16(self.rest, 0)).min(self.rest.len() - REPEAT_LEN);
        let block = &self.rest[REPEAT_LEN..REPEAT_LEN + len];
        self.rest = &self.rest[REPEAT_LEN + len..];
        let age = self.age;
        self.age -= 1;
        Some((age, EntryIter { rest: block }))
    }
}

/// Iterator over a validated [`CompactFrame`].
#[derive(Clone, Debug)]
pub struct EntryIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for EntryIter<'a> {
    type Item = Entry<'a>;
    fn next(&mut self) -> Option<Entry<'a>> {
        if self.rest.is_empty() {
            return None;
        }
        let (e, tail) = split(self.rest).ok()?;
        self.rest = tail;
        Some(e)
    }
}

/// Parses and validates a whole frame.
///
/// Errors, in the order checked: over [`MAX_FRAME`] bytes: `Overlong`; no
/// byte: `Empty`; version nibble != 1: `BadVersion`; flag bits other than
/// [`FLAG_REPEAT`] and [`FLAG_DEPTH`], or the depth flag alone, or a
/// block count outside 2..=[`MAX_DEPTH`]: `Reserved`; header (or count, or
/// a repeat length, or block) cut short: `Truncated`; an empty repeat
/// block or no entry: `Empty`; then per
/// entry: the 1 025th: `TooManyPackets`; any field or the payload cut short:
/// `Truncated`; a two-byte sid or length whose value fits the one-byte
/// form: `Overlong`; reserved codes (`ii = 11`, `ii = 01` in a full entry,
/// `M` without `R`, length prefix `11`, reserved bits of `sflags`, DF or
/// checksum-zero on IPv6, flow label over 20 bits, PT bit 7): `Reserved`.
pub fn decode(frame: &[u8]) -> Result<CompactFrame<'_>, FrameError> {
    if frame.len() > MAX_FRAME {
        return Err(FrameError::Overlong);
    }
    let Some(&b0) = frame.first() else {
        return Err(FrameError::Empty);
    };
    if b0 >> 4 != VERSION {
        return Err(FrameError::BadVersion);
    }
    if b0 & 0x0f & !(FLAG_REPEAT | FLAG_DEPTH) != 0 || b0 & 0x0f == FLAG_DEPTH {
        return Err(FrameError::Reserved);
    }
    let Some(h) = frame.first_chunk::<HEADER_LEN>() else {
        return Err(FrameError::Truncated);
    };
    let header = FrameHeader {
        epoch: h[1],
        seq: be16(h, 2),
    };
    let mut body = &frame[HEADER_LEN..];
    let mut depth = 0;
    if b0 & FLAG_DEPTH != 0 {
        let Some((&n, rest)) = body.split_first() else {
            return Err(FrameError::Truncated);
        };
        depth = usize::from(n);
        if !(2..=MAX_DEPTH).contains(&depth) {
            return Err(FrameError::Reserved);
        }
        body = rest;
    } else if b0 & FLAG_REPEAT != 0 {
        depth = 1;
    }
    // The blocks' lengths first, then the frame's own entries, then the
    // blocks' entries (the order the Wireshark dissector checks in too).
    let start = body;
    for _ in 0..depth {
        if body.len() < REPEAT_LEN {
            return Err(FrameError::Truncated);
        }
        let rlen = usize::from(be16(body, 0));
        if rlen == 0 {
            return Err(FrameError::Empty);
        }
        if body.len() < REPEAT_LEN + rlen {
            return Err(FrameError::Truncated);
        }
        body = &body[REPEAT_LEN + rlen..];
    }
    let repeat = &start[..start.len() - body.len()];
    if body.is_empty() {
        return Err(FrameError::Empty);
    }
    let count = entries(body)?;
    let mut repeat_count = 0;
    let mut rest = repeat;
    while !rest.is_empty() {
        let rlen = usize::from(be16(rest, 0));
        repeat_count += entries(&rest[REPEAT_LEN..REPEAT_LEN + rlen])?;
        rest = &rest[REPEAT_LEN + rlen..];
    }
    if count + repeat_count > MAX_PACKETS_PER_FRAME {
        return Err(FrameError::TooManyPackets);
    }
    Ok(CompactFrame {
        header,
        body,
        count,
        repeat,
        repeat_count,
        depth,
    })
}

/// Validates a run of entries; returns how many.
fn entries(mut rest: &[u8]) -> Result<usize, FrameError> {
    let mut count = 0;
    while !rest.is_empty() {
        if count == MAX_PACKETS_PER_FRAME {
            return Err(FrameError::TooManyPackets);
        }
        rest = split(rest)?.1;
        count += 1;
    }
    Ok(count)
}

/// A cursor over an entry's bytes; every read is checked.
struct Cur<'a> {
    b: &'a [u8],
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if n > self.b.len() {
            return Err(FrameError::Truncated);
        }
        let (a, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, FrameError> {
        Ok(be16(self.take(2)?, 0))
    }
    fn u32(&mut self) -> Result<u32, FrameError> {
        Ok(be32(self.take(4)?, 0))
    }
}

/// Bytes of the first entry of `rest` (a run of entries, e.g. a frame's
/// body as the mux wrote it), validated as [`decode`] does.
pub fn entry_len(rest: &[u8]) -> Result<usize, FrameError> {
    if rest.is_empty() {
        return Err(FrameError::Empty);
    }
    split(rest).map(|(_, tail)| rest.len() - tail.len())
}

/// Splits one entry off `rest` (which is not empty).
fn split(rest: &[u8]) -> Result<(Entry<'_>, &[u8]), FrameError> {
    let mut c = Cur { b: rest };
    let s0 = c.u8()?;
    let sid = if s0 & 0x80 == 0 {
        u16::from(s0)
    } else {
        let v = u16::from(s0 & 0x7f) << 8 | u16::from(c.u8()?);
        if v < 128 {
            return Err(FrameError::Overlong);
        }
        v
    };
    let ctl = c.u8()?;
    let full = ctl & CTL_FULL != 0;
    let rtp = ctl & CTL_RTP != 0;
    let marker = ctl & CTL_MARKER != 0;
    let ii = ctl & 3;
    if ii == 3 || (full && ii == 1) || (marker && !rtp) {
        return Err(FrameError::Reserved);
    }
    let l0 = c.u8()?;
    let len = match l0 >> 6 {
        0 | 1 => usize::from(l0),
        2 => {
            let v = usize::from(l0 & 0x3f) << 8 | usize::from(c.u8()?);
            if v < 128 {
                return Err(FrameError::Overlong);
            }
            v
        }
        _ => return Err(FrameError::Reserved),
    };
    let stat = if full {
        Some(read_static(&mut c, rtp)?)
    } else {
        None
    };
    let id = match ii {
        0 => IpId::Zero,
        1 => IpId::Lsb(c.u8()?),
        _ => IpId::Full(c.u16()?),
    };
    let seq_lsb = if rtp && !full { c.u8()? } else { 0 };
    let payload = c.take(len)?;
    Ok((
        Entry {
            sid,
            gen: (ctl >> 4) & 7,
            rtp,
            marker,
            id,
            full: stat,
            seq_lsb,
            payload,
        },
        c.b,
    ))
}

fn read_static(c: &mut Cur<'_>, rtp: bool) -> Result<Static, FrameError> {
    let sf = c.u8()?;
    let v6 = sf & SF_V6 != 0;
    if sf & 0x1f != 0 || (v6 && sf & (SF_DF | SF_CSUM0) != 0) {
        return Err(FrameError::Reserved);
    }
    let tos = c.u8()?;
    let ttl = c.u8()?;
    let (flow, src) = if v6 {
        let f = c.take(3)?;
        if f[0] & 0xf0 != 0 {
            return Err(FrameError::Reserved);
        }
        let flow = u32::from(f[0]) << 16 | u32::from(f[1]) << 8 | u32::from(f[2]);
        let a: [u8; 16] = c.take(16)?.try_into().map_err(|_| FrameError::Truncated)?;
        (flow, IpAddr::V6(Ipv6Addr::from(a)))
    } else {
        let a: [u8; 4] = c.take(4)?.try_into().map_err(|_| FrameError::Truncated)?;
        (0, IpAddr::V4(Ipv4Addr::from(a)))
    };
    let src_port = c.u16()?;
    let rtp = if rtp {
        let pt = c.u8()?;
        if pt & 0x80 != 0 {
            return Err(FrameError::Reserved);
        }
        Some(RtpStatic {
            pt,
            ssrc: c.u32()?,
            stride: c.u16()?,
            seq: c.u16()?,
            ts: c.u32()?,
        })
    } else {
        None
    };
    Ok(Static {
        df: sf & SF_DF != 0,
        udp_csum_zero: sf & SF_CSUM0 != 0,
        tos,
        ttl,
        flow,
        src,
        src_port,
        rtp,
    })
}

/// Checks that an entry can be written as stated (what [`decode`] would accept back).
fn check(e: &Entry<'_>) -> Result<(), WriteError> {
    let bad = e.sid > MAX_STREAM_ID
        || e.gen > 7
        || e.payload.len() > MAX_LEN
        || (e.marker && !e.rtp)
        || match &e.full {
            Some(s) => {
                matches!(e.id, IpId::Lsb(_))
                    || s.rtp.is_some() != e.rtp
                    || s.rtp.is_some_and(|r| r.pt > 0x7f)
                    || match s.src {
                        IpAddr::V4(_) => s.flow != 0,
                        IpAddr::V6(_) => s.df || s.udp_csum_zero || s.flow > 0xf_ffff,
                    }
            }
            None => false,
        };
    if bad {
        Err(WriteError::OutOfRange)
    } else {
        Ok(())
    }
}

/// Writes the frame header into `out[..HEADER_LEN]`.
pub fn write_header(out: &mut [u8; HEADER_LEN], header: FrameHeader) {
    out[0] = VERSION << 4;
    out[1] = header.epoch;
    out[2..4].copy_from_slice(&header.seq.to_be_bytes());
}

/// Writes one entry at the start of `out`; returns its length
/// ([`Entry::wire_len`]). On error nothing is written.
pub fn write_entry(out: &mut [u8], e: &Entry<'_>) -> Result<usize, WriteError> {
    check(e)?;
    let end = e.wire_len();
    if end > out.len() {
        return Err(WriteError::NoRoom);
    }
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        out[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    if e.sid < 128 {
        put(&[e.sid as u8]);
    } else {
        put(&(0x8000 | e.sid).to_be_bytes());
    }
    let ctl = (if e.full.is_some() { CTL_FULL } else { 0 })
        | (e.gen & 7) << 4
        | if e.rtp { CTL_RTP } else { 0 }
        | if e.marker { CTL_MARKER } else { 0 }
        | e.id.code();
    put(&[ctl]);
    let n = e.payload.len();
    if n < 128 {
        put(&[n as u8]);
    } else {
        put(&(0x8000 | n as u16).to_be_bytes());
    }
    if let Some(s) = &e.full {
        let sf = match s.src {
            IpAddr::V4(_) => {
                (if s.df { SF_DF } else { 0 }) | if s.udp_csum_zero { SF_CSUM0 } else { 0 }
            }
            IpAddr::V6(_) => SF_V6,
        };
        put(&[sf, s.tos, s.ttl]);
        match s.src {
            IpAddr::V4(a) => put(&a.octets()),
            IpAddr::V6(a) => {
                put(&s.flow.to_be_bytes()[1..]);
                put(&a.octets());
            }
        }
        put(&s.src_port.to_be_bytes());
        if let Some(r) = &s.rtp {
            put(&[r.pt]);
            put(&r.ssrc.to_be_bytes());
            put(&r.stride.to_be_bytes());
            put(&r.seq.to_be_bytes());
            put(&r.ts.to_be_bytes());
        }
    }
    match e.id {
        IpId::Zero => {}
        IpId::Lsb(b) => put(&[b]),
        IpId::Full(v) => put(&v.to_be_bytes()),
    }
    if e.rtp && e.full.is_none() {
        put(&[e.seq_lsb]);
    }
    put(e.payload);
    debug_assert_eq!(at, end);
    Ok(end)
}

/// Writes a compact frame into a caller buffer whose length is the frame limit.
#[derive(Debug)]
pub struct CompactWriter<'b> {
    buf: &'b mut [u8],
    len: usize,
    count: usize,
}

impl<'b> CompactWriter<'b> {
    /// A writer over `buf` starting a frame with `header`; `None` when
    /// `buf` cannot hold the header.
    pub fn new(buf: &'b mut [u8], header: FrameHeader) -> Option<Self> {
        let h = buf.first_chunk_mut::<HEADER_LEN>()?;
        write_header(h, header);
        Some(CompactWriter {
            buf,
            len: HEADER_LEN,
            count: 0,
        })
    }

    /// Appends an entry; on error nothing is written.
    pub fn push(&mut self, e: &Entry<'_>) -> Result<(), WriteError> {
        if self.count == MAX_PACKETS_PER_FRAME {
            return Err(WriteError::TooManyPackets);
        }
        let limit = self.buf.len().min(MAX_FRAME);
        let out = self
            .buf
            .get_mut(self.len..limit)
            .ok_or(WriteError::NoRoom)?;
        self.len += write_entry(out, e)?;
        self.count += 1;
        Ok(())
    }

    /// Entries written so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Bytes written so far (header included).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True while no entry has been written.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The frame's length; `buf[..len]` is the frame (refused by [`decode`]
    /// if no entry was written).
    pub fn finish(self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full_v4(payload: &[u8]) -> Entry<'_> {
        Entry {
            sid: 3,
            gen: 5,
            rtp: true,
            marker: true,
            id: IpId::Full(0x1234),
            full: Some(Static {
                df: true,
                udp_csum_zero: false,
                tos: 0xb8,
                ttl: 63,
                flow: 0,
                src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                src_port: 5004,
                rtp: Some(RtpStatic {
                    pt: 18,
                    ssrc: 0xdeadbeef,
                    stride: 160,
                    seq: 1,
                    ts: 160,
                }),
            }),
            seq_lsb: 0,
            payload,
        }
    }

    fn small(sid: StreamId, payload: &[u8]) -> Entry<'_> {
        Entry {
            sid,
            gen: 5,
            rtp: true,
            marker: false,
            id: IpId::Lsb(0x35),
            full: None,
            seq_lsb: 2,
            payload,
        }
    }

    #[test]
    fn round_trip_and_sizes() {
        let voice = [0x11u8; 20];
        let big = [0x22u8; 300];
        let v6 = Entry {
            sid: 200,
            gen: 0,
            rtp: false,
            marker: false,
            id: IpId::Zero,
            full: Some(Static {
                df: false,
                udp_csum_zero: false,
                tos: 0xb9,
                ttl: 1,
                flow: 0xabcde,
                src: IpAddr::V6("fd00::1".parse().unwrap()),
                src_port: 1,
                rtp: None,
            }),
            seq_lsb: 0,
            payload: &big,
        };
        let entries = [full_v4(&voice), small(3, &voice), v6, small(127, &[])];
        // full v4 RTP: sid 1 + ctl 1 + len 1 + static 22 + ID 2 = 27 bytes of header
        assert_eq!(entries[0].wire_len(), 27 + 20);
        // compressed RTP: sid + ctl + len + ID LSB + seq LSB = 5
        assert_eq!(entries[1].wire_len(), 5 + 20);
        assert_eq!(entries[2].wire_len(), 2 + 1 + 2 + 24 + 300);
        let mut buf = [0u8; 1440];
        let mut w = CompactWriter::new(
            &mut buf,
            FrameHeader {
                epoch: 9,
                seq: 0xfffe,
            },
        )
        .unwrap();
        for e in &entries {
            w.push(e).unwrap();
        }
        let n = w.finish();
        assert_eq!(n, 4 + entries.iter().map(Entry::wire_len).sum::<usize>());
        assert_eq!(&buf[..4], &[0x10, 9, 0xff, 0xfe]);
        let f = decode(&buf[..n]).unwrap();
        assert_eq!(
            f.header,
            FrameHeader {
                epoch: 9,
                seq: 0xfffe
            }
        );
        assert_eq!(f.iter().collect::<Vec<_>>(), entries.to_vec());
    }

    #[test]
    fn errors_are_named() {
        assert_eq!(decode(&[]), Err(FrameError::Empty));
        assert_eq!(decode(&[0x20, 0, 0, 0]), Err(FrameError::BadVersion));
        assert_eq!(decode(&[0x12, 0, 0, 0]), Err(FrameError::Reserved));
        // Repeat flag: length, block, then at least one own entry.
        assert_eq!(decode(&[0x11, 0, 0, 0]), Err(FrameError::Truncated));
        assert_eq!(
            decode(&[0x11, 0, 0, 0, 0, 0, 5, 0, 1, 0xaa]),
            Err(FrameError::Empty)
        );
        assert_eq!(
            decode(&[0x11, 0, 0, 0, 0, 4, 5, 0, 1]),
            Err(FrameError::Truncated)
        );
        assert_eq!(
            decode(&[0x11, 0, 0, 0, 0, 4, 5, 0, 1, 0xaa]),
            Err(FrameError::Empty)
        );
        let f = decode(&[0x11, 0, 0, 9, 0, 4, 5, 0, 1, 0xaa, 6, 0, 1, 0xbb]).unwrap();
        assert_eq!((f.len(), f.repeated_len()), (1, 1));
        assert_eq!(f.repeated().next().unwrap().sid, 5);
        assert_eq!(f.iter().next().unwrap().sid, 6);
        // Depth flag: a count 2..=4, then that many blocks, oldest first.
        let f = decode(&[
            0x13, 0, 0, 9, 2, 0, 4, 5, 0, 1, 0xa7, 0, 4, 5, 0, 1, 0xa8, 6, 0, 1, 0xbb,
        ])
        .unwrap();
        assert_eq!((f.len(), f.repeated_len(), f.depth()), (1, 2, 2));
        let blocks: Vec<(usize, Vec<u8>)> = f
            .blocks()
            .map(|(age, b)| (age, b.map(|e| e.payload[0]).collect()))
            .collect();
        assert_eq!(blocks, [(2, vec![0xa7]), (1, vec![0xa8])]);
        assert_eq!(
            f.repeated().map(|e| e.payload[0]).collect::<Vec<_>>(),
            [0xa7, 0xa8]
        );
        assert_eq!(
            decode(&[0x11, 0, 0, 9, 0, 4, 5, 0, 1, 0xaa, 6, 0, 1, 0xbb])
                .unwrap()
                .depth(),
            1
        );
        // depth flag without the repeat flag, or a count outside 2..=4
        assert_eq!(decode(&[0x12, 0, 0, 0, 2]), Err(FrameError::Reserved));
        for n in [0u8, 1, 5, 255] {
            assert_eq!(
                decode(&[0x13, 0, 0, 0, n, 0, 4, 5, 0, 1, 0xa7, 6, 0, 1, 0xbb]),
                Err(FrameError::Reserved),
                "count {n}"
            );
        }
        assert_eq!(decode(&[0x13, 0, 0, 0]), Err(FrameError::Truncated));
        // fewer blocks than counted, or an empty one
        assert_eq!(
            decode(&[0x13, 0, 0, 0, 2, 0, 4, 5, 0, 1, 0xa7]),
            Err(FrameError::Truncated)
        );
        assert_eq!(
            decode(&[0x13, 0, 0, 0, 2, 0, 4, 5, 0, 1, 0xa7, 0, 0, 6, 0, 1, 0xbb]),
            Err(FrameError::Empty)
        );
        // The repeat block's entries are validated too.
        assert_eq!(
            decode(&[0x11, 0, 0, 0, 0, 3, 1, 3, 0, 6, 0, 1, 0xbb]),
            Err(FrameError::Reserved)
        );
        assert_eq!(decode(&[0x10, 0, 0]), Err(FrameError::Truncated));
        assert_eq!(decode(&[0x10, 0, 0, 0]), Err(FrameError::Empty));
        // sid 5, ctl 0 (verbatim UDP payload, ID 0), len 1, one byte
        assert!(decode(&[0x10, 0, 0, 0, 5, 0, 1, 0xaa]).is_ok());
        assert_eq!(
            decode(&[0x10, 0, 0, 0, 5, 0, 2, 0xaa]),
            Err(FrameError::Truncated)
        );
        assert_eq!(
            decode(&[0x10, 0, 0, 0, 0x80, 5, 0, 0]),
            Err(FrameError::Overlong)
        );
        assert_eq!(decode(&[0x10, 0, 0, 0, 5, 3, 0]), Err(FrameError::Reserved));
        assert_eq!(
            decode(&[0x10, 0, 0, 0, 5, 0x04, 0]),
            Err(FrameError::Reserved)
        );
        assert_eq!(
            decode(&[0x10, 0, 0, 0, 5, 0x81, 0]),
            Err(FrameError::Reserved)
        );
        assert_eq!(
            decode(&[0x10, 0, 0, 0, 5, 0, 0xc0]),
            Err(FrameError::Reserved)
        );
        assert_eq!(
            decode(&[0x10, 0, 0, 0, 5, 0, 0x80, 0x7f]),
            Err(FrameError::Overlong)
        );
        // full entry with a reserved sflags bit
        assert_eq!(
            decode(&[0x10, 0, 0, 0, 5, 0x80, 0, 0x01, 0, 0, 1, 2, 3, 4, 0, 1]),
            Err(FrameError::Reserved)
        );
        assert!(decode(&[0x10, 0, 0, 0, 5, 0x80, 0, 0x40, 0, 0, 1, 2, 3, 4, 0, 1]).is_ok());
        assert_eq!(
            decode(&[0x10, 0, 0, 0, 5, 0x80, 0, 0xc0, 0, 0, 1, 2, 3, 4, 0, 1]),
            Err(FrameError::Reserved)
        );
        let mut many = vec![0x10, 0, 0, 0];
        for _ in 0..=MAX_PACKETS_PER_FRAME {
            many.extend_from_slice(&[1, 0, 0]);
        }
        assert_eq!(decode(&many), Err(FrameError::TooManyPackets));
    }

    #[test]
    fn writer_refuses_what_decode_would_refuse() {
        let mut buf = [0u8; 64];
        let mut w = CompactWriter::new(&mut buf, FrameHeader::default()).unwrap();
        let mut e = small(MAX_STREAM_ID + 1, &[]);
        assert_eq!(w.push(&e), Err(WriteError::OutOfRange));
        e.sid = 1;
        e.rtp = false;
        e.marker = true;
        assert_eq!(w.push(&e), Err(WriteError::OutOfRange));
        let mut f = full_v4(&[]);
        f.id = IpId::Lsb(1);
        assert_eq!(w.push(&f), Err(WriteError::OutOfRange));
        assert_eq!(w.push(&full_v4(&[0; 40])), Err(WriteError::NoRoom));
        assert!(w.is_empty());
        w.push(&full_v4(&[0; 4])).unwrap();
        assert_eq!(w.count(), 1);
    }
}
