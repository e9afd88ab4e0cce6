//! What a receiver keeps per source to fill a report block: RFC 3550
//! appendix A.1 (sequence validation with probation, wrap-around cycles),
//! A.3 (expected, lost, fraction lost per interval), A.8 (interarrival
//! jitter in timestamp units), and the last SR seen (for LSR/DLSR).
//!
//! Owns: that state. Must not touch: clocks (arrival times in µs come from
//! the caller), sockets. Fixed size, no allocation.

use super::{
    ntp_mid32, us_to_compact, ReportBlock, SenderInfo, CUMULATIVE_LOST_MAX, CUMULATIVE_LOST_MIN,
};

const RTP_SEQ_MOD: u32 = 1 << 16;
const MAX_DROPOUT: u16 = 3000;
const MAX_MISORDER: u16 = 100;
const MIN_SEQUENTIAL: u32 = 2;

/// The last SR received from a source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SenderReportSeen {
    /// Its sender info.
    pub info: SenderInfo,
    /// Middle 32 bits of its NTP timestamp (the LSR to echo).
    pub lsr: u32,
    /// When it arrived (caller's µs clock).
    pub arrival_us: u64,
}

/// Reception state of one source (appendix A.1 `source`).
#[derive(Clone, Debug)]
pub struct ReceptionStats {
    clock_rate: u32,
    started: bool,
    max_seq: u16,
    cycles: u32,
    base_seq: u32,
    bad_seq: u32,
    probation: u32,
    received: u32,
    expected_prior: u32,
    received_prior: u32,
    last_transit: Option<u32>,
    jitter: f64,
    last_sr: Option<SenderReportSeen>,
}

impl ReceptionStats {
    /// New state for a source with an RTP clock in Hz.
    pub fn new(clock_rate: u32) -> Self {
        ReceptionStats {
            clock_rate: clock_rate.max(1),
            started: false,
            max_seq: 0,
            cycles: 0,
            base_seq: 0,
            bad_seq: RTP_SEQ_MOD + 1,
            probation: MIN_SEQUENTIAL,
            received: 0,
            expected_prior: 0,
            received_prior: 0,
            last_transit: None,
            jitter: 0.0,
            last_sr: None,
        }
    }

    fn init_seq(&mut self, seq: u16) {
        self.base_seq = u32::from(seq);
        self.max_seq = seq;
        self.bad_seq = RTP_SEQ_MOD + 1;
        self.cycles = 0;
        self.received = 0;
        self.received_prior = 0;
        self.expected_prior = 0;
    }

    /// Appendix A.1 `update_seq`: false while the source is on probation or
    /// for a packet that jumped too far (counted only if the jump repeats).
    fn update_seq(&mut self, seq: u16) -> bool {
        if !self.started {
            self.started = true;
            self.init_seq(seq);
            self.max_seq = seq.wrapping_sub(1);
            self.probation = MIN_SEQUENTIAL;
        }
        let udelta = seq.wrapping_sub(self.max_seq);
        if self.probation > 0 {
            if seq == self.max_seq.wrapping_add(1) {
                self.probation -= 1;
                self.max_seq = seq;
                if self.probation == 0 {
                    self.init_seq(seq);
                    self.received += 1;
                    return true;
                }
            } else {
                self.probation = MIN_SEQUENTIAL - 1;
                self.max_seq = seq;
            }
            return false;
        } else if udelta < MAX_DROPOUT {
            if seq < self.max_seq {
                self.cycles = self.cycles.wrapping_add(RTP_SEQ_MOD);
            }
            self.max_seq = seq;
        } else if u32::from(udelta) <= RTP_SEQ_MOD - u32::from(MAX_MISORDER) {
            if u32::from(seq) == self.bad_seq {
                // Two sequential packets after a big jump: the source restarted.
                self.init_seq(seq);
            } else {
                self.bad_seq = (u32::from(seq) + 1) & (RTP_SEQ_MOD - 1);
                return false;
            }
        }
        // else: duplicate or reordered packet, counted.
        self.received = self.received.wrapping_add(1);
        true
    }

    /// Account for one RTP packet; returns whether it was counted.
    pub fn on_rtp(&mut self, seq: u16, rtp_ts: u32, arrival_us: u64) -> bool {
        let counted = self.update_seq(seq);
        if counted {
            // A.8: transit in timestamp units (wrapping), |D| into J.
            let arrival =
                ((u128::from(arrival_us) * u128::from(self.clock_rate)) / 1_000_000) as u32;
            let transit = arrival.wrapping_sub(rtp_ts);
            if let Some(last) = self.last_transit {
                let d = f64::from(transit.wrapping_sub(last) as i32).abs();
                self.jitter += (d - self.jitter) / 16.0;
            }
            self.last_transit = Some(transit);
        }
        counted
    }

    /// Remember a SR from this source (for LSR/DLSR).
    pub fn on_sender_report(&mut self, info: &SenderInfo, arrival_us: u64) {
        self.last_sr = Some(SenderReportSeen {
            info: *info,
            lsr: ntp_mid32(info.ntp),
            arrival_us,
        });
    }

    /// The last SR seen.
    pub fn last_sender_report(&self) -> Option<SenderReportSeen> {
        self.last_sr
    }

    /// Packets counted.
    pub fn received(&self) -> u32 {
        self.received
    }

    /// Extended highest sequence number (cycles + max_seq).
    pub fn extended_max(&self) -> u32 {
        self.cycles.wrapping_add(u32::from(self.max_seq))
    }

    /// Packets expected: extended max - base + 1.
    pub fn expected(&self) -> u32 {
        self.extended_max()
            .wrapping_sub(self.base_seq)
            .wrapping_add(1)
    }

    /// Cumulative lost (expected - received), may be negative with duplicates.
    pub fn cumulative_lost(&self) -> i64 {
        i64::from(self.expected()) - i64::from(self.received)
    }

    /// Jitter in timestamp units.
    pub fn jitter_units(&self) -> f64 {
        self.jitter
    }

    /// Build the report block for `ssrc` at `now_us` (appendix A.3) and
    /// start a new interval. `None` before any packet was counted.
    pub fn report_block(&mut self, ssrc: u32, now_us: u64) -> Option<ReportBlock> {
        if self.received == 0 && self.expected_prior == 0 {
            return None;
        }
        let expected = self.expected();
        let expected_interval = expected.wrapping_sub(self.expected_prior);
        self.expected_prior = expected;
        let received_interval = self.received.wrapping_sub(self.received_prior);
        self.received_prior = self.received;
        let lost_interval = i64::from(expected_interval) - i64::from(received_interval);
        let fraction_lost = if expected_interval == 0 || lost_interval <= 0 {
            0
        } else {
            ((lost_interval << 8) / i64::from(expected_interval)).min(255) as u8
        };
        let cum = self.cumulative_lost().clamp(
            i64::from(CUMULATIVE_LOST_MIN),
            i64::from(CUMULATIVE_LOST_MAX),
        ) as i32;
        let (lsr, dlsr) = match self.last_sr {
            Some(sr) => (sr.lsr, us_to_compact(now_us.saturating_sub(sr.arrival_us))),
            None => (0, 0),
        };
        Some(ReportBlock {
            ssrc,
            fraction_lost,
            cumulative_lost: cum,
            ext_highest_seq: self.extended_max(),
            jitter: self.jitter as u32,
            lsr,
            dlsr,
        })
    }
}
