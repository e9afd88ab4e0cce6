//! The multiplexer's public types: its configuration, what it does with a
//! packet ([`Verdict`]), what it hands the driver ([`Transmit`]), why it
//! drops or unicasts, and its statistics. Re-exported by [`super`]; the
//! state machine is there.

use super::super::airtime::CellPhy;
use super::super::StreamId;
use crate::Micros;

/// The frame layout the mux writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    /// [`super::super::compact`] (default).
    #[default]
    Compact,
    /// [`super::super::seed`]: IPv4 only, no compression, for the seed's stations.
    Seed,
}

/// Configuration.
#[derive(Clone, Debug, PartialEq)]
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
    /// The cell's PHY facts for the airtime rule (module doc); `None`:
    /// every frame is sent.
    pub airtime: Option<CellPhy>,
    /// Bytes of the frame datagram's own UDP/IP header (28 over IPv4, 48
    /// over IPv6), counted in the frame's airtime.
    pub frame_overhead: u32,
    /// Redundancy depth (compact only; 0: off, at most
    /// [`super::super::compact::MAX_DEPTH`]): each frame also carries the entries of up to
    /// this many previous frames when they fit (module doc).
    pub redundancy: u8,
    /// Redundancy: when not even the previous frame's whole block fits,
    /// repeat as many of its entries as fit, a window that rotates from
    /// frame to frame over the entries (module doc). Off: no block then.
    pub partial_repeat: bool,
    /// Times each frame is sent (1-4, compact only; 1: once): the copies
    /// after the first carry the same bytes and sequence number, each its
    /// own channel access, so a frame is lost only when every copy is (a
    /// multicast frame has no ACK and no retry: this is 802.11aa's
    /// unsolicited retries, done above the MAC). A station takes the first
    /// copy it gets and ignores the rest. With the airtime rule a frame is
    /// sent as many times as still cost less airtime than its packets as
    /// unicast (at least once; none: unicast).
    pub copies: u8,
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
            airtime: None,
            frame_overhead: 28,
            redundancy: 0,
            partial_repeat: false,
            copies: 1,
        }
    }
}

/// Smallest `max_frame` accepted (a frame must hold one small packet).
pub const MIN_FRAME: usize = 128;

/// Most copies of a frame ([`MuxConfig::copies`]).
pub const MAX_COPIES: u8 = 4;

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
    /// The station reports multicast loss above the limit
    /// ([`super::Mux::set_unicast`], driven by [`super::super::loss`]).
    Loss,
}

impl UnicastReason {
    /// All variants, in index order.
    pub const ALL: [UnicastReason; 7] = [
        UnicastReason::UnusualHeader,
        UnicastReason::Fragment,
        UnicastReason::BadUdp,
        UnicastReason::TtlExpired,
        UnicastReason::TooLarge,
        UnicastReason::Unsupported,
        UnicastReason::Loss,
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
            UnicastReason::Loss => "loss",
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
    /// [`super::Mux::flush`].
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

/// Result of [`super::Mux::handle_packet`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not for a registered stream (or not a UDP packet): forward it as usual.
    Pass,
    /// For a registered stream, but sent as usual: forward it unchanged.
    Unicast(UnicastReason),
    /// Queued in a frame (stream id given).
    Queued(StreamId),
    /// Queued in a frame (stream id given) and also to be forwarded
    /// unchanged: its station is on a trial ([`super::Mux::set_trial`]). Counted
    /// in [`MuxStats::queued`] and [`MuxStats::trial`].
    Trial(StreamId),
}

/// One frame ready to leave: `buf[..len]`; or, with `unicast`, one
/// original packet to forward as usual (airtime rule, module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written.
    pub len: usize,
    /// Packets inside (1 for a unicast packet).
    pub packets: usize,
    /// Of those, trial copies ([`Verdict::Trial`]: the packet also went
    /// by unicast, so a driver's accounting does not count them again).
    pub trial: usize,
    /// `buf[..len]` is an original IP packet, not a frame.
    pub unicast: bool,
    /// Frame sequence number (compact; 0 for the seed layout).
    pub seq: u16,
    /// A further copy of the frame just sent ([`MuxConfig::copies`]):
    /// `packets` and `trial` are 0, so a driver counts its packets once.
    pub copy: bool,
    /// Why it left.
    pub reason: FrameReason,
}

/// Why [`super::Mux::add_stream`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamError {
    /// `max_streams` reached.
    TableFull,
    /// The (address, port) or the stream id is registered already.
    Duplicate,
    /// Stream id over [`super::super::MAX_STREAM_ID`].
    BadId,
}

/// Counters. Invariant: `queued == sent_packets + fallback + dropped + pending`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MuxStats {
    /// Packets handed to [`super::Mux::handle_packet`].
    pub handled: u64,
    /// Passed back: not for a registered stream.
    pub passed: u64,
    /// Passed back for unicast, by [`UnicastReason::ALL`] index.
    pub unicast: [u64; 7],
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
    /// Packets that left as ordinary unicast because their frame would
    /// have cost more airtime (airtime rule).
    pub fallback: u64,
    /// Frames not sent for that reason.
    pub fallback_frames: u64,
    /// Airtime of the frames sent, µs (airtime rule only).
    pub airtime_frames_us: u64,
    /// Airtime the packets of those frames would have taken as unicast, µs.
    pub airtime_unicast_us: u64,
    /// Entries repeated from the previous frame (redundancy).
    pub repeated: u64,
    /// Frames that carried part of the previous frame's entries
    /// ([`MuxConfig::partial_repeat`]).
    pub partial_repeats: u64,
    /// Packets queued on a trial and also handed back for unicast
    /// ([`Verdict::Trial`]; part of `queued`).
    pub trial: u64,
    /// Of `dropped`, trial copies.
    pub trial_dropped: u64,
    /// Further copies of frames sent ([`MuxConfig::copies`]; not in
    /// `frames`).
    pub copies: u64,
    /// Further copies the airtime rule left out: with them the frame
    /// would have cost as much as its packets as unicast.
    pub copies_priced_out: u64,
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
