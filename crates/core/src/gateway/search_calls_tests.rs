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
pub(super) fn mos(loss_pct: f64) -> f64 {
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
pub(super) struct Calls {
    pub(super) n: usize,
    pub(super) capacity_bps: f64,
    base_pct: f64,
    slope_pct: f64,
    rng: Rng,
    /// Per call and direction: packets lost in each of the last seconds.
    lost: Vec<[[u64; WINDOW_S]; 2]>,
    /// Per call and direction: lost over the whole run.
    total: Vec<[u64; 2]>,
    seconds: u64,
    /// The rates of the last seconds, newest last. The loss follows the
    /// highest of the rates `delay_s` to `delay_s + 1` seconds ago: on the
    /// air a probe's loss shows 2-3 s after it (the flows fill the new rate
    /// and the mesh's queues), and lasts about as long after the cut.
    recent: Vec<u64>,
    delay_s: usize,
    /// Mean loss (%) added per capacity above the knee.
    over_pct: f64,
}

impl Calls {
    pub(super) fn new(n: usize, capacity_bps: f64, seed: u64) -> Self {
        Calls {
            n,
            capacity_bps,
            base_pct: 0.1,
            slope_pct: 1.0,
            rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
            lost: vec![[[0; WINDOW_S]; 2]; n],
            total: vec![[0; 2]; n],
            seconds: 0,
            recent: Vec::new(),
            delay_s: 0,
            over_pct: 40.0,
        }
    }

    /// The loss follows the rate `delay_s` (and `delay_s + 1`) seconds late.
    pub(super) fn delay(mut self, delay_s: usize) -> Self {
        self.delay_s = delay_s;
        self
    }

    /// Mean loss (%) added per capacity above the knee.
    pub(super) fn over(mut self, pct: f64) -> Self {
        self.over_pct = pct;
        self
    }

    fn mean_loss_pct(&self, rate: u64) -> f64 {
        let x = rate as f64 / self.capacity_bps;
        let over = (x - 1.0).max(0.0);
        (self.base_pct + self.slope_pct * x.min(1.0) + self.over_pct * over).min(50.0)
    }

    /// One second at `rate`: each call's packets lost at random, in bursts
    /// of [`BURST`], upstream at the mean loss and downstream at a third of
    /// it (as measured at 2 hops: 1.15 % and 0.36 % at 296 kbit/s of TCP).
    pub(super) fn advance(&mut self, rate: u64) {
        self.recent.push(rate);
        if self.recent.len() > self.delay_s + 2 {
            self.recent.remove(0);
        }
        // The two rates `delay_s` and `delay_s + 1` s ago (the first rate
        // while there are none yet); no delay: this second's alone.
        let k = self.recent.len();
        let old = &self.recent[..k.saturating_sub(self.delay_s).max(1)];
        let load = if self.delay_s == 0 {
            rate
        } else {
            old.iter().rev().take(2).copied().max().unwrap_or(rate)
        };
        let mean = self.mean_loss_pct(load) / 100.0;
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
    pub(super) fn reading(&self, percentile: f64) -> f64 {
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
    pub(super) fn supported(&self) -> usize {
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

/// Rates of one run, for a failure message: the rate at each second in
/// kbit/s.
pub(super) fn kbps(v: &[u64]) -> Vec<u64> {
    v.iter().map(|r| r / 1000).collect()
}

/// A plant for one of seed 003's chains at about 90 % of its voice
/// capacity (docs/results.md, seed 003, "Other hop counts"): `n` calls
/// leaving `cap` bit/s, the loss `delay` 2 s behind the rate, `over` %
/// more loss per capacity above the knee: about 10 at 1-2 hops (432 kbit/s,
/// 1.46 x the right rate at 2 hops, read 4 % upstream loss), steeper at 4-5
/// hops (5 hops: 128 kbit/s, 1.07 x, read 3-8 %).
pub(super) fn chain(n: usize, cap: f64, over: f64, seed: u64) -> Calls {
    Calls::new(n, cap, seed).delay(2).over(over)
}

/// 5 hops, 8 calls: about 120 kbit/s left.
const LONG: (usize, f64, f64) = (8, 120_000.0, 40.0);

#[test]
fn at_a_long_chain_the_start_does_not_overshoot() {
    // The measured failure: the 128 kbit/s start was above what 8 calls
    // leave at 5 hops, and the calls' first windows are not judged: 8 s of
    // choke. The start per call stays below it; the first probe still may
    // cross the knee (the search must find it), which over 20 s costs
    // calls in some runs at this steep knee, far fewer than the old start.
    let (n, cap, over) = LONG;
    let mut kept = 0;
    for seed in 1..=6u64 {
        let mut c = chain(n, cap, over, seed);
        let r = run(&mut c, MOS_PERCENTILE, 20);
        let what = format!("seed {seed}: {:?}", kbps(&r));
        assert!(
            r[..10].iter().all(|&x| x as f64 <= cap),
            "above {cap} in the first 10 s: {what}"
        );
        assert!(mean(&r) >= 0.8 * cap, "{what}");
        kept += c.supported();
    }
    assert!(kept >= 36, "{kept} of 48 calls kept over 20 s");
}

#[test]
fn at_2_hops_the_first_probe_costs_no_call_over_20_s() {
    // The measured failure: 128 -> 192 -> 288 -> 432 kbit/s (+50 % with no
    // bad rate known) at 14 s; the overshoot lost 1-2 of 16 calls over 20 s.
    for seed in 1..=6u64 {
        let mut c = chain(16, CAP, 10.0, seed);
        let r = run(&mut c, MOS_PERCENTILE, 20);
        let what = format!("seed {seed}: {:?}", kbps(&r));
        assert_eq!(c.supported(), 16, "{what}");
        assert!(r.iter().all(|&x| x as f64 <= 1.3 * CAP), "{what}");
        assert!(mean(&r) >= 0.7 * CAP, "{what}");
    }
}

#[test]
fn at_every_hop_count_over_a_minute_calls_pass_near_the_capacity() {
    // 1-5 hops at about 90 % of the voice capacity (40, 16, 11, 9, 8 calls
    // leaving about 743, 300, 149, 127, 120 kbit/s).
    for (n, cap, over) in [
        (40usize, 743_000.0, 10.0),
        (16, CAP, 10.0),
        (11, 149_000.0, 20.0),
        (9, 127_000.0, 40.0),
        LONG,
    ] {
        for seed in 1..=3u64 {
            let mut c = chain(n, cap, over, seed);
            let r = run(&mut c, MOS_PERCENTILE, 60);
            let what = format!("{n} calls, {cap}, seed {seed}: {:?}", kbps(&r));
            assert_eq!(c.supported(), n, "{what}");
            assert!(mean(&r) >= 0.75 * cap, "{what}");
        }
    }
}
