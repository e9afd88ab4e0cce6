//! Per-stream receive statistics (sans-IO accumulator) and the call-quality
//! assessment: loss, duplicates, reordering, one-way delay (mean, p95, max),
//! RFC 3550 jitter, late loss behind a fixed playout buffer, E-model R and
//! MOS, and the "supported" criterion.
//!
//! Owns: what a receiver concludes from (sequence, RTP timestamp, marker,
//! send time, receive time) tuples. Must not touch: sockets, clocks, files.
//! Its parts: the bounded estimators (delay histogram, loss model; in
//! `measures`) and the assessment of a direction from its summary (in
//! `quality`).
//!
//! Memory is bounded per stream whatever the call length: a 1024-packet
//! duplicate window (128 bytes) and a log-linear delay histogram (2240
//! buckets of u32, about 9 KB, relative resolution 1/64 above 128 µs).
//! Nothing is allocated per packet.
//!
//! Jitter: the RFC 3550 estimator (J += (|D| - J)/16) with S = the probe's
//! send time rather than the RTP timestamp, so only the network's delay
//! variation counts (with a perfectly punctual sender the two are equal).
//! The RTP-timestamp variant is reported too, as `jitter_rtp_ms`. Each is
//! reported three ways: the final value (`jitter_ms`, what an RTCP report at
//! the end of the call would carry), and the mean and maximum of the running
//! estimate over the call (`jitter_mean_ms`, `jitter_max_ms`; see
//! [`crate::jitter`] for the exact definition, Wireshark's). The final value
//! alone forgets a delay spike 16 packets after it ends.
//!
//! Playout rule (fixed playout buffer, reset per talk spurt): the first
//! packet of the stream, and every in-order packet that starts a talk spurt
//! (RTP marker bit, or, with [`StreamStats::with_timestamp_step`], an RTP
//! timestamp jump larger than the sequence jump implies), set the playout delay of the spurt to
//! `its one-way delay + playout buffer`. A packet whose one-way delay exceeds
//! the playout delay in force is *late* (lost for the listener). With CBR
//! (one spurt) this is the classic fixed deadline "first packet's delay +
//! buffer". The mouth-to-ear delay for the E-model is the mean playout delay
//! over on-time packets plus the codec delay (packetization + look-ahead).

use serde::{Deserialize, Serialize};

use crate::jitter::JitterEstimator;

mod measures;
mod quality;
#[cfg(test)]
mod tests;

pub use measures::{DelayHistogram, LossMarkov, MAX_BURST_R};
pub use quality::{
    assess, assess_with, AssessOptions, BurstModel, Criterion, Quality, DEFAULT_MIN_MOS,
};

/// Packets remembered for duplicate detection (must be a multiple of 64).
pub const DUP_WINDOW: usize = 1024;
const WORDS: usize = DUP_WINDOW / 64;

/// One received packet, as the receiver saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxPacket {
    /// RTP sequence number.
    pub seq: u16,
    /// RTP timestamp.
    pub rtp_ts: u32,
    /// RTP marker bit (talk-spurt start).
    pub marker: bool,
    /// Sender's clock at send (µs), from the probe tag.
    pub send_us: u64,
    /// Receiver's clock at receive (µs), same clock as `send_us`.
    pub recv_us: u64,
}

/// What the accumulator decided about one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// First copy, within its playout deadline.
    OnTime,
    /// First copy, after its playout deadline.
    Late,
    /// A copy of a packet already counted.
    Duplicate,
    /// Older than the duplicate window: counted as received and late.
    TooOld,
}

/// Receive-side accumulator for one RTP stream.
#[derive(Clone, Debug)]
pub struct StreamStats {
    playout_us: u64,
    received: u64,
    duplicates: u64,
    reordered: u64,
    too_old: u64,
    late: u64,
    negative_delay: u64,
    highest: Option<i64>,
    highest_ts: u32,
    ts_step: u32,
    base: i64,
    window: [u64; WORDS],
    late_window: [u64; WORDS],
    markov: LossMarkov,
    jitter: JitterEstimator,
    jitter_rtp: JitterEstimator,
    delay_sum_us: u128,
    delay_min_us: u64,
    delay_max_us: u64,
    hist: DelayHistogram,
    playout_delay_us: u64,
    playout_sum_us: u128,
    on_time: u64,
    spurts: u64,
}

impl StreamStats {
    /// New accumulator: RTP clock rate (Hz) and playout buffer (ms).
    pub fn new(clock_rate: u32, playout_ms: f64) -> Self {
        let playout_ms = if playout_ms.is_finite() {
            playout_ms.clamp(0.0, 10_000.0)
        } else {
            0.0
        };
        Self {
            playout_us: (playout_ms * 1000.0).round() as u64,
            received: 0,
            duplicates: 0,
            reordered: 0,
            too_old: 0,
            late: 0,
            negative_delay: 0,
            highest: None,
            highest_ts: 0,
            ts_step: 0,
            base: 0,
            window: [0; WORDS],
            late_window: [0; WORDS],
            markov: LossMarkov::default(),
            jitter: JitterEstimator::new(clock_rate),
            jitter_rtp: JitterEstimator::new(clock_rate),
            delay_sum_us: 0,
            delay_min_us: u64::MAX,
            delay_max_us: 0,
            hist: DelayHistogram::default(),
            playout_delay_us: 0,
            playout_sum_us: 0,
            on_time: 0,
            spurts: 0,
        }
    }

    /// Also detect a talk-spurt start whose marker packet was lost: an
    /// in-order packet whose RTP timestamp advanced more than `step` per
    /// sequence number (a silence). `step` = RTP timestamp units per packet.
    pub fn with_timestamp_step(mut self, step: u32) -> Self {
        self.ts_step = step;
        self
    }

    fn bit(ext: i64) -> (usize, u64) {
        let i = ext.rem_euclid(DUP_WINDOW as i64) as usize;
        (i / 64, 1u64 << (i % 64))
    }

    /// Account for one received packet.
    pub fn on_packet(&mut self, p: &RxPacket) -> Verdict {
        // Extended sequence number relative to the highest seen.
        let (ext, newer) = match self.highest {
            None => (i64::from(p.seq), true),
            Some(h) => {
                let delta = i64::from(p.seq.wrapping_sub(h as u16) as i16);
                (h + delta, delta > 0)
            }
        };
        let delay_us = match p.recv_us.checked_sub(p.send_us) {
            Some(d) => d,
            None => {
                self.negative_delay += 1;
                0
            }
        };
        let first = self.highest.is_none();
        if first {
            self.base = ext;
        }
        let mut silence_gap = false;
        if newer {
            let h = self.highest.unwrap_or(ext - 1);
            if !first && self.ts_step > 0 {
                let ts_adv = i64::from(p.rtp_ts.wrapping_sub(self.highest_ts) as i32);
                silence_gap = ts_adv > (ext - h) * i64::from(self.ts_step);
            }
            self.highest_ts = p.rtp_ts;
            let advance = ext - h;
            if advance as usize >= DUP_WINDOW {
                // Everything in the window leaves it, then a run of packets
                // never seen.
                let mut m = std::mem::take(&mut self.markov);
                self.retire_window(h, &mut m);
                self.markov = m;
                let never_seen = (ext - DUP_WINDOW as i64) - h;
                self.markov.push_run(true, never_seen.max(0) as u64);
                self.window = [0; WORDS];
                self.late_window = [0; WORDS];
            } else {
                for e in h + 1..=ext {
                    let (w, b) = Self::bit(e);
                    let leaving = e - DUP_WINDOW as i64;
                    if leaving >= self.base {
                        let lost = self.window[w] & b == 0 || self.late_window[w] & b != 0;
                        self.markov.push(lost);
                    }
                    self.window[w] &= !b;
                    self.late_window[w] &= !b;
                }
            }
            self.highest = Some(ext);
        } else {
            let h = self.highest.unwrap_or(ext);
            if h - ext >= DUP_WINDOW as i64 {
                // Cannot tell whether it is a duplicate: count it once as
                // received, late (far beyond any playout buffer).
                self.too_old += 1;
                self.count_fresh(p, delay_us);
                self.late += 1;
                return Verdict::TooOld;
            }
        }
        let (w, b) = Self::bit(ext);
        if self.window[w] & b != 0 {
            self.duplicates += 1;
            return Verdict::Duplicate;
        }
        self.window[w] |= b;
        if !newer {
            self.reordered += 1;
        }
        self.count_fresh(p, delay_us);

        if first || (newer && (p.marker || silence_gap)) {
            self.playout_delay_us = delay_us.saturating_add(self.playout_us);
            self.spurts += 1;
        }
        if delay_us > self.playout_delay_us {
            self.late += 1;
            self.late_window[w] |= b;
            Verdict::Late
        } else {
            self.on_time += 1;
            self.playout_sum_us += u128::from(self.playout_delay_us);
            Verdict::OnTime
        }
    }

    /// Feed the loss state of every sequence number still in the window
    /// (oldest first, up to `highest`) to a loss model.
    fn retire_window(&self, highest: i64, m: &mut LossMarkov) {
        let from = (highest - DUP_WINDOW as i64 + 1).max(self.base);
        for x in from..=highest {
            let (w, b) = Self::bit(x);
            m.push(self.window[w] & b == 0 || self.late_window[w] & b != 0);
        }
    }

    /// Loss burstiness so far: G.107 BurstR from a two-state Markov model
    /// of the effective loss (lost or late) in sequence order, over the
    /// sequence numbers from the first to the highest received.
    pub fn burst_ratio(&self) -> f64 {
        let Some(h) = self.highest else {
            return 1.0;
        };
        let mut m = self.markov.clone();
        self.retire_window(h, &mut m);
        m.burst_r()
    }

    fn count_fresh(&mut self, p: &RxPacket, delay_us: u64) {
        self.received += 1;
        self.jitter.update_send_time(p.send_us, p.recv_us);
        self.jitter_rtp.update(p.rtp_ts, p.recv_us);
        self.delay_sum_us += u128::from(delay_us);
        self.delay_min_us = self.delay_min_us.min(delay_us);
        self.delay_max_us = self.delay_max_us.max(delay_us);
        self.hist.record(delay_us);
    }

    /// Unique packets received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The summary a receiver reports.
    pub fn summary(&self) -> ReceiveSummary {
        let ms = |us: f64| us / 1000.0;
        let any = self.received > 0;
        ReceiveSummary {
            received: self.received,
            duplicates: self.duplicates,
            reordered: self.reordered,
            too_old: self.too_old,
            late: self.late,
            negative_delay: self.negative_delay,
            talk_spurts: self.spurts,
            delay_min_ms: any.then(|| ms(self.delay_min_us as f64)),
            delay_mean_ms: any.then(|| ms(self.delay_sum_us as f64 / self.received as f64)),
            delay_p50_ms: self
                .hist
                .quantile(0.5)
                .map(|v| ms(v.min(self.delay_max_us as f64))),
            delay_p95_ms: self
                .hist
                .quantile(0.95)
                .map(|v| ms(v.min(self.delay_max_us as f64))),
            delay_max_ms: any.then(|| ms(self.delay_max_us as f64)),
            jitter_ms: self.jitter.jitter_ms(),
            jitter_mean_ms: self.jitter.mean_ms(),
            jitter_max_ms: self.jitter.max_ms(),
            jitter_rtp_ms: self.jitter_rtp.jitter_ms(),
            jitter_rtp_mean_ms: self.jitter_rtp.mean_ms(),
            jitter_rtp_max_ms: self.jitter_rtp.max_ms(),
            burst_r: self.burst_ratio(),
            playout_ms: ms(self.playout_us as f64),
            playout_delay_ms: (self.on_time > 0)
                .then(|| ms(self.playout_sum_us as f64 / self.on_time as f64)),
        }
    }
}

/// Raw receive statistics of one stream (what `airpack voip` writes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct ReceiveSummary {
    /// Unique packets received (duplicates excluded).
    pub received: u64,
    /// Extra copies received.
    pub duplicates: u64,
    /// Unique packets that arrived after a higher sequence number.
    pub reordered: u64,
    /// Packets older than the duplicate window (counted received and late).
    pub too_old: u64,
    /// Unique packets that missed their playout deadline.
    pub late: u64,
    /// Packets whose receive time preceded their send time (clock problem).
    pub negative_delay: u64,
    /// Talk spurts seen (playout-delay resets).
    pub talk_spurts: u64,
    /// One-way network delay: minimum (ms).
    pub delay_min_ms: Option<f64>,
    /// One-way network delay: mean (ms).
    pub delay_mean_ms: Option<f64>,
    /// One-way network delay: median (ms, histogram resolution 1/64).
    #[serde(default)]
    pub delay_p50_ms: Option<f64>,
    /// One-way network delay: 95th percentile (ms, histogram resolution 1/64).
    pub delay_p95_ms: Option<f64>,
    /// One-way network delay: maximum (ms).
    pub delay_max_ms: Option<f64>,
    /// Interarrival jitter at the end of the call (ms): the RFC 3550
    /// estimator over the probe's send times, i.e. network jitter only.
    pub jitter_ms: f64,
    /// Mean of that estimator over the call (ms): the average of its value
    /// after every packet but the first (Wireshark's "Mean Jitter").
    #[serde(default)]
    pub jitter_mean_ms: f64,
    /// Largest value of that estimator during the call (ms).
    #[serde(default)]
    pub jitter_max_ms: f64,
    /// The RFC 3550 estimator over RTP timestamps, as a phone would report
    /// it (includes the sender's own scheduling lateness), at the end.
    #[serde(default)]
    pub jitter_rtp_ms: f64,
    /// Mean of the RTP-timestamp estimator over the call (ms); what
    /// `tshark -z rtp,streams` reports as "Mean Jitter" from a capture at the
    /// receiver.
    #[serde(default)]
    pub jitter_rtp_mean_ms: f64,
    /// Largest value of the RTP-timestamp estimator (ms; tshark's "Max Jitter").
    #[serde(default)]
    pub jitter_rtp_max_ms: f64,
    /// Measured burst ratio of the effective loss (1 = random, see
    /// [`LossMarkov::burst_r`]); used by the E-model with [`BurstModel::Measured`].
    #[serde(default = "one")]
    pub burst_r: f64,
    /// Playout buffer used (ms).
    pub playout_ms: f64,
    /// Mean playout delay (network delay of the spurt's first packet +
    /// buffer) over on-time packets (ms); `None` if none was on time.
    pub playout_delay_ms: Option<f64>,
}

fn one() -> f64 {
    1.0
}
