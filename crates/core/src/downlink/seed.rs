//! The seed-002 frame layout ("custom header", seed section 2-2, figure 2;
//! extractor, section 3-3-2), for interoperating with the seed's aggregator.
//!
//! Owns: parsing and writing that layout. Must not touch: which packets go
//! in a frame ([`super::mux`]), rebuilding IP packets ([`super::demux`]), I/O.
//!
//! ```text
//! +--------+----------------------------------------------+-----------+---
//! | count  | src IPv4 | dst IPv4 | RTP len | sport | dport | RTP bytes | ...
//! | 2 B    | 4 B      | 4 B      | 2 B     | 2 B   | 2 B   | RTP len B |
//! +--------+----------------------------------------------+-----------+---
//!           `------------- 14-byte custom header ---------'   repeated count times
//! ```
//!
//! Every field is big-endian ("network byte order", seed 2-2), in the order
//! of figure 2: outer-node source address, inner-node destination address,
//! RTP length, UDP source port, UDP destination port.
//!
//! Where the seed is ambiguous, and what this module chooses:
//! * The packet count: section 3-3-2 says the extractor reads "the first two
//!   bytes of the packet, which represents the number of sub RTP packet";
//!   its byte order is not stated. Network order, like every other field.
//! * "RTP length" is "the length of the payload (RTP header size + RTP
//!   payload size)", i.e. the UDP payload length, without the 14 header
//!   bytes. The payload need not be RTP: the seed queues every UDP packet to
//!   the registered port range, so nothing here looks inside it.
//! * A length of 0 (an empty UDP payload) is refused as
//!   [`FrameError::ZeroLength`]; the seed never produces one from RTP.
//! * A count of 0 with no body is a valid, empty frame (the seed's sender
//!   thread fires every 20 ms whether or not it holds packets).
//! * Bytes after the last counted packet are [`FrameError::TrailingBytes`]
//!   (the seed's extractor would ignore them; strictness here catches a
//!   count that disagrees with the body).
//! * The maximum frame size (1440 in the seed's sender, 2300 in its
//!   design) is the caller's buffer length here, the count included.

use super::{be16, FrameError, WriteError, MAX_FRAME, MAX_PACKETS_PER_FRAME};
use core::net::Ipv4Addr;

/// Bytes of the packet count at the start of a frame.
pub const COUNT_LEN: usize = 2;
/// Bytes of the custom header before each packet's RTP bytes.
pub const HEADER_LEN: usize = 14;
/// Largest UDP payload an IPv4 packet can hold (65535 - 20 - 8).
pub const MAX_PAYLOAD: usize = 65_507;

/// One packet of a seed frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeedPacket<'a> {
    /// The outer node's address (the original packet's IPv4 source).
    pub src: Ipv4Addr,
    /// The inner node's address (the original packet's IPv4 destination).
    pub dst: Ipv4Addr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// The UDP payload (RTP header and payload).
    pub payload: &'a [u8],
}

/// A fully validated seed frame; [`SeedFrame::iter`] yields its packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeedFrame<'a> {
    body: &'a [u8],
    count: usize,
}

/// Parses a whole frame; every length is checked before anything is returned.
///
/// Errors, in the order checked: more than [`MAX_FRAME`] bytes: `Overlong`;
/// no byte: `Empty`; one byte: `Truncated`; count over
/// [`MAX_PACKETS_PER_FRAME`]: `TooManyPackets`; per packet: header or RTP
/// bytes cut short: `Truncated`; RTP length 0: `ZeroLength`; bytes after the
/// last counted packet: `TrailingBytes`.
pub fn decode(frame: &[u8]) -> Result<SeedFrame<'_>, FrameError> {
    if frame.len() > MAX_FRAME {
        return Err(FrameError::Overlong);
    }
    if frame.is_empty() {
        return Err(FrameError::Empty);
    }
    if frame.len() < COUNT_LEN {
        return Err(FrameError::Truncated);
    }
    let count = usize::from(be16(frame, 0));
    if count > MAX_PACKETS_PER_FRAME {
        return Err(FrameError::TooManyPackets);
    }
    let body = &frame[COUNT_LEN..];
    let mut rest = body;
    for _ in 0..count {
        let (_, tail) = split(rest)?;
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(FrameError::TrailingBytes);
    }
    Ok(SeedFrame { body, count })
}

/// Splits one packet off `rest`.
#[inline]
fn split(rest: &[u8]) -> Result<(SeedPacket<'_>, &[u8]), FrameError> {
    let Some(h) = rest.first_chunk::<HEADER_LEN>() else {
        return Err(FrameError::Truncated);
    };
    let len = usize::from(be16(h, 8));
    if len == 0 {
        return Err(FrameError::ZeroLength);
    }
    let after = &rest[HEADER_LEN..];
    if len > after.len() {
        return Err(FrameError::Truncated);
    }
    let (payload, tail) = after.split_at(len);
    Ok((
        SeedPacket {
            src: Ipv4Addr::new(h[0], h[1], h[2], h[3]),
            dst: Ipv4Addr::new(h[4], h[5], h[6], h[7]),
            src_port: be16(h, 10),
            dst_port: be16(h, 12),
            payload,
        },
        tail,
    ))
}

impl<'a> SeedFrame<'a> {
    /// Number of packets.
    pub fn len(&self) -> usize {
        self.count
    }
    /// True for a frame without packets.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// The packets, in frame order.
    pub fn iter(&self) -> SeedIter<'a> {
        SeedIter {
            rest: self.body,
            left: self.count,
        }
    }
}

/// Iterator over a validated [`SeedFrame`].
#[derive(Clone, Debug)]
pub struct SeedIter<'a> {
    rest: &'a [u8],
    left: usize,
}

impl<'a> Iterator for SeedIter<'a> {
    type Item = SeedPacket<'a>;
    fn next(&mut self) -> Option<SeedPacket<'a>> {
        if self.left == 0 {
            return None;
        }
        // The frame was validated: this cannot fail.
        let (p, tail) = split(self.rest).ok()?;
        self.rest = tail;
        self.left -= 1;
        Some(p)
    }
}

/// Writes one packet (custom header + payload) at the start of `out`;
/// returns its length. On error nothing is written. The frame's count is
/// the caller's (see [`SeedWriter`]).
pub fn write_packet(out: &mut [u8], p: &SeedPacket<'_>) -> Result<usize, WriteError> {
    let n = p.payload.len();
    if n == 0 || n > MAX_PAYLOAD {
        return Err(WriteError::OutOfRange);
    }
    let end = HEADER_LEN + n;
    let Some(out) = out.get_mut(..end) else {
        return Err(WriteError::NoRoom);
    };
    out[0..4].copy_from_slice(&p.src.octets());
    out[4..8].copy_from_slice(&p.dst.octets());
    out[8..10].copy_from_slice(&(n as u16).to_be_bytes());
    out[10..12].copy_from_slice(&p.src_port.to_be_bytes());
    out[12..14].copy_from_slice(&p.dst_port.to_be_bytes());
    out[HEADER_LEN..].copy_from_slice(p.payload);
    Ok(end)
}

/// Writes a seed frame into a caller buffer whose length is the frame limit.
#[derive(Debug)]
pub struct SeedWriter<'b> {
    buf: &'b mut [u8],
    len: usize,
    count: usize,
}

impl<'b> SeedWriter<'b> {
    /// A writer over `buf`; `None` when `buf` cannot hold the count.
    pub fn new(buf: &'b mut [u8]) -> Option<Self> {
        if buf.len() < COUNT_LEN {
            return None;
        }
        buf[..COUNT_LEN].fill(0);
        Some(SeedWriter {
            buf,
            len: COUNT_LEN,
            count: 0,
        })
    }

    /// Bytes a packet with `payload_len` bytes of UDP payload adds.
    pub fn cost(payload_len: usize) -> usize {
        HEADER_LEN + payload_len
    }

    /// Appends one packet; on error nothing is written.
    pub fn push(&mut self, p: &SeedPacket<'_>) -> Result<(), WriteError> {
        if self.count == MAX_PACKETS_PER_FRAME {
            return Err(WriteError::TooManyPackets);
        }
        let limit = self.buf.len().min(MAX_FRAME);
        let out = self
            .buf
            .get_mut(self.len..limit)
            .ok_or(WriteError::NoRoom)?;
        self.len += write_packet(out, p)?;
        self.count += 1;
        self.buf[..COUNT_LEN].copy_from_slice(&(self.count as u16).to_be_bytes());
        Ok(())
    }

    /// Packets written so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Bytes written so far (the count included).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: the count is written at once.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The frame's length; `buf[..len]` is the frame.
    pub fn finish(self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(payload: &[u8], last: u8) -> SeedPacket<'_> {
        SeedPacket {
            src: Ipv4Addr::new(192, 168, 0, last),
            dst: Ipv4Addr::new(192, 168, 1, last),
            src_port: 6666,
            dst_port: 6600 + u16::from(last),
            payload,
        }
    }

    #[test]
    fn round_trip_and_layout() {
        let a = [0x80u8, 0x12, 0, 1, 0, 0, 0, 0xa0, 1, 2, 3, 4, 9, 9];
        let b = [0x55u8; 3];
        let mut buf = [0u8; 64];
        let mut w = SeedWriter::new(&mut buf).unwrap();
        w.push(&pkt(&a, 5)).unwrap();
        w.push(&pkt(&b, 6)).unwrap();
        let n = w.finish();
        assert_eq!(n, 2 + 14 + a.len() + 14 + b.len());
        // count, then src, dst, length, sport, dport, all big-endian
        assert_eq!(&buf[..2], &[0, 2]);
        assert_eq!(&buf[2..6], &[192, 168, 0, 5]);
        assert_eq!(&buf[6..10], &[192, 168, 1, 5]);
        assert_eq!(&buf[10..12], &[0, 14]);
        assert_eq!(&buf[12..14], &6666u16.to_be_bytes());
        assert_eq!(&buf[14..16], &6605u16.to_be_bytes());
        let f = decode(&buf[..n]).unwrap();
        let got: Vec<_> = f.iter().collect();
        assert_eq!(got, vec![pkt(&a, 5), pkt(&b, 6)]);
    }

    #[test]
    fn every_error_is_named() {
        assert_eq!(decode(&[]), Err(FrameError::Empty));
        assert_eq!(decode(&[0]), Err(FrameError::Truncated));
        assert!(decode(&[0, 0]).unwrap().is_empty());
        assert_eq!(decode(&[0, 0, 1]), Err(FrameError::TrailingBytes));
        assert_eq!(decode(&[0x04, 0x01]), Err(FrameError::TooManyPackets));
        let mut f = vec![0, 1];
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2, 0, 0, 0, 1, 0, 2]);
        assert_eq!(decode(&f), Err(FrameError::ZeroLength));
        f[11] = 2; // length 2, one byte present
        f.push(7);
        assert_eq!(decode(&f), Err(FrameError::Truncated));
        f.push(8);
        assert_eq!(decode(&f).unwrap().len(), 1);
        f.push(9);
        assert_eq!(decode(&f), Err(FrameError::TrailingBytes));
        assert_eq!(decode(&f[..10]), Err(FrameError::Truncated));
        assert_eq!(decode(&vec![0; MAX_FRAME + 1]), Err(FrameError::Overlong));
    }

    #[test]
    fn writer_refuses_without_writing() {
        let mut buf = [0u8; 20];
        let mut w = SeedWriter::new(&mut buf).unwrap();
        assert_eq!(w.push(&pkt(&[], 1)), Err(WriteError::OutOfRange));
        assert_eq!(w.push(&pkt(&[1; 5], 1)), Err(WriteError::NoRoom));
        w.push(&pkt(&[1; 4], 1)).unwrap();
        assert_eq!(w.finish(), 20);
        assert!(SeedWriter::new(&mut [0u8; 1]).is_none());
    }
}
