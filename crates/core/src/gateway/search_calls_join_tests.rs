//! The search controller when calls leave and come back (issue 12 point 8;
//! rule 6 of [`super::search`]): a plant shaped on the lab's 2-hop gateway
//! run `--calls 16 --calls-at 30:8 --calls-at 60:16` (docs/results.md, "The
//! controller after calls leave and join"): 16 calls leave about
//! 300 kbit/s of TCP, 8 calls about 880 (the measured steady rates); the
//! calls' loss follows the rate 2 s late, over a 4 s window; the gateway
//! sees a change in the number of calls 2 s after it (a leaving call's BYE
//! and the next step; a joining call judged after 1 s of packets).

use super::rate::{RateConfig, RateController};
use crate::Micros;

/// TCP left beside no call and the TCP one call costs: 16 calls leave
/// 300 kbit/s, 8 calls 880 kbit/s.
const TOTAL_BPS: f64 = 1_460_000.0;
/// See [`TOTAL_BPS`].
const PER_CALL_BPS: f64 = 72_500.0;
/// Seconds in the MOS window.
const WINDOW_S: usize = 4;
/// Seconds from a rate to the calls' loss at it.
const DELAY_S: usize = 2;
/// Seconds from a change in the number of calls to the gateway seeing it.
const SEEN_S: u64 = 2;

/// The E-model (ITU-T G.107) for G.729 at 117 ms, as in
/// `search_calls_tests`.
fn mos(loss_pct: f64) -> f64 {
    let id = 0.024 * 117.0;
    let ie = 11.0 + (95.0 - 11.0) * loss_pct / (loss_pct + 19.0);
    let r: f64 = 93.2 - id - ie;
    (1.0 + 0.035 * r + 7e-6 * r * (r - 60.0) * (100.0 - r)).clamp(1.0, 4.5)
}

fn capacity(calls: usize) -> f64 {
    TOTAL_BPS - calls as f64 * PER_CALL_BPS
}

/// Mean voice loss (%) at `rate` beside `calls` calls: a little below the
/// knee, 10 % more per capacity above it.
fn loss_pct(rate: u64, calls: usize) -> f64 {
    let x = rate as f64 / capacity(calls);
    (0.1 + x.min(1.0) + 10.0 * (x - 1.0).max(0.0)).min(50.0)
}

/// One run: the calls active at each second from `calls(s)`; returns the
/// rate after each second's step (index = second) and the loss (%) of each
/// second.
fn run(secs: u64, calls: impl Fn(u64) -> usize) -> (Vec<u64>, Vec<f64>, RateController) {
    run_seen(secs, SEEN_S, calls)
}

/// [`run`] with calls joining seen `seen_s` seconds after they start (2:
/// judged calls; 0-1: calls heard at their first packet, seen at the step
/// after it); calls leaving are seen [`SEEN_S`] late either way (a BYE
/// takes a call out of both counts).
fn run_seen(
    secs: u64,
    seen_s: u64,
    calls: impl Fn(u64) -> usize,
) -> (Vec<u64>, Vec<f64>, RateController) {
    let mut rc = RateController::new(RateConfig::default()).unwrap();
    rc.on_timeout(0, None, 0);
    let (mut rates, mut losses) = (vec![rc.rate_bps()], vec![0.0]);
    let mut sent = vec![rc.rate_bps()];
    for s in 1..=secs {
        let n = calls(s);
        let at = s as usize;
        let load = sent[at.saturating_sub(DELAY_S)];
        losses.push(if n == 0 { 0.0 } else { loss_pct(load, n) });
        let from = at.saturating_sub(WINDOW_S - 1).max(1);
        let window = losses[from..=at].iter().sum::<f64>() / (at + 1 - from) as f64;
        let seen = calls(s.saturating_sub(seen_s)).max(calls(s.saturating_sub(SEEN_S)));
        let reading = (seen > 0).then(|| mos(window));
        let now: Micros = s * 1_000_000;
        rc.on_timeout(now, reading, seen);
        rates.push(rc.rate_bps());
        sent.push(rc.rate_bps());
    }
    (rates, losses, rc)
}

fn the_lab_schedule(s: u64) -> usize {
    match s {
        0..=29 => 16,
        30..=59 => 8,
        _ => 16,
    }
}

fn kbps(v: &[u64]) -> Vec<u64> {
    v.iter().map(|r| r / 1000).collect()
}

/// The lab's settle measure: the steady rate is the median of the phase's
/// last half; the settle time the first second from which every rate of
/// the phase is within +-25 % of it.
fn settle(rates: &[u64], from: usize, until: usize) -> (f64, usize) {
    let mut tail: Vec<u64> = rates[(from + until) / 2..until].to_vec();
    tail.sort_unstable();
    let steady = tail[tail.len() / 2] as f64;
    let ok = |r: u64| (0.75 * steady..=1.25 * steady).contains(&(r as f64));
    let first = (from..until)
        .find(|&s| rates[s..until].iter().all(|&r| ok(r)))
        .unwrap_or(until);
    (steady, first - from)
}

#[test]
fn after_calls_leave_the_rate_settles_within_10_s() {
    let (rates, _, _) = run(90, the_lab_schedule);
    let (steady, t) = settle(&rates, 30, 60);
    let what = format!("{:?}", kbps(&rates[25..60]));
    assert!(
        t <= 10,
        "settled {t} s after the leave (steady {steady}): {what}"
    );
    // And the steady rate is the 8 calls' capacity, not below it.
    let cap = capacity(8);
    assert!(
        (0.75 * cap..=1.15 * cap).contains(&steady),
        "steady {steady} of {cap}: {what}"
    );
}

#[test]
fn calls_rejoining_go_straight_to_the_rate_remembered_for_them() {
    let (rates, losses, _) = run(90, the_lab_schedule);
    let what = format!("{:?}", kbps(&rates[25..75]));
    // What the controller knew good for 16 calls when it saw them leave.
    let (_, _, before_leave) = run(30 + SEEN_S - 1, the_lab_schedule);
    let good16 = before_leave.search_view().good_bps.expect("a good rate");
    assert!(good16 as f64 <= 1.2 * capacity(16), "{good16}: {what}");
    // The first step that sees the 16 calls again (62 s) goes to it.
    let seen = 60 + SEEN_S as usize;
    assert!(rates[seen - 1] > good16, "{what}");
    assert_eq!(rates[seen], good16, "{what}");
    // And it is not cut further by the loss of the seconds before.
    assert!(rates[seen..seen + 6].iter().all(|&r| r == good16), "{what}");
    // From the window after that the calls lose what they lost at that
    // rate before they left (the seconds before the gateway saw them
    // back are lost at the 8 calls' rate: no controller can help those).
    let w = seen + DELAY_S + 1;
    let at16 = losses[20..30].iter().cloned().fold(0.0, f64::max);
    assert!(
        losses[w..90].iter().all(|&l| l <= at16 + 1e-9),
        "{:?} vs {at16}: {what}",
        &losses[w..90]
    );
}

#[test]
fn calls_leaving_twice_go_straight_to_the_rate_remembered_for_fewer() {
    // 16 -> 8 -> 16 -> 8: the second leave goes to the 8 calls' rate at the
    // step that sees it.
    let (rates, _, rc) = run(120, |s| match s {
        0..=29 | 60..=89 => 16,
        _ => 8,
    });
    let what = format!("{:?}", kbps(&rates[85..120]));
    let seen = 90 + SEEN_S as usize;
    assert!(rates[seen] as f64 >= 0.75 * capacity(8), "{what}");
    assert_eq!(rates[seen], rates[seen + 1], "{what}");
    assert!(rc.search_view().recalled >= 2, "{what}");
    let (steady, t) = settle(&rates, 90, 120);
    assert!(t <= 10, "settled {t} s (steady {steady}): {what}");
}

/// A controller with 16 calls at `rate`, settled (readings in the hold
/// band for two windows, `rate` known good); returns it and the time.
fn settled16(rate: u64) -> (RateController, Micros) {
    let cfg = RateConfig {
        initial_bps: rate,
        search: super::search::SearchConfig {
            start_per_call_bps: 0,
            ..Default::default()
        },
        ..RateConfig::default()
    };
    let mut rc = RateController::new(cfg).unwrap();
    rc.on_timeout(0, None, 0);
    for t in 1..=10 {
        rc.on_timeout(t * 1_000_000, Some(3.65), 16);
    }
    assert_eq!(rc.rate_bps(), rate);
    assert_eq!(rc.search_view().good_bps, Some(rate));
    (rc, 10_000_000)
}

#[test]
fn after_calls_leave_with_nothing_remembered_the_rate_climbs_at_once() {
    // 16 -> 12 calls: at once by the calls' ratio (x 16/12), then +50 %
    // every probe_us (2 s), the hold band within the window after the
    // leave not stopping it.
    let (mut rc, t) = settled16(300_000);
    rc.on_timeout(t + 1_000_000, Some(3.65), 12);
    assert_eq!(rc.rate_bps(), 400_000);
    assert!(rc.search_view().climbing);
    rc.on_timeout(t + 2_000_000, Some(3.8), 12);
    assert_eq!(rc.rate_bps(), 400_000, "one probe_us per step");
    rc.on_timeout(t + 3_000_000, Some(3.65), 12);
    assert_eq!(rc.rate_bps(), 600_000);
    // A bad reading after the window: back to the rate before the step
    // that failed, the climb over.
    rc.on_timeout(t + 5_000_000, Some(3.8), 12);
    assert_eq!(rc.rate_bps(), 900_000);
    rc.on_timeout(t + 6_000_000, Some(3.5), 12);
    assert_eq!(rc.rate_bps(), 600_000);
    assert!(!rc.search_view().climbing);

    // A bad reading within the window after the leave (the busier
    // network's loss) cuts, and the climb goes on from there.
    let (mut rc, t) = settled16(300_000);
    rc.on_timeout(t + 1_000_000, Some(3.5), 8);
    assert_eq!(rc.rate_bps(), 270_000);
    assert!(rc.search_view().climbing);
    rc.on_timeout(t + 2_000_000, Some(3.8), 8);
    assert_eq!(rc.rate_bps(), 270_000);
    rc.on_timeout(t + 3_000_000, Some(3.8), 8);
    assert_eq!(rc.rate_bps(), 405_000);
    // The hold band after the window ends the climb.
    rc.on_timeout(t + 5_000_000, Some(3.65), 8);
    assert_eq!(rc.rate_bps(), 405_000);
    assert!(!rc.search_view().climbing);
}

#[test]
fn a_leave_climbs_from_the_rate_remembered_for_more_calls_on_a_jittery_grid() {
    // The air's case: 16 calls known good at 300 kbit/s, a poor reading cut
    // to 270 just before 8 of them left. The climb starts from the 300
    // remembered for 16 (x 1.5 at once), and its next step comes a probe_us
    // later even when the steps' times jitter by a fraction of the period.
    let (mut rc, t) = settled16(300_000);
    rc.on_timeout(t + 1_000_000, Some(3.5), 16);
    assert_eq!(rc.rate_bps(), 270_000);
    rc.on_timeout(t + 2_100_000, Some(3.75), 8);
    assert_eq!(rc.rate_bps(), 450_000);
    assert_eq!(rc.search_view().recalled, 1);
    rc.on_timeout(t + 3_000_000, Some(3.75), 8);
    rc.on_timeout(t + 4_000_000, Some(3.75), 8);
    assert_eq!(rc.rate_bps(), 675_000, "1.9 s after the last step");
}

#[test]
fn calls_heard_at_their_first_packet_rejoin_at_the_remembered_rate_before_their_loss() {
    // The gateway counts calls heard (first packet): it sees the rejoin at
    // the step that follows it (0-1 s), not 2 s late. The rate goes to the
    // rate known good for 16 there, so from the delay after that step on
    // the calls lose no more than the 16 calls did before they left: only
    // the seconds the mesh had already been sent at the 8 calls' rate
    // before that step lose more (2 s behind the rate, as in the plant).
    for seen_s in [0, 1] {
        let (rates, losses, _) = run_seen(90, seen_s, the_lab_schedule);
        let what = format!("seen {seen_s} s late: {:?}", kbps(&rates[25..75]));
        let (_, _, before_leave) = run_seen(30 + seen_s, seen_s, the_lab_schedule);
        let good16 = before_leave.search_view().good_bps.expect("a good rate");
        assert!(good16 as f64 <= 1.2 * capacity(16), "{good16}: {what}");
        let seen = 60 + seen_s as usize;
        assert!(rates[seen - 1] > good16, "{what}");
        assert!(rates[seen..seen + 6].iter().all(|&r| r == good16), "{what}");
        let at16 = losses[20..30].iter().cloned().fold(0.0, f64::max);
        let from = seen + DELAY_S;
        assert!(
            losses[from..90].iter().all(|&l| l <= at16 + 1e-9),
            "{:?} vs {at16}: {what}",
            &losses[from..90]
        );
        // Fewer seconds at the 8 calls' rate than with the judged count's
        // 2 s late sighting.
        let (_, late, _) = run(90, the_lab_schedule);
        let over = |l: &[f64]| l[60..70].iter().filter(|&&x| x > at16 + 1e-9).count();
        assert!(
            over(&losses) < over(&late),
            "{} vs {} seconds over: {what}",
            over(&losses),
            over(&late)
        );
        // The phases settle within 10 s, as with the late sighting.
        for (from, until) in [(30, 60), (60, 90)] {
            let (steady, t) = settle(&rates, from, until);
            assert!(
                t <= 10,
                "settled {t} s after {from} (steady {steady}): {what}"
            );
        }
    }
}

#[test]
fn after_a_rejoin_to_the_remembered_rate_the_first_probe_is_gentle() {
    // 16 calls good at 300 kbit/s; 8 leave, the climb finds a bad rate
    // with 8 calls (poor at about 1 Mbit/s); the 8 rejoin. The 8 calls'
    // bad rate says nothing of where 16 calls' knee is (near the 300
    // recalled): the first probe past the rejoin's hold-off adds at most
    // `first_up` (+25 %), not a bisection step towards it (+50 %).
    let (mut rc, mut t) = settled16(300_000);
    let step = |rc: &mut RateController, t: &mut Micros, mos: f64, calls: usize| {
        *t += 1_000_000;
        rc.on_timeout(*t, Some(mos), calls)
    };
    step(&mut rc, &mut t, 3.65, 8);
    while rc.rate_bps() < 900_000 {
        step(&mut rc, &mut t, 3.8, 8);
    }
    for _ in 0..3 {
        step(&mut rc, &mut t, 3.8, 8);
    }
    step(&mut rc, &mut t, 3.5, 8);
    assert!(
        rc.search_view().bad_bps.is_some(),
        "a bad rate with 8 calls"
    );
    for _ in 0..10 {
        step(&mut rc, &mut t, 3.65, 8);
    }
    let before = rc.rate_bps();
    assert!(before > 600_000, "{before}");
    // The rejoin: to the 16 calls' rate at once, held off through the old
    // loss, then fine.
    assert_eq!(step(&mut rc, &mut t, 3.7, 16), 300_000);
    let mut rates = vec![];
    for mos in [2.7, 3.0, 3.2, 3.4, 3.8, 3.8, 3.8, 3.8, 3.8, 3.8] {
        rates.push(step(&mut rc, &mut t, mos, 16));
    }
    let first_up = rates.iter().copied().find(|&r| r != 300_000);
    assert!(first_up.is_some_and(|r| r <= 375_000), "{:?}", kbps(&rates));
}
