//! TODO(wire helper): module doc (what the `native` encoding is, byte layout, reference).

use super::{Bundle, DecodeError};

/// Bytes of format header before the first packet.
pub const HEADER_LEN: usize = 0;

/// Whether a `native` bundle can carry `packet`.
pub fn can_carry(packet: &[u8]) -> bool {
    let _ = packet;
    todo!()
}

/// Bytes that appending a packet of `packet_len` adds (separator + packet).
pub fn cost(packet_len: usize, first: bool) -> usize {
    let _ = (packet_len, first);
    todo!()
}

/// Writes the separator and the packet; `out.len() == cost(packet.len(), first)`.
pub fn write_packet(out: &mut [u8], packet: &[u8], first: bool) {
    let _ = (out, packet, first);
    todo!()
}

/// Completes the format header in `buf[..HEADER_LEN]` once `count` packets are written.
pub fn write_header(buf: &mut [u8], count: usize) {
    let _ = (buf, count);
}

/// Parses and fully validates a bundle payload.
pub fn decode(payload: &[u8]) -> Result<Bundle<'_>, DecodeError> {
    let _ = payload;
    todo!()
}

/// Splits the next packet off an already validated body; `None` only if invalid.
pub(crate) fn split_next(rest: &[u8], first: bool) -> Option<(&[u8], &[u8])> {
    let _ = (rest, first);
    todo!()
}
