//! RTP (RFC 3550 section 5.1) fixed header: strict parse of untrusted bytes
//! and write into a caller's buffer, plus the airpack probe tag carried at the
//! start of the payload (sender timestamp and call id).
//!
//! Owns: the byte layout only. Must not touch: sockets, clocks, statistics.
//! Parsing never panics, never allocates, and checks every length (CSRC list,
//! header extension, padding) against what remains.

/// Length of the fixed RTP header (no CSRC, no extension).
pub const HEADER_LEN: usize = 12;
/// Length of the probe tag at the start of each payload: sender timestamp
/// (µs, big-endian u64) then call id (big-endian u32).
pub const TAG_LEN: usize = 12;

/// Why a datagram is not a valid RTP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RtpError {
    /// Fewer than 12 bytes.
    Truncated,
    /// Version field is not 2.
    BadVersion,
    /// The CSRC count announces more identifiers than the datagram holds.
    CsrcPastEnd,
    /// The header extension's length runs past the end.
    ExtensionPastEnd,
    /// Padding bit set but the padding count is 0 (it counts itself, so >= 1).
    ZeroPadding,
    /// Padding count larger than what follows the header.
    PaddingPastEnd,
}

impl RtpError {
    /// Stable snake_case name, for counters.
    pub fn name(self) -> &'static str {
        match self {
            RtpError::Truncated => "truncated",
            RtpError::BadVersion => "bad_version",
            RtpError::CsrcPastEnd => "csrc_past_end",
            RtpError::ExtensionPastEnd => "extension_past_end",
            RtpError::ZeroPadding => "zero_padding",
            RtpError::PaddingPastEnd => "padding_past_end",
        }
    }
}

impl std::fmt::Display for RtpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for RtpError {}

/// The fields of an RTP header the tool uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RtpHeader {
    /// Marker bit (start of a talk spurt for audio).
    pub marker: bool,
    /// Payload type (7 bits).
    pub payload_type: u8,
    /// Sequence number.
    pub sequence: u16,
    /// Media timestamp.
    pub timestamp: u32,
    /// Synchronization source.
    pub ssrc: u32,
}

/// A parsed packet: header, and the payload with CSRCs, extension and
/// padding removed (borrowed from the input).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtpPacket<'a> {
    /// Header fields.
    pub header: RtpHeader,
    /// Number of CSRC identifiers that were skipped.
    pub csrc_count: u8,
    /// Whether a header extension was present (skipped).
    pub has_extension: bool,
    /// Number of padding bytes removed (0 if none).
    pub padding: u8,
    /// Payload.
    pub payload: &'a [u8],
}

/// Parse an RTP packet strictly.
pub fn parse(buf: &[u8]) -> Result<RtpPacket<'_>, RtpError> {
    if buf.len() < HEADER_LEN {
        return Err(RtpError::Truncated);
    }
    let b0 = buf[0];
    if b0 >> 6 != 2 {
        return Err(RtpError::BadVersion);
    }
    let has_padding = b0 & 0x20 != 0;
    let has_extension = b0 & 0x10 != 0;
    let csrc_count = b0 & 0x0f;
    let b1 = buf[1];
    let header = RtpHeader {
        marker: b1 & 0x80 != 0,
        payload_type: b1 & 0x7f,
        sequence: u16::from_be_bytes([buf[2], buf[3]]),
        timestamp: u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]),
        ssrc: u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]),
    };
    let mut off = HEADER_LEN + 4 * usize::from(csrc_count);
    if off > buf.len() {
        return Err(RtpError::CsrcPastEnd);
    }
    if has_extension {
        // 16-bit profile-defined id, 16-bit length in 32-bit words.
        if buf.len() - off < 4 {
            return Err(RtpError::ExtensionPastEnd);
        }
        let words = usize::from(u16::from_be_bytes([buf[off + 2], buf[off + 3]]));
        off += 4;
        if buf.len() - off < 4 * words {
            return Err(RtpError::ExtensionPastEnd);
        }
        off += 4 * words;
    }
    let mut end = buf.len();
    let mut padding = 0u8;
    if has_padding {
        if end == off {
            return Err(RtpError::PaddingPastEnd);
        }
        padding = buf[end - 1];
        if padding == 0 {
            return Err(RtpError::ZeroPadding);
        }
        if usize::from(padding) > end - off {
            return Err(RtpError::PaddingPastEnd);
        }
        end -= usize::from(padding);
    }
    Ok(RtpPacket {
        header,
        csrc_count,
        has_extension,
        padding,
        payload: &buf[off..end],
    })
}

/// Write a 12-byte header (version 2, no padding/extension/CSRC) followed by
/// `payload` into `out`; returns the length written, or `None` if `out` is
/// too small or the payload type does not fit in 7 bits.
pub fn write(header: &RtpHeader, payload: &[u8], out: &mut [u8]) -> Option<usize> {
    let len = HEADER_LEN.checked_add(payload.len())?;
    if out.len() < len || header.payload_type > 0x7f {
        return None;
    }
    out[0] = 0x80;
    out[1] = (u8::from(header.marker) << 7) | header.payload_type;
    out[2..4].copy_from_slice(&header.sequence.to_be_bytes());
    out[4..8].copy_from_slice(&header.timestamp.to_be_bytes());
    out[8..12].copy_from_slice(&header.ssrc.to_be_bytes());
    out[HEADER_LEN..len].copy_from_slice(payload);
    Some(len)
}

/// The probe tag at the start of every payload the tool sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeTag {
    /// Sender's CLOCK_MONOTONIC at send, µs.
    pub send_us: u64,
    /// Call id from the spec.
    pub call_id: u32,
}

impl ProbeTag {
    /// Write the tag into the first [`TAG_LEN`] bytes of `payload`, zero the
    /// rest (padding up to the codec payload size). `None` if too short.
    pub fn write_payload(&self, payload: &mut [u8]) -> Option<()> {
        if payload.len() < TAG_LEN {
            return None;
        }
        payload[..8].copy_from_slice(&self.send_us.to_be_bytes());
        payload[8..12].copy_from_slice(&self.call_id.to_be_bytes());
        payload[TAG_LEN..].fill(0);
        Some(())
    }

    /// Read the tag from a payload; `None` if shorter than [`TAG_LEN`].
    pub fn read(payload: &[u8]) -> Option<ProbeTag> {
        let t = payload.get(..TAG_LEN)?;
        let mut s = [0u8; 8];
        s.copy_from_slice(&t[..8]);
        let mut c = [0u8; 4];
        c.copy_from_slice(&t[8..12]);
        Some(ProbeTag {
            send_us: u64::from_be_bytes(s),
            call_id: u32::from_be_bytes(c),
        })
    }
}

/// Payload size actually sent for a codec payload size: the codec size, but
/// at least [`TAG_LEN`] (only matters for G.729 at 10 ms: 10 -> 12 bytes).
pub fn probe_payload_len(codec_payload: usize) -> usize {
    codec_payload.max(TAG_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let h = RtpHeader {
            marker: true,
            payload_type: 18,
            sequence: 0xbeef,
            timestamp: 0x01020304,
            ssrc: 0xa1b2c3d4,
        };
        let mut out = [0u8; 64];
        let n = write(&h, &[9u8; 20], &mut out).unwrap();
        out[..n].to_vec()
    }

    #[test]
    fn write_then_parse_round_trips_byte_exact() {
        let b = sample();
        assert_eq!(
            &b[..12],
            &[
                0x80,
                0x80 | 18,
                0xbe,
                0xef,
                1,
                2,
                3,
                4,
                0xa1,
                0xb2,
                0xc3,
                0xd4
            ]
        );
        let p = parse(&b).unwrap();
        assert!(p.header.marker);
        assert_eq!(p.header.payload_type, 18);
        assert_eq!(p.header.sequence, 0xbeef);
        assert_eq!(p.header.timestamp, 0x01020304);
        assert_eq!(p.header.ssrc, 0xa1b2c3d4);
        assert_eq!(p.payload, &[9u8; 20]);
    }

    #[test]
    fn truncated_and_bad_version_are_rejected() {
        let b = sample();
        for n in 0..12 {
            assert_eq!(parse(&b[..n]), Err(RtpError::Truncated), "len {n}");
        }
        assert!(parse(&b[..12]).unwrap().payload.is_empty());
        for v in [0u8, 1, 3] {
            let mut x = b.clone();
            x[0] = (x[0] & 0x3f) | (v << 6);
            assert_eq!(parse(&x), Err(RtpError::BadVersion));
        }
    }

    #[test]
    fn csrc_count_past_end_is_rejected_and_valid_csrcs_skipped() {
        let mut x = sample(); // 32 bytes: room for 5 CSRCs exactly
        x[0] |= 6;
        assert_eq!(parse(&x), Err(RtpError::CsrcPastEnd));
        x[0] = (x[0] & 0xf0) | 5;
        let p = parse(&x).unwrap();
        assert_eq!(p.csrc_count, 5);
        assert!(p.payload.is_empty());
        x[0] |= 0x0f;
        assert_eq!(parse(&x), Err(RtpError::CsrcPastEnd));
    }

    #[test]
    fn extension_lengths_are_checked() {
        let mut x = sample();
        x[0] |= 0x10;
        // extension header at 12..16: id, length in words
        x[14] = 0;
        x[15] = 3; // 4 + 12 bytes of 20 available
        let p = parse(&x).unwrap();
        assert!(p.has_extension);
        assert_eq!(p.payload.len(), 4);
        x[15] = 4; // 4 + 16 = 20: exactly all
        assert_eq!(parse(&x).unwrap().payload.len(), 0);
        x[15] = 5;
        assert_eq!(parse(&x), Err(RtpError::ExtensionPastEnd));
        x[14] = 0xff;
        assert_eq!(parse(&x), Err(RtpError::ExtensionPastEnd));
        assert_eq!(parse(&x[..14]), Err(RtpError::ExtensionPastEnd));
    }

    #[test]
    fn padding_lengths_are_checked() {
        let mut x = sample();
        x[0] |= 0x20;
        let last = x.len() - 1;
        x[last] = 4;
        assert_eq!(parse(&x).unwrap().payload.len(), 16);
        x[last] = 20; // all of the payload is padding
        let p = parse(&x).unwrap();
        assert_eq!((p.payload.len(), p.padding), (0, 20));
        x[last] = 21;
        assert_eq!(parse(&x), Err(RtpError::PaddingPastEnd));
        x[last] = 0;
        assert_eq!(parse(&x), Err(RtpError::ZeroPadding));
        // header only, padding bit set: no byte to hold the count
        let mut h = x[..12].to_vec();
        h[0] |= 0x20;
        assert_eq!(parse(&h), Err(RtpError::PaddingPastEnd));
    }

    #[test]
    fn write_refuses_small_buffers_and_wide_payload_types() {
        let h = RtpHeader {
            payload_type: 0,
            ..Default::default()
        };
        let mut out = [0u8; 31];
        assert_eq!(write(&h, &[0; 20], &mut out), None);
        let h = RtpHeader {
            payload_type: 128,
            ..Default::default()
        };
        let mut out = [0u8; 64];
        assert_eq!(write(&h, &[0; 20], &mut out), None);
    }

    #[test]
    fn probe_tag_round_trips_and_pads() {
        let mut p = [0xffu8; 20];
        let t = ProbeTag {
            send_us: 123_456_789_012,
            call_id: 77,
        };
        t.write_payload(&mut p).unwrap();
        assert_eq!(ProbeTag::read(&p), Some(t));
        assert!(p[12..].iter().all(|&b| b == 0));
        assert_eq!(ProbeTag::read(&p[..11]), None);
        assert_eq!(t.write_payload(&mut [0u8; 11]), None);
        assert_eq!(probe_payload_len(10), 12);
        assert_eq!(probe_payload_len(160), 160);
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics_and_payload_is_inside(buf in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            if let Ok(p) = parse(&buf) {
                let start = p.payload.as_ptr() as usize - buf.as_ptr() as usize;
                proptest::prop_assert!(start >= HEADER_LEN);
                proptest::prop_assert!(start + p.payload.len() <= buf.len());
                proptest::prop_assert_eq!(buf[0] >> 6, 2);
            }
        }

        #[test]
        fn write_parse_round_trip(m: bool, pt in 0u8..128, seq: u16, ts: u32, ssrc: u32,
                                  payload in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let h = RtpHeader { marker: m, payload_type: pt, sequence: seq, timestamp: ts, ssrc };
            let mut out = [0u8; 256];
            let n = write(&h, &payload, &mut out).unwrap();
            let p = parse(&out[..n]).unwrap();
            proptest::prop_assert_eq!(p.header, h);
            proptest::prop_assert_eq!(p.payload, &payload[..]);
        }
    }
}
