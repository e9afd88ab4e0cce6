//! The AP side of the compact format's RTP header compression: reading an
//! intercepted UDP packet ([`parse`]: what the format can carry, or why it
//! goes back for unicast) and the per-stream compressor context ([`Ctx`]:
//! full or compressed, generation, references), by the rules of
//! docs/wire-format.md, "compact".
//!
//! Owns: those two decisions. Must not touch: frames, queues, timing
//! ([`super::mux`]), byte layouts ([`super::compact`]), the station's side
//! ([`super::demux`]).

use super::compact::{Entry, IpId, RtpStatic, Static};
use super::mux::UnicastReason;
use super::{be16, be32, udp_checksum, StreamId};
use crate::wire::ip::{self, proto};
use core::net::{IpAddr, Ipv4Addr};

/// The compressor's context for one stream (see docs/wire-format.md).
#[derive(Clone, Copy, Debug)]
pub(super) struct Ctx {
    have: bool,
    gen: u8,
    st: Static,
    ref_seq: u16,
    ref_ts: u32,
    ref_id: u16,
    fulls_left: u8,
    since_full: u8,
}

/// Full entries after a context change besides the changing one.
const REDUNDANT_FULLS: u8 = 2;
/// A full entry at least every this many packets of a stream.
const REFRESH: u8 = 16;
/// Largest sequence step a compressed entry may encode.
const MAX_SEQ_STEP: u16 = 8;
/// Largest IPv4 ID step a one-byte ID may encode.
const MAX_ID_STEP: u16 = 32;

/// One intercepted UDP packet, parsed (headers only).
#[derive(Clone, Copy, Debug)]
pub(super) struct Udp<'a> {
    pub(super) tos: u8,
    pub(super) ttl: u8,
    pub(super) df: bool,
    pub(super) id: u16,
    pub(super) flow: u32,
    pub(super) src: IpAddr,
    pub(super) src_port: u16,
    pub(super) csum_zero: bool,
    pub(super) payload: &'a [u8],
}

impl Udp<'_> {
    pub(super) fn static_part(&self, rtp: bool) -> Static {
        let p = self.payload;
        Static {
            df: self.df,
            udp_csum_zero: self.csum_zero,
            tos: self.tos,
            ttl: self.ttl,
            flow: self.flow,
            src: self.src,
            src_port: self.src_port,
            rtp: rtp.then(|| RtpStatic {
                pt: p[1] & 0x7f,
                ssrc: be32(p, 8),
                stride: 0,
                seq: be16(p, 2),
                ts: be32(p, 4),
            }),
        }
    }
}

impl Ctx {
    pub(super) fn new() -> Self {
        Ctx {
            have: false,
            gen: 0,
            st: Static {
                df: false,
                udp_csum_zero: false,
                tos: 0,
                ttl: 0,
                flow: 0,
                src: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                src_port: 0,
                rtp: None,
            },
            ref_seq: 0,
            ref_ts: 0,
            ref_id: 0,
            fulls_left: 0,
            since_full: 0,
        }
    }

    /// The stations did not see this stream's latest packets (their frame
    /// was not sent): the next entry is full, in a new generation.
    pub(super) fn restart(&mut self) {
        self.have = false;
    }

    /// Chooses full or compressed for this packet and updates the context
    /// (the rules of docs/wire-format.md, "compact").
    pub(super) fn compress<'p>(
        &mut self,
        sid: StreamId,
        u: &Udp<'p>,
        rtp: bool,
        body: &'p [u8],
    ) -> Entry<'p> {
        let mut st = u.static_part(rtp);
        let marker = rtp && u.payload[1] & 0x80 != 0;
        let mut linear = true;
        if let Some(r) = st.rtp.as_mut() {
            let prev = self
                .st
                .rtp
                .filter(|p| self.have && p.pt == r.pt && p.ssrc == r.ssrc);
            let step = r.seq.wrapping_sub(self.ref_seq);
            let dt = r.ts.wrapping_sub(self.ref_ts);
            let stepping = prev.is_some() && (1..=MAX_SEQ_STEP).contains(&step);
            let learned = (stepping && !marker && dt % u32::from(step) == 0)
                .then(|| dt / u32::from(step))
                .filter(|q| (1..=0xffff).contains(q));
            r.stride = match (learned, prev) {
                (Some(q), _) => q as u16,
                (None, Some(p)) => p.stride,
                (None, None) => 0,
            };
            linear = stepping
                && r.stride != 0
                && r.ts
                    == self
                        .ref_ts
                        .wrapping_add(u32::from(step) * u32::from(r.stride));
        }
        let same = self.have && same_static(&self.st, &st);
        let full = if !(same && linear) {
            self.gen = (self.gen + 1) & 7;
            self.fulls_left = REDUNDANT_FULLS;
            true
        } else if self.fulls_left > 0 {
            self.fulls_left -= 1;
            true
        } else {
            self.since_full + 1 >= REFRESH
        };
        self.since_full = if full { 0 } else { self.since_full + 1 };
        let id = match (u.src, u.id) {
            (IpAddr::V6(_), _) | (_, 0) => IpId::Zero,
            (_, id) if !full && (1..=MAX_ID_STEP).contains(&id.wrapping_sub(self.ref_id)) => {
                IpId::Lsb(id as u8)
            }
            (_, id) => IpId::Full(id),
        };
        let seq_lsb = st.rtp.map_or(0, |r| r.seq as u8);
        if let Some(r) = st.rtp {
            self.ref_seq = r.seq;
            self.ref_ts = r.ts;
        }
        self.ref_id = u.id;
        self.have = true;
        self.st = st;
        Entry {
            sid,
            gen: self.gen,
            rtp,
            marker,
            id,
            full: full.then_some(st),
            seq_lsb,
            payload: body,
        }
    }
}

/// Equal static fields, ignoring the per-packet RTP sequence number and timestamp.
fn same_static(a: &Static, b: &Static) -> bool {
    let strip = |s: &Static| Static {
        rtp: s.rtp.map(|r| RtpStatic { seq: 0, ts: 0, ..r }),
        ..*s
    };
    strip(a) == strip(b)
}

/// Checks an intercepted UDP packet for a registered stream and reads its
/// fields (the IP header is already valid: [`ip::inspect`]).
pub(super) fn parse<'a>(
    b: &'a [u8],
    info: &ip::PacketInfo,
    dec: u8,
) -> Result<Udp<'a>, UnicastReason> {
    let (hl, tos, ttl, df, id, flow) = if info.version == 4 {
        if b[0] != 0x45 || b[6] & 0x80 != 0 {
            return Err(UnicastReason::UnusualHeader);
        }
        if info.fragment {
            return Err(UnicastReason::Fragment);
        }
        (20, b[1], b[8], b[6] & 0x40 != 0, be16(b, 4), 0)
    } else {
        if b[6] != proto::UDP {
            return Err(UnicastReason::UnusualHeader);
        }
        let flow = u32::from(b[1] & 0x0f) << 16 | u32::from(be16(b, 2));
        (40, (b[0] << 4) | (b[1] >> 4), b[7], false, 0, flow)
    };
    let udp = &b[hl..];
    if udp.len() < 8 || usize::from(be16(udp, 4)) != udp.len() {
        return Err(UnicastReason::BadUdp);
    }
    let csum = be16(udp, 6);
    let csum_zero = csum == 0;
    if (csum_zero && info.version == 6)
        || (!csum_zero && udp_checksum(&info.src, &info.dst, udp) != 0)
    {
        return Err(UnicastReason::BadUdp);
    }
    if dec > 0 && ttl <= dec {
        return Err(UnicastReason::TtlExpired);
    }
    Ok(Udp {
        tos,
        ttl: ttl - dec.min(ttl),
        df,
        id,
        flow,
        src: info.src,
        src_port: be16(udp, 0),
        csum_zero,
        payload: &udp[8..],
    })
}
