//! Registration messages between a station and the access point (UDP, both
//! ways): register (ports: one, a range, or "auto"), renew, unregister, the
//! answers (lease time, table epoch and the stream ids assigned, as runs of
//! consecutive ports), errors with clear codes, and the station's periodic
//! loss report (frames received / missed / missed and not recovered in the
//! last window; never answered, fed to [`super::loss`]). Every message carries a
//! key id, a 64-bit sequence number and a SipHash-2-4 tag
//! ([`crate::auth`]) over everything before it.
//!
//! Owns: the byte layout, strict parsing ([`decode`]), writing ([`encode`])
//! and the tag check ([`open`]). Must not touch: lease policy and replay
//! windows ([`super::lease`]), keys' storage, sockets, clocks.
//!
//! ```text
//! | ver=1 | type | key id (2) | seq (8) | body ... | tag (8) |
//!   tag = SipHash-2-4(key, DOMAIN || all bytes before the tag)
//! ```

use super::{be16, FrameError, StreamId, WriteError, MAX_STREAM_ID};
use crate::auth::{self, Key, TAG_LEN};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Format version (byte 0).
pub const VERSION: u8 = 1;
/// Domain label in front of the tagged bytes, so that a registration tag can
/// never be taken for another message kind's (16 bytes, like [`auth::Domain`]'s).
pub const DOMAIN: &[u8] = b"airpack dlreg v1";
/// Bytes before the body: version, type, key id, sequence number.
pub const HEADER_LEN: usize = 12;
/// Most runs an answer carries.
pub const MAX_RUNS: usize = 8;
/// Largest message (an answer with [`MAX_RUNS`] runs).
pub const MAX_MESSAGE: usize = HEADER_LEN + 8 + 1 + 2 + 1 + 6 * MAX_RUNS + TAG_LEN;

/// Which ports a station registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ports {
    /// One port (code 1).
    Single(u16),
    /// `first ..= last` (code 2; `first <= last`).
    Range(u16, u16),
    /// The AP picks up the station's UDP streams in its own configured port
    /// range as they appear, and lists them in later answers (code 3).
    Auto,
}

/// Consecutive ports mapped to consecutive stream ids:
/// port `first_port + i` is stream `first_sid + i`, for `i < count`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Run {
    /// First port.
    pub first_port: u16,
    /// Number of ports (>= 1).
    pub count: u16,
    /// Stream id of the first port.
    pub first_sid: StreamId,
}

/// A positive answer to register or renew (equal when the valid runs are).
#[derive(Clone, Copy, Debug)]
pub struct Answer {
    /// Sequence number of the request answered.
    pub reply_to: u64,
    /// The AP's stream-table epoch (compact frame headers carry it).
    pub epoch: u8,
    /// Seconds the lease lasts from now unless renewed.
    pub lease_secs: u16,
    /// Number of valid entries in `runs`.
    pub n_runs: u8,
    /// The station's streams.
    pub runs: [Run; MAX_RUNS],
}

impl PartialEq for Answer {
    fn eq(&self, o: &Answer) -> bool {
        (self.reply_to, self.epoch, self.lease_secs, self.runs())
            == (o.reply_to, o.epoch, o.lease_secs, o.runs())
    }
}

impl Eq for Answer {}

impl Answer {
    /// The valid runs.
    pub fn runs(&self) -> &[Run] {
        &self.runs[..usize::from(self.n_runs).min(MAX_RUNS)]
    }
}

/// Error codes of an [`Body::Error`] answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The request's fields are inconsistent (range backwards, lease 0, ...).
    BadRequest = 1,
    /// The lease table or the stream-id space is full.
    TableFull = 2,
    /// A requested port of this address is registered by another lease.
    PortsTaken = 3,
    /// A range of more ports than the AP allows.
    RangeTooLarge = 4,
    /// Renew or unregister without a lease.
    NoLease = 5,
    /// The address in the body is not the request's source address.
    AddressMismatch = 6,
}

impl ErrorCode {
    /// All codes, in [`ErrorCode::index`] order.
    pub const ALL: [ErrorCode; 6] = [
        ErrorCode::BadRequest,
        ErrorCode::TableFull,
        ErrorCode::PortsTaken,
        ErrorCode::RangeTooLarge,
        ErrorCode::NoLease,
        ErrorCode::AddressMismatch,
    ];
    /// Position in [`ErrorCode::ALL`].
    pub fn index(self) -> usize {
        self as usize - 1
    }
    /// Short snake-case name (statistics).
    pub fn reason(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::TableFull => "table_full",
            ErrorCode::PortsTaken => "ports_taken",
            ErrorCode::RangeTooLarge => "range_too_large",
            ErrorCode::NoLease => "no_lease",
            ErrorCode::AddressMismatch => "address_mismatch",
        }
    }
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => ErrorCode::BadRequest,
            2 => ErrorCode::TableFull,
            3 => ErrorCode::PortsTaken,
            4 => ErrorCode::RangeTooLarge,
            5 => ErrorCode::NoLease,
            6 => ErrorCode::AddressMismatch,
            _ => return None,
        })
    }
}

/// What a station saw of the multiplexed frames in one report window
/// (counts of frame sequence numbers, [`super::demux::DemuxStats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LossReport {
    /// Frames received.
    pub received: u32,
    /// Frames missing from the sequence (gaps between frames received).
    pub missed: u32,
    /// Of those, frames whose entries no later frame repeated
    /// (redundancy); equal to `missed` without redundancy.
    pub unrecovered: u32,
}

/// A message's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// Station -> AP, type 1: multiplex `ports` of `addr` for `lease_secs`.
    Register {
        /// The station's address (must be the request's source).
        addr: IpAddr,
        /// Ports.
        ports: Ports,
        /// Lease asked for (seconds, >= 1; the AP may shorten it).
        lease_secs: u16,
    },
    /// Station -> AP, type 2: extend the lease of `addr`.
    Renew {
        /// The station's address.
        addr: IpAddr,
        /// Lease asked for.
        lease_secs: u16,
    },
    /// Station -> AP, type 3: stop multiplexing for `addr`.
    Unregister {
        /// The station's address.
        addr: IpAddr,
    },
    /// Station -> AP, type 4: multicast loss seen in the last window
    /// (`unrecovered <= missed`). Not answered.
    Report {
        /// The station's address.
        addr: IpAddr,
        /// The counts.
        report: LossReport,
    },
    /// AP -> station, type 0x81.
    RegisterOk(Answer),
    /// AP -> station, type 0x82.
    RenewOk(Answer),
    /// AP -> station, type 0x83.
    UnregisterOk {
        /// Sequence number of the request answered.
        reply_to: u64,
    },
    /// AP -> station, type 0xff.
    Error {
        /// Sequence number of the request answered.
        reply_to: u64,
        /// Why.
        code: ErrorCode,
    },
}

impl Body {
    fn code(&self) -> u8 {
        match self {
            Body::Register { .. } => 1,
            Body::Renew { .. } => 2,
            Body::Unregister { .. } => 3,
            Body::Report { .. } => 4,
            Body::RegisterOk(_) => 0x81,
            Body::RenewOk(_) => 0x82,
            Body::UnregisterOk { .. } => 0x83,
            Body::Error { .. } => 0xff,
        }
    }
}

/// A whole message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// Which pre-shared key tags it (lets both ends hold two keys during a change-over).
    pub key_id: u16,
    /// The sender's sequence number (must grow; the receiver keeps a replay window).
    pub seq: u64,
    /// What it says.
    pub body: Body,
}

/// Why a registration message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegError {
    /// The layout is wrong (the frame reasons: truncated, trailing bytes, bad version, reserved values).
    Format(FrameError),
    /// No key with this id.
    UnknownKey,
    /// The tag does not verify.
    BadTag,
}

impl From<FrameError> for RegError {
    fn from(e: FrameError) -> Self {
        RegError::Format(e)
    }
}

struct Cur<'a> {
    b: &'a [u8],
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if n > self.b.len() {
            return Err(FrameError::Truncated);
        }
        let (a, r) = self.b.split_at(n);
        self.b = r;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, FrameError> {
        Ok(be16(self.take(2)?, 0))
    }
    fn u32(&mut self) -> Result<u32, FrameError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, FrameError> {
        let b = self.take(8)?;
        Ok(u64::from_be_bytes(
            b.try_into().map_err(|_| FrameError::Truncated)?,
        ))
    }
    fn addr(&mut self) -> Result<IpAddr, FrameError> {
        match self.u8()? {
            4 => {
                let a: [u8; 4] = self
                    .take(4)?
                    .try_into()
                    .map_err(|_| FrameError::Truncated)?;
                Ok(IpAddr::V4(Ipv4Addr::from(a)))
            }
            6 => {
                let a: [u8; 16] = self
                    .take(16)?
                    .try_into()
                    .map_err(|_| FrameError::Truncated)?;
                Ok(IpAddr::V6(Ipv6Addr::from(a)))
            }
            _ => Err(FrameError::Reserved),
        }
    }
    fn answer(&mut self) -> Result<Answer, FrameError> {
        let reply_to = self.u64()?;
        let epoch = self.u8()?;
        let lease_secs = self.u16()?;
        let n = self.u8()?;
        if usize::from(n) > MAX_RUNS {
            return Err(FrameError::TooManyPackets);
        }
        let mut runs = [Run::default(); MAX_RUNS];
        for r in runs.iter_mut().take(usize::from(n)) {
            *r = Run {
                first_port: self.u16()?,
                count: self.u16()?,
                first_sid: self.u16()?,
            };
            if r.count == 0 {
                return Err(FrameError::ZeroLength);
            }
            let last_port = u32::from(r.first_port) + u32::from(r.count) - 1;
            let last_sid = u32::from(r.first_sid) + u32::from(r.count) - 1;
            if last_port > 0xffff || last_sid > u32::from(MAX_STREAM_ID) {
                return Err(FrameError::Reserved);
            }
        }
        Ok(Answer {
            reply_to,
            epoch,
            lease_secs,
            n_runs: n,
            runs,
        })
    }
}

/// Parses a message's layout (the tag is not checked: see [`open`]).
/// Returns the message and the tag bytes.
///
/// Errors (as [`FrameError`]): no byte `Empty`; version != 1 `BadVersion`;
/// unknown type, address family other than 4/6, port kind other than 1-3,
/// a report with more frames unrecovered than missed,
/// `Range` backwards, unknown error code, a run past port 65535 or stream id
/// 32767: `Reserved`; a run of 0 ports: `ZeroLength`; more than
/// [`MAX_RUNS`] runs: `TooManyPackets`; cut short: `Truncated`; bytes
/// between the body and the tag: `TrailingBytes`.
pub fn decode(b: &[u8]) -> Result<(Message, &[u8]), FrameError> {
    if b.is_empty() {
        return Err(FrameError::Empty);
    }
    if b[0] != VERSION {
        return Err(FrameError::BadVersion);
    }
    if b.len() < HEADER_LEN + TAG_LEN {
        return Err(FrameError::Truncated);
    }
    let (signed, tag) = b.split_at(b.len() - TAG_LEN);
    let mut c = Cur { b: &signed[1..] };
    let ty = c.u8()?;
    let key_id = c.u16()?;
    let seq = c.u64()?;
    let body = match ty {
        1 => {
            let addr = c.addr()?;
            let kind = c.u8()?;
            let (first, last) = (c.u16()?, c.u16()?);
            let ports = match kind {
                1 if first == last => Ports::Single(first),
                2 if first <= last => Ports::Range(first, last),
                3 if first == 0 && last == 0 => Ports::Auto,
                _ => return Err(FrameError::Reserved),
            };
            Body::Register {
                addr,
                ports,
                lease_secs: c.u16()?,
            }
        }
        2 => Body::Renew {
            addr: c.addr()?,
            lease_secs: c.u16()?,
        },
        3 => Body::Unregister { addr: c.addr()? },
        4 => {
            let addr = c.addr()?;
            let report = LossReport {
                received: c.u32()?,
                missed: c.u32()?,
                unrecovered: c.u32()?,
            };
            if report.unrecovered > report.missed {
                return Err(FrameError::Reserved);
            }
            Body::Report { addr, report }
        }
        0x81 => Body::RegisterOk(c.answer()?),
        0x82 => Body::RenewOk(c.answer()?),
        0x83 => Body::UnregisterOk { reply_to: c.u64()? },
        0xff => {
            let reply_to = c.u64()?;
            let code = ErrorCode::from_u8(c.u8()?).ok_or(FrameError::Reserved)?;
            Body::Error { reply_to, code }
        }
        _ => return Err(FrameError::Reserved),
    };
    if !c.b.is_empty() {
        return Err(FrameError::TrailingBytes);
    }
    Ok((Message { key_id, seq, body }, tag))
}

/// Parses a message and verifies its tag with the key `keys` returns for
/// its key id. The caller must then check the sequence number against the
/// sender's replay window ([`super::lease::LeaseTable`] does for requests).
pub fn open<'k>(b: &[u8], keys: impl Fn(u16) -> Option<&'k Key>) -> Result<Message, RegError> {
    let (m, tag) = decode(b)?;
    let key = keys(m.key_id).ok_or(RegError::UnknownKey)?;
    if !auth::verify(key, &[DOMAIN, &b[..b.len() - TAG_LEN]], tag) {
        return Err(RegError::BadTag);
    }
    Ok(m)
}

/// Writes `m`, tagged with `key`, at the start of `out`; returns its length.
pub fn encode(m: &Message, key: &Key, out: &mut [u8]) -> Result<usize, WriteError> {
    let mut buf = [0u8; MAX_MESSAGE];
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        buf[n..n + bytes.len()].copy_from_slice(bytes);
        n += bytes.len();
    };
    put(&[VERSION, m.body.code()]);
    put(&m.key_id.to_be_bytes());
    put(&m.seq.to_be_bytes());
    let addr = |put: &mut dyn FnMut(&[u8]), a: &IpAddr| match a {
        IpAddr::V4(a) => {
            put(&[4]);
            put(&a.octets());
        }
        IpAddr::V6(a) => {
            put(&[6]);
            put(&a.octets());
        }
    };
    match &m.body {
        Body::Register {
            addr: a,
            ports,
            lease_secs,
        } => {
            addr(&mut put, a);
            let (kind, first, last) = match *ports {
                Ports::Single(p) => (1, p, p),
                Ports::Range(f, l) if f <= l => (2, f, l),
                Ports::Range(..) => return Err(WriteError::OutOfRange),
                Ports::Auto => (3, 0, 0),
            };
            put(&[kind]);
            put(&first.to_be_bytes());
            put(&last.to_be_bytes());
            put(&lease_secs.to_be_bytes());
        }
        Body::Renew {
            addr: a,
            lease_secs,
        } => {
            addr(&mut put, a);
            put(&lease_secs.to_be_bytes());
        }
        Body::Unregister { addr: a } => addr(&mut put, a),
        Body::Report { addr: a, report } => {
            if report.unrecovered > report.missed {
                return Err(WriteError::OutOfRange);
            }
            addr(&mut put, a);
            put(&report.received.to_be_bytes());
            put(&report.missed.to_be_bytes());
            put(&report.unrecovered.to_be_bytes());
        }
        Body::RegisterOk(ans) | Body::RenewOk(ans) => {
            if usize::from(ans.n_runs) > MAX_RUNS {
                return Err(WriteError::OutOfRange);
            }
            put(&ans.reply_to.to_be_bytes());
            put(&[ans.epoch]);
            put(&ans.lease_secs.to_be_bytes());
            put(&[ans.n_runs]);
            for r in ans.runs() {
                let bad = r.count == 0
                    || u32::from(r.first_port) + u32::from(r.count) - 1 > 0xffff
                    || u32::from(r.first_sid) + u32::from(r.count) - 1 > u32::from(MAX_STREAM_ID);
                if bad {
                    return Err(WriteError::OutOfRange);
                }
                put(&r.first_port.to_be_bytes());
                put(&r.count.to_be_bytes());
                put(&r.first_sid.to_be_bytes());
            }
        }
        Body::UnregisterOk { reply_to } => put(&reply_to.to_be_bytes()),
        Body::Error { reply_to, code } => {
            put(&reply_to.to_be_bytes());
            put(&[*code as u8]);
        }
    }
    let t = auth::tag(key, &[DOMAIN, &buf[..n]]);
    buf[n..n + TAG_LEN].copy_from_slice(&t);
    let n = n + TAG_LEN;
    let out = out.get_mut(..n).ok_or(WriteError::NoRoom)?;
    out.copy_from_slice(&buf[..n]);
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key::from_bytes(*b"0123456789abcdef")
    }

    fn roundtrip(m: Message) -> usize {
        let k = key();
        let mut out = [0u8; MAX_MESSAGE];
        let n = encode(&m, &k, &mut out).unwrap();
        assert_eq!(open(&out[..n], |id| (id == m.key_id).then_some(&k)), Ok(m));
        // Any flipped bit is refused: by the layout or by the tag.
        for i in 0..n * 8 {
            let mut bad = out;
            bad[i / 8] ^= 1 << (i % 8);
            assert!(open(&bad[..n], |_| Some(&k)).is_err(), "bit {i}");
        }
        assert_eq!(open(&out[..n], |_| None), Err(RegError::UnknownKey));
        n
    }

    #[test]
    fn every_message_round_trips_and_is_tamper_evident() {
        let a4 = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5));
        let a6: IpAddr = "fd00::5".parse().unwrap();
        let reg = |ports| Message {
            key_id: 7,
            seq: 1_700_000_000_000_000,
            body: Body::Register {
                addr: a4,
                ports,
                lease_secs: 60,
            },
        };
        assert_eq!(roundtrip(reg(Ports::Single(6600))), 12 + 5 + 5 + 2 + 8);
        roundtrip(reg(Ports::Range(6600, 6700)));
        roundtrip(reg(Ports::Auto));
        roundtrip(Message {
            key_id: 1,
            seq: 2,
            body: Body::Renew {
                addr: a6,
                lease_secs: 30,
            },
        });
        roundtrip(Message {
            key_id: 1,
            seq: 3,
            body: Body::Unregister { addr: a6 },
        });
        let report = LossReport {
            received: 48,
            missed: 2,
            unrecovered: 1,
        };
        assert_eq!(
            roundtrip(Message {
                key_id: 1,
                seq: 8,
                body: Body::Report { addr: a4, report },
            }),
            12 + 5 + 12 + 8
        );
        roundtrip(Message {
            key_id: 1,
            seq: 9,
            body: Body::Report { addr: a6, report },
        });
        let mut runs = [Run::default(); MAX_RUNS];
        runs[0] = Run {
            first_port: 6600,
            count: 101,
            first_sid: 0,
        };
        let ans = Answer {
            reply_to: 2,
            epoch: 9,
            lease_secs: 60,
            n_runs: 1,
            runs,
        };
        assert_eq!(
            roundtrip(Message {
                key_id: 1,
                seq: 4,
                body: Body::RegisterOk(ans)
            }),
            12 + 12 + 6 + 8
        );
        roundtrip(Message {
            key_id: 1,
            seq: 5,
            body: Body::RenewOk(Answer { n_runs: 0, ..ans }),
        });
        roundtrip(Message {
            key_id: 1,
            seq: 6,
            body: Body::UnregisterOk { reply_to: 3 },
        });
        roundtrip(Message {
            key_id: 1,
            seq: 7,
            body: Body::Error {
                reply_to: 3,
                code: ErrorCode::PortsTaken,
            },
        });
    }

    #[test]
    fn layout_errors_are_named() {
        assert_eq!(decode(&[]).map(|x| x.0), Err(FrameError::Empty));
        assert_eq!(decode(&[2; 30]).map(|x| x.0), Err(FrameError::BadVersion));
        assert_eq!(decode(&[1; 19]).map(|x| x.0), Err(FrameError::Truncated));
        let mut m = [0u8; 12 + 8];
        m[0] = 1;
        m[1] = 9; // unknown type
        assert_eq!(decode(&m).map(|x| x.0), Err(FrameError::Reserved));
        m[1] = 0x83; // UnregisterOk needs 8 body bytes
        assert_eq!(decode(&m).map(|x| x.0), Err(FrameError::Truncated));
        let mut m = [0u8; 12 + 9 + 8];
        m[0] = 1;
        m[1] = 0x83;
        assert_eq!(decode(&m).map(|x| x.0), Err(FrameError::TrailingBytes));
        // An answer with one run of 0 ports at port 0 (found by fuzzing: an
        // underflow before the count was checked).
        let mut a = vec![1u8, 0x81, 0, 0];
        a.extend_from_slice(&[0; 8]); // seq
        a.extend_from_slice(&[0; 8]); // reply-to
        a.extend_from_slice(&[0, 0, 60, 1, 0, 0, 0, 0, 0, 0]); // epoch, lease, 1 run: port 0, count 0, sid 0
        a.extend_from_slice(&[0; 8]); // tag
        assert_eq!(decode(&a).map(|x| x.0), Err(FrameError::ZeroLength));
        // A range written backwards is refused by the writer.
        let back = Message {
            key_id: 0,
            seq: 0,
            body: Body::Register {
                addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
                ports: Ports::Range(9, 8),
                lease_secs: 1,
            },
        };
        assert_eq!(
            encode(&back, &key(), &mut [0u8; 64]),
            Err(WriteError::OutOfRange)
        );
        // A report claiming more unrecovered than missed frames.
        let bad = LossReport {
            received: 1,
            missed: 1,
            unrecovered: 2,
        };
        let m = Message {
            key_id: 0,
            seq: 1,
            body: Body::Report {
                addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
                report: bad,
            },
        };
        assert_eq!(
            encode(&m, &key(), &mut [0u8; 64]),
            Err(WriteError::OutOfRange)
        );
        let mut r = vec![1u8, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 4, 127, 0, 0, 1];
        r.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2]);
        r.extend_from_slice(&[0; 8]);
        assert_eq!(decode(&r).map(|x| x.0), Err(FrameError::Reserved));
        r[28] = 1; // unrecovered 1 of 1 missed: accepted
        assert!(decode(&r).is_ok());
    }
}
