//! The search controller reading a percentile of many calls (issue 12
//! point 8; docs/results.md, "Calibrating the gateway's voice reading"):
//! a plant whose calls lose packets at random, each call's MOS taken over a
//! 4 s window of its own packets (200 a direction, as the VPM does), the
//! network MOS the worst call or a percentile of them.
//!
//! What it shows: when every call sees the same mean loss, the worst of
//! 16 calls' two directions over 4 s is an extreme of 32 small samples and
//! reads poor at loads every call passes over a minute; a low percentile
//! reads the same calls without that bias, so the search settles near the
//! capacity the calls leave, and still below the knee where calls fail.

use super::rate::{RateConfig, RateController};
use super::search::MOS_PERCENTILE;
use crate::Micros;

/// Packets per second of a G.729 20 ms call, per direction.
const PPS: u64 = 50;
/// Seconds in the MOS window.
const WINDOW_S: usize = 4;
/// Packets lost together (the mesh loses voice in short bursts).
const BURST: u64 = 2;
/// Loss (%) at or above which a call fails over the whole run: the lab's
/// MOS 3.6 at its 117 ms mouth-to-ear delay (G.729).
const FAIL_PCT: f64 = 2.4;

/// The E-model (ITU-T G.107, the voice crate's) for G.729 at 117 ms.
fn mos(loss_pct: f64) -> f64 {
    let d: f64 = 117.0;
    let id = 0.024 * d + if d > 177.3 { 0.11 * (d - 177.3) } else { 0.0 };
    let ie = 11.0 + (95.0 - 11.0) * loss_pct / (loss_pct + 19.0);
    let r: f64 = 93.2 - id - ie;
    if r <= 0.0 {
        1.0
    } else {
        (1.0 + 0.035 * r + 7e-6 * r * (r - 60.0) * (100.0 - r)).min(4.5)
    }
}

/// xorshift64*: deterministic noise.
struct Rng(u64);
impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Calls through a mesh whose mean voice loss grows with the TCP rate:
/// `base_pct` + `slope_pct` per capacity below the knee (the capacity the
/// calls leave), and steeply (the queue overflows) above it.
struct Calls {
    n: usize,
    capacity_bps: f64,
    base_pct: f64,
    slope_pct: f64,
    rng: Rng,
    /// Per call and direction: packets lost in each of the last seconds.
    lost: Vec<[[u64; WINDOW_S]; 2]>,
    /// Per call and direction: lost over the whole run.
    total: Vec<[u64; 2]>,
    seconds: u64,
}

impl Calls {
    fn new(n: usize, capacity_bps: f64, seed: u64) -> Self {
        Calls {
            n,
            capacity_bps,
            base_pct: 0.1,
            slope_pct: 1.0,
            rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
            lost: vec![[[0; WINDOW_S]; 2]; n],
            total: vec![[0; 2]; n],
            seconds: 0,
        }
    }

    fn mean_loss_pct(&self, rate: u64) -> f64 {
        let x = rate as f64 / self.capacity_bps;
        let over = (x - 1.0).max(0.0);
        (self.base_pct + self.slope_pct * x.min(1.0) + 40.0 * over).min(50.0)
    }

    /// One second at `rate`: each call's packets lost at random, in bursts
    /// of [`BURST`], upstream at the mean loss and downstream at a third of
    /// it (as measured at 2 hops: 1.15 % and 0.36 % at 296 kbit/s of TCP).
    fn advance(&mut self, rate: u64) {
        let mean = self.mean_loss_pct(rate) / 100.0;
        let slot = self.seconds as usize % WINDOW_S;
        for c in 0..self.n {
            for dir in 0..2 {
                // Each draw stands for BURST packets: lost with probability p.
                let p = if dir == 0 { mean } else { mean / 3.0 };
                let mut lost = 0;
                for _ in 0..PPS / BURST {
                    if self.rng.unit() < p {
                        lost += BURST;
                    }
                }
                self.lost[c][dir][slot] = lost;
                self.total[c][dir] += lost;
            }
        }
        self.seconds += 1;
    }

    /// The `percentile` of the calls' window MOS (each the lower of its
    /// two directions), as `airpack_voice::vpm::Vpm::network_mos` takes it.
    fn reading(&self, percentile: f64) -> f64 {
        let secs = (self.seconds as usize).clamp(1, WINDOW_S) as f64;
        let mut m: Vec<f64> = self
            .lost
            .iter()
            .map(|d| {
                let w =
                    |dir: usize| 100.0 * d[dir].iter().sum::<u64>() as f64 / (secs * PPS as f64);
                mos(w(0).max(w(1)))
            })
            .collect();
        m.sort_by(f64::total_cmp);
        m[(percentile * (m.len() - 1) as f64).floor() as usize]
    }

    /// Calls whose loss over the run stays below [`FAIL_PCT`] both ways.
    fn supported(&self) -> usize {
        let sent = (self.seconds * PPS) as f64;
        self.total
            .iter()
            .filter(|t| t.iter().all(|&l| 100.0 * l as f64 / sent < FAIL_PCT))
            .count()
    }
}

/// The search controller for `secs` s against `calls`, reading `percentile`;
/// returns the rate at each second.
fn run(calls: &mut Calls, percentile: f64, secs: u64) -> Vec<u64> {
    let mut rc = RateController::new(RateConfig::default()).unwrap();
    let n = calls.n;
    rc.on_timeout(0, None, 0);
    let mut rates = Vec::new();
    for s in 1..=secs {
        calls.advance(rc.rate_bps());
        let now: Micros = s * 1_000_000;
        if rc.poll_timeout().is_some_and(|t| now >= t) {
            rc.on_timeout(now, Some(calls.reading(percentile)), n);
        }
        rates.push(rc.rate_bps());
    }
    rates
}

fn mean(v: &[u64]) -> f64 {
    v.iter().sum::<u64>() as f64 / v.len() as f64
}

/// 16 calls leaving 300 kbit/s, as at 2 hops in the lab.
const CAP: f64 = 300_000.0;

#[test]
fn the_worst_of_16_calls_reads_poor_where_every_call_passes() {
    // Pinned at 90 % of the capacity: mean loss 1 %, every call passes over
    // a minute, yet the worst call's window reads below 3.6 most seconds;
    // the default percentile reads it mostly at or above 3.6 (measured at
    // 296 kbit/s, 2 hops: worst 46 of 55 s poor, 25th percentile 3 of 55).
    let mut c = Calls::new(16, CAP, 7);
    let (mut worst_poor, mut pct_poor) = (0, 0);
    for s in 0..60 {
        c.advance((0.9 * CAP) as u64);
        if s >= WINDOW_S {
            worst_poor += usize::from(c.reading(0.0) < 3.6);
            pct_poor += usize::from(c.reading(MOS_PERCENTILE) < 3.6);
        }
    }
    assert_eq!(c.supported(), 16);
    assert!(
        worst_poor >= 28,
        "worst call poor in {worst_poor} of 56 s, percentile {pct_poor}"
    );
    assert!(pct_poor <= 12, "percentile poor in {pct_poor} of 56 s");
}

#[test]
fn reading_a_percentile_the_search_settles_near_the_capacity_and_calls_pass() {
    for seed in [1u64, 2, 3] {
        let mut worst = Calls::new(16, CAP, seed);
        let w = run(&mut worst, 0.0, 90);
        let mut pct = Calls::new(16, CAP, seed);
        let p = run(&mut pct, MOS_PERCENTILE, 90);
        let (mw, mp) = (mean(&w[30..]), mean(&p[30..]));
        assert!(
            (0.75 * CAP..=1.05 * CAP).contains(&mp),
            "seed {seed}: percentile mean {mp} of {CAP}: {p:?}"
        );
        assert!(
            mp >= 1.2 * mw,
            "seed {seed}: percentile {mp} vs worst {mw}: {p:?} {w:?}"
        );
        assert_eq!(pct.supported(), 16, "seed {seed}: {p:?}");
    }
}
