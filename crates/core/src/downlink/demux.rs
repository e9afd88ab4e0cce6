//! A station's downlink demultiplexer: takes the frames the access point
//! multicast, keeps only its own streams' packets and rebuilds each as the
//! original IP/UDP packet (what the AP would have forwarded).
//!
//! Owns: the station's stream table (stream id -> its destination address
//! and port, from the registration answer), the RTP decompressor's contexts,
//! frame-loss accounting, IP/UDP header rebuilding. Must not touch: sockets
//! (the driver injects the rebuilt packets), registration, byte layouts
//! ([`super::seed`], [`super::compact`] parse the frames).
//!
//! What travels, and why the result is byte-identical (compact format):
//! every header field is either carried (TOS/traffic class with ECN, TTL /
//! hop limit after the AP's decrement, DF, IPv4 ID, flow label, source
//! address and port, the UDP checksum's "none" state, RTP PT/M/SSRC/seq/ts),
//! fixed by what the AP accepts (20-byte IPv4 header without options,
//! reserved flag, MF or offset; IPv6 without extension headers; protocol
//! 17), the stream's (destination address and port), or computed (lengths,
//! IPv4 header checksum, UDP checksum: the AP only multiplexes packets whose
//! UDP checksum verifies, so the recomputed value is the original, RFC 768's
//! 0xFFFF for a computed 0 included).
//!
//! The seed layout carries only addresses, ports and the payload: rebuilt
//! packets get TOS 0, ID 0, DF set, TTL [`DemuxConfig::seed_ttl`] and a
//! computed UDP checksum (docs/wire-format.md).
//!
//! Delivery is a callback per rebuilt packet, written into the caller's
//! scratch buffer: nothing is allocated per frame or packet.

use super::compact::{self, Entry, IpId, Static};
use super::mux::Format;
use super::seed;
use super::{udp_checksum, FrameError, StreamId};
use crate::wire::ip;
use core::net::{IpAddr, Ipv4Addr};
use std::collections::{HashMap, HashSet};

/// A frame-sequence gap of this many lost frames or more drops every context.
pub const RESET_GAP: u16 = 8;
/// Scratch space that always holds a rebuilt packet.
pub const MAX_REBUILT: usize = 65_535;

/// Configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DemuxConfig {
    /// The layout the AP sends.
    pub format: Format,
    /// TTL written into packets rebuilt from the seed layout.
    pub seed_ttl: u8,
}

impl Default for DemuxConfig {
    fn default() -> Self {
        DemuxConfig {
            format: Format::Compact,
            seed_ttl: 64,
        }
    }
}

/// Counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DemuxStats {
    /// Frames accepted (parsed, right epoch, not a repeat).
    pub frames: u64,
    /// Frames refused by the parser, by [`FrameError::ALL`] index.
    pub refused: [u64; FrameError::COUNT],
    /// Compact frames of another epoch (ignored).
    pub wrong_epoch: u64,
    /// Compact frames repeating the last sequence number (ignored: the
    /// AP's further copies, `MuxConfig::copies`, or a duplicated datagram;
    /// they carry nothing new, so they are not drops).
    pub copies: u64,
    /// Compact frames whose number is behind the last one (taken, every context dropped).
    pub resyncs: u64,
    /// Frames missing from the sequence (sum of gaps).
    pub lost_frames: u64,
    /// Times every context was dropped after a gap of [`RESET_GAP`] or more.
    pub context_resets: u64,
    /// Packets rebuilt and delivered.
    pub delivered: u64,
    /// Packets for other stations (headers parsed, payload skipped).
    pub skipped: u64,
    /// Compressed entries without a matching context (dropped).
    pub no_context: u64,
    /// Entries inconsistent with the stream (family, IPv6 with an ID, scratch too small).
    pub bad_entry: u64,
    /// Packets rebuilt from a repeat block (their own frame was lost; also in `delivered`).
    pub recovered: u64,
    /// Repeated entries for this station skipped: their frame had arrived.
    pub duplicates: u64,
    /// Missing frames whose entries arrived in a later frame's repeat block
    /// (at most `lost_frames`; a partial block counts as recovering its frame).
    pub recovered_frames: u64,
}

#[derive(Clone, Copy, Debug)]
struct DCtx {
    gen: u8,
    st: Static,
    ref_seq: u16,
    ref_ts: u32,
    ref_id: u16,
}

#[derive(Clone, Copy, Debug)]
struct DStream {
    dst: IpAddr,
    port: u16,
    ctx: Option<DCtx>,
}

/// The station's demultiplexer.
#[derive(Debug)]
pub struct Demux {
    cfg: DemuxConfig,
    streams: HashMap<StreamId, DStream>,
    seed_streams: HashSet<(Ipv4Addr, u16)>,
    epoch: u8,
    last_seq: Option<u16>,
    stats: DemuxStats,
}

impl Demux {
    /// A demultiplexer without streams, epoch 0.
    pub fn new(cfg: DemuxConfig) -> Self {
        Demux {
            cfg,
            streams: HashMap::new(),
            seed_streams: HashSet::new(),
            epoch: 0,
            last_seq: None,
            stats: DemuxStats::default(),
        }
    }

    /// Statistics.
    pub fn stats(&self) -> &DemuxStats {
        &self.stats
    }

    /// The AP's table epoch (from a registration answer); a change drops
    /// every context and the frame sequence.
    pub fn set_epoch(&mut self, epoch: u8) {
        if epoch != self.epoch {
            self.epoch = epoch;
            self.last_seq = None;
            self.reset_contexts();
        }
    }

    /// Adds (or replaces) one of this station's streams.
    pub fn add_stream(&mut self, sid: StreamId, dst: IpAddr, port: u16) {
        self.streams.insert(
            sid,
            DStream {
                dst,
                port,
                ctx: None,
            },
        );
        if let IpAddr::V4(a) = dst {
            self.seed_streams.insert((a, port));
        }
    }

    /// Removes a stream.
    pub fn remove_stream(&mut self, sid: StreamId) {
        if let Some(s) = self.streams.remove(&sid) {
            if let IpAddr::V4(a) = s.dst {
                self.seed_streams.remove(&(a, s.port));
            }
        }
    }

    /// Drops every decompression context and the frame sequence. The driver
    /// calls this when no frame has arrived for [`RESET_GAP`] intervals or
    /// more (a silence the sequence number cannot show if it spans a
    /// multiple of 65 536 frames).
    pub fn forget(&mut self) {
        self.last_seq = None;
        self.reset_contexts();
    }

    fn reset_contexts(&mut self) {
        for s in self.streams.values_mut() {
            s.ctx = None;
        }
    }

    /// Handles one received frame: each of this station's packets is
    /// rebuilt into `scratch` and handed to `deliver`. Returns the number
    /// delivered, or the parser's reason (nothing delivered).
    pub fn handle_frame<F: FnMut(&[u8])>(
        &mut self,
        frame: &[u8],
        scratch: &mut [u8],
        mut deliver: F,
    ) -> Result<usize, FrameError> {
        let before = self.stats.delivered;
        let r = match self.cfg.format {
            Format::Compact => self.compact(frame, scratch, &mut deliver),
            Format::Seed => self.seed(frame, scratch, &mut deliver),
        };
        if let Err(e) = r {
            self.stats.refused[e.index()] += 1;
        }
        r.map(|()| (self.stats.delivered - before) as usize)
    }

    fn seed(
        &mut self,
        frame: &[u8],
        scratch: &mut [u8],
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), FrameError> {
        let f = seed::decode(frame)?;
        self.stats.frames += 1;
        for p in f.iter() {
            if !self.seed_streams.contains(&(p.dst, p.dst_port)) {
                self.stats.skipped += 1;
                continue;
            }
            let h = Hdr {
                src: IpAddr::V4(p.src),
                dst: IpAddr::V4(p.dst),
                src_port: p.src_port,
                dst_port: p.dst_port,
                tos: 0,
                ttl: self.cfg.seed_ttl,
                df: true,
                id: 0,
                flow: 0,
                csum_zero: false,
            };
            match build(scratch, &h, None, p.payload) {
                Some(n) => {
                    self.stats.delivered += 1;
                    deliver(&scratch[..n]);
                }
                None => self.stats.bad_entry += 1,
            }
        }
        Ok(())
    }

    fn compact(
        &mut self,
        frame: &[u8],
        scratch: &mut [u8],
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), FrameError> {
        let f = compact::decode(frame)?;
        if f.header.epoch != self.epoch {
            self.stats.wrong_epoch += 1;
            return Ok(());
        }
        // A repeat block (frame seq - j's entries) is used only when that
        // frame is known to be missing: the last frame seen is older, j <
        // gap. None after a resync (nothing known) or before the first frame.
        let mut use_below = 0;
        if let Some(last) = self.last_seq {
            let gap = f.header.seq.wrapping_sub(last);
            if gap <= 0x8000 {
                use_below = usize::from(gap);
            }
            if gap == 0 {
                self.stats.copies += 1;
                return Ok(());
            }
            if gap > 0x8000 {
                // Seemingly backwards: a reordered old frame or an AP that
                // restarted its numbering. Either way no context can be
                // trusted; take the frame as the new reference.
                self.stats.resyncs += 1;
                self.stats.context_resets += 1;
                self.reset_contexts();
            } else {
                self.stats.lost_frames += u64::from(gap - 1);
                if gap > RESET_GAP {
                    self.stats.context_resets += 1;
                    self.reset_contexts();
                }
            }
        }
        self.last_seq = Some(f.header.seq);
        self.stats.frames += 1;
        // Oldest block first, so a stream's entries are expanded in order.
        for (age, block) in f.blocks() {
            if age < use_below {
                self.stats.recovered_frames += 1;
            }
            for e in block {
                if !self.streams.contains_key(&e.sid) {
                    continue;
                }
                if age >= use_below {
                    self.stats.duplicates += 1;
                    continue;
                }
                let before = self.stats.delivered;
                self.entry(&e, scratch, deliver);
                self.stats.recovered += self.stats.delivered - before;
            }
        }
        for e in f.iter() {
            if !self.streams.contains_key(&e.sid) {
                self.stats.skipped += 1;
                continue;
            }
            self.entry(&e, scratch, deliver);
        }
        Ok(())
    }

    /// Rebuilds one entry of a registered stream and delivers it.
    fn entry(&mut self, e: &Entry<'_>, scratch: &mut [u8], deliver: &mut dyn FnMut(&[u8])) {
        let Some(s) = self.streams.get_mut(&e.sid) else {
            return;
        };
        match expand(s, e) {
            Err(Miss::NoContext) => self.stats.no_context += 1,
            Err(Miss::Bad) => self.stats.bad_entry += 1,
            Ok((h, rtp)) => match build(scratch, &h, rtp.as_ref(), e.payload) {
                Some(n) => {
                    self.stats.delivered += 1;
                    deliver(&scratch[..n]);
                }
                None => self.stats.bad_entry += 1,
            },
        }
    }
}

enum Miss {
    NoContext,
    Bad,
}

/// The RTP header fields of a rebuilt packet.
struct Rtp {
    marker: bool,
    pt: u8,
    seq: u16,
    ts: u32,
    ssrc: u32,
}

/// Everything needed to write the IP and UDP headers.
struct Hdr {
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    dst_port: u16,
    tos: u8,
    ttl: u8,
    df: bool,
    id: u16,
    flow: u32,
    csum_zero: bool,
}

/// Resolves an entry against the stream's context (updating it).
fn expand(s: &mut DStream, e: &Entry<'_>) -> Result<(Hdr, Option<Rtp>), Miss> {
    let (st, seq, ts, id) = match e.full {
        Some(st) => {
            if st.src.is_ipv4() != s.dst.is_ipv4() || (st.src.is_ipv6() && e.id != IpId::Zero) {
                return Err(Miss::Bad);
            }
            let id = match e.id {
                IpId::Full(v) => v,
                _ => 0,
            };
            let (seq, ts) = st.rtp.map_or((0, 0), |r| (r.seq, r.ts));
            (st, seq, ts, id)
        }
        None => {
            let c = s.ctx.as_ref().ok_or(Miss::NoContext)?;
            if c.gen != e.gen
                || c.st.rtp.is_some() != e.rtp
                || c.st.rtp.is_some_and(|r| r.stride == 0)
            {
                return Err(Miss::NoContext);
            }
            if c.st.src.is_ipv6() && e.id != IpId::Zero {
                return Err(Miss::Bad);
            }
            let (seq, ts) = match c.st.rtp {
                Some(r) => {
                    let d8 = e.seq_lsb.wrapping_sub(c.ref_seq as u8);
                    let d = if d8 > 191 {
                        i32::from(d8) - 256
                    } else {
                        i32::from(d8)
                    };
                    let ts = c
                        .ref_ts
                        .wrapping_add(d.wrapping_mul(i32::from(r.stride)) as u32);
                    (c.ref_seq.wrapping_add(d as u16), ts)
                }
                None => (0, 0),
            };
            let id = match e.id {
                IpId::Zero => 0,
                IpId::Full(v) => v,
                IpId::Lsb(b) => {
                    let d8 = b.wrapping_sub(c.ref_id as u8);
                    let d = if d8 > 223 {
                        i32::from(d8) - 256
                    } else {
                        i32::from(d8)
                    };
                    c.ref_id.wrapping_add(d as u16)
                }
            };
            (c.st, seq, ts, id)
        }
    };
    s.ctx = Some(DCtx {
        gen: e.gen,
        st,
        ref_seq: seq,
        ref_ts: ts,
        ref_id: id,
    });
    let h = Hdr {
        src: st.src,
        dst: s.dst,
        src_port: st.src_port,
        dst_port: s.port,
        tos: st.tos,
        ttl: st.ttl,
        df: st.df,
        id,
        flow: st.flow,
        csum_zero: st.udp_csum_zero,
    };
    let rtp = st.rtp.map(|r| Rtp {
        marker: e.marker,
        pt: r.pt,
        seq,
        ts,
        ssrc: r.ssrc,
    });
    Ok((h, rtp))
}

/// Writes the rebuilt packet into `out`; `None` if it does not fit.
fn build(out: &mut [u8], h: &Hdr, rtp: Option<&Rtp>, body: &[u8]) -> Option<usize> {
    let hl = if h.src.is_ipv4() {
        ip::IPV4_HEADER_LEN
    } else {
        ip::IPV6_HEADER_LEN
    };
    let rl = if rtp.is_some() {
        compact::RTP_HEADER_LEN
    } else {
        0
    };
    let udp_len = 8 + rl + body.len();
    let total = hl + udp_len;
    if total > out.len() || total > ip::MAX_PACKET || (h.src.is_ipv6() && udp_len > 0xffff) {
        return None;
    }
    let out = &mut out[..total];
    match (h.src, h.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out[0] = 0x45;
            out[1] = h.tos;
            out[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            out[4..6].copy_from_slice(&h.id.to_be_bytes());
            out[6] = if h.df { 0x40 } else { 0 };
            out[7] = 0;
            out[8] = h.ttl;
            out[9] = 17;
            out[10..12].fill(0);
            out[12..16].copy_from_slice(&s.octets());
            out[16..20].copy_from_slice(&d.octets());
            let c = ip::checksum(&out[..20]);
            out[10..12].copy_from_slice(&c.to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let first = 6u32 << 28 | u32::from(h.tos) << 20 | (h.flow & 0xf_ffff);
            out[0..4].copy_from_slice(&first.to_be_bytes());
            out[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            out[6] = 17;
            out[7] = h.ttl;
            out[8..24].copy_from_slice(&s.octets());
            out[24..40].copy_from_slice(&d.octets());
        }
        _ => return None,
    }
    let u = &mut out[hl..];
    u[0..2].copy_from_slice(&h.src_port.to_be_bytes());
    u[2..4].copy_from_slice(&h.dst_port.to_be_bytes());
    u[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    u[6..8].fill(0);
    if let Some(r) = rtp {
        u[8] = 0x80;
        u[9] = (u8::from(r.marker) << 7) | r.pt;
        u[10..12].copy_from_slice(&r.seq.to_be_bytes());
        u[12..16].copy_from_slice(&r.ts.to_be_bytes());
        u[16..20].copy_from_slice(&r.ssrc.to_be_bytes());
    }
    u[8 + rl..].copy_from_slice(body);
    if !h.csum_zero {
        let c = match udp_checksum(&h.src, &h.dst, u) {
            0 => 0xffff,
            c => c,
        };
        u[6..8].copy_from_slice(&c.to_be_bytes());
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::downlink::compact::{CompactWriter, FrameHeader, RtpStatic};

    /// A frame with one entry of stream 1: full (with static block) or compressed.
    fn frame(seq: u16, full: bool, rtp_seq: u16) -> Vec<u8> {
        let mut buf = vec![0u8; 200];
        let mut w = CompactWriter::new(&mut buf, FrameHeader { epoch: 0, seq }).unwrap();
        let st = Static {
            df: true,
            udp_csum_zero: true,
            tos: 0xb8,
            ttl: 63,
            flow: 0,
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            src_port: 5004,
            rtp: Some(RtpStatic {
                pt: 18,
                ssrc: 7,
                stride: 160,
                seq: rtp_seq,
                ts: 160 * u32::from(rtp_seq),
            }),
        };
        w.push(&Entry {
            sid: 1,
            gen: 3,
            rtp: true,
            marker: false,
            id: IpId::Zero,
            full: full.then_some(st),
            seq_lsb: rtp_seq as u8,
            payload: &[0x55; 20],
        })
        .unwrap();
        let n = w.finish();
        buf.truncate(n);
        buf
    }

    fn demux() -> Demux {
        let mut d = Demux::new(DemuxConfig::default());
        d.add_stream(1, IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5)), 6600);
        d
    }

    #[test]
    fn sequence_gaps_and_context_rules() {
        let mut d = demux();
        let mut s = vec![0u8; MAX_REBUILT];
        let mut got = Vec::new();
        let mut run = |d: &mut Demux, f: &[u8], got: &mut Vec<(u16, u32)>| {
            d.handle_frame(f, &mut s, |p| {
                got.push((
                    u16::from_be_bytes([p[30], p[31]]),
                    u32::from_be_bytes([p[32], p[33], p[34], p[35]]),
                ))
            })
            .unwrap()
        };
        // A compressed entry before any full one: no context.
        assert_eq!(run(&mut d, &frame(10, false, 1), &mut got), 0);
        assert_eq!(d.stats().no_context, 1);
        assert_eq!(run(&mut d, &frame(11, true, 1), &mut got), 1);
        // Frames 12..=18 lost (7 < RESET_GAP): the context survives; seq and ts expand.
        assert_eq!(run(&mut d, &frame(19, false, 9), &mut got), 1);
        assert_eq!(got.last(), Some(&(9, 1440)));
        assert_eq!(d.stats().lost_frames, 7);
        // A repeat is ignored; a gap of 8 lost frames drops the context.
        assert_eq!(run(&mut d, &frame(19, false, 9), &mut got), 0);
        assert_eq!(d.stats().copies, 1);
        assert_eq!(run(&mut d, &frame(28, false, 10), &mut got), 0);
        assert_eq!((d.stats().context_resets, d.stats().no_context), (1, 2));
        // A frame numbered behind the last one resynchronises.
        assert_eq!(run(&mut d, &frame(3, true, 20), &mut got), 1);
        assert_eq!(d.stats().resyncs, 1);
        // Another epoch is ignored.
        d.set_epoch(1);
        assert_eq!(run(&mut d, &frame(4, true, 21), &mut got), 0);
        assert_eq!(d.stats().wrong_epoch, 1);
    }
}
