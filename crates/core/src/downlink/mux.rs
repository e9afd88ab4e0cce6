//! The access point's downlink multiplexer: a sans-IO state machine in the
//! shape of [`crate::engine::Engine`]. The driver hands it every packet it
//! intercepted on the way to the cell (`handle_packet(now, bytes)`), the
//! medium's state (`set_link_busy`) and time (`handle_timeout`), and drains
//! frames (`poll_transmit(now, buf)`) to send to the multicast group, then
//! sleeps until `poll_timeout()`.
//!
//! Owns: which packets join a frame and when a frame leaves, the RTP
//! compressor's contexts, the bounded frame queue, statistics. Every packet
//! handed in is passed back ([`Verdict::Pass`]: not a registered stream;
//! [`Verdict::Unicast`]: registered, but the format cannot carry it), or
//! leaves in a frame, or is counted in [`MuxStats::dropped`].
//!
//! Must not touch: sockets, clocks, registration (the lease table calls
//! [`Mux::add_stream`] / [`Mux::remove_stream`]), byte layouts
//! ([`super::seed`], [`super::compact`]).
//!
//! Semantics (decisions where the seed leaves room):
//! * A frame is closed when its first packet has waited `interval` (so no
//!   packet is held longer than the interval; the seed's fixed 20 ms timer
//!   gives the same bound), when the next packet would not fit `max_frame`
//!   (that packet starts the next frame), when the medium is idle and the
//!   frame holds exactly one packet (at its arrival, or when the driver
//!   reports the medium idle), or on [`Mux::flush`].
//! * Closed frames wait in a queue of `queue_frames`; when it is full the
//!   oldest is dropped and its packets counted ([`MuxDrop::QueueFull`]).
//!   Its sequence number is then missing at the stations, as for a frame
//!   lost on the air.
//! * Airtime rule (issue 14, point 10: never lower capacity), when
//!   [`MuxConfig::airtime`] gives the cell's PHY: as a frame closes, its
//!   airtime as one multicast frame without ACK at the multicast rate
//!   ([`super::airtime::CellPhy::multicast_us`] of the frame plus its
//!   UDP/IP header) is compared with the airtime of its packets as
//!   ordinary unicast exchanges. When the frame does not take less, its
//!   packets leave as they came, one [`Transmit`] each with
//!   [`Transmit::unicast`] set (counted in [`MuxStats::fallback`]); the
//!   frame's sequence number is reused by the next frame (stations see no
//!   gap) and the RTP contexts of its streams start over with a full entry
//!   (the stations never saw these packets). For this the mux keeps a copy
//!   of each original packet while airtime is configured (buffers
//!   allocated at start; a frame whose copies would not fit closes early,
//!   as for size).
//! * Redundancy ([`MuxConfig::redundancy`] = depth D, compact only): as a
//!   frame closes, the entries of the D frames before it (sequence numbers
//!   one to D less, each sent as a frame) are put in front of its own, as
//!   repeat blocks, newest first as long as they fit `max_frame` (and the
//!   frame still pays under the airtime rule): a frame carries the blocks
//!   of frames `seq - k .. seq - 1` for the largest k <= D that fits. A
//!   station that lost such a frame rebuilds its packets from the repeat;
//!   one that has it skips the block (counted as duplicates). The repeated
//!   entries are byte for byte those of the earlier frame, so the station's
//!   RTP contexts see the same sequence either way. With
//!   [`MuxConfig::partial_repeat`], a frame without room for the previous
//!   frame's whole block carries part of it: a window of its entries, in
//!   their order, as many as fit, starting where the last window ended (so
//!   on a full cell every stream is protected in turn, not always the same
//!   first ones). Depth 1 writes the
//!   one-block layout of the first version (flag 0x01 only); a frame with
//!   two or more blocks also sets the depth flag (docs/wire-format.md).
//! * Loss rule ([`super::loss`]): the streams of a station set with
//!   [`Mux::set_unicast`] are handed back as [`UnicastReason::Loss`] (the
//!   driver forwards the original packet as usual); when the station
//!   returns, each of its streams starts over with a full entry.
//! * Trial ([`Mux::set_trial`], the loss rule's first probe of a new
//!   station): a station on unicast by loss whose trial is on has its
//!   packets both queued in the frame and handed back for unicast
//!   ([`Verdict::Trial`]), so the station can measure the frames while no
//!   packet depends on them. Trial entries are not priced by the airtime
//!   rule and a frame holding one is never closed as unicast (its packets
//!   already went by unicast). The station's socket receives each of
//!   these packets twice (RTP receivers drop duplicates by sequence number).
//! * Copies ([`MuxConfig::copies`] = N): each multicast frame is handed
//!   out N times in a row (the copies as [`Transmit::copy`], counted in
//!   [`MuxStats::copies`], not in the packets or frames sent); when the
//!   queue is full, a frame that has left once gives up its further copies
//!   before any unsent frame is dropped.
//! * The mux stands in for the AP's forwarding step: TTL / hop limit is
//!   decremented by `ttl_decrement` (1 by default; 0 when the driver hands
//!   packets the kernel has already forwarded); a packet that would expire
//!   is passed back for unicast, so the kernel sends its ICMP.

use super::compact::{self, Entry, FrameHeader, IpId};
use super::compressor::{parse, Ctx, Udp};
use super::seed::{self, SeedPacket};
use super::{StreamId, MAX_STREAM_ID};
use crate::wire::ip::{self, proto};
use crate::Micros;
use core::net::IpAddr;
use std::collections::HashMap;

#[path = "mux_types.rs"]
mod types;
pub use types::*;

#[derive(Clone, Copy, Debug)]
struct Stream {
    sid: StreamId,
    ctx: Ctx,
    /// Its station is on unicast by loss ([`Mux::set_unicast`]).
    by_loss: bool,
    /// ... and on a trial ([`Mux::set_trial`]).
    trial: bool,
    addr: IpAddr,
    /// Airtime rule only: airtime of its packets as unicast exchanges so
    /// far (multiplexed or not), µs ([`Mux::station_unicast_us`]).
    air_us: f64,
}

/// A frame buffer and what is in it.
#[derive(Debug)]
struct FrameBuf {
    buf: Vec<u8>,
    len: usize,
    count: usize,
    first_arrival: Micros,
    orig_bytes: u64,
    seq: u16,
    reason: FrameReason,
    /// Airtime rule only: copies of the original packets, each as stream
    /// slot (2 bytes LE), length (2 bytes LE), bytes.
    orig: Vec<u8>,
    orig_len: usize,
    /// Airtime of the packets as unicast exchanges, µs.
    unicast_us: f64,
    /// Closed as unicast: `poll_transmit` hands out the copies from `cursor`.
    unicast: bool,
    cursor: usize,
    /// Trial entries inside (never closed as unicast).
    trial: usize,
    /// Times this frame is sent: [`MuxConfig::copies`], fewer when the
    /// airtime rule priced the rest out (set when it closes).
    copies: u8,
}

/// Bytes of the record header in [`FrameBuf::orig`].
const ORIG_HDR: usize = 4;
/// Most bytes an original packet has beyond its entry in a frame (IPv6,
/// UDP and RTP headers), for sizing [`FrameBuf::orig`].
const ORIG_EXTRA: usize = 40 + 8 + 12;

/// Redundancy: the own entries of a frame sent (what later frames repeat).
#[derive(Debug)]
struct Sent {
    buf: Vec<u8>,
    len: usize,
    count: usize,
    /// Its sequence number; `None`: nothing to repeat.
    seq: Option<u16>,
}

/// The downlink multiplexer.
#[derive(Debug)]
pub struct Mux {
    cfg: MuxConfig,
    by_key: HashMap<(IpAddr, u16), usize>,
    streams: Vec<Option<Stream>>,
    free: Vec<usize>,
    /// Ring of `queue_frames + 1` buffers: `head..head+ready` are closed,
    /// the next one is the open frame.
    frames: Vec<FrameBuf>,
    head: usize,
    ready: usize,
    next_seq: u16,
    /// Redundancy: the own entries of the last `redundancy` frames sent
    /// (`history[0]` the newest), and a spare buffer for the next.
    history: Vec<Sent>,
    spare: Vec<u8>,
    /// Partial repeat: the entry index the next window starts at.
    rotate: usize,
    busy: bool,
    now: Micros,
    stats: MuxStats,
    /// Stations served by unicast because of their loss (at most `max_streams`).
    unicast_addrs: Vec<IpAddr>,
    /// Those of them on a trial (a subset).
    trial_addrs: Vec<IpAddr>,
    /// Copies of the head frame sent so far ([`MuxConfig::copies`]).
    head_copies: u8,
}

impl Mux {
    /// A multiplexer; `max_frame` is clamped to [`MIN_FRAME`]..=[`super::MAX_FRAME`]
    /// and `queue_frames` to at least 1. All buffers are allocated here.
    pub fn new(mut cfg: MuxConfig) -> Self {
        cfg.max_frame = cfg.max_frame.clamp(MIN_FRAME, super::MAX_FRAME);
        cfg.queue_frames = cfg.queue_frames.max(1);
        cfg.redundancy = cfg.redundancy.min(compact::MAX_DEPTH as u8);
        cfg.copies = cfg.copies.clamp(1, MAX_COPIES);
        if cfg.format != Format::Compact {
            cfg.redundancy = 0;
            cfg.copies = 1;
        }
        let frames = (0..=cfg.queue_frames)
            .map(|_| FrameBuf {
                buf: vec![0; cfg.max_frame],
                len: 0,
                count: 0,
                first_arrival: 0,
                orig_bytes: 0,
                seq: 0,
                reason: FrameReason::Flush,
                // Entries take at least 4 bytes: a full frame's copies fit.
                orig: if cfg.airtime.is_some() {
                    vec![0; cfg.max_frame + (cfg.max_frame / 4 + 1) * (ORIG_HDR + ORIG_EXTRA)]
                } else {
                    Vec::new()
                },
                orig_len: 0,
                unicast_us: 0.0,
                copies: 1,
                unicast: false,
                cursor: 0,
                trial: 0,
            })
            .collect();
        Mux {
            by_key: HashMap::with_capacity(cfg.max_streams),
            streams: Vec::with_capacity(cfg.max_streams),
            free: Vec::new(),
            frames,
            head: 0,
            ready: 0,
            next_seq: cfg.first_seq,
            history: (0..usize::from(cfg.redundancy))
                .map(|_| Sent {
                    buf: vec![0; cfg.max_frame],
                    len: 0,
                    count: 0,
                    seq: None,
                })
                .collect(),
            spare: vec![0; if cfg.redundancy > 0 { cfg.max_frame } else { 0 }],
            rotate: 0,
            busy: false,
            now: 0,
            stats: MuxStats::default(),
            unicast_addrs: Vec::new(),
            trial_addrs: Vec::new(),
            head_copies: 0,
            cfg,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &MuxConfig {
        &self.cfg
    }

    /// Statistics.
    pub fn stats(&self) -> &MuxStats {
        &self.stats
    }

    /// Packets not yet sent: in the open frame and in closed frames waiting
    /// for [`Mux::poll_transmit`].
    pub fn pending(&self) -> usize {
        let n = self.frames.len();
        (0..=self.ready)
            .map(|k| self.frames[(self.head + k) % n].count)
            .sum()
    }

    /// Of [`Mux::pending`], trial copies ([`Verdict::Trial`]).
    pub fn pending_trial(&self) -> usize {
        let n = self.frames.len();
        (0..=self.ready)
            .map(|k| &self.frames[(self.head + k) % n])
            .filter(|f| f.count > 0)
            .map(|f| f.trial)
            .sum()
    }

    /// Registers a stream: packets to `addr`:`port` go into frames as `sid`.
    pub fn add_stream(
        &mut self,
        addr: IpAddr,
        port: u16,
        sid: StreamId,
    ) -> Result<(), StreamError> {
        if sid > MAX_STREAM_ID {
            return Err(StreamError::BadId);
        }
        if self.by_key.contains_key(&(addr, port))
            || self.streams.iter().flatten().any(|s| s.sid == sid)
        {
            return Err(StreamError::Duplicate);
        }
        if self.by_key.len() >= self.cfg.max_streams {
            return Err(StreamError::TableFull);
        }
        let s = Stream {
            sid,
            ctx: Ctx::new(),
            by_loss: self.unicast_addrs.contains(&addr),
            trial: self.trial_addrs.contains(&addr),
            addr,
            air_us: 0.0,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.streams[i] = Some(s);
                i
            }
            None => {
                self.streams.push(Some(s));
                self.streams.len() - 1
            }
        };
        self.by_key.insert((addr, port), i);
        Ok(())
    }

    /// Unregisters a stream; packets already in frames still leave.
    pub fn remove_stream(&mut self, addr: IpAddr, port: u16) -> Option<StreamId> {
        let i = self.by_key.remove(&(addr, port))?;
        self.free.push(i);
        self.streams[i].take().map(|s| s.sid)
    }

    /// Serves every stream of station `addr` by unicast (`on`: their
    /// packets are handed back as [`UnicastReason::Loss`]) or multiplexes
    /// them again (`!on`: each stream's next entry is full, as the station
    /// saw none of the packets in between). Streams registered later follow
    /// the setting. Returns whether it changed. Called on a state change
    /// only (not per packet); bounded by `max_streams` stations.
    pub fn set_unicast(&mut self, addr: IpAddr, on: bool) -> bool {
        let known = self.unicast_addrs.iter().position(|a| *a == addr);
        match (on, known) {
            (true, None) if self.unicast_addrs.len() < self.cfg.max_streams => {
                self.unicast_addrs.push(addr)
            }
            (false, Some(i)) => {
                self.unicast_addrs.swap_remove(i);
                self.trial_addrs.retain(|a| *a != addr);
            }
            _ => return false,
        }
        for s in self.streams.iter_mut().flatten() {
            if s.addr == addr {
                s.by_loss = on;
                if !on {
                    s.trial = false;
                    s.ctx.restart();
                }
            }
        }
        true
    }

    /// Starts (`on`) or ends a trial of station `addr`, which must be on
    /// unicast by loss ([`Mux::set_unicast`]; else nothing happens): its
    /// packets are also queued in the frame ([`Verdict::Trial`]), each
    /// stream starting with a full entry. Returns whether it changed.
    /// Leaving unicast ends the trial. Called on a state change only.
    pub fn set_trial(&mut self, addr: IpAddr, on: bool) -> bool {
        let known = self.trial_addrs.iter().position(|a| *a == addr);
        match (on, known) {
            (true, None) if self.unicast_addrs.contains(&addr) => self.trial_addrs.push(addr),
            (false, Some(i)) => {
                self.trial_addrs.swap_remove(i);
            }
            _ => return false,
        }
        for s in self.streams.iter_mut().flatten() {
            if s.addr == addr {
                s.trial = on;
                if on {
                    s.ctx.restart();
                }
            }
        }
        true
    }

    /// Whether station `addr` is on a trial ([`Mux::set_trial`]).
    pub fn is_trial(&self, addr: IpAddr) -> bool {
        self.trial_addrs.contains(&addr)
    }

    /// Airtime rule only (else 0): the airtime the packets of station
    /// `addr`'s registered streams took or would have taken as unicast
    /// exchanges so far, µs (O(streams); for [`super::loss`], once per report).
    pub fn station_unicast_us(&self, addr: IpAddr) -> f64 {
        self.streams
            .iter()
            .flatten()
            .filter(|s| s.addr == addr)
            .map(|s| s.air_us)
            .sum()
    }

    /// Registered streams of station `addr` (O(streams); for
    /// [`super::loss`], once per new lease).
    pub fn station_streams(&self, addr: IpAddr) -> usize {
        self.streams
            .iter()
            .flatten()
            .filter(|s| s.addr == addr)
            .count()
    }

    /// Whether station `addr` is served by unicast ([`Mux::set_unicast`]).
    pub fn is_unicast(&self, addr: IpAddr) -> bool {
        self.unicast_addrs.contains(&addr)
    }

    /// Registered streams.
    pub fn streams(&self) -> usize {
        self.by_key.len()
    }

    fn open(&self) -> &FrameBuf {
        &self.frames[(self.head + self.ready) % self.frames.len()]
    }

    fn open_mut(&mut self) -> &mut FrameBuf {
        let n = self.frames.len();
        &mut self.frames[(self.head + self.ready) % n]
    }

    /// Hands the mux one intercepted IP packet.
    pub fn handle_packet(&mut self, now: Micros, bytes: &[u8]) -> Verdict {
        self.now = self.now.max(now);
        self.stats.handled += 1;
        let v = self.classify_and_queue(bytes);
        match v {
            Verdict::Pass => self.stats.passed += 1,
            Verdict::Unicast(r) => self.stats.unicast[r as usize] += 1,
            Verdict::Queued(_) | Verdict::Trial(_) => {
                self.stats.queued += 1;
                if let Verdict::Trial(_) = v {
                    self.stats.trial += 1;
                }
                if self.cfg.idle_release && !self.busy && self.open().count == 1 && self.ready == 0
                {
                    self.close(FrameReason::Idle);
                }
            }
        }
        v
    }

    fn classify_and_queue(&mut self, bytes: &[u8]) -> Verdict {
        let Ok(info) = ip::inspect(bytes) else {
            return Verdict::Pass;
        };
        let (true, Some(dport)) = (info.protocol == proto::UDP, info.dst_port) else {
            return Verdict::Pass;
        };
        let Some(&slot) = self.by_key.get(&(info.dst, dport)) else {
            return Verdict::Pass;
        };
        let udp = match parse(bytes, &info, self.cfg.ttl_decrement) {
            Ok(u) => u,
            Err(r) => return Verdict::Unicast(r),
        };
        let Some(stream) = self.streams[slot] else {
            return Verdict::Pass;
        };
        // One unicast exchange's airtime (airtime rule only; 0 otherwise).
        let air = self
            .cfg
            .airtime
            .map_or(0.0, |c| c.unicast_us(bytes.len() as u32));
        if let Some(s) = self.streams[slot].as_mut() {
            s.air_us += air;
        }
        if stream.by_loss && !stream.trial {
            return Verdict::Unicast(UnicastReason::Loss);
        }
        let v = match self.cfg.format {
            Format::Seed => self.queue_seed(&udp, info.dst, dport, stream.sid, bytes),
            Format::Compact => self.queue_compact(&udp, slot, bytes),
        };
        if let (Verdict::Queued(sid), true) = (v, stream.trial) {
            // Also forwarded as unicast: neither copied nor priced (module doc).
            self.open_mut().trial += 1;
            return Verdict::Trial(sid);
        }
        if let (Verdict::Queued(_), Some(_)) = (v, self.cfg.airtime) {
            let f = self.open_mut();
            let at = f.orig_len;
            f.orig[at..at + 2].copy_from_slice(&(slot as u16).to_le_bytes());
            f.orig[at + 2..at + 4].copy_from_slice(&(bytes.len() as u16).to_le_bytes());
            f.orig[at + ORIG_HDR..at + ORIG_HDR + bytes.len()].copy_from_slice(bytes);
            f.orig_len += ORIG_HDR + bytes.len();
            f.unicast_us += air;
        }
        v
    }

    fn queue_seed(
        &mut self,
        u: &Udp<'_>,
        dst: IpAddr,
        dport: u16,
        sid: StreamId,
        orig: &[u8],
    ) -> Verdict {
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (u.src, dst) else {
            return Verdict::Unicast(UnicastReason::Unsupported);
        };
        if u.payload.is_empty() {
            return Verdict::Unicast(UnicastReason::Unsupported);
        }
        let cost = seed::HEADER_LEN + u.payload.len();
        if seed::COUNT_LEN + cost > self.cfg.max_frame {
            return Verdict::Unicast(UnicastReason::TooLarge);
        }
        self.make_room(cost, orig.len());
        let p = SeedPacket {
            src,
            dst,
            src_port: u.src_port,
            dst_port: dport,
            payload: u.payload,
        };
        let f = self.open_mut();
        let n = seed::write_packet(&mut f.buf[f.len..], &p).expect("room was made");
        f.len += n;
        f.count += 1;
        f.orig_bytes += orig.len() as u64;
        let c = (f.count as u16).to_be_bytes();
        f.buf[..2].copy_from_slice(&c);
        Verdict::Queued(sid)
    }

    fn queue_compact(&mut self, u: &Udp<'_>, slot: usize, orig: &[u8]) -> Verdict {
        let Some(mut stream) = self.streams[slot] else {
            return Verdict::Pass;
        };
        let rtp = u.payload.len() >= compact::RTP_HEADER_LEN && u.payload[0] == 0x80;
        let body = if rtp {
            &u.payload[compact::RTP_HEADER_LEN..]
        } else {
            u.payload
        };
        // Worst case: a full entry with a two-byte ID.
        let worst = Entry {
            sid: stream.sid,
            gen: 0,
            rtp,
            marker: false,
            id: IpId::Full(1),
            full: Some(u.static_part(rtp)),
            seq_lsb: 0,
            payload: body,
        };
        if body.len() > compact::MAX_LEN
            || compact::HEADER_LEN + worst.wire_len() > self.cfg.max_frame
        {
            return Verdict::Unicast(UnicastReason::TooLarge);
        }
        let e = stream.ctx.compress(stream.sid, u, rtp, body);
        self.streams[slot] = Some(stream);
        if e.full.is_some() {
            self.stats.full_entries += 1;
        } else {
            self.stats.compressed_entries += 1;
        }
        self.make_room(e.wire_len(), orig.len());
        let f = self.open_mut();
        let n = compact::write_entry(&mut f.buf[f.len..], &e).expect("room was made");
        f.len += n;
        f.count += 1;
        f.orig_bytes += orig.len() as u64;
        Verdict::Queued(stream.sid)
    }

    /// Closes the open frame if `cost` more bytes (and, under the airtime
    /// rule, a copy of `orig` bytes) would not fit, then opens a frame if
    /// none is open.
    fn make_room(&mut self, cost: usize, orig: usize) {
        let f = self.open();
        let (len, count) = (f.len, f.count);
        let copies_full = self.cfg.airtime.is_some() && f.orig_len + ORIG_HDR + orig > f.orig.len();
        if count > 0
            && (len + cost > self.cfg.max_frame
                || count == super::MAX_PACKETS_PER_FRAME
                || copies_full)
        {
            self.close(FrameReason::Size);
        }
        if self.open().count == 0 {
            let seq = self.next_seq;
            self.next_seq = seq.wrapping_add(1);
            let now = self.now;
            let format = self.cfg.format;
            let epoch = self.cfg.epoch;
            let f = self.open_mut();
            f.first_arrival = now;
            f.orig_bytes = 0;
            f.orig_len = 0;
            f.unicast_us = 0.0;
            f.unicast = false;
            f.cursor = 0;
            f.trial = 0;
            f.seq = seq;
            f.len = match format {
                Format::Compact => {
                    let h = f
                        .buf
                        .first_chunk_mut::<{ compact::HEADER_LEN }>()
                        .expect("MIN_FRAME");
                    compact::write_header(h, FrameHeader { epoch, seq });
                    compact::HEADER_LEN
                }
                Format::Seed => {
                    f.buf[..2].fill(0);
                    seed::COUNT_LEN
                }
            };
        }
    }

    /// Moves the open frame (if it holds packets) to the queue.
    fn close(&mut self, reason: FrameReason) {
        if self.open().count == 0 {
            return;
        }
        self.open_mut().reason = reason;
        self.open_mut().copies = self.cfg.copies;
        if let Some(cell) = self.cfg.airtime {
            let overhead = self.cfg.frame_overhead;
            let idx = (self.head + self.ready) % self.frames.len();
            let f = &mut self.frames[idx];
            // As many copies as still cost less than unicast: copies must
            // never lower capacity (a G.711 frame at a low multicast rate
            // pays once, not twice).
            let once = cell.multicast_us(f.len as u32 + overhead);
            let mut k = f.copies;
            while k > 1 && once * f64::from(k) >= f.unicast_us {
                k -= 1;
            }
            f.copies = k;
            if once < f.unicast_us || f.trial > 0 {
                self.stats.copies_priced_out += u64::from(self.cfg.copies - k);
            } else {
                // Unicast: the stations never see this frame (module doc).
                f.unicast = true;
                let seq = f.seq;
                let mut at = 0;
                while at < f.orig_len {
                    let slot = usize::from(u16::from_le_bytes([f.orig[at], f.orig[at + 1]]));
                    let len = usize::from(u16::from_le_bytes([f.orig[at + 2], f.orig[at + 3]]));
                    at += ORIG_HDR + len;
                    if let Some(Some(s)) = self.streams.get_mut(slot) {
                        s.ctx.restart();
                    }
                }
                self.next_seq = seq;
                self.stats.fallback_frames += 1;
            }
        }
        if self.cfg.redundancy > 0 {
            self.add_repeat();
        }
        if self.ready == self.cfg.queue_frames && self.head_copies > 0 {
            // The oldest frame has left once: its further copies give way.
            self.free_head();
        } else if self.ready == self.cfg.queue_frames {
            let old = &mut self.frames[self.head];
            self.stats.dropped += old.count as u64;
            self.stats.trial_dropped += old.trial as u64;
            old.trial = 0;
            self.stats.dropped_frames += 1;
            old.count = 0;
            old.len = 0;
            self.head = (self.head + 1) % self.frames.len();
            self.ready -= 1;
        }
        self.ready += 1;
        let f = self.open_mut();
        f.count = 0;
        f.len = 0;
    }

    /// The medium became busy or idle (the caller's view, as for the engine).
    pub fn set_link_busy(&mut self, now: Micros, busy: bool) {
        self.now = self.now.max(now);
        self.busy = busy;
        if !busy && self.cfg.idle_release && self.open().count == 1 && self.ready == 0 {
            self.close(FrameReason::Idle);
        }
    }

    /// Advances time; closes the open frame when its first packet has waited the interval.
    pub fn handle_timeout(&mut self, now: Micros) {
        self.now = self.now.max(now);
        let f = self.open();
        if f.count > 0 && self.now >= f.first_arrival.saturating_add(self.cfg.interval) {
            self.close(FrameReason::Interval);
        }
    }

    /// Closes the open frame now (shutdown, tests).
    pub fn flush(&mut self) {
        self.close(FrameReason::Flush);
    }

    /// When the driver must call [`Mux::handle_timeout`] next (`None`: no
    /// packet pending). A closed frame waiting means "now".
    pub fn poll_timeout(&self) -> Option<Micros> {
        if self.ready > 0 {
            return Some(self.now);
        }
        let f = self.open();
        (f.count > 0).then(|| f.first_arrival.saturating_add(self.cfg.interval))
    }

    /// Writes the next frame into `buf` (at least `max_frame` bytes, else
    /// `None` and the frame stays queued).
    pub fn poll_transmit(&mut self, now: Micros, buf: &mut [u8]) -> Option<Transmit> {
        self.handle_timeout(now);
        if self.ready == 0 || buf.len() < self.cfg.max_frame {
            return None;
        }
        let n = self.frames.len();
        let f = &mut self.frames[self.head];
        if f.unicast {
            let at = f.cursor;
            let len = usize::from(u16::from_le_bytes([f.orig[at + 2], f.orig[at + 3]]));
            if buf.len() < len {
                return None;
            }
            buf[..len].copy_from_slice(&f.orig[at + ORIG_HDR..at + ORIG_HDR + len]);
            f.cursor += ORIG_HDR + len;
            f.count -= 1;
            self.stats.fallback += 1;
            let t = Transmit {
                len,
                packets: 1,
                trial: 0,
                unicast: true,
                seq: 0,
                copy: false,
                reason: f.reason,
            };
            if f.cursor >= f.orig_len {
                f.count = 0;
                f.len = 0;
                f.unicast = false;
                self.head = (self.head + 1) % n;
                self.ready -= 1;
            }
            return Some(t);
        }
        buf[..f.len].copy_from_slice(&f.buf[..f.len]);
        let (len, count, trial, reason) = (f.len, f.count, f.trial, f.reason);
        let (orig_bytes, unicast_us, copies) = (f.orig_bytes, f.unicast_us, f.copies);
        let seq = if self.cfg.format == Format::Compact {
            f.seq
        } else {
            0
        };
        let first = self.head_copies == 0;
        if let Some(cell) = self.cfg.airtime {
            let frame_us = cell.multicast_us(len as u32 + self.cfg.frame_overhead);
            self.stats.airtime_frames_us += frame_us.round() as u64;
            if first {
                self.stats.airtime_unicast_us += unicast_us.round() as u64;
            }
        }
        if first {
            self.stats.sent_packets += count as u64;
            self.stats.frames[reason as usize] += 1;
            self.stats.bytes_in += orig_bytes;
            self.stats.bytes_out += len as u64;
        } else {
            // A further copy: the same bytes, its packets already counted.
            self.stats.copies += 1;
        }
        self.head_copies += 1;
        if self.head_copies >= copies {
            self.free_head();
        }
        Some(Transmit {
            len,
            packets: if first { count } else { 0 },
            trial: if first { trial } else { 0 },
            unicast: false,
            seq,
            copy: !first,
            reason,
        })
    }

    /// The head frame has left (every copy): its buffer is free.
    fn free_head(&mut self) {
        let f = &mut self.frames[self.head];
        f.count = 0;
        f.len = 0;
        f.trial = 0;
        self.head = (self.head + 1) % self.frames.len();
        self.ready -= 1;
        self.head_copies = 0;
    }
}

#[path = "mux_repeat.rs"]
mod repeat;

#[cfg(test)]
#[path = "mux_tests.rs"]
mod tests;
