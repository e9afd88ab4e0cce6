//! Writing compound RTCP packets into a caller's buffer.
//!
//! Owns: producing bytes. Must not touch: parsing, state. A failed call
//! leaves what was written before it intact (nothing partial is kept).

use super::{
    ReportBlock, SenderInfo, MAX_COUNT, PT_BYE, PT_RR, PT_SDES, PT_SR, REPORT_BLOCK_LEN, SDES_CNAME,
};

/// Why a packet could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteError {
    /// The buffer is too small for this packet.
    NoRoom,
    /// More than 31 report blocks or sources.
    TooMany,
    /// SDES text or BYE reason longer than 255 bytes.
    TooLong,
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WriteError::NoRoom => "no_room",
            WriteError::TooMany => "too_many",
            WriteError::TooLong => "too_long",
        })
    }
}

impl std::error::Error for WriteError {}

/// Appends RTCP packets to a buffer; [`Writer::len`] is the compound's size.
/// A compound RFC 3550 accepts starts with [`Writer::sender_report`] or
/// [`Writer::receiver_report`] and contains [`Writer::sdes_cname`].
#[derive(Debug)]
pub struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> Writer<'a> {
    /// Start writing at the beginning of `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, len: 0 }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Nothing written yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes written so far.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Reserve `total` bytes (a multiple of 4) and write the common header.
    fn begin(&mut self, count: usize, pt: u8, total: usize) -> Result<&mut [u8], WriteError> {
        if count > MAX_COUNT {
            return Err(WriteError::TooMany);
        }
        debug_assert!(total % 4 == 0 && total >= 4);
        let words = u16::try_from(total / 4 - 1).map_err(|_| WriteError::NoRoom)?;
        let end = self.len.checked_add(total).ok_or(WriteError::NoRoom)?;
        let out = self.buf.get_mut(self.len..end).ok_or(WriteError::NoRoom)?;
        out.fill(0);
        out[0] = 0x80 | count as u8;
        out[1] = pt;
        out[2..4].copy_from_slice(&words.to_be_bytes());
        self.len = end;
        Ok(out)
    }

    fn blocks(out: &mut [u8], blocks: &[ReportBlock]) {
        for (chunk, b) in out.chunks_exact_mut(REPORT_BLOCK_LEN).zip(blocks) {
            chunk.copy_from_slice(&b.to_bytes());
        }
    }

    /// Append a SR.
    pub fn sender_report(
        &mut self,
        ssrc: u32,
        info: &SenderInfo,
        blocks: &[ReportBlock],
    ) -> Result<(), WriteError> {
        let out = self.begin(blocks.len(), PT_SR, 28 + REPORT_BLOCK_LEN * blocks.len())?;
        out[4..8].copy_from_slice(&ssrc.to_be_bytes());
        out[8..16].copy_from_slice(&info.ntp.to_be_bytes());
        out[16..20].copy_from_slice(&info.rtp_ts.to_be_bytes());
        out[20..24].copy_from_slice(&info.packets.to_be_bytes());
        out[24..28].copy_from_slice(&info.octets.to_be_bytes());
        Self::blocks(&mut out[28..], blocks);
        Ok(())
    }

    /// Append a RR.
    pub fn receiver_report(&mut self, ssrc: u32, blocks: &[ReportBlock]) -> Result<(), WriteError> {
        let out = self.begin(blocks.len(), PT_RR, 8 + REPORT_BLOCK_LEN * blocks.len())?;
        out[4..8].copy_from_slice(&ssrc.to_be_bytes());
        Self::blocks(&mut out[8..], blocks);
        Ok(())
    }

    /// Append a SDES with one chunk: `ssrc` and its CNAME.
    pub fn sdes_cname(&mut self, ssrc: u32, cname: &[u8]) -> Result<(), WriteError> {
        let n = u8::try_from(cname.len()).map_err(|_| WriteError::TooLong)?;
        // header, SSRC, type, length, text, at least one null, pad to 4.
        let chunk = (4 + 2 + cname.len() + 1).next_multiple_of(4);
        let out = self.begin(1, PT_SDES, 4 + chunk)?;
        out[4..8].copy_from_slice(&ssrc.to_be_bytes());
        out[8] = SDES_CNAME;
        out[9] = n;
        out[10..10 + cname.len()].copy_from_slice(cname);
        Ok(())
    }

    /// Append a BYE for `sources`, with an optional reason.
    pub fn bye(&mut self, sources: &[u32], reason: Option<&[u8]>) -> Result<(), WriteError> {
        let rlen = match reason {
            Some(r) => 1 + usize::from(u8::try_from(r.len()).map_err(|_| WriteError::TooLong)?),
            None => 0,
        };
        let total = (4 + 4 * sources.len() + rlen).next_multiple_of(4);
        let out = self.begin(sources.len(), PT_BYE, total)?;
        for (c, s) in out[4..].chunks_exact_mut(4).zip(sources) {
            c.copy_from_slice(&s.to_be_bytes());
        }
        if let Some(r) = reason {
            let at = 4 + 4 * sources.len();
            out[at] = r.len() as u8;
            out[at + 1..at + 1 + r.len()].copy_from_slice(r);
        }
        Ok(())
    }
}
