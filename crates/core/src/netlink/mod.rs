//! Netlink messages the daemon's radio source reads (issue 11 point 4):
//! strict parsers over byte slices and the request builders, no sockets.
//!
//! Owns: the netlink header and attribute walk ([`messages`], [`attrs`]),
//! generic netlink's family lookup and nl80211's station and survey dumps
//! ([`nl80211`]), and rtnetlink's neighbour dump ([`neigh`]). Every length is
//! checked before it is used; a malformed message is an error, never a
//! panic or a guess. Layouts: `<linux/netlink.h>`, `<linux/genetlink.h>`,
//! `<linux/nl80211.h>`, `<linux/neighbour.h>` (all native-endian).
//!
//! Must not touch: sockets, the kernel, time (the daemon sends the bytes the
//! builders write and hands each received datagram to a parser).

pub mod neigh;
pub mod nl80211;

/// Length of `struct nlmsghdr`.
pub const NLMSG_HDRLEN: usize = 16;
/// `NLMSG_ERROR`.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`.
pub const NLMSG_DONE: u16 = 3;
/// `NLM_F_REQUEST`.
pub const NLM_F_REQUEST: u16 = 1;
/// `NLM_F_ACK`.
pub const NLM_F_ACK: u16 = 4;
/// `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`).
pub const NLM_F_DUMP: u16 = 0x300;
/// `NLM_F_MULTI`: part of a multi-part answer.
pub const NLM_F_MULTI: u16 = 2;

/// Why bytes were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NlError {
    /// A header or attribute claims more bytes than there are, or fewer
    /// than its own header.
    Length,
    /// A fixed-size value (family header, u32 counter, MAC) has the wrong size.
    BadValue,
    /// A message type the request cannot have caused.
    UnexpectedType,
    /// The kernel answered with this errno (positive).
    Errno(i32),
    /// The answer lacks an attribute it must carry.
    Missing,
}

impl NlError {
    /// Statistics label.
    pub fn reason(self) -> &'static str {
        match self {
            NlError::Length => "length",
            NlError::BadValue => "bad_value",
            NlError::UnexpectedType => "unexpected_type",
            NlError::Errno(_) => "errno",
            NlError::Missing => "missing",
        }
    }
}

/// One netlink message: header fields and payload (after the 16-byte header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    /// `nlmsg_type`.
    pub ty: u16,
    /// `nlmsg_flags`.
    pub flags: u16,
    /// `nlmsg_seq`.
    pub seq: u32,
    /// The bytes after the header, `nlmsg_len - 16` of them.
    pub payload: &'a [u8],
}

impl Message<'_> {
    /// For `NLMSG_ERROR`: the errno it carries (0 = an acknowledgement).
    pub fn error_code(&self) -> Result<i32, NlError> {
        let b = self.payload.get(..4).ok_or(NlError::Length)?;
        Ok(i32::from_ne_bytes([b[0], b[1], b[2], b[3]]).saturating_neg())
    }
}

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_ne_bytes([*b.get(i)?, *b.get(i + 1)?]))
}

fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_ne_bytes([
        *b.get(i)?,
        *b.get(i + 1)?,
        *b.get(i + 2)?,
        *b.get(i + 3)?,
    ]))
}

/// The messages of one datagram. A length that does not fit ends the walk
/// with `Err(Length)`; messages are 4-byte aligned (the padding after the
/// last one may be missing).
pub fn messages(mut buf: &[u8]) -> impl Iterator<Item = Result<Message<'_>, NlError>> {
    core::iter::from_fn(move || {
        if buf.is_empty() {
            return None;
        }
        let parsed = (|| {
            let len = u32_at(buf, 0)? as usize;
            if len < NLMSG_HDRLEN || len > buf.len() {
                return None;
            }
            let m = Message {
                ty: u16_at(buf, 4)?,
                flags: u16_at(buf, 6)?,
                seq: u32_at(buf, 8)?,
                payload: &buf[NLMSG_HDRLEN..len],
            };
            buf = buf.get((len + 3) & !3..).unwrap_or(&[]);
            Some(m)
        })();
        Some(parsed.ok_or_else(|| {
            buf = &[];
            NlError::Length
        }))
    })
}

/// The attributes of `buf`: `(type without the nested/byte-order flags,
/// value)`. A length under 4 or past the end ends the walk with
/// `Err(Length)`.
pub fn attrs(mut buf: &[u8]) -> impl Iterator<Item = Result<(u16, &[u8]), NlError>> {
    core::iter::from_fn(move || {
        if buf.is_empty() {
            return None;
        }
        let parsed = (|| {
            let len = usize::from(u16_at(buf, 0)?);
            let ty = u16_at(buf, 2)? & 0x3fff;
            if len < 4 || len > buf.len() {
                return None;
            }
            let v = &buf[4..len];
            buf = buf.get((len + 3) & !3..).unwrap_or(&[]);
            Some((ty, v))
        })();
        Some(parsed.ok_or_else(|| {
            buf = &[];
            NlError::Length
        }))
    })
}

/// A u8 attribute value (exactly one byte).
pub fn attr_u8(v: &[u8]) -> Result<u8, NlError> {
    match v {
        [b] => Ok(*b),
        _ => Err(NlError::BadValue),
    }
}

/// A u16 attribute value (exactly two bytes).
pub fn attr_u16(v: &[u8]) -> Result<u16, NlError> {
    match v {
        [a, b] => Ok(u16::from_ne_bytes([*a, *b])),
        _ => Err(NlError::BadValue),
    }
}

/// A u32 attribute value (exactly four bytes).
pub fn attr_u32(v: &[u8]) -> Result<u32, NlError> {
    match v {
        [a, b, c, d] => Ok(u32::from_ne_bytes([*a, *b, *c, *d])),
        _ => Err(NlError::BadValue),
    }
}

/// A u64 attribute value (exactly eight bytes).
pub fn attr_u64(v: &[u8]) -> Result<u64, NlError> {
    let a: [u8; 8] = v.try_into().map_err(|_| NlError::BadValue)?;
    Ok(u64::from_ne_bytes(a))
}

/// Appends a netlink header to `out` (its length is patched by [`finish`]).
pub fn begin(out: &mut Vec<u8>, ty: u16, flags: u16, seq: u32) {
    out.clear();
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it
}

/// Appends one attribute (padded to 4 bytes).
pub fn push_attr(out: &mut Vec<u8>, ty: u16, value: &[u8]) {
    let len = (4 + value.len()) as u16;
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(value);
    while out.len() % 4 != 0 {
        out.push(0);
    }
}

/// Writes the message length into the header [`begin`] wrote.
pub fn finish(out: &mut [u8]) {
    let len = out.len() as u32;
    out[..4].copy_from_slice(&len.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_messages_and_attributes_with_every_length_checked() {
        let mut m = Vec::new();
        begin(&mut m, 30, NLM_F_MULTI, 7);
        push_attr(&mut m, 1, &[1, 2, 3]);
        push_attr(&mut m, 0x8002, &5u32.to_ne_bytes());
        finish(&mut m);
        assert_eq!(m.len(), 16 + 8 + 8);
        let mut two = m.clone();
        two.extend_from_slice(&m);
        let got: Vec<_> = messages(&two).collect();
        assert_eq!(got.len(), 2);
        let msg = got[0].unwrap();
        assert_eq!((msg.ty, msg.flags, msg.seq), (30, NLM_F_MULTI, 7));
        let a: Vec<_> = attrs(msg.payload).map(Result::unwrap).collect();
        assert_eq!(a, vec![(1, &[1u8, 2, 3][..]), (2, &5u32.to_ne_bytes()[..])]);
        // Every truncation of a message is refused, never read past.
        for cut in 1..m.len() {
            let r: Vec<_> = messages(&m[..cut]).collect();
            assert_eq!(r.last(), Some(&Err(NlError::Length)), "cut {cut}");
        }
        // An attribute claiming more than there is; one shorter than its header.
        assert_eq!(attrs(&[9, 0, 1, 0, 0]).next(), Some(Err(NlError::Length)));
        assert_eq!(attrs(&[3, 0, 1, 0]).next(), Some(Err(NlError::Length)));
        assert_eq!(attr_u32(&[1, 2, 3]), Err(NlError::BadValue));
        assert_eq!(attr_u8(&[]), Err(NlError::BadValue));
    }
}
