//! Local recovery and redundant-retransmission drop of the gateway's TCP
//! Improvement Module (seed 003, section 5.2, Algorithm 2), pure.
//!
//! Owns: a bounded buffer of each flow's recent data segments (whole IP
//! packets, as they went into the mesh), the duplicate-ACK count of the
//! client's ACKs, and the decisions "retransmit this segment into the mesh
//! now" (third duplicate ACK) and "this retransmission from the server is
//! redundant". Must not touch: flow identity and sequence state
//! ([`super::tcp_flow`]), header bytes, clocks.
//!
//! Memory: `segments` buffers of `max_packet` bytes per flow slot, allocated
//! when the slot is first used and reused after; so at most
//! `max_flows * segments * max_packet` bytes in all. No allocation per packet.
//!
//! Redundant retransmission drop is conservative, so a connection never
//! stalls because of it: only a data segment (more than one byte, so TCP
//! keep-alive and zero-window probes always pass) that lies entirely at or
//! below the highest ACK the client sent *and* that the gateway already
//! forwarded once (it is in the buffer, or below it) is redundant. The
//! caller should answer a drop by forwarding the client's latest ACK to the
//! server again ([`Recovery::redundant`] says so), since the server only
//! retransmits when it did not see that ACK.

use super::tcp_flow::{seq_le, seq_lt};

/// Buffer settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveryConfig {
    /// Flow slots (as in the flow table).
    pub max_flows: usize,
    /// Segments kept per flow.
    pub segments: usize,
    /// Largest packet kept (bytes); larger ones are not buffered.
    pub max_packet: usize,
    /// Duplicate ACKs that trigger a local retransmission (the third).
    pub dupack_threshold: u32,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            max_flows: 4096,
            segments: 8,
            max_packet: 1500,
            dupack_threshold: 3,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Meta {
    used: bool,
    seq: u32,
    end: u32,
    len: usize,
}

#[derive(Debug, Default)]
struct Slot {
    bytes: Vec<u8>,
    meta: Vec<Meta>,
    last_ack: Option<u32>,
    /// The window of that ACK (a duplicate must repeat it, RFC 5681).
    last_window: u16,
    dupacks: u32,
    retransmitted_for: Option<u32>,
}

/// Per-flow segment buffers and duplicate-ACK counters.
#[derive(Debug)]
pub struct Recovery {
    cfg: RecoveryConfig,
    slots: Vec<Slot>,
}

impl Recovery {
    /// Empty buffers for `max_flows` slots (allocated on first use).
    pub fn new(cfg: RecoveryConfig) -> Self {
        let cfg = RecoveryConfig {
            segments: cfg.segments.max(1),
            dupack_threshold: cfg.dupack_threshold.max(1),
            ..cfg
        };
        Recovery {
            cfg,
            slots: (0..cfg.max_flows).map(|_| Slot::default()).collect(),
        }
    }

    /// Forget a slot's segments and counters (its flow ended).
    pub fn clear(&mut self, slot: usize) {
        if let Some(s) = self.slots.get_mut(slot) {
            s.meta.iter_mut().for_each(|m| m.used = false);
            s.last_ack = None;
            s.dupacks = 0;
            s.retransmitted_for = None;
        }
    }

    /// Segments buffered for a slot.
    pub fn buffered(&self, slot: usize) -> usize {
        self.slots
            .get(slot)
            .map_or(0, |s| s.meta.iter().filter(|m| m.used).count())
    }

    /// A data segment (`packet`, sequence `seq`, `seq_len` bytes of
    /// sequence space) goes into the mesh: keep a copy if there is room
    /// (acknowledged segments free theirs).
    pub fn on_data(&mut self, slot: usize, seq: u32, seq_len: u32, packet: &[u8]) {
        let (n, max) = (self.cfg.segments, self.cfg.max_packet);
        let Some(s) = self.slots.get_mut(slot) else {
            return;
        };
        if seq_len == 0 || packet.len() > max {
            return;
        }
        if s.meta.is_empty() {
            s.bytes = vec![0; n * max];
            s.meta = vec![Meta::default(); n];
        }
        // A copy of the same segment replaces the old one; otherwise a free
        // place. When every place holds an unacknowledged segment the new
        // one is not kept: the oldest unacknowledged segments are the ones
        // a duplicate ACK asks for (replacing them, as a ring would, loses
        // exactly the segment at the ACK once more than `segments` were sent
        // after it, which a deep pacer queue behind the gateway allows).
        let Some(i) = s
            .meta
            .iter()
            .position(|m| m.used && m.seq == seq)
            .or_else(|| s.meta.iter().position(|m| !m.used))
        else {
            return;
        };
        s.bytes[i * max..i * max + packet.len()].copy_from_slice(packet);
        s.meta[i] = Meta {
            used: true,
            seq,
            end: seq.wrapping_add(seq_len),
            len: packet.len(),
        };
    }

    /// A pure ACK from the client (no payload, no SYN/FIN) acknowledging
    /// `ack` with the advertised `window` (as the client sent it), `sacked`
    /// when it carries a SACK block above `ack`: frees acknowledged segments
    /// and counts duplicates. A duplicate repeats the ACK and either SACKs
    /// data above it (the receiver holds data past a hole) or repeats the
    /// window too (RFC 5681, without SACK): an ACK that only moves the
    /// window is a window update, not a sign of loss. On the threshold-th
    /// duplicate, returns the buffered packet starting at `ack` to send
    /// into the mesh again (once per loss). `dsack_only`: the ACK's only
    /// SACK blocks lie at or below `ack` (RFC 2883 D-SACK: a duplicate
    /// arrived, nothing is missing): never a duplicate.
    pub fn on_ack(
        &mut self,
        slot: usize,
        ack: u32,
        window: u16,
        sacked: bool,
        dsack_only: bool,
    ) -> Option<&[u8]> {
        let (max, threshold) = (self.cfg.max_packet, self.cfg.dupack_threshold);
        let s = self.slots.get_mut(slot)?;
        for m in s.meta.iter_mut().filter(|m| m.used && seq_le(m.end, ack)) {
            m.used = false;
        }
        match s.last_ack {
            Some(last) if last == ack && dsack_only => return None,
            Some(last) if last == ack && window != s.last_window && !sacked => {
                s.last_window = window;
                return None;
            }
            Some(last) if last == ack => s.dupacks += 1,
            Some(last) if seq_lt(ack, last) => return None, // an old ACK, reordered
            _ => {
                s.last_ack = Some(ack);
                s.last_window = window;
                s.dupacks = 0;
                s.retransmitted_for = None;
                return None;
            }
        }
        if s.dupacks < threshold || s.retransmitted_for == Some(ack) {
            return None;
        }
        let i = s.meta.iter().position(|m| m.used && m.seq == ack)?;
        s.retransmitted_for = Some(ack);
        let m = s.meta[i];
        Some(&s.bytes[i * max..i * max + m.len])
    }

    /// Whether a data segment from the server is a redundant retransmission:
    /// more than one byte, entirely at or below the client's highest ACK
    /// `ack_max`, and not above what was already forwarded (`snd_max`).
    pub fn redundant(seq: u32, payload_len: usize, ack_max: u32, snd_max: u32) -> bool {
        if payload_len <= 1 {
            return false;
        }
        let end = seq.wrapping_add(payload_len as u32);
        seq_le(end, ack_max) && seq_le(end, snd_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pkt(tag: u8, len: usize) -> Vec<u8> {
        vec![tag; len]
    }

    #[test]
    fn third_duplicate_ack_retransmits_the_missing_segment_once() {
        let mut r = Recovery::new(RecoveryConfig {
            max_flows: 2,
            ..RecoveryConfig::default()
        });
        let base = u32::MAX - 1000; // across the wrap
        for k in 0..4u32 {
            r.on_data(1, base.wrapping_add(k * 1000), 1000, &pkt(k as u8, 1040));
        }
        assert_eq!(r.buffered(1), 4);
        // Segment 1 is lost: ACKs for 1000 repeat.
        let lost = base.wrapping_add(1000);
        assert!(
            r.on_ack(1, lost, 100, false, false).is_none(),
            "first ACK frees segment 0"
        );
        assert_eq!(r.buffered(1), 3);
        // Window updates (same ACK, another window) are not duplicates.
        assert!(r.on_ack(1, lost, 200, false, false).is_none());
        assert!(r.on_ack(1, lost, 300, false, false).is_none());
        assert!(r.on_ack(1, lost, 100, false, false).is_none());
        assert!(r.on_ack(1, lost, 100, false, false).is_none());
        // With SACK blocks above the hole, a changing window still counts;
        // a D-SACK alone (a duplicate arrived) never does.
        assert!(r.on_ack(1, lost, 120, true, false).is_none());
        assert!(r.on_ack(1, lost, 100, false, true).is_none());
        assert!(r.on_ack(1, lost, 100, false, true).is_none());
        assert_eq!(
            r.on_ack(1, lost, 100, false, false),
            Some(&pkt(1, 1040)[..]),
            "third duplicate"
        );
        assert!(
            r.on_ack(1, lost, 100, false, false).is_none(),
            "once per loss"
        );
        // The hole is filled: a new ACK frees everything below it.
        assert!(r
            .on_ack(1, base.wrapping_add(4000), 100, false, false)
            .is_none());
        assert_eq!(r.buffered(1), 0);
        // An old, reordered ACK does nothing.
        assert!(r.on_ack(1, lost, 100, false, false).is_none());
        assert!(
            r.on_ack(9, lost, 100, false, false).is_none(),
            "unknown slot"
        );
    }

    #[test]
    fn buffer_is_bounded_and_oversized_packets_are_not_kept() {
        let cfg = RecoveryConfig {
            max_flows: 1,
            segments: 3,
            max_packet: 100,
            dupack_threshold: 3,
        };
        let mut r = Recovery::new(cfg);
        for k in 0..10u32 {
            r.on_data(0, k * 50, 50, &pkt(k as u8, 90));
        }
        assert_eq!(r.buffered(0), 3);
        r.on_data(0, 10_000, 50, &pkt(0, 101));
        assert_eq!(r.buffered(0), 3);
        // The oldest three remain (seq 0, 50, 100), the ones an ACK asks
        // for: the ACK of 50 frees seq 0, and its duplicates get 50 back.
        for _ in 0..3 {
            assert!(r.on_ack(0, 50, 100, false, false).is_none());
        }
        assert_eq!(r.buffered(0), 2);
        assert_eq!(r.on_ack(0, 50, 100, false, false), Some(&pkt(1, 90)[..]));
        // The freed place takes the next segment.
        r.on_data(0, 500, 50, &pkt(10, 90));
        assert_eq!(r.buffered(0), 3);
        r.clear(0);
        assert_eq!(r.buffered(0), 0);
        assert!(r.on_ack(0, 350, 100, false, false).is_none());
    }

    #[test]
    fn redundant_retransmissions_but_never_probes() {
        assert!(Recovery::redundant(1000, 500, 2000, 3000));
        assert!(
            !Recovery::redundant(1000, 500, 1400, 3000),
            "partly unacknowledged"
        );
        assert!(
            !Recovery::redundant(1999, 1, 2000, 3000),
            "keep-alive probe"
        );
        assert!(!Recovery::redundant(2000, 0, 2000, 3000), "pure ACK");
        assert!(
            !Recovery::redundant(1000, 500, 2000, 1200),
            "beyond what was forwarded"
        );
        assert!(
            Recovery::redundant(u32::MAX - 100, 200, 150, 150),
            "across the wrap"
        );
    }

    proptest! {
        #[test]
        fn never_more_than_the_bound(ops in proptest::collection::vec((0usize..3, any::<u32>(), 0u32..3000, 0usize..2000, any::<bool>()), 0..200)) {
            let cfg = RecoveryConfig { max_flows: 3, segments: 4, max_packet: 1500, dupack_threshold: 3 };
            let mut r = Recovery::new(cfg);
            for (slot, seq, n, len, ack) in ops {
                if ack {
                    if let Some(p) = r.on_ack(slot, seq, 100, false, false) {
                        prop_assert!(p.len() <= 1500);
                    }
                } else {
                    r.on_data(slot, seq, n, &vec![1u8; len]);
                }
                prop_assert!(r.buffered(slot) <= 4);
            }
        }
    }
}
