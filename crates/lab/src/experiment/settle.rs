//! How long the gateway pacer takes to reach its steady rate after the
//! number of calls changes (issue 12 point 8), from the rate samples a
//! mid-run point collected ([`super::midrun`]).
//!
//! Definitions (docs/lab.md section 6, "Calls joining and leaving"):
//! - a *phase* runs from one change of the number of calls to the next (or
//!   the point's end); the first phase starts with the calls (0 -> N);
//! - its *steady rate* is the median of the rate samples in the phase's last
//!   half;
//! - the rate has *reached* it at the first sample of the phase from which
//!   every later sample of the phase is within ±[`BAND`] of the steady rate;
//!   the *settle time* is that sample's time minus the change's time (None:
//!   the phase's last sample is outside the band, or too few samples);
//! - the target is met when the settle time is at most [`TARGET_S`].
//!
//! Pure: no clock, no I/O. Must not touch: the sampling (in `midrun`), the
//! controller (the daemon's).

use serde::Serialize;

/// Half-width of the band around the steady rate (a fraction of it).
pub const BAND: f64 = 0.25;
/// Issue 12 point 8: the steady rate within 10 s of a change.
pub const TARGET_S: f64 = 10.0;
/// Fewest samples in a phase's last half for a steady rate.
pub const MIN_STEADY_SAMPLES: usize = 3;

/// One phase's settling.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settle {
    /// The change's time (s after the calls' start).
    pub at_s: f64,
    /// The next change's time, or the point's end (s).
    pub until_s: f64,
    /// Calls before the change (0 for the first phase).
    pub from_calls: u32,
    /// Calls from the change on.
    pub to_calls: u32,
    /// The last rate sampled before the change (bit/s).
    pub rate_before_bps: Option<f64>,
    /// Median rate over the phase's last half (bit/s).
    pub steady_bps: Option<f64>,
    /// Rate samples in the phase.
    pub samples: usize,
    /// Seconds from the change until the rate entered the band for good.
    pub settle_s: Option<f64>,
    /// Seconds from the change until the first sample in the band.
    pub first_in_band_s: Option<f64>,
    /// Share of the phase's samples from the first in the band on that are in it.
    pub in_band_after_first: Option<f64>,
    /// Lowest and highest rate after the settle time (bit/s).
    pub settled_min_bps: Option<f64>,
    /// See `settled_min_bps`.
    pub settled_max_bps: Option<f64>,
    /// `settle_s <= TARGET_S`.
    pub met: bool,
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// The settling of the phase `[at_s, until_s)` from `samples` (time in s
/// after the calls' start, rate in bit/s; in time order).
pub fn settle(samples: &[(f64, f64)], at_s: f64, until_s: f64, from: u32, to: u32) -> Settle {
    let phase: Vec<(f64, f64)> = samples
        .iter()
        .copied()
        .filter(|&(t, _)| t >= at_s && t < until_s)
        .collect();
    let half = at_s + (until_s - at_s) / 2.0;
    let mut tail: Vec<f64> = phase
        .iter()
        .filter(|&&(t, _)| t >= half)
        .map(|&(_, r)| r)
        .collect();
    let steady = if tail.len() >= MIN_STEADY_SAMPLES {
        median(&mut tail)
    } else {
        None
    };
    let rate_before_bps = samples
        .iter()
        .take_while(|&&(t, _)| t < at_s)
        .last()
        .map(|&(_, r)| r);
    let mut out = Settle {
        at_s,
        until_s,
        from_calls: from,
        to_calls: to,
        rate_before_bps,
        steady_bps: steady,
        samples: phase.len(),
        settle_s: None,
        first_in_band_s: None,
        in_band_after_first: None,
        settled_min_bps: None,
        settled_max_bps: None,
        met: false,
    };
    let Some(s) = steady else { return out };
    let inside = |r: f64| (r - s).abs() <= BAND * s;
    if let Some(first) = phase.iter().position(|&(_, r)| inside(r)) {
        out.first_in_band_s = Some(phase[first].0 - at_s);
        let rest = &phase[first..];
        out.in_band_after_first =
            Some(rest.iter().filter(|&&(_, r)| inside(r)).count() as f64 / rest.len() as f64);
    }
    // the first sample after the last one outside the band
    let from_idx = match phase.iter().rposition(|&(_, r)| !inside(r)) {
        Some(i) => i + 1,
        None => 0,
    };
    if from_idx < phase.len() {
        let t = phase[from_idx].0 - at_s;
        out.settle_s = Some(t);
        out.met = t <= TARGET_S;
        let after = phase[from_idx..].iter().map(|&(_, r)| r);
        out.settled_min_bps = after.clone().reduce(f64::min);
        out.settled_max_bps = after.reduce(f64::max);
    }
    out
}

/// The settling of every phase of `schedule` (changes as `(time s, calls)`,
/// the first at 0 s) over a point of `duration_s`.
pub fn settle_all(samples: &[(f64, f64)], schedule: &[(f64, u32)], duration_s: f64) -> Vec<Settle> {
    schedule
        .iter()
        .enumerate()
        .map(|(i, &(at, n))| {
            let until = schedule.get(i + 1).map_or(duration_s, |&(t, _)| t);
            let from = if i == 0 { 0 } else { schedule[i - 1].1 };
            settle(samples, at, until, from, n)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One sample per second from `t0`, with the given rates (kbit/s).
    fn series(t0: f64, kbps: &[f64]) -> Vec<(f64, f64)> {
        kbps.iter()
            .enumerate()
            .map(|(i, &r)| (t0 + i as f64, r * 1000.0))
            .collect()
    }

    #[test]
    fn settles_when_the_rate_enters_the_band_for_good() {
        // 20 s phase: a climb, one excursion at 6 s, then 280-300 kbit/s.
        let mut r = vec![128.0, 192.0, 288.0, 290.0, 280.0, 300.0, 432.0, 288.0];
        r.extend([290.0; 12]);
        let s = settle(&series(0.0, &r), 0.0, 20.0, 0, 16);
        assert_eq!(s.steady_bps, Some(290_000.0));
        assert_eq!(s.first_in_band_s, Some(2.0));
        assert_eq!(s.settle_s, Some(7.0), "after the excursion to 432");
        assert!(s.met);
        assert_eq!(s.settled_min_bps, Some(288_000.0));
        assert_eq!(s.settled_max_bps, Some(290_000.0));
        assert_eq!(s.samples, 20);
        let inside = s.in_band_after_first.unwrap();
        assert!((inside - 17.0 / 18.0).abs() < 1e-9, "{inside}");
    }

    #[test]
    fn a_late_settle_misses_the_target_and_a_change_is_timed_from_its_own_start() {
        // before the change: 300; from 30 s the rate falls by small steps
        let mut all = series(0.0, &[300.0; 30]);
        let mut r: Vec<f64> = (0..14).map(|i| 300.0 - 12.0 * i as f64).collect();
        r.extend([130.0; 16]);
        all.extend(series(30.0, &r));
        let s = settle(&all, 30.0, 60.0, 16, 20);
        assert_eq!(s.rate_before_bps, Some(300_000.0));
        assert_eq!(s.steady_bps, Some(130_000.0));
        // 162.5 is the band's top: 300 - 12 i <= 162.5 from i = 12 (156)
        assert_eq!(s.settle_s, Some(12.0));
        assert!(!s.met);
        assert_eq!((s.from_calls, s.to_calls), (16, 20));
    }

    #[test]
    fn no_steady_rate_without_samples_and_no_settle_if_the_phase_ends_outside() {
        let s = settle(&series(0.0, &[100.0, 100.0]), 0.0, 10.0, 0, 4);
        assert_eq!((s.steady_bps, s.settle_s, s.met), (None, None, false));
        // last half (3 s on) 100,100,400: median 100, last sample outside
        let s = settle(
            &series(0.0, &[100.0, 100.0, 100.0, 100.0, 100.0, 400.0]),
            0.0,
            6.0,
            0,
            4,
        );
        assert_eq!(s.steady_bps, Some(100_000.0));
        assert_eq!(s.settle_s, None);
        assert_eq!(s.first_in_band_s, Some(0.0));
        assert!(!s.met);
    }

    #[test]
    fn every_phase_of_a_schedule() {
        let mut all = series(-2.0, &[128.0, 128.0]);
        all.extend(series(0.0, &[200.0; 30]));
        all.extend(series(30.0, &[400.0; 30]));
        all.extend(series(60.0, &[250.0; 30]));
        let v = settle_all(&all, &[(0.0, 16), (30.0, 8), (60.0, 16)], 90.0);
        assert_eq!(v.len(), 3);
        assert_eq!(
            (v[0].from_calls, v[1].from_calls, v[2].from_calls),
            (0, 16, 8)
        );
        assert_eq!(v[0].rate_before_bps, Some(128_000.0));
        assert_eq!(v[1].rate_before_bps, Some(200_000.0));
        assert_eq!(v[2].until_s, 90.0);
        assert!(v
            .iter()
            .all(|s| s.settle_s == Some(0.0) && s.met && s.samples == 30));
        assert_eq!(v[2].steady_bps, Some(250_000.0));
    }
}
