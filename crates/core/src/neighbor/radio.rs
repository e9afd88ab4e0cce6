//! What the radio reports about one neighbour (nl80211 station info on a
//! real radio, the `peer` line of the lab's `NODE.air` file) and the
//! transmit-side estimate built from it (issue 11 point 4).
//!
//! Owns: [`RadioReport`] (one reading: signal, average signal, noise floor,
//! cumulative MAC counters of our unicast frames to the neighbour, their
//! mean length) and [`TxEstimate`] (per-attempt frame error rate over
//! windows of at least [`MIN_ATTEMPTS`] attempts, turned into a bit error
//! rate and smoothed with the EWMA weight of the hello estimate). The rules
//! for which figure decides a size: `docs/adaptive.md`, "Radio figures".
//! Must not touch: sockets, time (a report is one sample; staleness is
//! counted in reports), the neighbour table's state.

use super::quality::ber_from_delivery;

/// Noise floor assumed when the radio reports none, dBm: thermal noise over
/// 20-22 MHz (-101 dBm) plus a typical 6-7 dB receiver noise figure, and
/// the value many drivers print when they do report it.
pub const DEFAULT_NOISE_DBM: i8 = -95;
/// A window of MAC counters counts once it holds this many attempts; fewer
/// are carried into the next report.
pub const MIN_ATTEMPTS: u64 = 20;
/// Reports in a row without a full window after which the transmit-side
/// estimate lapses (the link carried too little unicast to measure).
pub const STALE_REPORTS: u32 = 8;
/// IP length assumed for frames whose length the daemon does not know, bytes
/// (a few voice packets).
pub const DEFAULT_FRAME_LEN: usize = 200;

/// Cumulative MAC counters of our unicast frames to one neighbour.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MacCounters {
    /// Frames finished: acknowledged or given up (nl80211 `tx packets`;
    /// `tx_acked + tx_failed` in `NODE.air`).
    pub tx_frames: u64,
    /// Retried attempts (`tx retries`).
    pub tx_retries: u64,
    /// Frames given up after the retry limit (`tx failed`).
    pub tx_failed: u64,
}

/// One reading of the radio about one neighbour; every field optional.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RadioReport {
    /// Signal of its last frame, dBm.
    pub signal_dbm: Option<i8>,
    /// Average signal of its frames, dBm (preferred over `signal_dbm`).
    pub signal_avg_dbm: Option<i8>,
    /// Noise floor of the channel, dBm (else [`DEFAULT_NOISE_DBM`]).
    pub noise_dbm: Option<i8>,
    /// MAC counters of our frames to it.
    pub mac: Option<MacCounters>,
    /// Mean IP length of our frames to it since the previous report.
    pub frame_len: Option<u16>,
}

impl RadioReport {
    /// The signal the SNR is computed from: the average when reported.
    pub fn signal(&self) -> Option<i8> {
        self.signal_avg_dbm.or(self.signal_dbm)
    }

    /// The noise floor: reported or [`DEFAULT_NOISE_DBM`].
    pub fn noise(&self) -> i8 {
        self.noise_dbm.unwrap_or(DEFAULT_NOISE_DBM)
    }
}

/// Figures of the last full window, for the operator.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MacWindow {
    /// Frames finished in the window.
    pub frames: u64,
    /// Given up / finished: the loss left after the MAC's retries.
    pub loss: f64,
    /// Retries / finished frames.
    pub retry_ratio: f64,
    /// Failed attempts / attempts: `(retries + failed) / (frames + retries)`.
    pub attempt_loss: f64,
    /// Mean IP length of the window's frames.
    pub frame_len: usize,
}

/// Transmit-side link estimate from the MAC counters (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct TxEstimate {
    alpha: f64,
    base: Option<MacCounters>,
    /// Carried window: frames, retries, failed, Σ frames × length.
    pend: (u64, u64, u64, u64),
    ber: Option<f64>,
    since: u32,
    last: Option<MacWindow>,
}

impl TxEstimate {
    /// No sample yet; `alpha` is the EWMA weight of a window.
    pub fn new(alpha: f64) -> TxEstimate {
        TxEstimate {
            alpha: alpha.clamp(f64::MIN_POSITIVE, 1.0),
            base: None,
            pend: (0, 0, 0, 0),
            ber: None,
            since: 0,
            last: None,
        }
    }

    /// Takes the counters of one report. The first report (or one whose
    /// counters went back: a driver or station reset) only sets the
    /// baseline. Returns whether the estimate changed.
    pub fn on_counters(&mut self, c: MacCounters, frame_len: Option<u16>) -> bool {
        let Some(b) = self.base.replace(c) else {
            return false;
        };
        let (Some(df), Some(dr), Some(dx)) = (
            c.tx_frames.checked_sub(b.tx_frames),
            c.tx_retries.checked_sub(b.tx_retries),
            c.tx_failed.checked_sub(b.tx_failed),
        ) else {
            self.pend = (0, 0, 0, 0);
            return false;
        };
        let len = frame_len.map_or(DEFAULT_FRAME_LEN, usize::from) as u64;
        let p = &mut self.pend;
        p.0 = p.0.saturating_add(df);
        p.1 = p.1.saturating_add(dr);
        p.2 = p.2.saturating_add(dx.min(df));
        p.3 = p.3.saturating_add(df.saturating_mul(len));
        let (frames, retries, failed, lensum) = *p;
        let attempts = frames.saturating_add(retries);
        if frames == 0 || attempts < MIN_ATTEMPTS {
            self.since = self.since.saturating_add(1);
            if self.since > STALE_REPORTS {
                let changed = self.ber.is_some();
                self.ber = None;
                self.last = None;
                self.pend = (0, 0, 0, 0);
                return changed;
            }
            return false;
        }
        let q = ((retries + failed) as f64 / attempts as f64).clamp(0.0, 1.0);
        let mean_len = (lensum / frames) as usize;
        let sample = ber_from_delivery(1.0 - q, mean_len);
        self.ber = Some(match self.ber {
            None => sample,
            Some(v) => v + self.alpha * (sample - v),
        });
        self.last = Some(MacWindow {
            frames,
            loss: failed as f64 / frames as f64,
            retry_ratio: retries as f64 / frames as f64,
            attempt_loss: q,
            frame_len: mean_len,
        });
        self.pend = (0, 0, 0, 0);
        self.since = 0;
        true
    }

    /// Smoothed bit error rate of our frames to the neighbour, while fresh.
    pub fn ber(&self) -> Option<f64> {
        self.ber
    }

    /// The last full window, while fresh.
    pub fn window(&self) -> Option<MacWindow> {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(f: u64, r: u64, x: u64) -> MacCounters {
        MacCounters {
            tx_frames: f,
            tx_retries: r,
            tx_failed: x,
        }
    }

    /// 100 frames of 400 bytes, 40 retries, 2 given up: attempts 140,
    /// failed attempts 42, q = 0.3; BER = 1 - 0.7^(1/(8·436)) = 1.0227e-4.
    #[test]
    fn window_to_bit_error_rate() {
        let mut t = TxEstimate::new(0.125);
        assert!(!t.on_counters(c(1000, 10, 0), Some(400)), "baseline");
        assert!(t.on_counters(c(1100, 50, 2), Some(400)));
        let w = t.window().unwrap();
        assert_eq!(w.frames, 100);
        assert!((w.attempt_loss - 0.3).abs() < 1e-12);
        assert!((w.loss - 0.02).abs() < 1e-12 && (w.retry_ratio - 0.4).abs() < 1e-12);
        let ber = t.ber().unwrap();
        assert!((ber - 1.0227e-4).abs() < 1e-7, "{ber}");
        // The same loss on 100-byte frames means a 3.2 times higher BER; the
        // EWMA moves an eighth of the way.
        t.on_counters(c(1200, 90, 4), Some(100));
        let s = ber_from_delivery(0.7, 100);
        assert!((t.ber().unwrap() - (ber + 0.125 * (s - ber))).abs() < 1e-12);
    }

    #[test]
    fn small_windows_carry_and_the_estimate_lapses() {
        let mut t = TxEstimate::new(1.0);
        t.on_counters(c(0, 0, 0), None);
        // 10 attempts: carried; 10 more: a window of 20 (default length).
        assert!(!t.on_counters(c(8, 2, 0), None));
        assert!(t.on_counters(c(16, 4, 0), None));
        assert_eq!(t.window().unwrap().frame_len, DEFAULT_FRAME_LEN);
        assert!((t.window().unwrap().attempt_loss - 0.2).abs() < 1e-12);
        // Counters going back: a new baseline, nothing else.
        assert!(!t.on_counters(c(3, 0, 0), None));
        assert!(t.ber().is_some());
        // Idle link: fresh for STALE_REPORTS reports, then gone.
        for k in 0..STALE_REPORTS {
            assert!(!t.on_counters(c(3, 0, 0), None), "{k}");
        }
        assert!(t.on_counters(c(3, 0, 0), None));
        assert_eq!((t.ber(), t.window()), (None, None));
    }

    #[test]
    fn report_prefers_the_average_signal() {
        let r = RadioReport {
            signal_dbm: Some(-50),
            signal_avg_dbm: Some(-60),
            ..RadioReport::default()
        };
        assert_eq!((r.signal(), r.noise()), (Some(-60), DEFAULT_NOISE_DBM));
    }
}
