//! Counters and histograms, per peer and in total (seed 001's statistics plus
//! drops and decode errors by reason). Plain numbers; rendering is the caller's.
//!
//! Must not touch: policy (what is counted when is decided in [`crate::engine`]).

use crate::wire::DecodeError;

/// Why the engine dropped a packet. Closed and indexable: each is a counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The packet's IP headers did not parse ([`crate::wire::ip::inspect`] failed).
    Malformed,
    /// Larger than the engine can ever send (> [`crate::wire::MAX_BUNDLE`] or the caller's buffer).
    TooLarge,
    /// The peer table is full and the packet was for a new peer.
    PeerTableFull,
    /// Oldest packet dropped to make room: per-peer byte limit.
    QueueBytes,
    /// Oldest packet dropped to make room: per-peer packet limit.
    QueuePackets,
    /// The bypass FIFO was full.
    BypassQueueFull,
    /// Removed with its peer (peer deleted while packets were queued, when not flushed).
    PeerRemoved,
}

impl DropReason {
    /// Number of variants.
    pub const COUNT: usize = 7;
    /// All variants, in index order.
    pub const ALL: [DropReason; DropReason::COUNT] = [
        DropReason::Malformed,
        DropReason::TooLarge,
        DropReason::PeerTableFull,
        DropReason::QueueBytes,
        DropReason::QueuePackets,
        DropReason::BypassQueueFull,
        DropReason::PeerRemoved,
    ];
    /// Dense index.
    pub fn index(self) -> usize {
        self as usize
    }
    /// snake_case label.
    pub fn reason(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::TooLarge => "too_large",
            DropReason::PeerTableFull => "peer_table_full",
            DropReason::QueueBytes => "queue_bytes",
            DropReason::QueuePackets => "queue_packets",
            DropReason::BypassQueueFull => "bypass_queue_full",
            DropReason::PeerRemoved => "peer_removed",
        }
    }
}

/// A fixed-bucket histogram: `counts[i]` counts values `<= bounds[i]` and
/// `> bounds[i-1]`; the last count is for values above every bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    /// Inclusive upper bounds of the buckets, ascending.
    pub bounds: &'static [u64],
    /// One count per bound, plus one overflow bucket.
    pub counts: Vec<u64>,
    /// Sum of all recorded values.
    pub sum: u64,
    /// Number of recorded values.
    pub total: u64,
}

/// Bucket bounds for packets per bundle.
pub const BUNDLE_SIZE_BOUNDS: &[u64] = &[1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 128];
/// Bucket bounds for hold time in microseconds.
pub const HOLD_TIME_BOUNDS_US: &[u64] = &[
    0, 10, 50, 100, 250, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000,
];

impl Histogram {
    /// An empty histogram over `bounds` (allocates once, at creation).
    pub fn new(bounds: &'static [u64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0,
            total: 0,
        }
    }
    /// Records one value (no allocation).
    pub fn record(&mut self, value: u64) {
        self.record_many(self.bucket(value), 1, value);
    }
    /// The bucket index `value` falls in.
    #[inline]
    pub fn bucket(&self, value: u64) -> usize {
        self.bounds.partition_point(|&b| b < value)
    }
    /// Records `count` values whose sum is `sum`, all in bucket `i` (as
    /// returned by [`Histogram::bucket`]); out of range counts as overflow.
    #[inline]
    pub fn record_many(&mut self, i: usize, count: u64, sum: u64) {
        let last = self.counts.len() - 1;
        self.counts[i.min(last)] += count;
        self.sum = self.sum.saturating_add(sum);
        self.total += count;
    }
    /// Clears all counts, keeping the allocation.
    pub fn clear(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.sum = 0;
        self.total = 0;
    }
    /// Mean of recorded values, 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }
    /// Adds another histogram with the same bounds.
    pub fn merge(&mut self, other: &Histogram) {
        debug_assert_eq!(self.bounds, other.bounds);
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.sum = self.sum.saturating_add(other.sum);
        self.total += other.total;
    }
}

/// Seed 001's counters plus airpack's drop and decode-error counters.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Counters {
    /// Packets handed to the engine (all classes).
    pub packets_in: u64,
    /// Bytes handed to the engine.
    pub bytes_in: u64,
    /// Packets that left inside a bundle ("aggregated packets").
    pub aggregated_packets: u64,
    /// Inner bytes of those packets ("aggregated bytes").
    pub aggregated_bytes: u64,
    /// Bundles sent ("meta-packets").
    pub bundles: u64,
    /// Bundle bytes on the wire including the format header and the peer's outer
    /// header overhead ("aggregated bytes on network").
    pub bundle_wire_bytes: u64,
    /// Bundle- or opportunistic-class packets that left alone, unchanged ("unaggregated packets").
    pub unaggregated_packets: u64,
    /// Bytes of those packets.
    pub unaggregated_bytes: u64,
    /// Bypass-class packets forwarded.
    pub bypass_packets: u64,
    /// Bytes of those packets.
    pub bypass_bytes: u64,
    /// Transmissions (bundle or single) triggered by the hold time expiring.
    pub sent_on_timeout: u64,
    /// Transmissions triggered by reaching the minimum or maximum size / packet count.
    pub sent_on_size: u64,
    /// Transmissions triggered by the link becoming (or being) idle.
    pub sent_on_idle: u64,
    /// Transmissions triggered by [`crate::Engine::flush`].
    pub sent_on_flush: u64,
    /// Drops, indexed by [`DropReason::index`].
    pub dropped: [u64; DropReason::COUNT],
    /// Bundles received and successfully split.
    pub bundles_received: u64,
    /// Inner packets delivered from received bundles.
    pub packets_received: u64,
    /// Received bundles rejected, indexed by [`DecodeError::index`].
    pub decode_errors: [u64; DecodeError::COUNT],
    /// Packets of transmissions the caller could not send
    /// ([`crate::Engine::report_send_failure`]). They left the engine, so
    /// they are also in `aggregated_packets`, `unaggregated_packets` or
    /// `bypass_packets`; this says how many of those never reached the wire.
    pub send_failed_packets: u64,
    /// Inner packets of received bundles refused on their own (the bundle's
    /// framing was intact, its other packets delivered), indexed by
    /// [`DecodeError::index`].
    pub inner_errors: [u64; DecodeError::COUNT],
}

impl Counters {
    /// Adds every counter of `o`.
    pub fn merge(&mut self, o: &Counters) {
        // Destructured, so a new field cannot be forgotten here.
        let Counters {
            packets_in,
            bytes_in,
            aggregated_packets,
            aggregated_bytes,
            bundles,
            bundle_wire_bytes,
            unaggregated_packets,
            unaggregated_bytes,
            bypass_packets,
            bypass_bytes,
            sent_on_timeout,
            sent_on_size,
            sent_on_idle,
            sent_on_flush,
            dropped,
            bundles_received,
            packets_received,
            decode_errors,
            send_failed_packets,
            inner_errors,
        } = o;
        self.packets_in += packets_in;
        self.bytes_in += bytes_in;
        self.aggregated_packets += aggregated_packets;
        self.aggregated_bytes += aggregated_bytes;
        self.bundles += bundles;
        self.bundle_wire_bytes += bundle_wire_bytes;
        self.unaggregated_packets += unaggregated_packets;
        self.unaggregated_bytes += unaggregated_bytes;
        self.bypass_packets += bypass_packets;
        self.bypass_bytes += bypass_bytes;
        self.sent_on_timeout += sent_on_timeout;
        self.sent_on_size += sent_on_size;
        self.sent_on_idle += sent_on_idle;
        self.sent_on_flush += sent_on_flush;
        for (a, b) in self.dropped.iter_mut().zip(dropped) {
            *a += b;
        }
        self.bundles_received += bundles_received;
        self.packets_received += packets_received;
        for (a, b) in self.decode_errors.iter_mut().zip(decode_errors) {
            *a += b;
        }
        self.send_failed_packets += send_failed_packets;
        for (a, b) in self.inner_errors.iter_mut().zip(inner_errors) {
            *a += b;
        }
    }
    /// Total drops over all reasons.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().sum()
    }
    /// Seed 001's aggregation ratio: (aggregated + unaggregated) / (bundles + unaggregated).
    /// 1.0 when nothing was sent.
    pub fn aggregation_ratio(&self) -> f64 {
        let den = self.bundles + self.unaggregated_packets;
        if den == 0 {
            1.0
        } else {
            (self.aggregated_packets + self.unaggregated_packets) as f64 / den as f64
        }
    }
    /// Seed 001's average aggregation: aggregated packets per bundle (0 when no bundle).
    pub fn average_aggregation(&self) -> f64 {
        if self.bundles == 0 {
            0.0
        } else {
            self.aggregated_packets as f64 / self.bundles as f64
        }
    }
}

/// Counters plus histograms, for one peer or for the whole engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Event counters.
    pub counters: Counters,
    /// Packets per bundle sent.
    pub bundle_packets: Histogram,
    /// Hold time of each packet that left (bundled or alone), in microseconds.
    pub hold_time_us: Histogram,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            counters: Counters::default(),
            bundle_packets: Histogram::new(BUNDLE_SIZE_BOUNDS),
            hold_time_us: Histogram::new(HOLD_TIME_BOUNDS_US),
        }
    }
}

impl Stats {
    /// Adds `o` (counters and histograms).
    pub fn merge(&mut self, o: &Stats) {
        self.counters.merge(&o.counters);
        self.bundle_packets.merge(&o.bundle_packets);
        self.hold_time_us.merge(&o.hold_time_us);
    }
    /// Zeroes everything, keeping the histogram allocations (peer slot reuse).
    pub fn clear(&mut self) {
        self.counters = Counters::default();
        self.bundle_packets.clear();
        self.hold_time_us.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_inclusive_upper_bounds() {
        let mut h = Histogram::new(HOLD_TIME_BOUNDS_US);
        for v in [0, 1, 10, 11, 100_000, 100_001, u64::MAX] {
            h.record(v);
        }
        assert_eq!(h.counts[0], 1); // 0
        assert_eq!(h.counts[1], 2); // 1, 10
        assert_eq!(h.counts[2], 1); // 11
        assert_eq!(h.counts[12], 1); // 100_000
        assert_eq!(h.counts[13], 2); // overflow
        assert_eq!(h.total, 7);
        assert_eq!(h.sum, u64::MAX); // saturates
        let mut g = Histogram::new(HOLD_TIME_BOUNDS_US);
        g.record(5);
        g.merge(&h);
        assert_eq!(g.total, 8);
        assert_eq!(g.counts[1], 3);
        g.clear();
        assert_eq!((g.total, g.sum, g.counts.iter().sum::<u64>()), (0, 0, 0));
    }

    #[test]
    fn ratios_follow_seed_001() {
        let mut c = Counters::default();
        assert_eq!(c.aggregation_ratio(), 1.0);
        assert_eq!(c.average_aggregation(), 0.0);
        c.aggregated_packets = 30;
        c.bundles = 10;
        c.unaggregated_packets = 10;
        assert_eq!(c.aggregation_ratio(), 2.0); // (30 + 10) / (10 + 10)
        assert_eq!(c.average_aggregation(), 3.0);
        c.dropped[DropReason::QueueBytes.index()] = 2;
        c.dropped[DropReason::Malformed.index()] = 1;
        assert_eq!(c.dropped_total(), 3);
        let mut twice = c.clone();
        twice.merge(&c);
        assert_eq!(twice.dropped_total(), 6);
        assert_eq!((twice.bundles, twice.aggregated_packets), (20, 60));
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }
}
