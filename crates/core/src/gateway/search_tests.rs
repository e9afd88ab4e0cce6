//! The search controller against a simulated plant: a toy mesh whose voice
//! loses packets when the TCP rate stays above the capacity the calls leave,
//! seen through a sliding MOS window, with calls joining and leaving
//! mid-run. And the seed's controller against the same plant, for contrast.

use super::rate::{Mode, RateConfig, RateController};
use super::search::{Phase, SearchConfig};
use crate::Micros;
use proptest::prelude::*;

/// Plant time step.
const DT: Micros = 100_000;
/// MOS with no loss (the lab's gateway reading: G.729, 30 ms wired, 60 ms playout).
const MOS_CLEAN: f64 = 3.82;
/// MOS lost per percent of voice loss (one packet of 200 in a 4 s window
/// costs about 0.09).
const MOS_PER_PCT: f64 = 0.18;

/// A toy mesh: the leftover capacity for TCP is `total - calls * per_call`;
/// what TCP sends above it queues at the bottleneck (bounded, `queue_bits`),
/// and once the queue is full the overflow's share of the arrivals is lost,
/// voice alike. Voice loss is averaged over a sliding window (like the VPM)
/// and mapped to a MOS. `noise`: one deterministic extra loss burst (in
/// percent over one plant step) every `noise_every` steps.
struct Plant {
    total_bps: f64,
    per_call_bps: f64,
    queue_bits: f64,
    q: f64,
    window: Vec<f64>,
    noise_pct: f64,
    noise_every: u64,
    t: u64,
}

impl Plant {
    fn new(total_bps: f64, per_call_bps: f64) -> Self {
        Plant {
            total_bps,
            per_call_bps,
            queue_bits: 150_000.0,
            q: 0.0,
            window: vec![0.0; 40], // 4 s of 100 ms steps
            noise_pct: 0.0,
            noise_every: 0,
            t: 0,
        }
    }
    fn capacity(&self, calls: usize) -> f64 {
        (self.total_bps - calls as f64 * self.per_call_bps).max(0.0)
    }
    /// Advance one step with TCP at `rate` and `calls` calls.
    fn advance(&mut self, rate: u64, calls: usize) {
        let cap = self.capacity(calls);
        let r = rate as f64;
        self.q += (r - cap) * DT as f64 / 1e6;
        let mut loss_pct = 0.0;
        if self.q > self.queue_bits {
            loss_pct = 100.0 * (r - cap) / r;
            self.q = self.queue_bits;
        }
        self.q = self.q.max(0.0);
        self.t += 1;
        if self.noise_every > 0 && self.t % self.noise_every == 0 {
            loss_pct += self.noise_pct;
        }
        self.window.rotate_left(1);
        *self.window.last_mut().unwrap() = loss_pct.min(100.0);
    }
    fn mos(&self, calls: usize) -> Option<f64> {
        if calls == 0 {
            return None;
        }
        let loss = self.window.iter().sum::<f64>() / self.window.len() as f64;
        Some((MOS_CLEAN - MOS_PER_PCT * loss).max(1.0))
    }
}

/// Runs the controller against the plant for `secs` seconds with the number
/// of calls given per second by `calls(second)`; returns the rate at each
/// second and the plant's MOS at each second.
fn run(
    cfg: RateConfig,
    plant: &mut Plant,
    secs: u64,
    calls: impl Fn(u64) -> usize,
) -> (Vec<u64>, Vec<f64>) {
    let mut rc = RateController::new(cfg).unwrap();
    rc.on_timeout(0, None, 0);
    let (mut rates, mut moses) = (Vec::new(), Vec::new());
    let mut now: Micros = 0;
    for sec in 0..secs {
        let n = calls(sec);
        for _ in 0..(1_000_000 / DT) {
            now += DT;
            plant.advance(rc.rate_bps(), n);
            if rc.poll_timeout().is_some_and(|t| now >= t) {
                rc.on_timeout(now, plant.mos(n), n);
            }
        }
        rates.push(rc.rate_bps());
        moses.push(plant.mos(n).unwrap_or(MOS_CLEAN));
    }
    (rates, moses)
}

/// First second from which every later rate (up to `until`) lies within
/// [lo, hi] of the capacity.
fn settled_from(
    rates: &[u64],
    from: usize,
    until: usize,
    cap: f64,
    lo: f64,
    hi: f64,
) -> Option<usize> {
    let ok = |r: u64| (r as f64) >= lo * cap && (r as f64) <= hi * cap;
    (from..until).find(|&s| rates[s..until].iter().all(|&r| ok(r)))
}

/// How a run behaves after a change at `from` (until the next at `until`):
/// the first second the rate is within [0.6, 1.2] x the capacity, the
/// share of the seconds from then on within that band, the lowest and the
/// highest rate from then on (relative to the capacity).
fn after_change(rates: &[u64], from: usize, until: usize, cap: f64) -> (usize, f64, f64, f64) {
    let ok = |r: u64| (r as f64) >= 0.6 * cap && (r as f64) <= 1.2 * cap;
    let first = (from..until).find(|&s| ok(rates[s])).unwrap_or(until);
    let rest = &rates[first..until];
    let inside = rest.iter().filter(|&&r| ok(r)).count() as f64 / rest.len().max(1) as f64;
    let lo = rest.iter().min().map_or(0.0, |&r| r as f64 / cap);
    let hi = rest.iter().max().map_or(0.0, |&r| r as f64 / cap);
    (first - from, inside, lo, hi)
}

/// The lab's case: 2 hops, 16 calls leave about 300 kbit/s.
fn lab_plant() -> Plant {
    // 18 calls' worth of capacity at 2 669 kbit/s of TCP alone: 148 kbit/s per call.
    Plant::new(2_669_000.0, 148_000.0)
}

#[test]
fn from_a_low_start_it_settles_near_the_capacity_and_stays() {
    let mut p = lab_plant();
    let cap = p.capacity(16);
    let (rates, moses) = run(RateConfig::default(), &mut p, 90, |_| 16);
    let (first, inside, lo, hi) = after_change(&rates, 0, 90, cap);
    assert!(first <= 10, "{first} s to reach the band: {rates:?}");
    assert!(
        inside >= 0.8 && lo >= 0.4 && hi <= 1.5,
        "{inside} {lo}-{hi}: {rates:?}"
    );
    let s = settled_from(&rates, 0, 90, cap, 0.5, 1.2).expect("settles");
    assert!(s <= 30, "settled from {s} s: {rates:?}");
    // Over the last minute: mostly near the capacity, the voice mostly fine.
    let tail = &rates[30..];
    let mean = tail.iter().sum::<u64>() as f64 / tail.len() as f64;
    assert!(
        mean >= 0.75 * cap && mean <= 1.05 * cap,
        "mean {mean} of {cap}: {rates:?}"
    );
    // (This plant is harsh: a rate 1 % above its capacity fills the queue
    // and then loses voice; every probe past it costs a few seconds.)
    let bad = moses[30..].iter().filter(|&&m| m < 3.6).count();
    assert!(bad <= 12, "{bad} s below 3.6: {moses:?} {rates:?}");
}

#[test]
fn the_seeds_controller_from_1_mbit_does_not_within_a_minute() {
    // The measured failure (docs/results.md 7(b)): halving to the floor,
    // then +3-5 % a second.
    let mut p = lab_plant();
    let cap = p.capacity(16);
    let (rates, _) = run(RateConfig::seed(), &mut p, 60, |_| 16);
    assert!(rates[..10].iter().any(|&r| r <= 100_000), "{rates:?}");
    let search = run(RateConfig::default(), &mut lab_plant(), 60, |_| 16).0;
    let sum = |v: &[u64]| v.iter().sum::<u64>() as f64;
    assert!(
        sum(&search[..]) > 1.3 * sum(&rates[..]),
        "search {search:?} vs seed {rates:?} (capacity {cap})"
    );
}

#[test]
fn settles_within_10_s_after_calls_join_and_leave() {
    // 16 calls, then 10 join (capacity 300 -> 0.3x... stays > floor), then
    // 14 leave: the rate is within the band of the new capacity within 10 s
    // and stays there until the next change.
    let mut p = Plant::new(2_669_000.0, 100_000.0);
    let calls = |s: u64| match s {
        0..=59 => 16,
        60..=119 => 20,
        _ => 6,
    };
    let (rates, moses) = run(RateConfig::default(), &mut p, 180, calls);
    for (from, until, n) in [(60usize, 120usize, 20usize), (120, 180, 6)] {
        let cap = p.capacity(n);
        let (first, inside, lo, hi) = after_change(&rates, from, until, cap);
        let what = format!("after {from} s (capacity {cap}): {:?}", &rates[from..until]);
        assert!(first <= 10, "{first} s to reach the band {what}");
        assert!(inside >= 0.8, "{inside} of the time in the band {what}");
        assert!(lo >= 0.45 && hi <= 1.5, "{lo}-{hi} {what}");
    }
    // Calls joining cut the rate fast enough that the voice recovers within 10 s.
    let fine = moses[70..120].iter().filter(|&&m| m >= 3.6).count();
    assert!(fine >= 40, "{:?} {:?}", &moses[60..120], &rates[60..120]);
}

#[test]
fn a_noisy_plant_never_sticks_at_the_floor_and_oscillates_within_a_bound() {
    // A loss burst that alone reads poor for a whole window (60 % over one
    // 100 ms step = 1.5 % over the window: MOS 3.55) every 15 s, whatever
    // the rate.
    let mut p = lab_plant();
    p.noise_pct = 60.0;
    p.noise_every = 150;
    let cap = p.capacity(16);
    let (rates, _) = run(RateConfig::default(), &mut p, 150, |_| 16);
    let tail = &rates[40..];
    let (min, max) = (*tail.iter().min().unwrap(), *tail.iter().max().unwrap());
    assert!(min as f64 >= 0.4 * cap, "stuck low: {rates:?}");
    assert!((max as f64) <= 1.3 * cap, "overshoot: {rates:?}");
    assert!(rates.iter().all(|&r| r > 64_000) || rates[40..].iter().all(|&r| r > 64_000));
    let mean = tail.iter().sum::<u64>() as f64 / tail.len() as f64;
    assert!(mean >= 0.6 * cap, "mean {mean} of {cap}: {rates:?}");
}

#[test]
fn one_cut_per_window_for_one_burst() {
    // A single choke burst (the window stays low for 4 readings): the seed
    // halves four times, the search cuts once.
    let burst = |mode: Mode| {
        // The start and the first probes as before the per-call start:
        // from the configured rate, +50 % steps.
        let cfg = RateConfig {
            mode,
            initial_bps: 400_000,
            floor_bps: 1_000,
            search: SearchConfig {
                start_per_call_bps: 0,
                first_up: 0.5,
                ..SearchConfig::default()
            },
            ..RateConfig::default()
        };
        let mut rc = RateController::new(cfg).unwrap();
        rc.on_timeout(0, None, 0);
        let mut now = 0;
        // Settle at 400 kbit/s with fine voice for 10 s.
        for _ in 0..10 {
            now += 1_000_000;
            rc.on_timeout(now, Some(3.75), 4);
        }
        let before = rc.rate_bps();
        for _ in 0..4 {
            now += 1_000_000;
            rc.on_timeout(now, Some(3.0), 4);
        }
        (before, rc.rate_bps(), rc.search_view())
    };
    let (b, a, _) = burst(Mode::Seed);
    assert_eq!(a, b / 16, "seed: four halvings");
    let (b, a, v) = burst(Mode::Search);
    // It had probed 400 -> 600 -> 900 kbit/s (a full good window each):
    // one cut, back to the known good rate.
    assert_eq!((b, a), (900_000, 600_000), "search: one cut");
    assert_eq!((v.cuts, v.held_off, v.phase), (1, 3, Phase::HoldOff));
    assert_eq!(v.bad_bps, Some(b));
}

/// A controller whose 3 calls have been on for two windows at `rate`
/// (readings in the hold band); returns it and the time of the last step.
fn warm(rate: u64) -> (RateController, Micros) {
    let cfg = RateConfig {
        initial_bps: rate,
        search: SearchConfig {
            start_per_call_bps: 0,
            ..SearchConfig::default()
        },
        ..RateConfig::default()
    };
    let mut rc = RateController::new(cfg).unwrap();
    rc.on_timeout(0, None, 0);
    for t in 1..=8 {
        rc.on_timeout(t * 1_000_000, Some(3.65), 3);
    }
    assert_eq!(rc.rate_bps(), rate);
    (rc, 8_000_000)
}

#[test]
fn worse_during_a_hold_off_cuts_again() {
    let (mut rc, t) = warm(800_000);
    rc.on_timeout(t + 1_000_000, Some(3.2), 3);
    assert_eq!(rc.rate_bps(), 400_000);
    rc.on_timeout(t + 2_000_000, Some(2.9), 3);
    assert_eq!(
        rc.rate_bps(),
        400_000,
        "1 s after the cut: the loss from before it, however bad"
    );
    rc.on_timeout(t + 3_000_000, Some(2.8), 3);
    assert_eq!(rc.rate_bps(), 400_000, "not below the lowest by the margin");
    rc.on_timeout(t + 4_000_000, Some(2.5), 3);
    assert_eq!(
        rc.rate_bps(),
        200_000,
        "0.3 below the lowest since: cut again"
    );
    let v = rc.search_view();
    assert_eq!((v.cuts, v.recuts, v.held_off), (2, 1, 2));
    assert_eq!(
        v.bad_bps,
        Some(400_000),
        "new loss after the cut: the rate cut to is bad"
    );
    assert_eq!(v.window_peak_bps, 800_000);
}

#[test]
fn the_loss_from_before_a_cut_passing_is_not_held_against_the_rate() {
    // A probe from 400 to 500 kbit/s fails; its loss keeps showing for a
    // while after the cut back to 400 (the mesh's queues, the window):
    // poor readings that improve on the worst since the cut are that loss
    // passing, not a reason to cut again or to remember 400 as bad.
    let (mut rc, t) = warm(400_000);
    for k in 1..=4 {
        rc.on_timeout(t + k * 1_000_000, Some(3.75), 3);
    }
    assert_eq!(rc.rate_bps(), 500_000, "first probe: +25 %");
    let t = t + 4_000_000;
    rc.on_timeout(t + 1_000_000, Some(3.5), 3);
    assert_eq!(rc.rate_bps(), 400_000, "back to the known good rate");
    for (k, m) in [(2, 3.2), (3, 3.1), (4, 3.2), (5, 3.4), (6, 3.5)] {
        rc.on_timeout(t + k * 1_000_000, Some(m), 3);
        assert_eq!(rc.rate_bps(), 400_000, "{k} s after the cut, MOS {m}");
    }
    let v = rc.search_view();
    assert_eq!((v.cuts, v.recuts), (1, 0));
    assert_eq!(v.bad_bps, Some(500_000));
    // Without the rule (the same readings 1 s after the cut cutting again
    // at once) the rate would have halved to 200 kbit/s.
}

#[test]
fn memory_of_the_bad_rate_decays_and_calls_leaving_forget_it() {
    let c = RateConfig::default();
    let s = SearchConfig::default();
    let (mut rc, t) = warm(128_000);
    rc.on_timeout(t + 1_000_000, Some(3.5), 3); // poor at the start rate
    let v = rc.search_view();
    assert_eq!(v.bad_bps, Some(128_000));
    assert_eq!(rc.rate_bps(), 115_200, "the poor band's -10 %");
    let mut st = super::search::Search::default();
    assert_eq!(st.bad_now(&s, 0), None);
    st.step(&c, &s, 200_000, 0, Some(3.75), 5);
    st.step(&c, &s, 200_000, 1_000_000, Some(3.5), 5);
    assert_eq!(st.bad_now(&s, 1_000_000), None, "calls just joined");
    st.step(&c, &s, 200_000, 9_000_000, Some(3.5), 5);
    assert_eq!(st.bad_now(&s, 9_000_000 + s.bad_memory_us), Some(200_000));
    assert_eq!(
        st.bad_now(&s, 9_000_000 + 2 * s.bad_memory_us),
        Some(400_000)
    );
    assert_eq!(
        st.bad_now(&s, 9_000_000 + 3 * s.bad_memory_us),
        Some(800_000)
    );
    // A call leaves: the bad rate is forgotten.
    st.step(&c, &s, 180_000, 10_000_000, Some(3.75), 4);
    assert_eq!(st.bad_now(&s, 10_000_000), None);
}

#[test]
fn the_first_calls_set_the_rate_to_the_start_per_call() {
    let cfg = RateConfig {
        initial_bps: 200_000,
        ..RateConfig::default()
    };
    let per_call = cfg.search.start_per_call_bps;
    let mut rc = RateController::new(cfg).unwrap();
    rc.on_timeout(0, None, 0);
    let mut now = 0;
    for _ in 0..30 {
        now += 1_000_000;
        rc.on_timeout(now, None, 0);
    }
    assert!(rc.rate_bps() > 1_000_000, "no calls: grows");
    now += 1_000_000;
    rc.on_timeout(now, Some(3.8), 20);
    assert_eq!(
        rc.rate_bps(),
        20 * per_call,
        "down to the start for 20 calls"
    );
    // And waits a full window before growing again.
    for _ in 0..3 {
        now += 1_000_000;
        rc.on_timeout(now, Some(3.8), 20);
        assert_eq!(rc.rate_bps(), 20 * per_call);
    }
    now += 1_000_000;
    rc.on_timeout(now, Some(3.8), 20);
    assert_eq!(rc.rate_bps(), 25 * per_call, "then +25 %");
    // Calls appearing from none set the start up too, and more of them in
    // the first windows raise it while it holds.
    let mut rc = RateController::new(RateConfig::default()).unwrap();
    rc.on_timeout(0, None, 0);
    rc.on_timeout(1_000_000, Some(3.8), 10);
    assert_eq!(rc.rate_bps(), 10 * per_call);
    rc.on_timeout(2_000_000, Some(3.8), 40);
    assert_eq!(rc.rate_bps(), 40 * per_call);
    // Few calls: the floor.
    let mut rc = RateController::new(RateConfig::default()).unwrap();
    rc.on_timeout(0, None, 0);
    rc.on_timeout(1_000_000, Some(3.8), 2);
    assert_eq!(rc.rate_bps(), RateConfig::default().floor_bps);
}

#[test]
fn without_a_start_per_call_the_first_call_brings_the_rate_down_to_the_initial() {
    let cfg = RateConfig {
        initial_bps: 200_000,
        search: SearchConfig {
            start_per_call_bps: 0,
            ..SearchConfig::default()
        },
        ..RateConfig::default()
    };
    let mut rc = RateController::new(cfg).unwrap();
    rc.on_timeout(0, None, 0);
    let mut now = 0;
    for _ in 0..30 {
        now += 1_000_000;
        rc.on_timeout(now, None, 0);
    }
    now += 1_000_000;
    rc.on_timeout(now, Some(3.8), 2);
    assert_eq!(rc.rate_bps(), 200_000);
}

#[test]
fn the_first_probes_are_gentle_then_the_steps_grow() {
    // 40 calls, readings fine throughout: +25 % three times, then +50 % a
    // window.
    let mut rc = RateController::new(RateConfig::default()).unwrap();
    rc.on_timeout(0, None, 0);
    let mut rates = Vec::new();
    for t in 1..=21 {
        rc.on_timeout(t * 1_000_000, Some(3.8), 40);
        rates.push(rc.rate_bps() / 1000);
    }
    let steps: Vec<u64> = rates
        .windows(2)
        .filter(|w| w[1] != w[0])
        .map(|w| w[1])
        .collect();
    assert_eq!(steps, [600, 750, 937, 1406, 2109], "{rates:?}");
    // A reading in the hold band (the target) makes the next probe gentle again.
    rc.on_timeout(22_000_000, Some(3.65), 40);
    for t in 23..=26 {
        rc.on_timeout(t * 1_000_000, Some(3.8), 40);
    }
    assert_eq!(
        rc.rate_bps(),
        2_636_719,
        "+25 % after the hold reading (not +50 %)"
    );
}

#[test]
fn invalid_search_settings_are_refused() {
    for f in [
        (|s: &mut SearchConfig| s.settle_us = 0) as fn(&mut SearchConfig),
        |s| s.probe_us = 0,
        |s| s.fast_up = f64::NAN,
        |s| s.fast_up = -0.1,
        |s| s.near = 1.0,
        |s| s.bad_memory_us = 0,
    ] {
        let mut c = RateConfig::default();
        f(&mut c.search);
        assert_eq!(c.validate(), Err(super::rate::RateConfigError::Search));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any capacity left in 150 kbit/s - 3 Mbit/s, any number of calls, any
    /// rate before them: the rate settles into [0.5, 1.3] x capacity within
    /// 60 s of a start and never hits the floor afterwards. (Within 40 s
    /// before the per-call start: from 1 call's 64 kbit/s the gentle first
    /// probes take up to 60 s to reach 40 times that at a light load.)
    #[test]
    fn settles_for_any_capacity(total in 200_000f64..3_000_000f64, calls in 1usize..10,
                                start_kbps in 64u64..2000) {
        let per_call = total * 0.05;
        let mut p = Plant::new(total, per_call);
        let cap = p.capacity(calls);
        prop_assume!(cap >= 150_000.0);
        let cfg = RateConfig { initial_bps: start_kbps * 1000, ..RateConfig::default() };
        let (rates, _) = run(cfg, &mut p, 100, |_| calls);
        let s = settled_from(&rates, 0, 100, cap, 0.5, 1.3);
        prop_assert!(s.is_some_and(|s| s <= 60), "capacity {cap}: {rates:?}");
        prop_assert!(rates[60..].iter().all(|&r| r > 64_000));
    }

    /// Arbitrary readings: the search stays within the bounds.
    #[test]
    fn any_readings_stay_within_bounds(readings in proptest::collection::vec(
            (prop_oneof![Just(None), Just(Some(f64::NAN)), (0.0f64..5.0).prop_map(Some)], 0usize..40, 1u64..3_000_000),
            0..200),
            floor in 0u64..200_000, span in 1u64..10_000_000) {
        let cfg = RateConfig { floor_bps: floor, ceiling_bps: floor + span, ..RateConfig::default() };
        let mut rc = RateController::new(cfg).unwrap();
        let mut now = 0;
        rc.on_timeout(now, None, 0);
        for (mos, calls, dt) in readings {
            now += dt;
            let r = rc.on_timeout(now, mos, calls);
            prop_assert!(cfg.floor_bps <= r && r <= cfg.ceiling_bps);
        }
    }
}

#[test]
fn the_first_window_of_new_calls_is_not_held_against_the_rate() {
    let mut rc = RateController::new(RateConfig::default()).unwrap();
    rc.on_timeout(0, None, 0);
    // Calls start: a choke reading from their first packets, at the start rate.
    rc.on_timeout(1_000_000, Some(3.2), 16);
    assert_eq!(
        rc.rate_bps(),
        192_000,
        "the start for 16 calls, not acted on"
    );
    // The window slides over their start: still poor readings, not acted on.
    for t in 2..=6 {
        rc.on_timeout(t * 1_000_000, Some(3.45), 16);
    }
    assert_eq!(rc.rate_bps(), 192_000);
    assert_eq!(rc.search_view().held_off, 6);
    rc.on_timeout(7_000_000, Some(3.75), 16);
    assert_eq!(rc.rate_bps(), 240_000, "then up, nothing remembered");
    assert_eq!(rc.search_view().bad_bps, None);
    // More calls join: a bad reading cuts, but is not remembered.
    for t in 8..=14 {
        rc.on_timeout(t * 1_000_000, Some(3.75), 16);
    }
    let before = rc.rate_bps();
    rc.on_timeout(15_000_000, Some(3.5), 18);
    assert!(rc.rate_bps() < before);
    assert_eq!(rc.search_view().bad_bps, None);
    // Two windows after they joined, a bad reading is remembered again.
    for t in 16..=22 {
        rc.on_timeout(t * 1_000_000, Some(3.75), 18);
    }
    rc.on_timeout(23_000_000, Some(3.5), 18);
    assert!(rc.search_view().bad_bps.is_some());
}

#[test]
fn the_window_after_calls_left_is_not_remembered_as_a_bad_rate() {
    // 16 calls at a rate the search found bad at 300 kbit/s.
    let (mut rc, t0) = warm(250_000);
    let mut t = t0;
    // (warm runs 3 calls; 16 join, then settle two windows in the hold band)
    for _ in 0..10 {
        t += 1_000_000;
        rc.on_timeout(t, Some(3.65), 16);
    }
    // Half the calls leave; the first reading still holds the loss of 16.
    t += 1_000_000;
    let before = rc.rate_bps();
    rc.on_timeout(t, Some(3.5), 8);
    assert!(rc.rate_bps() < before, "a bad reading still cuts");
    assert_eq!(
        rc.search_view().bad_bps,
        None,
        "but the rate is not remembered as bad for the 8 calls"
    );
    // One window later a bad reading is the 8 calls' own: remembered.
    for _ in 0..4 {
        t += 1_000_000;
        rc.on_timeout(t, Some(3.75), 8);
    }
    t += 1_000_000;
    rc.on_timeout(t, Some(3.5), 8);
    assert!(rc.search_view().bad_bps.is_some());
}

#[test]
fn calls_joining_end_a_cuts_hold_off() {
    let (mut rc, t0) = warm(800_000);
    let mut t = t0;
    // A poor reading cuts; one second later calls join and the reading is
    // choke: new load, cut at once (not held off as the first cut's loss).
    t += 1_000_000;
    rc.on_timeout(t, Some(3.5), 3);
    let after_cut = rc.rate_bps();
    assert!(after_cut < 800_000);
    t += 1_000_000;
    rc.on_timeout(t, Some(3.1), 6);
    assert!(
        rc.rate_bps() < after_cut,
        "{} not cut below {after_cut}",
        rc.rate_bps()
    );
    // Without the join the same reading is held off (the first cut's loss).
    let (mut rc, t0) = warm(800_000);
    rc.on_timeout(t0 + 1_000_000, Some(3.5), 3);
    let after_cut = rc.rate_bps();
    rc.on_timeout(t0 + 2_000_000, Some(3.1), 3);
    assert_eq!(rc.rate_bps(), after_cut);
}
