//! A peer's queue: packet records ([`Entry`]), the slot that holds a peer's
//! queue, configuration and statistics ([`Slot`]), the bypass FIFO's records,
//! hold-time recording, and what a packet costs inside a bundle.
//!
//! Owns: per-queue bookkeeping (sums kept in step with the queue, readiness
//! of one queue). Must not touch: other peers, the heaps and tables that
//! order peers (that is [`super::Engine`] and `service.rs`), or wire layouts
//! beyond asking [`crate::wire`] for header lengths and costs.

use super::fifo::{ByteFifo, Ring};
use super::{Histogram, LinkMode, PeerConfig, PeerKey, Reason, Stats};
use crate::wire::{self, Encoding, MAX_PACKETS_PER_BUNDLE};
use crate::Micros;

/// Metadata of one queued packet. Its bytes are in the peer's [`ByteFifo`],
/// back to back in queue order, each packet behind the separator it gets as a
/// later (not first) packet of a bundle in the peer's encoding: `cost` bytes,
/// the packet being the last `len` of them.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Entry {
    pub(super) arrival: Micros,
    pub(super) len: u32,
    /// Bytes this packet adds to a bundle when it is not the first (separator + packet).
    pub(super) cost: u32,
    /// The packet's TOS / traffic class byte: DSCP << 2 | ECN.
    pub(super) tos: u8,
    pub(super) opportunistic: bool,
    /// The peer's current encoding can carry the packet (checked at arrival
    /// from the parsed headers, and again if the encoding changes).
    pub(super) carry: bool,
    /// [`LinkMode::Adaptive`]: the packet's hold limit (µs, see
    /// `policy::hold_limit`; `spurt::NO_LIMIT` in other modes).
    pub(super) limit: u32,
    /// [`LinkMode::Adaptive`]: the first packet of a talk spurt, held its
    /// full limit (see `spurt`).
    pub(super) spurt: bool,
}

/// Sums over records removed from a queue (see `Slot::forget_front`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Removed {
    pub(super) bytes: usize,
    pub(super) cost: usize,
    pub(super) opportunistic: usize,
    pub(super) nocarry: usize,
    /// Records whose ECN field is Not-ECT.
    pub(super) not_ect: usize,
    /// Sum of arrival times, modulo 2^64.
    pub(super) arrivals: u64,
}

impl Removed {
    #[inline(always)]
    pub(super) fn add(&mut self, e: &Entry) {
        self.bytes += e.len as usize;
        self.cost += e.cost as usize;
        self.opportunistic += e.opportunistic as usize;
        self.nocarry += !e.carry as usize;
        self.not_ect += (e.tos & 3 == 0) as usize;
        self.arrivals = self.arrivals.wrapping_add(e.arrival);
    }
}

/// One bypass packet (bytes in the bypass [`ByteFifo`]).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct BypassEntry {
    pub(super) len: u32,
    /// Peer slot and its generation, to charge the peer's statistics (if it still exists).
    pub(super) slot: u32,
    pub(super) gen: u32,
    pub(super) dscp: u8,
}

/// A peer's queue, configuration and statistics.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) key: PeerKey,
    /// In the peer table (false: free, or draining after `remove_peer`).
    pub(super) live: bool,
    /// Removed by `remove_peer` with packets still queued: they leave alone, then the slot is freed.
    pub(super) draining: bool,
    /// Configured with `set_peer` (keeps its config across `reconfigure`).
    pub(super) explicit: bool,
    /// Bumped when the slot is freed, so bypass entries stop charging its statistics.
    pub(super) gen: u32,
    pub(super) cfg: PeerConfig,
    pub(super) q: Ring<Entry>,
    pub(super) bytes: ByteFifo,
    pub(super) queued_bytes: usize,
    /// Sum of `Entry::cost` over `q`.
    pub(super) cost_sum: usize,
    /// Format header plus what the first packet costs beyond `Entry::cost`
    /// (kept up to date by `Engine::refresh` whenever the front changes).
    pub(super) fixed_cost: usize,
    /// `cfg.max_packets` clamped to what a bundle may hold (kept by `Slot::sync`).
    pub(super) max_packets: usize,
    /// `size_ready`'s byte condition is `cost_sum >= ready_cost` (kept by `Slot::sync`).
    pub(super) ready_cost: usize,
    pub(super) opportunistic: usize,
    /// Records in `q` whose `carry` is false.
    pub(super) nocarry: usize,
    /// Records in `q` whose ECN field is Not-ECT (a bundle's outer header
    /// is ECT(0) only when none is).
    pub(super) not_ect: usize,
    /// Sum of `Entry::arrival` over `q`, modulo 2^64 (differences of such
    /// sums are exact when the true difference fits in 64 bits).
    pub(super) arrival_sum: u64,
    /// The highest `Entry::tos` in `q` when `tos_exact`; otherwise at
    /// least that (packets have left since the queue was last empty). Its
    /// DSCP (`>> 2`) is the highest DSCP: the TOS orders by DSCP first.
    pub(super) tos_max: u8,
    pub(super) tos_exact: bool,
    /// Packets at the front of `q` that `flush`/`remove_peer` made ready.
    pub(super) flush_pending: usize,
    /// Generation of the one valid deadline-heap entry.
    pub(super) dl_gen: u32,
    /// Generation of the one valid ready-heap entry.
    pub(super) rd_gen: u32,
    pub(super) in_ready: bool,
    pub(super) in_wake: bool,
    /// `!in_ready && !draining && flush_pending == 0 && cfg.accepts_bundles
    /// && opportunistic == 0` (kept by `Slot::sync_calm`): with an idle link
    /// in fixed mode, a push can only make the queue ready by its size.
    pub(super) calm: bool,
    /// [`Engine::handle_packet`]'s shortest path (a short packet pushed in
    /// the native encoding that changes nothing but the queue) applies when
    /// `q.len() - 1 < fast_len` (wrapping: the queue is not empty) and
    /// `cost_sum + cost < fast_cost`. `fast_len` is zero unless the queue is
    /// `calm` in the native encoding; see `Slot::sync_calm` and `Slot::sync`.
    pub(super) fast_len: usize,
    pub(super) fast_cost: usize,
    /// [`LinkMode::Adaptive`]: no later than the earliest time a queued
    /// packet's delay-budget share runs out (`Micros::MAX` in other modes).
    /// Set when a packet joins (`Engine::note_budget`); after a partial send
    /// it may be earlier than needed, which only releases early.
    pub(super) budget_due: Micros,
    pub(super) stats: Stats,
}

impl Slot {
    pub(super) fn new(key: PeerKey, cfg: PeerConfig, explicit: bool) -> Self {
        Slot {
            key,
            live: true,
            draining: false,
            explicit,
            gen: 0,
            cfg,
            q: Ring::default(),
            bytes: ByteFifo::default(),
            queued_bytes: 0,
            cost_sum: 0,
            fixed_cost: 0,
            max_packets: 0,
            ready_cost: 0,
            opportunistic: 0,
            nocarry: 0,
            not_ect: 0,
            arrival_sum: 0,
            tos_max: 0,
            tos_exact: false,
            flush_pending: 0,
            dl_gen: 0,
            rd_gen: 0,
            in_ready: false,
            in_wake: false,
            calm: false,
            fast_len: 0,
            fast_cost: 0,
            budget_due: Micros::MAX,
            stats: Stats::default(),
        }
        .synced()
    }

    pub(super) fn synced(mut self) -> Self {
        self.sync();
        self
    }

    /// Recomputes the values derived from `cfg` and `fixed_cost`; called
    /// whenever either changes.
    pub(super) fn sync(&mut self) {
        self.max_packets = self.cfg.max_packets.clamp(1, MAX_PACKETS_PER_BUNDLE);
        // wire_estimate() >= min(min_size, max_size), with the cost sum alone.
        self.ready_cost = self
            .cfg
            .min_size
            .min(self.cfg.max_size)
            .saturating_sub(self.cfg.outer_overhead.saturating_add(self.fixed_cost));
        // Below the readiness threshold and (conservatively: a packet's cost
        // is at least its length) within the byte limit after the push.
        self.fast_cost = self
            .ready_cost
            .min(self.cfg.queue_limit_bytes.saturating_add(1));
        self.sync_calm();
    }

    /// Recomputes `calm` and `fast_len`; called whenever one of their inputs changes.
    #[inline]
    pub(super) fn sync_calm(&mut self) {
        self.calm = !self.in_ready
            && !self.draining
            && self.flush_pending == 0
            && self.cfg.accepts_bundles
            && self.opportunistic == 0;
        // With `n = q.len()` before the push: `1 <= n` (the front stays),
        // `n + 1 < max_packets` (not ready by count after it) and
        // `n < queue_limit_packets` (room for it), i.e. `n - 1 < fast_len`.
        self.fast_len = if self.calm && self.cfg.encoding == Encoding::Native {
            (self.max_packets.saturating_sub(2)).min(self.cfg.queue_limit_packets.saturating_sub(1))
        } else {
            0
        };
    }

    /// Clears `calm` (and with it `fast_len`).
    #[inline]
    pub(super) fn clear_calm(&mut self) {
        self.calm = false;
        self.fast_len = 0;
    }

    /// Replaces the configuration.
    pub(super) fn set_cfg(&mut self, cfg: PeerConfig) {
        self.cfg = cfg;
        self.sync();
    }

    /// Changes the maximum bundle size.
    pub(super) fn set_max_size(&mut self, max_size: usize) {
        self.cfg.max_size = max_size;
        self.sync();
    }

    /// Appends a packet (behind its later-packet separator, ready to be
    /// copied into a bundle) and its record; no limits, no readiness.
    #[inline(always)]
    pub(super) fn push(
        &mut self,
        now: Micros,
        packet: &[u8],
        tos: u8,
        opportunistic: bool,
        carry: bool,
    ) {
        let len = packet.len();
        if self.q.is_empty() {
            self.tos_max = tos;
            self.tos_exact = true;
        } else {
            self.tos_max = self.tos_max.max(tos);
        }
        let (sep, k) = match self.cfg.encoding {
            // The usual voice case, without the general separator writer.
            Encoding::Native if len < 0x80 => (len as u32, 1),
            enc => {
                let (sep, k) = enc.later_separator(packet);
                (u32::from_le_bytes(sep), k)
            }
        };
        self.append(now, packet, tos, (sep, k), opportunistic, carry);
    }

    /// [`Slot::push`] of a packet shorter than 128 bytes in the native
    /// encoding (one-byte separator), bundle class, that an IPv4 packet is,
    /// onto a non-empty queue: the shortest path, see `fast_len`.
    #[inline(always)]
    pub(super) fn push_native_short(&mut self, now: Micros, packet: &[u8], tos: u8) {
        debug_assert!(!self.q.is_empty() && packet.len() < 0x80);
        debug_assert_eq!(self.cfg.encoding, Encoding::Native);
        // (A branch: the TOS of a voice flow rarely changes.)
        if tos > self.tos_max {
            self.tos_max = tos;
        }
        self.append(now, packet, tos, (packet.len() as u32, 1), false, true);
    }

    /// The part of a push after the TOS maximum: the packet behind its separator
    /// (`sep`: the separator's bytes as a little-endian word, and its
    /// length), its record, and the queue aggregates.
    #[inline(always)]
    pub(super) fn append(
        &mut self,
        now: Micros,
        packet: &[u8],
        tos: u8,
        (sep, k): (u32, usize),
        opportunistic: bool,
        carry: bool,
    ) {
        let len = packet.len();
        let c = k + len;
        self.bytes.push_prefixed_word(sep, k, packet);
        self.q.push_back(Entry {
            arrival: now,
            len: len as u32,
            cost: c as u32,
            tos,
            opportunistic,
            carry,
            limit: super::spurt::NO_LIMIT,
            spurt: false,
        });
        self.queued_bytes += len;
        self.cost_sum += c;
        if opportunistic {
            self.opportunistic += 1;
            self.clear_calm();
        }
        self.nocarry += !carry as usize;
        self.not_ect += (tos & 3 == 0) as usize;
        self.arrival_sum = self.arrival_sum.wrapping_add(now);
        debug_assert!(self.aggregates_hold());
    }

    /// Takes the aggregates of the `n` records just removed from the front
    /// of `q` out of the queue's: their lengths, costs, opportunistic and
    /// non-carriable counts and arrival times summed.
    #[inline(always)]
    pub(super) fn forget_front(&mut self, n: usize, removed: Removed) {
        self.queued_bytes -= removed.bytes;
        self.cost_sum -= removed.cost;
        self.opportunistic -= removed.opportunistic;
        self.nocarry -= removed.nocarry;
        self.not_ect -= removed.not_ect;
        self.arrival_sum = self.arrival_sum.wrapping_sub(removed.arrivals);
        self.flush_pending = self.flush_pending.saturating_sub(n);
        self.sync_calm();
        // The highest TOS may have left; it is exact again once the queue
        // has been empty.
        self.tos_exact &= self.q.is_empty();
        debug_assert!(self.aggregates_hold());
    }

    /// Every aggregate kept over `q` equals its sum over the records (tests).
    pub(super) fn aggregates_hold(&self) -> bool {
        let mut r = Removed::default();
        let mut tos = 0;
        for e in self.q.iter() {
            r.add(e);
            tos = tos.max(e.tos);
        }
        (
            r.bytes,
            r.cost,
            r.opportunistic,
            r.nocarry,
            r.not_ect,
            r.arrivals,
        ) == (
            self.queued_bytes,
            self.cost_sum,
            self.opportunistic,
            self.nocarry,
            self.not_ect,
            self.arrival_sum,
        ) && (self.q.is_empty()
            || (self.tos_max >= tos && (!self.tos_exact || self.tos_max == tos)))
            && self.calm
                == (!self.in_ready
                    && !self.draining
                    && self.flush_pending == 0
                    && self.cfg.accepts_bundles
                    && self.opportunistic == 0)
            && (self.fast_len == 0 || (self.calm && self.cfg.encoding == Encoding::Native))
            && self.fast_len + 2 <= self.max_packets.max(2)
            && self.fast_len < self.cfg.queue_limit_packets.max(1)
            && self.fast_cost <= self.ready_cost
            && self.fast_cost <= self.cfg.queue_limit_bytes.saturating_add(1)
    }

    /// After a push to this queue with its front unchanged: whether
    /// `Engine::refresh` has anything to do, i.e. `in_ready || link_busy ||
    /// ready_reason(..).is_some()` with `q` not empty. Its common case, in
    /// line: a calm queue on an idle link in fixed mode that has not reached
    /// its size.
    #[inline(always)]
    pub(super) fn refresh_after_push(
        &self,
        calm_link: bool,
        link_busy: bool,
        mode: LinkMode,
    ) -> bool {
        debug_assert_eq!(calm_link, !link_busy && mode == LinkMode::Fixed);
        let refresh = !(self.calm && calm_link) || self.size_ready();
        debug_assert_eq!(
            refresh,
            self.in_ready || link_busy || self.ready_reason(link_busy, mode).is_some()
        );
        refresh
    }

    /// Payload + outer overhead of a bundle holding the whole queue.
    #[inline]
    pub(super) fn wire_estimate(&self) -> usize {
        self.cfg.outer_overhead + self.fixed_cost + self.cost_sum
    }

    pub(super) fn update_fixed_cost(&mut self) {
        let enc = self.cfg.encoding;
        let first_extra = match self.q.front() {
            Some(e) => cost(enc, e.len as usize, true).saturating_sub(e.cost as usize),
            None => 0,
        };
        let fixed_cost = header_len(enc) + first_extra;
        // (Unchanged in the native and kau encodings, whose first packet
        // costs what a later one does: nothing to recompute then.)
        if fixed_cost != self.fixed_cost {
            self.fixed_cost = fixed_cost;
            self.sync();
        }
    }

    /// Minimum size, maximum size or packet count reached.
    #[inline]
    pub(super) fn size_ready(&self) -> bool {
        let ready = self.q.len() >= self.max_packets || self.cost_sum >= self.ready_cost;
        debug_assert_eq!(ready, {
            let est = self.wire_estimate();
            // A bundle exactly at the maximum is full: nothing else can join it.
            self.q.len() >= self.cfg.max_packets.clamp(1, MAX_PACKETS_PER_BUNDLE)
                || est >= self.cfg.min_size
                || est >= self.cfg.max_size
        });
        ready
    }

    /// Why this queue may send now, apart from its hold time (the deadline heap's job).
    #[inline]
    pub(super) fn ready_reason(&self, link_busy: bool, mode: LinkMode) -> Option<Reason> {
        if self.q.is_empty() {
            return None;
        }
        if self.draining || self.flush_pending > 0 {
            return Some(Reason::Flush);
        }
        if !self.cfg.accepts_bundles {
            return Some(Reason::NotAccepted);
        }
        if self.size_ready() {
            return Some(Reason::Size);
        }
        if !link_busy && (mode != LinkMode::Fixed || self.opportunistic > 0) {
            return Some(Reason::Idle);
        }
        None
    }

    pub(super) fn deadline(&self) -> Option<Micros> {
        self.q.front().map(|e| {
            e.arrival
                .saturating_add(self.cfg.hold_time)
                .min(self.budget_due)
        })
    }
}

/// Hold times of consecutive packets of one bundle, recorded per run of equal
/// histogram bucket (values need not be ordered; a value outside the current
/// bucket ends the run and starts a new one).
pub(super) struct HoldRun {
    pub(super) bucket: usize,
    /// The current bucket holds the values `lo..=hi`.
    pub(super) lo: u64,
    pub(super) hi: u64,
    pub(super) count: u64,
    pub(super) sum: u64,
}

impl HoldRun {
    #[inline]
    pub(super) fn new(h: &Histogram, first: u64) -> Self {
        let mut r = HoldRun {
            bucket: 0,
            lo: 0,
            hi: 0,
            count: 0,
            sum: 0,
        };
        r.enter(h, first);
        r
    }
    /// Makes the bucket of `value` the current one.
    #[inline]
    pub(super) fn enter(&mut self, h: &Histogram, value: u64) {
        let b = h.bucket(value);
        self.bucket = b;
        self.lo = match b.checked_sub(1) {
            Some(p) => h.bounds[p].saturating_add(1),
            None => 0,
        };
        self.hi = h.bounds.get(b).copied().unwrap_or(u64::MAX);
    }
    #[inline(always)]
    pub(super) fn add(&mut self, h: &mut Histogram, hold: u64) {
        if hold < self.lo || hold > self.hi {
            self.change(h, hold);
        }
        self.count += 1;
        self.sum = self.sum.saturating_add(hold);
    }
    #[inline(never)]
    pub(super) fn change(&mut self, h: &mut Histogram, hold: u64) {
        self.finish(h);
        self.enter(h, hold);
    }
    #[inline]
    pub(super) fn finish(&mut self, h: &mut Histogram) {
        if self.count > 0 {
            h.record_many(self.bucket, self.count, self.sum);
            self.count = 0;
            self.sum = 0;
        }
    }
}

/// Records the hold time (`now` minus arrival) of every packet in `q`, in
/// `h`, given the sum of their arrival times. Arrival times are
/// non-decreasing along a queue, so when the first and the last packet's
/// hold times fall in the same bucket, every one does, and the bucket gets
/// them all at once: their count and the sum of their hold times,
/// `len * now - arrivals` (computed modulo 2^64, exact when no hold time
/// sum can exceed 64 bits; otherwise, as when the buckets differ, the packets
/// are recorded in runs, whose sums saturate).
pub(super) fn record_holds(q: &Ring<Entry>, now: Micros, arrivals: u64, h: &mut Histogram) {
    let (a, b) = q.as_slices();
    let (Some(first), Some(last)) = (a.first(), b.last().or(a.last())) else {
        return;
    };
    let mut run = HoldRun::new(h, now.saturating_sub(first.arrival));
    let n = q.len() as u64;
    if now >= last.arrival
        && now - last.arrival >= run.lo
        && (now - first.arrival).checked_mul(n).is_some()
    {
        // Every hold time lies between the last's and the first's, so in the run's bucket.
        debug_assert!(a
            .iter()
            .chain(b)
            .all(|e| (run.lo..=run.hi).contains(&(now - e.arrival))));
        run.count = n;
        run.sum = n.wrapping_mul(now).wrapping_sub(arrivals);
    } else {
        for e in a.iter().chain(b) {
            run.add(h, now.saturating_sub(e.arrival));
        }
    }
    run.finish(h);
}

#[inline]
pub(super) fn header_len(enc: Encoding) -> usize {
    match enc {
        Encoding::Native => wire::native::HEADER_LEN,
        Encoding::Kau => wire::kau::HEADER_LEN,
        Encoding::Simplemux => wire::simplemux::HEADER_LEN,
    }
}

#[inline]
pub(super) fn cost(enc: Encoding, len: usize, first: bool) -> usize {
    match enc {
        Encoding::Native => wire::native::cost(len, first),
        Encoding::Kau => wire::kau::cost(len, first),
        Encoding::Simplemux => wire::simplemux::cost(len, first),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fifo::Ring;
    use super::super::stats::HOLD_TIME_BOUNDS_US;
    use super::{Entry, Histogram, HoldRun};

    #[test]
    fn record_holds_matches_one_by_one() {
        // Queues of non-decreasing arrival times (small, at bucket edges, and
        // huge, so hold-time sums overflow 64 bits and must saturate), with
        // the arrival sum kept modulo 2^64 as the engine keeps it.
        let mut x: u64 = 0x1234_5678_9abc_def1;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..2_000 {
            let mut q: Ring<Entry> = Ring::default();
            let mut sum = 0u64;
            let mut t = match round % 3 {
                0 => rnd() % 1_000,
                1 => u64::MAX / 2 + rnd() % 1_000,
                _ => rnd() % (u64::MAX / 4),
            };
            for _ in 0..1 + rnd() % 30 {
                t = t.saturating_add(match rnd() % 3 {
                    0 => 0,
                    1 => rnd() % 20,
                    _ => rnd() % (1 << (rnd() % 64)),
                });
                q.push_back(Entry {
                    arrival: t,
                    ..Entry::default()
                });
                sum = sum.wrapping_add(t);
            }
            let now = t.saturating_add(match rnd() % 3 {
                0 => 0,
                1 => rnd() % 200,
                _ => rnd(),
            });
            let mut expect = Histogram::new(HOLD_TIME_BOUNDS_US);
            for e in q.iter() {
                expect.record(now - e.arrival);
            }
            let mut got = Histogram::new(HOLD_TIME_BOUNDS_US);
            super::record_holds(&q, now, sum, &mut got);
            assert_eq!(got, expect, "round {round}");
        }
    }

    #[test]
    fn hold_run_records_like_one_by_one() {
        // Runs of values (mostly non-increasing, as along a queue, sometimes
        // not) give the same histograms as recording each value alone.
        let mut x: u32 = 0x0bad_cafe;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            u64::from(x)
        };
        for _ in 0..500 {
            let mut expect = Histogram::new(HOLD_TIME_BOUNDS_US);
            let mut peer = Histogram::new(HOLD_TIME_BOUNDS_US);
            let mut v = rnd() % 200_000;
            let mut run = HoldRun::new(&peer, v);
            for _ in 0..rnd() % 40 {
                expect.record(v);
                run.add(&mut peer, v);
                v = match rnd() % 4 {
                    0 => v.saturating_sub(rnd() % 3_000),
                    1 => rnd() % 200_000,
                    2 => [0, 10, 11, 50, 100_000, 100_001, u64::MAX][rnd() as usize % 7],
                    _ => v,
                };
            }
            run.finish(&mut peer);
            assert_eq!(peer, expect);
        }
    }
}
