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

/// The frame layout the mux writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    /// [`super::compact`] (default).
    #[default]
    Compact,
    /// [`super::seed`]: IPv4 only, no compression, for the seed's stations.
    Seed,
}

/// Configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MuxConfig {
    /// Frame layout.
    pub format: Format,
    /// Longest time a packet waits (µs); default 20 ms.
    pub interval: Micros,
    /// Largest frame (the UDP payload), default 1440 as in the seed.
    pub max_frame: usize,
    /// Closed frames waiting for `poll_transmit`; beyond it the oldest is dropped.
    pub queue_frames: usize,
    /// Bound on registered streams.
    pub max_streams: usize,
    /// Release a frame holding exactly one packet at once when the medium is idle.
    pub idle_release: bool,
    /// Forwarding decrement applied to TTL / hop limit (see module doc).
    pub ttl_decrement: u8,
    /// The stream table's epoch, written in compact frame headers.
    pub epoch: u8,
    /// Sequence number of the first frame (compact).
    pub first_seq: u16,
}

impl Default for MuxConfig {
    fn default() -> Self {
        MuxConfig {
            format: Format::Compact,
            interval: 20_000,
            max_frame: 1440,
            queue_frames: 4,
            max_streams: 1024,
            idle_release: true,
            ttl_decrement: 1,
            epoch: 0,
            first_seq: 0,
        }
    }
}

/// Smallest `max_frame` accepted (a frame must hold one small packet).
pub const MIN_FRAME: usize = 128;

/// Why a registered stream's packet was handed back for unicast.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnicastReason {
    /// IPv4 options, IPv6 extension headers or the IPv4 reserved flag:
    /// the format carries fixed headers only.
    UnusualHeader,
    /// An IP fragment.
    Fragment,
    /// UDP length disagrees with IP, or the UDP checksum does not verify
    /// (IPv6: or is 0).
    BadUdp,
    /// TTL / hop limit would expire at this hop.
    TtlExpired,
    /// Larger than a frame (or than an entry's length field) can carry.
    TooLarge,
    /// The seed layout: an IPv6 packet or an empty UDP payload.
    Unsupported,
}

impl UnicastReason {
    /// All variants, in index order.
    pub const ALL: [UnicastReason; 6] = [
        UnicastReason::UnusualHeader,
        UnicastReason::Fragment,
        UnicastReason::BadUdp,
        UnicastReason::TtlExpired,
        UnicastReason::TooLarge,
        UnicastReason::Unsupported,
    ];
    /// Short snake-case name (statistics).
    pub fn reason(self) -> &'static str {
        match self {
            UnicastReason::UnusualHeader => "unusual_header",
            UnicastReason::Fragment => "fragment",
            UnicastReason::BadUdp => "bad_udp",
            UnicastReason::TtlExpired => "ttl_expired",
            UnicastReason::TooLarge => "too_large",
            UnicastReason::Unsupported => "unsupported",
        }
    }
}

/// Why queued packets were dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MuxDrop {
    /// Their closed frame was the oldest when the frame queue overflowed.
    QueueFull,
}

/// Why a frame left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameReason {
    /// Its first packet had waited the interval.
    Interval,
    /// The next packet would not have fitted.
    Size,
    /// The medium was idle and the frame held one packet.
    Idle,
    /// [`Mux::flush`].
    Flush,
}

impl FrameReason {
    /// All variants, in [`MuxStats::frames`] order.
    pub const ALL: [FrameReason; 4] = [
        FrameReason::Interval,
        FrameReason::Size,
        FrameReason::Idle,
        FrameReason::Flush,
    ];
    /// Short snake-case name (statistics).
    pub fn reason(self) -> &'static str {
        match self {
            FrameReason::Interval => "interval",
            FrameReason::Size => "size",
            FrameReason::Idle => "idle",
            FrameReason::Flush => "flush",
        }
    }
}

/// Result of [`Mux::handle_packet`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not for a registered stream (or not a UDP packet): forward it as usual.
    Pass,
    /// For a registered stream, but sent as usual: forward it unchanged.
    Unicast(UnicastReason),
    /// Queued in a frame (stream id given).
    Queued(StreamId),
}

/// One frame ready to leave: `buf[..len]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written.
    pub len: usize,
    /// Packets inside.
    pub packets: usize,
    /// Frame sequence number (compact; 0 for the seed layout).
    pub seq: u16,
    /// Why it left.
    pub reason: FrameReason,
}

/// Why [`Mux::add_stream`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamError {
    /// `max_streams` reached.
    TableFull,
    /// The (address, port) or the stream id is registered already.
    Duplicate,
    /// Stream id over [`MAX_STREAM_ID`].
    BadId,
}

/// Counters. Invariant: `queued == sent_packets + dropped + pending`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MuxStats {
    /// Packets handed to [`Mux::handle_packet`].
    pub handled: u64,
    /// Passed back: not for a registered stream.
    pub passed: u64,
    /// Passed back for unicast, by [`UnicastReason::ALL`] index.
    pub unicast: [u64; 6],
    /// Packets put in a frame.
    pub queued: u64,
    /// Packets that left in a frame.
    pub sent_packets: u64,
    /// Frames sent, by reason: interval, size, idle, flush.
    pub frames: [u64; 4],
    /// Packets dropped with their frame (queue overflow).
    pub dropped: u64,
    /// Frames dropped.
    pub dropped_frames: u64,
    /// Bytes of the original IP packets that left in frames.
    pub bytes_in: u64,
    /// Bytes of the frames sent (UDP payloads).
    pub bytes_out: u64,
    /// Compact entries written full / compressed.
    pub full_entries: u64,
    /// Compact entries written compressed.
    pub compressed_entries: u64,
}

impl MuxStats {
    /// Frames sent, all reasons.
    pub fn frames_sent(&self) -> u64 {
        self.frames.iter().sum()
    }
    /// IP bytes the frames saved over the packets they carried (negative
    /// when framing cost more), the frames' own UDP/IP headers not counted.
    pub fn bytes_saved(&self) -> i64 {
        self.bytes_in as i64 - self.bytes_out as i64
    }
}

#[derive(Clone, Copy, Debug)]
struct Stream {
    sid: StreamId,
    ctx: Ctx,
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
    busy: bool,
    now: Micros,
    stats: MuxStats,
}

impl Mux {
    /// A multiplexer; `max_frame` is clamped to [`MIN_FRAME`]..=[`super::MAX_FRAME`]
    /// and `queue_frames` to at least 1. All buffers are allocated here.
    pub fn new(mut cfg: MuxConfig) -> Self {
        cfg.max_frame = cfg.max_frame.clamp(MIN_FRAME, super::MAX_FRAME);
        cfg.queue_frames = cfg.queue_frames.max(1);
        let frames = (0..=cfg.queue_frames)
            .map(|_| FrameBuf {
                buf: vec![0; cfg.max_frame],
                len: 0,
                count: 0,
                first_arrival: 0,
                orig_bytes: 0,
                seq: 0,
                reason: FrameReason::Flush,
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
            busy: false,
            now: 0,
            stats: MuxStats::default(),
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
            Verdict::Queued(_) => {
                self.stats.queued += 1;
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
        match self.cfg.format {
            Format::Seed => self.queue_seed(&udp, info.dst, dport, stream.sid, bytes.len()),
            Format::Compact => self.queue_compact(&udp, slot, bytes.len()),
        }
    }

    fn queue_seed(
        &mut self,
        u: &Udp<'_>,
        dst: IpAddr,
        dport: u16,
        sid: StreamId,
        orig: usize,
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
        self.make_room(cost);
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
        f.orig_bytes += orig as u64;
        let c = (f.count as u16).to_be_bytes();
        f.buf[..2].copy_from_slice(&c);
        Verdict::Queued(sid)
    }

    fn queue_compact(&mut self, u: &Udp<'_>, slot: usize, orig: usize) -> Verdict {
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
        self.make_room(e.wire_len());
        let f = self.open_mut();
        let n = compact::write_entry(&mut f.buf[f.len..], &e).expect("room was made");
        f.len += n;
        f.count += 1;
        f.orig_bytes += orig as u64;
        Verdict::Queued(stream.sid)
    }

    /// Closes the open frame if `cost` more bytes would not fit, then opens
    /// a frame if none is open.
    fn make_room(&mut self, cost: usize) {
        let (len, count) = (self.open().len, self.open().count);
        if count > 0 && (len + cost > self.cfg.max_frame || count == super::MAX_PACKETS_PER_FRAME) {
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
        if self.ready == self.cfg.queue_frames {
            let old = &mut self.frames[self.head];
            self.stats.dropped += old.count as u64;
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
        buf[..f.len].copy_from_slice(&f.buf[..f.len]);
        let t = Transmit {
            len: f.len,
            packets: f.count,
            seq: if self.cfg.format == Format::Compact {
                f.seq
            } else {
                0
            },
            reason: f.reason,
        };
        self.stats.sent_packets += f.count as u64;
        self.stats.frames[f.reason as usize] += 1;
        self.stats.bytes_in += f.orig_bytes;
        self.stats.bytes_out += f.len as u64;
        f.count = 0;
        f.len = 0;
        self.head = (self.head + 1) % n;
        self.ready -= 1;
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::downlink::udp_checksum;
    use core::net::Ipv4Addr;

    /// A G.729 packet: IPv4 198.51.100.1:5004 -> 192.168.1.5:6600, EF, DF,
    /// ID `id`, TTL `ttl`, RTP seq/ts, 20 voice bytes; checksums valid.
    fn g729(seq: u16, ts: u32, id: u16, ttl: u8) -> Vec<u8> {
        let mut p = vec![
            0x45, 0xb8, 0, 60, 0, 0, 0x40, 0, ttl, 17, 0, 0, 198, 51, 100, 1, 192, 168, 1, 5,
        ];
        p[4..6].copy_from_slice(&id.to_be_bytes());
        let c = ip::checksum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        let mut u = vec![0x13, 0x8c, 0x19, 0xc8, 0, 40, 0, 0, 0x80, 18];
        u.extend_from_slice(&seq.to_be_bytes());
        u.extend_from_slice(&ts.to_be_bytes());
        u.extend_from_slice(&0xdeadbeefu32.to_be_bytes());
        u.extend_from_slice(&[0x11; 20]);
        let src = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1));
        let dst = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5));
        let c = match udp_checksum(&src, &dst, &u) {
            0 => 0xffff,
            c => c,
        };
        u[6..8].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(&u);
        p
    }

    fn mux() -> Mux {
        let mut m = Mux::new(MuxConfig::default());
        m.add_stream(IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5)), 6600, 1)
            .unwrap();
        m.set_link_busy(0, true);
        m
    }

    #[test]
    fn steady_stream_compresses_to_four_bytes_per_packet() {
        let mut m = mux();
        let mut buf = vec![0u8; 1440];
        let mut sizes = Vec::new();
        for k in 0..40u16 {
            let now = u64::from(k) * 20_000;
            assert_eq!(
                m.handle_packet(now, &g729(k, 160 * u32::from(k), 0, 64)),
                Verdict::Queued(1)
            );
            m.flush();
            let t = m.poll_transmit(now, &mut buf).unwrap();
            assert_eq!((t.packets, t.seq, t.reason), (1, k, FrameReason::Flush));
            sizes.push(t.len - compact::HEADER_LEN);
        }
        // First packet full (stride unknown), second full (stride learned:
        // a new generation), two redundant fulls, then compressed entries
        // (sid, ctl, len, seq LSB + 20 voice bytes) with a refresh every 16th.
        assert_eq!(&sizes[..6], &[45, 45, 45, 45, 24, 24]);
        assert_eq!(sizes.iter().filter(|s| **s == 45).count(), 4 + 2);
        assert_eq!(m.stats().compressed_entries, 34);
        assert_eq!(m.stats().bytes_in, 40 * 60);
    }

    #[test]
    fn what_the_format_cannot_carry_goes_back_for_unicast() {
        let mut m = mux();
        assert_eq!(
            m.handle_packet(0, &g729(1, 1, 1, 1)),
            Verdict::Unicast(UnicastReason::TtlExpired)
        );
        let mut bad = g729(1, 1, 1, 64);
        bad[40] ^= 1; // RTP byte: UDP checksum no longer verifies
        assert_eq!(
            m.handle_packet(0, &bad),
            Verdict::Unicast(UnicastReason::BadUdp)
        );
        let mut frag = g729(1, 1, 1, 64);
        frag[6] = 0x20; // MF
        frag[10..12].fill(0);
        let c = ip::checksum(&frag[..20]);
        frag[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(
            m.handle_packet(0, &frag),
            Verdict::Unicast(UnicastReason::Fragment)
        );
        let mut other = g729(1, 1, 1, 64);
        other[22] = 0x1a; // another destination port: not registered
        assert_eq!(m.handle_packet(0, &other), Verdict::Pass);
        assert_eq!(m.handle_packet(0, &[0x45, 0]), Verdict::Pass);
        assert_eq!(m.stats().unicast, [0, 1, 1, 1, 0, 0]);
        assert_eq!(m.stats().passed, 2);
        assert_eq!(m.pending(), 0);
    }

    #[test]
    fn frame_leaves_on_interval_size_and_idle() {
        let mut m = mux();
        let mut buf = vec![0u8; 1440];
        m.handle_packet(1_000, &g729(1, 160, 0, 64));
        assert_eq!(m.poll_timeout(), Some(21_000));
        assert!(m.poll_transmit(20_999, &mut buf).is_none());
        let t = m.poll_transmit(21_000, &mut buf).unwrap();
        assert_eq!((t.packets, t.reason), (1, FrameReason::Interval));
        // 60 G.729 packets of ~24-45 bytes do not fit 1440: a Size frame.
        for k in 0..60 {
            m.handle_packet(30_000, &g729(k, 160 * u32::from(k), 0, 64));
        }
        let t = m.poll_transmit(30_000, &mut buf).unwrap();
        assert_eq!(t.reason, FrameReason::Size);
        assert!(t.len <= 1440 && t.len + 24 > 1440, "{}", t.len);
        assert!(m.poll_transmit(30_000, &mut buf).is_none());
        let left = m.pending();
        assert_eq!(t.packets + left, 60);
        m.flush();
        m.poll_transmit(30_000, &mut buf).unwrap();
        // Idle medium and a single pending packet: at once.
        m.set_link_busy(40_000, false);
        m.handle_packet(40_000, &g729(61, 161 * 160, 0, 64));
        let t = m.poll_transmit(40_000, &mut buf).unwrap();
        assert_eq!((t.packets, t.reason), (1, FrameReason::Idle));
        assert_eq!(m.stats().frames, [1, 1, 1, 1]);
    }
}
