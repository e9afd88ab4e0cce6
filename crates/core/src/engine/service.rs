//! The engine's internals: peer slots' life cycle, enqueueing under queue
//! limits, drops, deadline and ready bookkeeping, and serving a queue into a
//! bundle (`serve`). The public API is in `mod.rs`; this is what it calls.
//!
//! Owns: the order in which peers are served and every counter a transmit
//! or a drop updates. Must not touch: byte layouts beyond
//! [`crate::wire::BundleWriter`], or anything outside the engine.

use super::fifo::ByteFifo;
use super::slot::{cost, header_len, record_holds, BypassEntry, HoldRun, Removed, Slot};
use super::spurt;
use super::{
    count, push_within_limits, DropReason, Engine, LinkMode, PeerConfig, PeerKey, Reason,
    TrafficClass, Transmit, TransmitKind, Verdict,
};
use crate::wire::{ip, BundleWriter, MAX_BUNDLE};
use crate::Micros;
use core::cmp::Reverse;

impl Engine {
    #[inline]
    pub(super) fn advance(&mut self, now: Micros) {
        if now > self.now {
            self.now = now;
        }
    }

    #[inline]
    pub(super) fn lookup(&mut self, peer: PeerKey) -> Option<usize> {
        self.index.get(&peer).map(|i| i as usize)
    }

    pub(super) fn create_peer(
        &mut self,
        peer: PeerKey,
        cfg: PeerConfig,
        explicit: bool,
    ) -> Result<usize, DropReason> {
        let used = self.slots.len() - self.free.len();
        if used >= self.config.max_peers {
            return Err(DropReason::PeerTableFull);
        }
        let i = match self.free.pop() {
            Some(i) => {
                let s = &mut self.slots[i as usize];
                debug_assert!(s.q.is_empty() && !s.live);
                s.key = peer;
                s.live = true;
                s.draining = false;
                s.explicit = explicit;
                s.flush_pending = 0;
                s.set_cfg(cfg);
                s.stats.clear();
                i as usize
            }
            None => {
                self.slots.push(Slot::new(peer, cfg, explicit));
                self.slots.len() - 1
            }
        };
        self.index.insert(peer, i as u32);
        Ok(i)
    }

    pub(super) fn free_slot(&mut self, i: usize) {
        let s = &mut self.slots[i];
        debug_assert!(s.q.is_empty());
        // Its statistics stay in the totals.
        self.retired.merge(&s.stats);
        s.stats.clear();
        s.live = false;
        s.draining = false;
        s.gen = s.gen.wrapping_add(1);
        s.dl_gen = s.dl_gen.wrapping_add(1);
        s.rd_gen = s.rd_gen.wrapping_add(1);
        if s.in_ready {
            s.in_ready = false;
            self.ready_count -= 1;
        }
        s.sync_calm();
        self.free.push(i as u32);
    }

    /// A packet of `len` bytes handed in and dropped at once: counted in and
    /// dropped for slot `slot`, or (no peer) among the retired.
    pub(super) fn drop_arrival(
        &mut self,
        slot: Option<usize>,
        len: usize,
        reason: DropReason,
    ) -> Verdict {
        let ps = slot.map(|i| &mut self.slots[i].stats);
        count(&mut self.retired, ps, |c| {
            c.packets_in += 1;
            c.bytes_in += len as u64;
        });
        self.drop_new(slot, reason)
    }

    pub(super) fn drop_new(&mut self, slot: Option<usize>, reason: DropReason) -> Verdict {
        let ps = slot.map(|i| &mut self.slots[i].stats);
        count(&mut self.retired, ps, |c| c.dropped[reason.index()] += 1);
        self.settle();
        Verdict::Dropped(reason)
    }

    pub(super) fn enqueue_bypass(&mut self, i: usize, packet: &[u8], dscp: u8) -> Verdict {
        if self.bypass.len() >= self.config.bypass_queue_limit {
            return self.drop_new(Some(i), DropReason::BypassQueueFull);
        }
        self.bypass_bytes.push(packet);
        self.quiet_until = 0;
        self.bypass.push_back(BypassEntry {
            len: packet.len() as u32,
            slot: i as u32,
            gen: self.slots[i].gen,
            dscp,
        });
        self.counts.packets += 1;
        self.counts.bytes += packet.len();
        Verdict::Queued(TrafficClass::Bypass)
    }

    /// Queues a bundle- or opportunistic-class packet for slot `i`.
    #[inline(always)]
    pub(super) fn enqueue(
        &mut self,
        i: usize,
        packet: &[u8],
        tos: u8,
        opportunistic: bool,
        carry: bool,
    ) -> Verdict {
        let s = &mut self.slots[i];
        let pushed = push_within_limits(
            s,
            &mut self.counts,
            self.now,
            packet,
            tos,
            opportunistic,
            carry,
        );
        match pushed {
            Some(front_changed) if matches!(self.config.link_mode, LinkMode::Adaptive(_)) => {
                self.note_budget(i, packet, front_changed);
            }
            Some(false)
                if !s.refresh_after_push(self.calm_link, self.link_busy, self.config.link_mode) => {
            }
            Some(front_changed) => self.refresh_out_of_line(i, front_changed),
            None => return self.enqueue_over_limit(i, packet, tos, opportunistic, carry),
        }
        Verdict::Queued(TrafficClass::Bundle)
    }

    /// [`Engine::enqueue`] when the packet would exceed a queue limit: drop it
    /// or the oldest packets.
    #[cold]
    #[inline(never)]
    pub(super) fn enqueue_over_limit(
        &mut self,
        i: usize,
        packet: &[u8],
        tos: u8,
        opportunistic: bool,
        carry: bool,
    ) -> Verdict {
        let len = packet.len();
        let s = &self.slots[i];
        if len > s.cfg.queue_limit_bytes {
            return self.drop_new(Some(i), DropReason::QueueBytes);
        }
        if s.cfg.queue_limit_packets == 0 {
            return self.drop_new(Some(i), DropReason::QueuePackets);
        }
        while self.slots[i].q.len() >= self.slots[i].cfg.queue_limit_packets {
            self.drop_front(i, DropReason::QueuePackets);
        }
        while self.slots[i].queued_bytes + len > self.slots[i].cfg.queue_limit_bytes {
            self.drop_front(i, DropReason::QueueBytes);
        }
        let s = &mut self.slots[i];
        let pushed = push_within_limits(
            s,
            &mut self.counts,
            self.now,
            packet,
            tos,
            opportunistic,
            carry,
        );
        debug_assert!(pushed.is_some(), "room was made");
        if self.adaptive() {
            // (Drops may have emptied the queue: the pushed packet may be alone.)
            let alone = self.slots[i].q.len() == 1;
            self.note_budget(i, packet, alone);
        }
        // The front may have changed with the drops.
        self.refresh(i, true);
        Verdict::Queued(TrafficClass::Bundle)
    }

    /// Drops the oldest packet of slot `i` (no deadline/ready bookkeeping).
    pub(super) fn drop_front(&mut self, i: usize, reason: DropReason) {
        let s = &mut self.slots[i];
        let Some(e) = s.q.pop_front() else { return };
        s.bytes.pop(e.cost as usize);
        let mut r = Removed::default();
        r.add(&e);
        s.forget_front(1, r);
        if s.q.is_empty() {
            self.counts.nonempty -= 1;
        }
        self.counts.packets -= 1;
        self.counts.bytes -= e.len as usize;
        s.stats.counters.dropped[reason.index()] += 1;
    }

    /// Applies a new configuration to slot `i`, keeping its queue.
    pub(super) fn apply_peer_config(&mut self, i: usize, cfg: PeerConfig) {
        let s = &mut self.slots[i];
        if s.cfg.encoding != cfg.encoding {
            // Re-encode the queue: each packet behind the new encoding's separator.
            let mut fresh = ByteFifo::default();
            let mut sum = 0;
            let mut nocarry = 0;
            let mut off = 0;
            for e in s.q.iter_mut() {
                let (l, old) = (e.len as usize, e.cost as usize);
                let pkt = s.bytes.get(off + old - l, l);
                off += old;
                let (sep, k) = cfg.encoding.later_separator(pkt);
                fresh.push_prefixed(&sep, k, pkt);
                e.cost = (k + l) as u32;
                debug_assert_eq!(e.cost as usize, cost(cfg.encoding, l, false));
                e.carry = cfg.encoding.can_carry(pkt);
                sum += e.cost as usize;
                nocarry += !e.carry as usize;
            }
            s.bytes = fresh;
            s.cost_sum = sum;
            s.nocarry = nocarry;
        }
        s.set_cfg(cfg);
        while self.slots[i].q.len() > self.slots[i].cfg.queue_limit_packets {
            self.drop_front(i, DropReason::QueuePackets);
        }
        while self.slots[i].queued_bytes > self.slots[i].cfg.queue_limit_bytes {
            self.drop_front(i, DropReason::QueueBytes);
        }
        self.refresh(i, true);
    }

    /// Re-establishes slot `i`'s heap and wake-list membership after any change
    /// to its queue, configuration or the link state. `front_changed`: the
    /// oldest packet (hence the deadline) may have changed.
    #[inline(always)]
    pub(super) fn refresh(&mut self, i: usize, front_changed: bool) {
        if front_changed {
            self.reset_deadline(i);
        }
        let s = &self.slots[i];
        if s.ready_reason(self.link_busy, self.config.link_mode)
            .is_some()
        {
            self.push_ready(i);
        } else if s.in_ready || self.link_busy {
            self.unready(i);
        }
        // else: not ready, not in the ready heap, and the link is idle so
        // there is no wake list to join: nothing to do (the common case).
    }

    #[inline(never)]
    pub(super) fn refresh_out_of_line(&mut self, i: usize, front_changed: bool) {
        self.refresh(i, front_changed);
    }

    /// The oldest packet of slot `i` changed: new fixed cost and deadline.
    #[inline(never)]
    pub(super) fn reset_deadline(&mut self, i: usize) {
        let s = &mut self.slots[i];
        // (An empty queue's fixed cost is recomputed when its next first
        // packet arrives, which resets the deadline again.)
        if !s.q.is_empty() {
            s.update_fixed_cost();
        }
        s.dl_gen = s.dl_gen.wrapping_add(1);
        if let Some(d) = s.deadline() {
            self.deadlines.push((d, i as u32, s.dl_gen));
            self.quiet_until = self.quiet_until.min(d);
            if self.deadlines.len() > 2 * self.counts.nonempty + 64 {
                let slots = &self.slots;
                self.deadlines
                    .retain(|&(_, j, g)| slots[j as usize].dl_gen == g);
            }
        }
        // The old entry, now stale, may be the top: `settle` (at the end of
        // every public call that can get here, or lazily in `poll_timeout`)
        // drops it; until then `quiet_until` is a lower bound, which is safe.
    }

    /// Slot `i` is ready: (re)enters the ready heap with its current size.
    #[inline(never)]
    pub(super) fn push_ready(&mut self, i: usize) {
        let s = &mut self.slots[i];
        s.rd_gen = s.rd_gen.wrapping_add(1);
        let key = s.wire_estimate();
        self.ready.push((key, Reverse(i as u32), s.rd_gen));
        self.quiet_until = 0;
        if !s.in_ready {
            s.in_ready = true;
            s.clear_calm();
            self.ready_count += 1;
        }
        if self.ready.len() > 2 * self.ready_count + 64 {
            let slots = &self.slots;
            self.ready.retain(|(_, Reverse(j), g)| {
                let s = &slots[*j as usize];
                s.in_ready && s.rd_gen == *g
            });
        }
    }

    /// Slot `i` is not ready: leaves the ready set, and waits for an idle link if that would release it.
    #[inline(never)]
    pub(super) fn unready(&mut self, i: usize) {
        let s = &mut self.slots[i];
        if s.in_ready {
            s.in_ready = false;
            s.rd_gen = s.rd_gen.wrapping_add(1);
            s.sync_calm();
            self.ready_count -= 1;
        }
        self.maybe_wake(i);
    }

    /// Puts slot `i` on the wake list if it waits for the link to become idle.
    pub(super) fn maybe_wake(&mut self, i: usize) {
        let s = &mut self.slots[i];
        if self.link_busy
            && !s.in_wake
            && !s.q.is_empty()
            && (self.config.link_mode != LinkMode::Fixed || s.opportunistic > 0)
        {
            s.in_wake = true;
            self.wake.push(i as u32);
        }
    }

    /// Why slot `i` may send now, apart from its hold time (the deadline heap's job).
    #[inline]
    pub(super) fn ready_reason(&self, i: usize) -> Option<Reason> {
        self.slots[i].ready_reason(self.link_busy, self.config.link_mode)
    }

    /// Drops stale entries from the top of the deadlines, so the top is a
    /// valid deadline, and makes `quiet_until` exact again (between calls it
    /// may be a lower bound: every deadline entry is at least `quiet_until`).
    #[inline]
    pub(super) fn settle(&mut self) {
        while let Some((_, j, g)) = self.deadlines.peek() {
            if self.slots[j as usize].dl_gen == g {
                break;
            }
            self.deadlines.pop();
        }
        self.quiet_until = if self.ready.is_empty() && self.bypass.is_empty() {
            self.deadlines.peek().map_or(Micros::MAX, |(t, _, _)| t)
        } else {
            0
        };
    }

    pub(super) fn next_bypass(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(e) = self.bypass.pop_front() {
            let len = e.len as usize;
            self.counts.packets -= 1;
            self.counts.bytes -= len;
            let slot = &mut self.slots[e.slot as usize];
            let key = slot.key;
            let ps = (slot.gen == e.gen).then_some(&mut slot.stats);
            if len > buf.len() {
                self.bypass_bytes.pop(len);
                count(&mut self.retired, ps, |c| {
                    c.dropped[DropReason::TooLarge.index()] += 1
                });
                continue;
            }
            buf[..len].copy_from_slice(self.bypass_bytes.get(0, len));
            self.bypass_bytes.pop(len);
            count(&mut self.retired, ps, |c| {
                c.bypass_packets += 1;
                c.bypass_bytes += len as u64;
            });
            return Some(Transmit {
                peer: key,
                len,
                kind: TransmitKind::Bypass,
                dscp: e.dscp,
                ecn: 0,
                reason: Reason::Bypass,
            });
        }
        None
    }

    /// Serves the peer whose oldest packet is due, else the fullest ready peer.
    // Out of line: once per bundle, and callgrind.sh reports its cost apart.
    #[inline(never)]
    pub(super) fn next_bundle(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let now = self.now;
        loop {
            let mut pick = None;
            if let Some((t, j, g)) = self.deadlines.peek() {
                if self.slots[j as usize].dl_gen != g {
                    self.deadlines.pop();
                    continue;
                }
                if t <= now {
                    self.deadlines.pop();
                    let s = &self.slots[j as usize];
                    // A flushing/removed peer's packets count as flushed even when late.
                    let reason = if s.draining || s.flush_pending > 0 {
                        Reason::Flush
                    } else if !s.cfg.accepts_bundles {
                        Reason::NotAccepted
                    } else {
                        Reason::Timeout
                    };
                    pick = Some((j as usize, reason));
                }
            }
            if pick.is_none() {
                let (_, Reverse(j), g) = self.ready.pop()?;
                let j = j as usize;
                let s = &self.slots[j];
                if !s.in_ready || s.rd_gen != g {
                    continue;
                }
                match self.ready_reason(j) {
                    Some(r) => pick = Some((j, r)),
                    None => {
                        // No longer ready (the link became busy again).
                        let s = &mut self.slots[j];
                        s.in_ready = false;
                        s.rd_gen = s.rd_gen.wrapping_add(1);
                        s.sync_calm();
                        self.ready_count -= 1;
                        self.maybe_wake(j);
                        continue;
                    }
                }
            }
            let (j, reason) = pick.expect("picked above");
            let t = self.serve(j, reason, now, buf);
            if self.slots[j].q.is_empty() {
                self.counts.nonempty -= 1;
                if self.slots[j].draining {
                    self.free_slot(j);
                } else {
                    self.refresh(j, true);
                }
            } else {
                self.refresh(j, true);
            }
            if t.is_some() {
                return t;
            }
        }
    }

    /// Sends the next bundle (or single packet) of slot `j`, which is non-empty.
    /// Returns `None` only when the packet at the front was too large for `buf`
    /// and was dropped. Leaves heap bookkeeping (and `nonempty`) to the caller.
    pub(super) fn serve(
        &mut self,
        j: usize,
        reason: Reason,
        now: Micros,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let s = &mut self.slots[j];
        let key = s.key;
        let enc = s.cfg.encoding;
        let limit = s
            .cfg
            .max_size
            .saturating_sub(s.cfg.outer_overhead)
            .min(buf.len())
            .min(MAX_BUNDLE);
        // Adaptive, on the deadline: a talk spurt's first packet may stay
        // for its full limit (`spurt::spurt_cut`).
        let adaptive = matches!(self.config.link_mode, LinkMode::Adaptive(_));
        let maxp = if adaptive && reason == Reason::Timeout {
            s.max_packets
                .min(spurt::spurt_cut(&s.q, now, s.cfg.hold_time))
        } else {
            s.max_packets
        };
        // A bundle only when at least the first two packets go into it (same
        // cost function as the writer's); otherwise the first leaves alone.
        let bundle = s.cfg.accepts_bundles
            && !s.draining
            && maxp >= 2
            && match (s.q.get(0), s.q.get(1)) {
                (Some(a), Some(b)) => {
                    a.carry
                        && b.carry
                        && header_len(enc) + cost(enc, a.len as usize, true) + b.cost as usize
                            <= limit
                }
                _ => false,
            };
        let n: usize;
        let mut tos = 0;
        let mut ecn = 0;
        let inner_bytes: usize;
        // (`limit` holds the header and two packets, so the writer exists.)
        let writer = if bundle {
            BundleWriter::new(enc, &mut buf[..limit])
        } else {
            None
        };
        let (len, kind) = if let Some(mut w) = writer {
            // The queue holds each packet behind its later-packet separator
            // (`Entry::cost` bytes). The first packet is written in its
            // first-packet form; the packets after it are already encoded, so
            // they are copied in one piece once it is known how many fit.
            let src = s.bytes.live();
            let first = *s.q.get(0).expect("checked above: two packets queued");
            let (fl, fc) = (first.len as usize, first.cost as usize);
            // Room for the later packets once the first is written (it is
            // copied with them when its stored form is its first form).
            let first_as_later = enc.first_as_later();
            let room = if first_as_later {
                debug_assert_eq!(cost(enc, fl, true), fc);
                w.remaining() - fc
            } else {
                w.push_checked(&src[fc - fl..fc])
                    .expect("checked above: header and the first two packets fit");
                w.remaining()
            };
            let count = maxp.min(s.q.len());
            let holds = &mut s.stats.hold_time_us;
            let body;
            let removed;
            if count == s.q.len() && s.nocarry == 0 && s.cost_sum - fc <= room {
                // The whole queue fits (the common case): what leaves is the
                // queue's aggregates, no walk needed to find or sum it.
                n = count;
                body = s.cost_sum - fc;
                removed = Removed {
                    bytes: s.queued_bytes,
                    cost: s.cost_sum,
                    opportunistic: s.opportunistic,
                    nocarry: 0,
                    not_ect: s.not_ect,
                    arrivals: s.arrival_sum,
                };
                tos = if s.tos_exact {
                    s.tos_max
                } else {
                    s.q.iter().map(|e| e.tos).max().unwrap_or(0)
                };
                record_holds(&s.q, now, s.arrival_sum, holds);
            } else {
                // Walk while the next packet fits. Arrival times are
                // non-decreasing along the queue, so hold times are
                // non-increasing and their histogram bucket only moves down:
                // record runs of equal buckets at once.
                let mut run = HoldRun::new(holds, now.saturating_sub(first.arrival));
                let mut r = Removed::default();
                r.add(&first);
                tos = first.tos;
                run.add(holds, now.saturating_sub(first.arrival));
                let mut k = 1;
                let mut later = 0usize;
                while k < count {
                    let Some(&e) = s.q.get(k) else { break };
                    let c = e.cost as usize;
                    if !e.carry || later + c > room {
                        break;
                    }
                    later += c;
                    k += 1;
                    r.add(&e);
                    tos = tos.max(e.tos);
                    run.add(holds, now.saturating_sub(e.arrival));
                }
                run.finish(holds);
                n = k;
                body = later;
                removed = r;
            }
            if first_as_later {
                w.push_encoded(&src[..fc + body], n)
            } else {
                w.push_encoded(&src[fc..fc + body], n - 1)
            }
            .expect("the walk kept to the room and packet count left");
            s.q.drop_front(n);
            s.bytes.pop(removed.cost);
            s.forget_front(n, removed);
            inner_bytes = removed.bytes;
            if removed.not_ect == 0 {
                ecn = ip::ecn::ECT0;
            }
            debug_assert!(n >= 2, "the first two packets were checked to fit");
            (
                w.finish(),
                TransmitKind::Bundle {
                    packets: n as u16,
                    encoding: enc,
                },
            )
        } else {
            let e =
                s.q.pop_front()
                    .expect("serve is only called on a non-empty queue");
            let l = e.len as usize;
            let c = e.cost as usize;
            n = 1;
            inner_bytes = l;
            let fits = l <= buf.len();
            if fits {
                buf[..l].copy_from_slice(s.bytes.get(c - l, l));
                tos = e.tos;
                s.stats.hold_time_us.record(now.saturating_sub(e.arrival));
            }
            s.bytes.pop(c);
            let mut r = Removed::default();
            r.add(&e);
            s.forget_front(1, r);
            if !fits {
                self.counts.packets -= 1;
                self.counts.bytes -= l;
                s.stats.counters.dropped[DropReason::TooLarge.index()] += 1;
                return None;
            }
            (l, TransmitKind::Single)
        };
        self.counts.packets -= n;
        self.counts.bytes -= inner_bytes;
        if adaptive && !s.q.is_empty() {
            // What stays keeps its own limits, exactly.
            s.budget_due = spurt::budget_due(&s.q);
        }
        let st = &mut s.stats;
        let c = &mut st.counters;
        if n >= 2 {
            c.aggregated_packets += n as u64;
            c.aggregated_bytes += inner_bytes as u64;
            c.bundles += 1;
            c.bundle_wire_bytes += (len + s.cfg.outer_overhead) as u64;
        } else {
            c.unaggregated_packets += 1;
            c.unaggregated_bytes += inner_bytes as u64;
        }
        match reason {
            Reason::Timeout => c.sent_on_timeout += 1,
            Reason::Size => c.sent_on_size += 1,
            Reason::Idle => c.sent_on_idle += 1,
            Reason::Flush => c.sent_on_flush += 1,
            Reason::NotAccepted | Reason::Bypass => {}
        }
        if n >= 2 {
            st.bundle_packets.record(n as u64);
        }
        Some(Transmit {
            peer: key,
            len,
            kind,
            dscp: tos >> 2,
            ecn,
            reason,
        })
    }
}
