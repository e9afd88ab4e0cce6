//! The gateway's TCP rate controller (seed 003, section 5.1, Algorithm 1):
//! every period, the total rate allowed to TCP into the mesh moves by a
//! factor chosen by the band the network's voice MOS falls in.
//!
//! Owns: the bands, the rate and its bounds, the period. Must not touch:
//! how the MOS is measured (`airpack_voice::vpm`), packets (see
//! [`super::pacer`]), clocks (time comes in as [`Micros`]).
//!
//! Bands (the seed's thresholds and adjustments, all configurable):
//!
//! | MOS | factor |
//! | --- | --- |
//! | >= Q_good (3.9) | 1 + R_good (+5 %) |
//! | [Q_fair, Q_good) = [3.7, 3.9) | 1 + R_fair (+3 %) |
//! | [Q_poor, Q_fair) = [3.6, 3.7) | 1 + R_hold (0: the target band) |
//! | [Q_choke, Q_poor) = [3.3, 3.6) | 1 + R_poor (-10 %) |
//! | < Q_choke (3.3), or not a number | 1 + R_choke (-50 %) |
//!
//! The seed's Algorithm 1 has three thresholds; its evaluation names four
//! (Q_good, Q_fair, Q_poor, Q_choke) with four adjustments, and says the
//! values are "tuned to maintain the target of MOS-score = 3.6": the band
//! between Q_poor and Q_fair is the target, where the rate holds. With no
//! active call (no MOS) the rate grows as in the good band (nothing to
//! protect). The result is clamped to [floor, ceiling]; an increase starts
//! from at least `restart_bps` (a multiplicative increase of 0 stays 0).
//!
//! Two controllers read these bands ([`Mode`]): `seed`, the seed's rule
//! (one band step every period), and `search` (the default; [`super::search`]):
//! one cut per MOS window, the last bad and good rates remembered, fast
//! increases far below the bad rate and the bands' small steps near it, a
//! low start, and the memory adjusted when calls join or leave.

use super::search::{Search, SearchConfig, SearchView};
use crate::Micros;

/// Which controller reads the bands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The seed's Algorithm 1: every period, the band's step.
    Seed,
    /// The search controller ([`super::search`]).
    Search,
}

/// Rate controller settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateConfig {
    /// MOS thresholds, descending.
    pub q_good: f64,
    /// See [`RateConfig::q_good`].
    pub q_fair: f64,
    /// See [`RateConfig::q_good`].
    pub q_poor: f64,
    /// See [`RateConfig::q_good`].
    pub q_choke: f64,
    /// Relative adjustments per band (0.05 = +5 %), descending.
    pub r_good: f64,
    /// See [`RateConfig::r_good`].
    pub r_fair: f64,
    /// See [`RateConfig::r_good`].
    pub r_hold: f64,
    /// See [`RateConfig::r_good`].
    pub r_poor: f64,
    /// See [`RateConfig::r_good`].
    pub r_choke: f64,
    /// Adjustment period.
    pub period_us: Micros,
    /// Bounds of the total TCP rate (bit/s); the floor may be 0.
    pub floor_bps: u64,
    /// See [`RateConfig::floor_bps`].
    pub ceiling_bps: u64,
    /// Rate at start (bit/s), clamped to the bounds.
    pub initial_bps: u64,
    /// Rate an increase starts from when the rate is 0.
    pub restart_bps: u64,
    /// Which controller.
    pub mode: Mode,
    /// The search controller's settings (unused by `Seed`).
    pub search: SearchConfig,
}

impl Default for RateConfig {
    fn default() -> Self {
        RateConfig {
            q_good: 3.9,
            q_fair: 3.7,
            q_poor: 3.6,
            q_choke: 3.3,
            r_good: 0.05,
            r_fair: 0.03,
            r_hold: 0.0,
            r_poor: -0.10,
            r_choke: -0.50,
            period_us: 1_000_000,
            floor_bps: 64_000,
            ceiling_bps: 100_000_000,
            initial_bps: 64_000,
            restart_bps: 64_000,
            mode: Mode::Search,
            search: SearchConfig::default(),
        }
    }
}

impl RateConfig {
    /// The seed's controller as first measured: its bands, one step per
    /// second, starting at 1 Mbit/s.
    pub fn seed() -> Self {
        RateConfig {
            mode: Mode::Seed,
            initial_bps: 1_000_000,
            ..RateConfig::default()
        }
    }
}

/// Why a [`RateConfig`] is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateConfigError {
    /// Thresholds not finite or not descending (good > fair > poor > choke).
    Thresholds,
    /// Adjustments not finite, not descending, or an increase band negative /
    /// a decrease band positive, or a factor 1 + r below 0.
    Adjustments,
    /// Period 0, or floor above ceiling.
    Bounds,
    /// Search settings out of range (a time 0, `fast_up` outside 0-10,
    /// `near` outside 0-1).
    Search,
}

/// Which band a MOS falls in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Band {
    /// Below Q_choke (or no number).
    Choke,
    /// [Q_choke, Q_poor).
    Poor,
    /// [Q_poor, Q_fair): the target.
    Hold,
    /// [Q_fair, Q_good).
    Fair,
    /// At or above Q_good.
    Good,
}

impl RateConfig {
    /// Check the settings.
    pub fn validate(&self) -> Result<(), RateConfigError> {
        let q = [self.q_good, self.q_fair, self.q_poor, self.q_choke];
        if q.iter().any(|x| !x.is_finite()) || q.windows(2).any(|w| w[0] <= w[1]) {
            return Err(RateConfigError::Thresholds);
        }
        let r = [
            self.r_good,
            self.r_fair,
            self.r_hold,
            self.r_poor,
            self.r_choke,
        ];
        if r.iter().any(|x| !x.is_finite() || *x < -1.0)
            || r.windows(2).any(|w| w[0] < w[1])
            || self.r_fair < 0.0
            || self.r_poor > 0.0
        {
            return Err(RateConfigError::Adjustments);
        }
        if self.period_us == 0 || self.floor_bps > self.ceiling_bps {
            return Err(RateConfigError::Bounds);
        }
        if !self.search.valid() {
            return Err(RateConfigError::Search);
        }
        Ok(())
    }

    /// The band of a MOS (`None`: no active call, treated as good).
    pub fn band(&self, mos: Option<f64>) -> Band {
        match mos {
            None => Band::Good,
            Some(m) if m >= self.q_good => Band::Good,
            Some(m) if m >= self.q_fair => Band::Fair,
            Some(m) if m >= self.q_poor => Band::Hold,
            Some(m) if m >= self.q_choke => Band::Poor,
            Some(_) => Band::Choke, // includes NaN
        }
    }

    /// The adjustment of a band.
    pub fn adjustment(&self, band: Band) -> f64 {
        match band {
            Band::Good => self.r_good,
            Band::Fair => self.r_fair,
            Band::Hold => self.r_hold,
            Band::Poor => self.r_poor,
            Band::Choke => self.r_choke,
        }
    }

    /// One step from `rate` for a MOS: the band's factor, clamped.
    pub fn next_rate(&self, rate_bps: u64, mos: Option<f64>) -> u64 {
        let r = self.adjustment(self.band(mos));
        let base = if r > 0.0 {
            rate_bps.max(self.restart_bps)
        } else {
            rate_bps
        };
        let x = base as f64 * (1.0 + r);
        // Decreases round down (so halving reaches 0), increases to nearest.
        let next = if r < 0.0 { x.floor() } else { x.round() };
        // f64 -> u64 saturates; NaN cannot occur (validated factors).
        (next as u64).clamp(self.floor_bps, self.ceiling_bps)
    }
}

/// How long a step brought forward by a join waits for the other calls
/// starting with it (µs): a few packet intervals.
pub const JOIN_GATHER_US: Micros = 60_000;

/// The controller: the current total TCP rate and when it moves next.
#[derive(Clone, Debug)]
pub struct RateController {
    cfg: RateConfig,
    rate_bps: u64,
    next_tick: Option<Micros>,
    /// When the clock started or the last step ran.
    last_step: Micros,
    search: Search,
    /// Time of the last call of [`RateController::on_timeout`].
    now: Micros,
}

impl RateController {
    /// New controller at the configured initial rate.
    pub fn new(cfg: RateConfig) -> Result<Self, RateConfigError> {
        cfg.validate()?;
        Ok(RateController {
            rate_bps: cfg.initial_bps.clamp(cfg.floor_bps, cfg.ceiling_bps),
            cfg,
            next_tick: None,
            last_step: 0,
            search: Search::default(),
            now: 0,
        })
    }

    /// The search controller's state (meaningful in [`Mode::Search`]).
    pub fn search_view(&self) -> SearchView {
        self.search.view(&self.cfg.search, self.rate_bps, self.now)
    }

    /// Settings.
    pub fn config(&self) -> &RateConfig {
        &self.cfg
    }

    /// New settings while running (a reload): the rate stays where it is,
    /// clamped into the new floor and ceiling; the step already due stays
    /// due when it was, the ones after follow the new period. (`initial_bps`
    /// only matters at the start.) A change of controller forgets what the
    /// search learnt. Refused, nothing changed, if invalid.
    pub fn reconfigure(&mut self, cfg: RateConfig) -> Result<(), RateConfigError> {
        cfg.validate()?;
        if cfg.mode != self.cfg.mode {
            self.search.reset();
        }
        self.rate_bps = self.rate_bps.clamp(cfg.floor_bps, cfg.ceiling_bps);
        self.cfg = cfg;
        Ok(())
    }

    /// Total TCP rate now (bit/s).
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// Fair share of one of `flows` active TCP flows (bit/s; the total if 0).
    pub fn share_bps(&self, flows: usize) -> u64 {
        self.rate_bps / (flows.max(1) as u64)
    }

    /// When [`RateController::on_timeout`] wants to run next (`None` before
    /// the first call).
    pub fn poll_timeout(&self) -> Option<Micros> {
        self.next_tick
    }

    /// Calls joined (the daemon heard a new call's first packet): the next
    /// step comes at most half a period after now instead of at the end of
    /// the period, so a join reaches the controller (search rule 6: the
    /// rate remembered for that many calls) before the joiners' load has
    /// filled the mesh for a whole period (issue 12 point 8: rejoining
    /// calls failed on the 0.4-0.9 s at the old rate). The step waits
    /// [`JOIN_GATHER_US`] so that calls starting together are heard in the
    /// same step (a staggered join seen in two steps would end the
    /// recalled rate's hold-off, rule 5). Never later than planned, never
    /// within half a period of the last step; the grid continues from the
    /// step.
    pub fn bring_forward(&mut self, now: Micros) {
        if let Some(t) = self.next_tick {
            let earliest = self.last_step.saturating_add(self.cfg.period_us / 2);
            self.next_tick = Some(t.min(now.saturating_add(JOIN_GATHER_US).max(earliest)));
        }
    }

    /// Call at (or after) [`RateController::poll_timeout`] with the
    /// network's MOS and the number of calls (the daemon: calls heard,
    /// search rule 5; the seed's mode ignores it): applies one
    /// step if a period has passed (the first call only starts the clock).
    /// Returns the rate.
    pub fn on_timeout(&mut self, now: Micros, mos: Option<f64>, calls: usize) -> u64 {
        self.now = self.now.max(now);
        match self.next_tick {
            None => {
                self.next_tick = Some(now.saturating_add(self.cfg.period_us));
                self.last_step = now;
            }
            Some(t) if now >= t => {
                self.last_step = now;
                self.rate_bps = match self.cfg.mode {
                    Mode::Seed => self.cfg.next_rate(self.rate_bps, mos),
                    Mode::Search => self.search.step(
                        &self.cfg,
                        &self.cfg.search,
                        self.rate_bps,
                        now,
                        mos,
                        calls,
                    ),
                };
                // Stay on the period grid unless a whole period was missed.
                let next = t.saturating_add(self.cfg.period_us);
                self.next_tick = Some(if next > now {
                    next
                } else {
                    now.saturating_add(self.cfg.period_us)
                });
            }
            Some(_) => {}
        }
        self.rate_bps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_seeds_bands_and_steps() {
        let c = RateConfig::default();
        assert_eq!(c.validate(), Ok(()));
        let cases = [
            (4.2, Band::Good, 1_050_000),
            (3.9, Band::Good, 1_050_000),
            (3.8, Band::Fair, 1_030_000),
            (3.7, Band::Fair, 1_030_000),
            (3.65, Band::Hold, 1_000_000),
            (3.6, Band::Hold, 1_000_000),
            (3.5, Band::Poor, 900_000),
            (3.3, Band::Poor, 900_000),
            (3.2, Band::Choke, 500_000),
            (f64::NAN, Band::Choke, 500_000),
        ];
        for (mos, band, next) in cases {
            assert_eq!(c.band(Some(mos)), band, "{mos}");
            assert_eq!(c.next_rate(1_000_000, Some(mos)), next, "{mos}");
        }
        assert_eq!(c.band(None), Band::Good);
    }

    /// A join brings the next step forward: to the join plus the gather
    /// time, at the earliest half a period after the last step, never
    /// after the planned tick; the grid continues from the early step.
    #[test]
    fn a_join_brings_the_next_step_forward_by_at_most_half_a_period() {
        let mut r = RateController::new(RateConfig::default()).unwrap(); // 1 s period
        r.bring_forward(0);
        assert_eq!(r.poll_timeout(), None, "no clock before the first call");
        r.on_timeout(0, Some(4.0), 1);
        assert_eq!(r.poll_timeout(), Some(1_000_000));
        let mut g = r.clone();
        g.bring_forward(460_000);
        assert_eq!(
            g.poll_timeout(),
            Some(460_000 + JOIN_GATHER_US),
            "its companions gathered"
        );
        r.bring_forward(100_000);
        assert_eq!(
            r.poll_timeout(),
            Some(500_000),
            "half a period after the last step"
        );
        r.bring_forward(200_000);
        assert_eq!(r.poll_timeout(), Some(500_000), "not earlier again");
        r.on_timeout(499_999, Some(4.0), 2);
        assert_eq!(r.poll_timeout(), Some(500_000), "not due yet");
        r.on_timeout(500_000, Some(4.0), 2);
        assert_eq!(
            r.poll_timeout(),
            Some(1_500_000),
            "the step ran, the grid from it"
        );
        r.bring_forward(1_200_000);
        assert_eq!(r.poll_timeout(), Some(1_200_000 + JOIN_GATHER_US));
        r.bring_forward(1_480_000);
        assert_eq!(
            r.poll_timeout(),
            Some(1_200_000 + JOIN_GATHER_US),
            "never later"
        );
        r.bring_forward(1_490_000);
        assert_eq!(
            r.poll_timeout(),
            Some(1_200_000 + JOIN_GATHER_US),
            "never later"
        );
        let mut late = RateController::new(RateConfig::default()).unwrap();
        late.on_timeout(0, Some(4.0), 1);
        late.bring_forward(990_000);
        assert_eq!(
            late.poll_timeout(),
            Some(1_000_000),
            "never after the planned tick"
        );
    }

    #[test]
    fn bounds_restart_and_bad_configs() {
        let c = RateConfig {
            floor_bps: 0,
            ceiling_bps: 2_000_000,
            ..RateConfig::default()
        };
        assert_eq!(
            c.next_rate(1, Some(1.0)),
            0,
            "halving 1 bit/s rounds to 0: the floor"
        );
        assert_eq!(c.next_rate(0, Some(1.0)), 0);
        assert_eq!(
            c.next_rate(0, Some(4.0)),
            67_200,
            "restart at 64 kbit/s, +5 %"
        );
        assert_eq!(c.next_rate(1_990_000, Some(4.0)), 2_000_000, "ceiling");
        let bad = |f: fn(&mut RateConfig)| {
            let mut c = RateConfig::default();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert_eq!(bad(|c| c.q_fair = 4.0), RateConfigError::Thresholds);
        assert_eq!(bad(|c| c.q_choke = f64::NAN), RateConfigError::Thresholds);
        assert_eq!(bad(|c| c.r_poor = 0.2), RateConfigError::Adjustments);
        assert_eq!(bad(|c| c.r_choke = -1.5), RateConfigError::Adjustments);
        assert_eq!(bad(|c| c.r_fair = -0.01), RateConfigError::Adjustments);
        assert_eq!(bad(|c| c.period_us = 0), RateConfigError::Bounds);
        assert_eq!(
            bad(|c| c.floor_bps = c.ceiling_bps + 1),
            RateConfigError::Bounds
        );
        assert!(RateController::new(RateConfig {
            q_good: 1.0,
            ..RateConfig::default()
        })
        .is_err());
    }

    #[test]
    fn controller_steps_once_per_period() {
        let mut rc = RateController::new(RateConfig::seed()).unwrap();
        assert_eq!(rc.poll_timeout(), None);
        assert_eq!(
            rc.on_timeout(5_000, Some(3.0), 1),
            1_000_000,
            "first call starts the clock"
        );
        assert_eq!(rc.poll_timeout(), Some(1_005_000));
        assert_eq!(
            rc.on_timeout(1_004_999, Some(3.0), 1),
            1_000_000,
            "early: nothing"
        );
        assert_eq!(rc.on_timeout(1_005_000, Some(3.0), 1), 500_000);
        assert_eq!(rc.poll_timeout(), Some(2_005_000), "on the grid");
        assert_eq!(rc.on_timeout(2_100_000, Some(4.0), 1), 525_000);
        assert_eq!(
            rc.poll_timeout(),
            Some(3_005_000),
            "a late call stays on the grid"
        );
        assert_eq!(rc.on_timeout(9_000_000, Some(3.65), 1), 525_000);
        assert_eq!(
            rc.poll_timeout(),
            Some(10_000_000),
            "periods missed: restart from now"
        );
        assert_eq!((rc.share_bps(0), rc.share_bps(3)), (525_000, 175_000));
        // Seed section 5.4: after a 50 % cut, R_good brings it back up in steps of 5 %.
        let c = RateConfig::default();
        let mut r = c.next_rate(760_000, Some(3.0));
        assert_eq!(r, 380_000);
        for _ in 0..3 {
            r = c.next_rate(r, Some(4.0));
        }
        assert!((r as f64 - 380_000.0 * 1.05f64.powi(3)).abs() <= 1.5, "{r}");
    }

    fn config() -> impl Strategy<Value = RateConfig> {
        (0u64..1_000_000, 1u64..100_000_000, 0.0f64..0.5, 0.0f64..1.0).prop_map(
            |(floor, span, up, down)| RateConfig {
                floor_bps: floor,
                ceiling_bps: floor + span,
                r_good: up,
                r_fair: up / 2.0,
                r_poor: -down / 4.0,
                r_choke: -down,
                ..RateConfig::default()
            },
        )
    }

    proptest! {
        #[test]
        fn rate_stays_within_bounds(c in config(), start in any::<u64>(),
                                    moses in proptest::collection::vec(prop_oneof![Just(None), Just(Some(f64::NAN)), (-10.0f64..10.0).prop_map(Some)], 0..200)) {
            let mut r = start.clamp(c.floor_bps, c.ceiling_bps);
            for m in moses {
                r = c.next_rate(r, m);
                prop_assert!(c.floor_bps <= r && r <= c.ceiling_bps);
            }
        }

        #[test]
        fn response_is_monotone_in_the_mos(c in config(), rate in any::<u64>(), a in 0.0f64..5.0, b in 0.0f64..5.0) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(c.band(Some(lo)) <= c.band(Some(hi)));
            prop_assert!(c.next_rate(rate, Some(lo)) <= c.next_rate(rate, Some(hi)));
            // And in the rate: a higher rate never steps below a lower one.
            let r2 = rate.saturating_add(1000);
            prop_assert!(c.next_rate(rate, Some(lo)) <= c.next_rate(r2, Some(lo)));
        }
    }

    #[test]
    fn reconfigure_keeps_the_rate_within_the_new_bounds_and_refuses_bad_settings() {
        let cfg = RateConfig::default();
        let mut c = RateController::new(cfg).unwrap();
        c.on_timeout(0, None, 0);
        let before = c.rate_bps();
        // A lower ceiling clamps the running rate at once; steps use the new size.
        let low = RateConfig {
            ceiling_bps: before / 2,
            floor_bps: cfg.floor_bps.min(before / 4),
            r_good: 0.5,
            ..cfg
        };
        c.reconfigure(low).unwrap();
        assert_eq!(c.rate_bps(), before / 2);
        assert_eq!(c.config().r_good, 0.5);
        // Invalid settings (bands out of order) change nothing.
        let bad = RateConfig { q_good: 1.0, ..low };
        assert!(c.reconfigure(bad).is_err());
        assert_eq!(c.config().r_good, 0.5);
        assert_eq!(c.rate_bps(), before / 2);
    }
}
