//! The call-quality assessment of one direction: from the sender's count
//! and the receiver's [`ReceiveSummary`], the loss, late loss, E-model R and
//! MOS, and whether the direction is supported ([`Criterion`]).
//!
//! Owns: [`assess`], [`assess_with`] and their options. Must not touch: the
//! receive accumulation ([`super::StreamStats`]), the E-model's formulas
//! ([`crate::emodel`]), sockets, clocks, files.

use serde::{Deserialize, Serialize};

use super::{one, ReceiveSummary, MAX_BURST_R};
use crate::codec::Profile;
use crate::emodel::{self, Impairments};

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
    assess_with(
        sent,
        rx,
        profile,
        &AssessOptions {
            criterion,
            min_mos,
            burst: BurstModel::Random,
        },
    )
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
pub fn assess_with(
    sent: u64,
    rx: &ReceiveSummary,
    profile: &Profile,
    opt: &AssessOptions,
) -> Quality {
    let (criterion, min_mos) = (opt.criterion, opt.min_mos);
    let burst_r = match opt.burst {
        BurstModel::Random => 1.0,
        BurstModel::Measured if rx.burst_r.is_finite() => rx.burst_r.clamp(1.0, MAX_BURST_R),
        BurstModel::Measured => 1.0,
    };
    let received = rx.received.min(sent);
    let lost = sent - received;
    let late = rx.late.min(received);
    let pct = |n: u64| {
        if sent == 0 {
            0.0
        } else {
            100.0 * n as f64 / sent as f64
        }
    };
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
                    && rx
                        .delay_mean_ms
                        .is_some_and(|d| d + rx.jitter_mean_ms < 150.0)
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
