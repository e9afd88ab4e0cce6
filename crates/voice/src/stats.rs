//! Per-stream receive statistics (sans-IO accumulator) and the call-quality
//! assessment: loss, duplicates, reordering, one-way delay (mean, p95, max),
//! RFC 3550 jitter, late loss behind a fixed playout buffer, E-model R and
//! MOS, and the "supported" criterion.
//!
//! Owns: what a receiver concludes from (sequence, RTP timestamp, marker,
//! send time, receive time) tuples. Must not touch: sockets, clocks, files.
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

use crate::codec::Profile;
use crate::emodel::{self, Impairments};
use crate::jitter::JitterEstimator;

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

/// Log-linear histogram of µs values: exact below 128, then 64 buckets per
/// power of two up to 2^40 µs (larger values land in the last bucket).
#[derive(Clone)]
pub struct DelayHistogram {
    counts: Box<[u32; HIST_BUCKETS]>,
    total: u64,
}

const HIST_BUCKETS: usize = 128 + 33 * 64;

impl Default for DelayHistogram {
    fn default() -> Self {
        Self { counts: Box::new([0; HIST_BUCKETS]), total: 0 }
    }
}

impl std::fmt::Debug for DelayHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayHistogram").field("total", &self.total).finish()
    }
}

impl DelayHistogram {
    fn index(v: u64) -> usize {
        if v < 128 {
            return v as usize;
        }
        let k = 63 - v.leading_zeros() as usize; // 7..=63
        if k >= 40 {
            return HIST_BUCKETS - 1;
        }
        let shift = k - 6;
        128 + (k - 7) * 64 + ((v >> shift) as usize - 64)
    }

    /// Lowest value and width of a bucket.
    fn bounds(i: usize) -> (u64, u64) {
        if i < 128 {
            return (i as u64, 1);
        }
        let k = (i - 128) / 64 + 7;
        let sub = ((i - 128) % 64 + 64) as u64;
        (sub << (k - 6), 1u64 << (k - 6))
    }

    /// Count one value.
    pub fn record(&mut self, v: u64) {
        let c = &mut self.counts[Self::index(v)];
        *c = c.saturating_add(1);
        self.total += 1;
    }

    /// Number of values recorded.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The q-quantile (0 < q <= 1): the middle of the bucket holding the
    /// value of rank ceil(q n). `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let q = if q.is_finite() { q.clamp(0.0, 1.0) } else { 1.0 };
        let rank = ((q * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                let (lo, w) = Self::bounds(i);
                return Some(lo as f64 + (w as f64 - 1.0) / 2.0);
            }
        }
        None
    }
}

/// Two-state (received / lost) Markov loss model fed in sequence order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LossMarkov {
    prev_lost: Option<bool>,
    /// Transitions out of "received", and how many went to "lost".
    from_received: u64,
    received_to_lost: u64,
    /// Transitions out of "lost", and how many went to "received".
    from_lost: u64,
    lost_to_received: u64,
}

/// Largest BurstR reported (a loss that never recovers).
pub const MAX_BURST_R: f64 = 100.0;

impl LossMarkov {
    /// Next packet's state.
    pub fn push(&mut self, lost: bool) {
        if let Some(prev) = self.prev_lost {
            if prev {
                self.from_lost += 1;
                self.lost_to_received += u64::from(!lost);
            } else {
                self.from_received += 1;
                self.received_to_lost += u64::from(lost);
            }
        }
        self.prev_lost = Some(lost);
    }

    /// `n` packets in the same state.
    pub fn push_run(&mut self, lost: bool, n: u64) {
        if n == 0 {
            return;
        }
        self.push(lost);
        if lost {
            self.from_lost += n - 1;
        } else {
            self.from_received += n - 1;
        }
    }

    /// BurstR = 1 / (p + q) with p = P(lost | received before) and
    /// q = P(received | lost before) (ITU-T G.107 annex, G.113); 1 for
    /// random loss, > 1 for bursty loss. 1 when there is no loss.
    pub fn burst_r(&self) -> f64 {
        if self.received_to_lost == 0 && self.from_lost == 0 {
            return 1.0;
        }
        let p = if self.from_received == 0 { 1.0 } else { self.received_to_lost as f64 / self.from_received as f64 };
        let q = if self.from_lost == 0 { 1.0 } else { self.lost_to_received as f64 / self.from_lost as f64 };
        if p + q <= 0.0 {
            return MAX_BURST_R;
        }
        (1.0 / (p + q)).min(MAX_BURST_R)
    }
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
        let playout_ms = if playout_ms.is_finite() { playout_ms.clamp(0.0, 10_000.0) } else { 0.0 };
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
            delay_p50_ms: self.hist.quantile(0.5).map(|v| ms(v.min(self.delay_max_us as f64))),
            delay_p95_ms: self.hist.quantile(0.95).map(|v| ms(v.min(self.delay_max_us as f64))),
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

/// Which BurstR the E-model uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BurstModel {
    /// BurstR = 1: loss treated as random (the usual VoIP-study setting).
    #[default]
    Random,
    /// BurstR measured from the loss pattern (G.107's bursty-loss form).
    Measured,
}

/// When a call direction counts as supported.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Criterion {
    /// MOS from the E-model at least `min_mos` (default 3.6, i.e. R >= 70).
    #[default]
    Mos,
    /// The seeds' rule: network loss < 4 % and mean delay + mean jitter
    /// (`jitter_mean_ms`, over the whole call) < 150 ms.
    Seeds,
}

/// Default MOS threshold for [`Criterion::Mos`].
pub const DEFAULT_MIN_MOS: f64 = 3.6;

/// Quality of one call direction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quality {
    /// Packets the sender produced.
    pub sent: u64,
    /// Unique packets received.
    pub received: u64,
    /// Network loss: (sent - received) / sent, percent.
    pub loss_pct: f64,
    /// Late loss behind the playout buffer, percent of sent.
    pub late_pct: f64,
    /// Loss the listener hears (network + late), percent; E-model Ppl.
    pub effective_loss_pct: f64,
    /// Duplicate copies received.
    pub duplicates: u64,
    /// Reordered packets.
    pub reordered: u64,
    /// Mean one-way network delay (ms).
    pub delay_ms: Option<f64>,
    /// Median one-way network delay (ms).
    #[serde(default)]
    pub delay_p50_ms: Option<f64>,
    /// 95th percentile one-way network delay (ms).
    pub delay_p95_ms: Option<f64>,
    /// Maximum one-way network delay (ms).
    pub delay_max_ms: Option<f64>,
    /// Network interarrival jitter at the end of the call (ms, RFC 3550
    /// estimator over send times).
    pub jitter_ms: f64,
    /// Mean of that estimator over the call (ms).
    #[serde(default)]
    pub jitter_mean_ms: f64,
    /// Largest value of that estimator during the call (ms).
    #[serde(default)]
    pub jitter_max_ms: f64,
    /// Mouth-to-ear delay used by the E-model (ms).
    pub mouth_to_ear_ms: f64,
    /// BurstR used by the E-model.
    #[serde(default = "one")]
    pub burst_r: f64,
    /// E-model rating.
    pub r: f64,
    /// MOS from R.
    pub mos: f64,
    /// Whether this direction meets the criterion.
    pub supported: bool,
}

/// Assess one direction from the sender's count and the receiver's summary.
///
/// Rules: `received` is capped at `sent`; a direction with `sent == 0` is not
/// supported (nothing shows its quality). The E-model uses Ppl = effective
/// loss, BurstR = 1 (random loss; see [`assess_with`]), d = mean playout delay + codec delay (if no packet was
/// on time, d = buffer + codec delay; the loss then dominates).
pub fn assess(
    sent: u64,
    rx: &ReceiveSummary,
    profile: &Profile,
    criterion: Criterion,
    min_mos: f64,
) -> Quality {
    assess_with(sent, rx, profile, &AssessOptions { criterion, min_mos, burst: BurstModel::Random })
}

/// Options of [`assess_with`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AssessOptions {
    /// Support criterion.
    pub criterion: Criterion,
    /// MOS threshold for [`Criterion::Mos`].
    pub min_mos: f64,
    /// BurstR used by the E-model.
    pub burst: BurstModel,
}

/// [`assess`] with the BurstR model chosen: `Measured` uses the receiver's
/// `burst_r` (clamped to [1, 100]) in Ie,eff.
pub fn assess_with(sent: u64, rx: &ReceiveSummary, profile: &Profile, opt: &AssessOptions) -> Quality {
    let (criterion, min_mos) = (opt.criterion, opt.min_mos);
    let burst_r = match opt.burst {
        BurstModel::Random => 1.0,
        BurstModel::Measured if rx.burst_r.is_finite() => rx.burst_r.clamp(1.0, MAX_BURST_R),
        BurstModel::Measured => 1.0,
    };
    let received = rx.received.min(sent);
    let lost = sent - received;
    let late = rx.late.min(received);
    let pct = |n: u64| if sent == 0 { 0.0 } else { 100.0 * n as f64 / sent as f64 };
    let loss_pct = pct(lost);
    let late_pct = pct(late);
    let effective_loss_pct = pct(lost + late);
    let params = profile.params();
    let mouth_to_ear_ms = rx.playout_delay_ms.unwrap_or(rx.playout_ms) + profile.codec_delay_ms();
    let r = emodel::r_factor(
        emodel::R0_DEFAULT,
        &Impairments {
            delay_ms: mouth_to_ear_ms,
            ie: params.ie,
            bpl: params.bpl,
            loss_pct: effective_loss_pct,
            burst_r,
        },
    );
    let mos = emodel::mos_from_r(r);
    let supported = sent > 0
        && match criterion {
            Criterion::Mos => mos >= min_mos,
            Criterion::Seeds => {
                loss_pct < 4.0
                    && rx.delay_mean_ms.is_some_and(|d| d + rx.jitter_mean_ms < 150.0)
            }
        };
    Quality {
        sent,
        received,
        loss_pct,
        late_pct,
        effective_loss_pct,
        duplicates: rx.duplicates,
        reordered: rx.reordered,
        delay_ms: rx.delay_mean_ms,
        delay_p50_ms: rx.delay_p50_ms,
        delay_p95_ms: rx.delay_p95_ms,
        delay_max_ms: rx.delay_max_ms,
        jitter_ms: rx.jitter_ms,
        jitter_mean_ms: rx.jitter_mean_ms,
        jitter_max_ms: rx.jitter_max_ms,
        mouth_to_ear_ms,
        burst_r,
        r,
        mos,
        supported,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Codec;

    const T0: u64 = 10_000_000;

    /// Packet k of a 20 ms stream, sent at T0 + 20k ms, with a network delay.
    fn pkt(k: u16, delay_ms: u64) -> RxPacket {
        let send = T0 + 20_000 * u64::from(k);
        RxPacket { seq: k.wrapping_add(65000), rtp_ts: 160 * u32::from(k), marker: k == 0, send_us: send, recv_us: send + delay_ms * 1000 }
    }

    fn g729() -> Profile {
        Codec::G729.profile(20).unwrap()
    }

    #[test]
    fn clean_stream_is_perfect_and_supported() {
        let mut s = StreamStats::new(8000, 60.0);
        for k in 0..500 {
            assert_eq!(s.on_packet(&pkt(k, 10)), Verdict::OnTime);
        }
        let sum = s.summary();
        assert_eq!((sum.received, sum.late, sum.duplicates, sum.reordered), (500, 0, 0, 0));
        assert_eq!(sum.delay_mean_ms, Some(10.0));
        assert_eq!(sum.delay_max_ms, Some(10.0));
        assert_eq!(sum.jitter_ms, 0.0);
        assert_eq!(sum.playout_delay_ms, Some(70.0));
        let q = assess(500, &sum, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
        assert_eq!(q.loss_pct, 0.0);
        assert_eq!(q.mouth_to_ear_ms, 95.0); // 10 + 60 + 20 + 5
        let expect_r = 93.2 - 0.024 * 95.0 - 11.0;
        assert!((q.r - expect_r).abs() < 1e-9);
        assert!(q.mos > 3.9 && q.supported, "{q:?}");
    }

    #[test]
    fn loss_is_sent_minus_unique_received() {
        let mut s = StreamStats::new(8000, 60.0);
        for k in 0..100u16 {
            if k % 10 != 3 {
                s.on_packet(&pkt(k, 5));
            }
        }
        let q = assess(100, &s.summary(), &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
        assert_eq!((q.received, q.loss_pct), (90, 10.0));
        assert!(!q.supported, "10% loss on G.729 must fail: {q:?}");
        // The seeds criterion too (loss >= 4 %).
        let q = assess(100, &s.summary(), &g729(), Criterion::Seeds, DEFAULT_MIN_MOS);
        assert!(!q.supported);
        // 2 % loss passes the seeds' rule.
        let q = assess(92, &s.summary(), &g729(), Criterion::Seeds, DEFAULT_MIN_MOS);
        assert!(q.loss_pct < 4.0 && q.supported, "{q:?}");
    }

    #[test]
    fn duplicates_and_reordering_are_counted_not_double_counted() {
        let mut s = StreamStats::new(8000, 60.0);
        let order = [0u16, 1, 3, 2, 2, 4, 3, 5, 1];
        let verdicts: Vec<_> = order.iter().map(|&k| s.on_packet(&pkt(k, 5))).collect();
        assert_eq!(verdicts[3], Verdict::OnTime); // 2 after 3: reordered but on time
        assert_eq!(verdicts[4], Verdict::Duplicate);
        assert_eq!(verdicts[6], Verdict::Duplicate);
        assert_eq!(verdicts[8], Verdict::Duplicate);
        let sum = s.summary();
        assert_eq!((sum.received, sum.duplicates, sum.reordered), (6, 3, 1));
        let q = assess(6, &sum, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
        assert_eq!(q.loss_pct, 0.0);
    }

    #[test]
    fn late_packets_behind_the_fixed_playout_deadline() {
        // First packet: 10 ms -> deadline 70 ms. Packets at 70 are on time,
        // 71 and 200 are late.
        let mut s = StreamStats::new(8000, 60.0);
        assert_eq!(s.on_packet(&pkt(0, 10)), Verdict::OnTime);
        assert_eq!(s.on_packet(&pkt(1, 70)), Verdict::OnTime);
        assert_eq!(s.on_packet(&pkt(2, 71)), Verdict::Late);
        assert_eq!(s.on_packet(&pkt(3, 200)), Verdict::Late);
        assert_eq!(s.on_packet(&pkt(4, 5)), Verdict::OnTime);
        let sum = s.summary();
        assert_eq!((sum.received, sum.late), (5, 2));
        let q = assess(5, &sum, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
        assert_eq!((q.loss_pct, q.late_pct, q.effective_loss_pct), (0.0, 40.0, 40.0));
        assert!(!q.supported);
        // The seeds' criterion ignores late loss: mean delay 71.2 + jitter.
        let q = assess(5, &sum, &g729(), Criterion::Seeds, DEFAULT_MIN_MOS);
        assert!(q.supported, "{q:?}");
    }

    #[test]
    fn a_marker_bit_resets_the_playout_delay_per_talk_spurt() {
        let mut s = StreamStats::new(8000, 60.0);
        assert_eq!(s.on_packet(&pkt(0, 10)), Verdict::OnTime); // deadline 70
        let mut p = pkt(1, 100);
        p.marker = true; // new talk spurt with 100 ms delay: deadline 160
        assert_eq!(s.on_packet(&p), Verdict::OnTime);
        assert_eq!(s.on_packet(&pkt(2, 150)), Verdict::OnTime);
        assert_eq!(s.on_packet(&pkt(3, 161)), Verdict::Late);
        let sum = s.summary();
        assert_eq!(sum.talk_spurts, 2);
        // on-time playout delays: 70, 160, 160
        assert!((sum.playout_delay_ms.unwrap() - 130.0).abs() < 1e-9);
        // A lost marker packet: a timestamp jump still starts a spurt when
        // the step is known.
        let mut t = StreamStats::new(8000, 60.0).with_timestamp_step(160);
        let mut u = StreamStats::new(8000, 60.0);
        for st in [&mut t, &mut u] {
            assert_eq!(st.on_packet(&pkt(0, 10)), Verdict::OnTime);
            assert_eq!(st.on_packet(&pkt(2, 10)), Verdict::OnTime); // one lost, no silence
        }
        assert_eq!(t.summary().talk_spurts, 1);
        // packet 3 sent after 1 s of silence: seq +1, timestamp +8160
        let mut q = pkt(3, 100);
        q.rtp_ts += 8000;
        q.send_us += 1_000_000;
        q.recv_us += 1_000_000;
        assert_eq!(t.on_packet(&q), Verdict::OnTime);
        assert_eq!(u.on_packet(&q), Verdict::Late);
        assert_eq!((t.summary().talk_spurts, u.summary().talk_spurts), (2, 1));
        // A reordered old packet with a marker does not reset it.
        let mut old = pkt(0, 1);
        old.seq = old.seq.wrapping_sub(5);
        old.marker = true;
        s.on_packet(&old);
        assert_eq!(s.summary().talk_spurts, 2);
    }

    #[test]
    fn sender_lateness_is_not_network_jitter() {
        let mut s = StreamStats::new(8000, 60.0);
        for k in 0..50u16 {
            let mut p = pkt(k, 4);
            if k % 5 == 0 {
                // sent 3 ms behind schedule; same 4 ms network delay
                p.send_us += 3_000;
                p.recv_us += 3_000;
            }
            assert_eq!(s.on_packet(&p), Verdict::OnTime);
        }
        let sum = s.summary();
        assert_eq!(sum.jitter_ms, 0.0);
        assert!(sum.jitter_rtp_ms > 0.3, "{}", sum.jitter_rtp_ms);
    }

    #[test]
    fn burst_ratio_of_random_and_bursty_loss() {
        // No loss: 1.
        let mut s = StreamStats::new(8000, 60.0);
        for k in 0..3000u16 {
            s.on_packet(&pkt(k, 5));
        }
        assert_eq!(s.summary().burst_r, 1.0);

        // Isolated losses every 10th packet: p = 1/9, q = 1 -> BurstR = 0.9
        // (spread more evenly than random); clamped to 1 when used.
        let mut s = StreamStats::new(8000, 60.0);
        for k in 0..3000u16 {
            if k % 10 != 5 {
                s.on_packet(&pkt(k, 5));
            }
        }
        let b = s.summary().burst_r;
        assert!((b - 0.9).abs() < 0.01, "{b}");

        // Same 10 % loss in bursts of 5: p = 1/45, q = 1/5 -> BurstR = 4.5.
        let mut s = StreamStats::new(8000, 60.0);
        for k in 0..3000u16 {
            if k % 50 >= 5 {
                s.on_packet(&pkt(k, 5));
            }
        }
        let sum = s.summary();
        assert!((sum.burst_r - 4.5).abs() < 0.05, "{}", sum.burst_r);
        let random = assess(3000, &sum, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
        let opts = AssessOptions { criterion: Criterion::Mos, min_mos: DEFAULT_MIN_MOS, burst: BurstModel::Measured };
        let bursty = assess_with(3000, &sum, &g729(), &opts);
        assert!((random.loss_pct - bursty.loss_pct).abs() < 1e-12);
        assert_eq!(random.burst_r, 1.0);
        assert!((bursty.burst_r - 4.5).abs() < 0.05);
        assert!(bursty.r < random.r - 5.0, "bursty {} random {}", bursty.r, random.r);

        // Independent 5 % loss (deterministic LCG): BurstR close to 1.
        let mut s = StreamStats::new(8000, 60.0);
        let mut x: u64 = 12345;
        for k in 0..60000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if (x >> 33) % 100 >= 5 {
                s.on_packet(&pkt(k as u16, 5));
            }
        }
        let b = s.summary().burst_r;
        assert!((b - 1.0).abs() < 0.1, "{b}");
    }

    #[test]
    fn burst_ratio_counts_late_packets_and_long_gaps() {
        // Late packets are effective loss: 5-packet bursts of lateness.
        let mut s = StreamStats::new(8000, 60.0);
        for k in 0..3000u16 {
            let d = if k % 50 >= 45 { 500 } else { 5 };
            s.on_packet(&pkt(k, d));
        }
        let b = s.summary().burst_r;
        // The stream ends inside a late burst: q = 59/299, p = 60/2700.
        assert!((b - 1.0 / (59.0 / 299.0 + 60.0 / 2700.0)).abs() < 1e-9, "{b}");
        // A gap longer than the duplicate window is one long loss run.
        let mut s = StreamStats::new(8000, 60.0);
        for k in (0..1000u16).chain(4000..5000) {
            s.on_packet(&pkt(k, 5));
        }
        // p = 1/1999, q = 1/3000 -> BurstR ~ 1200, capped at 100.
        assert_eq!(s.summary().burst_r, MAX_BURST_R);
    }

    #[test]
    fn delay_percentiles_and_max() {
        let mut s = StreamStats::new(8000, 1000.0);
        // delays 1..=100 ms
        for k in 0..100u16 {
            s.on_packet(&pkt(k, u64::from(k) + 1));
        }
        let sum = s.summary();
        assert_eq!(sum.delay_max_ms, Some(100.0));
        assert_eq!(sum.delay_min_ms, Some(1.0));
        assert!((sum.delay_mean_ms.unwrap() - 50.5).abs() < 1e-9);
        let p50 = sum.delay_p50_ms.unwrap();
        assert!((p50 - 50.0).abs() <= 50.0 / 64.0, "{p50}");
        let p95 = sum.delay_p95_ms.unwrap();
        assert!((p95 - 95.0).abs() <= 95.0 / 64.0, "{p95}");
        // jitter: delay grows 1 ms per 20 ms packet: |D| = 8 units each
        // time, J converges towards 8 units = 1 ms.
        assert!(sum.jitter_ms > 0.95 && sum.jitter_ms <= 1.0, "{}", sum.jitter_ms);
    }

    #[test]
    fn histogram_buckets_are_contiguous_and_bounded() {
        let mut last = 0;
        for v in (0..1_000_000u64).step_by(7).chain([u64::MAX, 1 << 39, 1 << 40]) {
            let i = DelayHistogram::index(v);
            assert!(i < HIST_BUCKETS);
            if v < 1 << 40 {
                let (lo, w) = DelayHistogram::bounds(i);
                assert!(lo <= v && v < lo + w, "v {v} i {i} lo {lo} w {w}");
                assert!(w == 1 || (w as f64) / (lo as f64) <= 1.0 / 64.0 + 1e-12);
            }
            if v < 1_000_000 {
                assert!(i >= last);
                last = i;
            }
        }
        let mut h = DelayHistogram::default();
        assert_eq!(h.quantile(0.95), None);
        for v in [5u64, 5, 5, 5, 1000] {
            h.record(v);
        }
        assert_eq!(h.quantile(0.8), Some(5.0));
        let top = h.quantile(1.0).unwrap();
        assert!((top - 1000.0).abs() < 1000.0 / 64.0);
    }

    #[test]
    fn sequence_wrap_and_too_old_packets() {
        let mut s = StreamStats::new(8000, 60.0);
        // pkt() starts at seq 65000 so 600 packets cross 65535 -> 0.
        for k in 0..600u16 {
            assert_ne!(s.on_packet(&pkt(k, 5)), Verdict::Duplicate, "k {k}");
        }
        assert_eq!(s.summary().reordered, 0);
        // jump 2000 ahead: window cleared, then a packet from before the window
        assert_eq!(s.on_packet(&pkt(2600, 5)), Verdict::OnTime);
        assert_eq!(s.on_packet(&pkt(10, 5)), Verdict::TooOld);
        assert_eq!(s.on_packet(&pkt(2600, 5)), Verdict::Duplicate);
        let sum = s.summary();
        assert_eq!((sum.received, sum.too_old, sum.late, sum.duplicates), (602, 1, 1, 1));
    }

    #[test]
    fn clock_going_backwards_is_counted_not_fatal() {
        let mut s = StreamStats::new(8000, 60.0);
        let mut p = pkt(0, 0);
        p.recv_us = p.send_us - 5;
        assert_eq!(s.on_packet(&p), Verdict::OnTime);
        assert_eq!(s.summary().negative_delay, 1);
        assert_eq!(s.summary().delay_max_ms, Some(0.0));
    }

    #[test]
    fn nothing_sent_or_received() {
        let empty = StreamStats::new(8000, 60.0).summary();
        assert_eq!(empty.delay_mean_ms, None);
        let q = assess(0, &empty, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
        assert!(!q.supported);
        let q = assess(100, &empty, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
        assert_eq!(q.loss_pct, 100.0);
        assert!(q.mos < 1.5 && !q.supported, "{q:?}");
        let q = assess(100, &empty, &g729(), Criterion::Seeds, DEFAULT_MIN_MOS);
        assert!(!q.supported);
    }

    #[test]
    fn high_delay_fails_both_criteria() {
        let mut s = StreamStats::new(8000, 60.0);
        for k in 0..100 {
            s.on_packet(&pkt(k, 250));
        }
        let sum = s.summary();
        let q = assess(100, &sum, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
        // d = 250 + 60 + 25 = 335 ms: R = 93.2 - (8.04 + 17.347) - 11 < 70
        assert!((q.mouth_to_ear_ms - 335.0).abs() < 1e-9);
        assert!(q.r < 70.0 && !q.supported, "{q:?}");
        assert!(!assess(100, &sum, &g729(), Criterion::Seeds, DEFAULT_MIN_MOS).supported);
    }

    #[test]
    fn delay_spikes_fail_the_seeds_rule_through_the_mean_jitter() {
        // 40 s of heavy delay variation (delay alternating 20 / 160 ms),
        // then 20 s at a constant 20 ms. The final value has forgotten the
        // variation (it decays by 15/16 per packet); the mean has not.
        let mut s = StreamStats::new(8000, 60.0);
        for k in 0..3000u16 {
            let delay = if k < 2000 && k % 2 == 1 { 160 } else { 20 };
            s.on_packet(&pkt(k, delay));
        }
        let sum = s.summary();
        assert!(sum.jitter_ms < 1e-3, "final value forgot the spikes: {}", sum.jitter_ms);
        assert!(sum.jitter_mean_ms > 20.0, "{sum:?}");
        assert!(sum.jitter_max_ms > sum.jitter_mean_ms && sum.jitter_max_ms < 1000.0, "{sum:?}");
        // Same arrival pattern through the RTP-timestamp estimator (punctual sender).
        assert!((sum.jitter_rtp_mean_ms - sum.jitter_mean_ms).abs() < 1e-9);
        assert!((sum.jitter_rtp_max_ms - sum.jitter_max_ms).abs() < 1e-9);
        let q = assess(3000, &sum, &g729(), Criterion::Seeds, DEFAULT_MIN_MOS);
        assert_eq!((q.jitter_mean_ms, q.jitter_max_ms), (sum.jitter_mean_ms, sum.jitter_max_ms));
        let d = sum.delay_mean_ms.unwrap();
        assert!(d + sum.jitter_ms < 150.0, "the final value would have passed");
        assert!(d + sum.jitter_mean_ms >= 150.0 && !q.supported, "{q:?}");
    }

    proptest::proptest! {
        #[test]
        fn accounting_holds_for_any_arrival_pattern(
            pkts in proptest::collection::vec((0u16..3000, 0u64..400_000, proptest::bool::ANY), 0..400)
        ) {
            let mut s = StreamStats::new(8000, 60.0);
            let mut fresh = 0u64;
            let mut dups = 0u64;
            for (i, &(k, d, m)) in pkts.iter().enumerate() {
                let send = T0 + 20_000 * u64::from(k);
                let p = RxPacket { seq: k, rtp_ts: 160 * u32::from(k), marker: m, send_us: send, recv_us: send + d + i as u64 };
                match s.on_packet(&p) {
                    Verdict::Duplicate => dups += 1,
                    _ => fresh += 1,
                }
            }
            let sum = s.summary();
            proptest::prop_assert_eq!(sum.received, fresh);
            proptest::prop_assert_eq!(sum.duplicates, dups);
            proptest::prop_assert!(sum.late <= sum.received);
            proptest::prop_assert!(sum.reordered <= sum.received);
            let q = assess(3000, &sum, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
            proptest::prop_assert!(q.mos >= 1.0 && q.mos <= 4.5);
            proptest::prop_assert!(q.effective_loss_pct <= 100.0 + 1e-9);
        }
    }
}
