//! The capacity search over the number of calls of one setup: doubling,
//! then bisection, then a confirming run, re-measuring the points a busy
//! machine disturbed.
//!
//! Owns: [`SetupResult`], [`capacity_search`] and its parts (a point's seed,
//! keeping a point).
//!
//! Must not touch: how a point is measured (the runner is passed in; the
//! default is [`super::run_point`]) or summarized ([`super::point`]).

use super::{point_line, remeasure_reason, run_point, ExperimentConfig, Point, Setup};
use anyhow::Result;
use serde::Serialize;

/// Capacity of one setup plus its points.
#[derive(Debug, Clone, Serialize)]
pub struct SetupResult {
    /// Setup.
    pub setup: Setup,
    /// Largest number of calls all supported (0 if even one call failed).
    pub capacity: u32,
    /// True when the search hit `max_calls` without failing.
    pub capacity_at_least: bool,
    /// Error that stopped this setup, if any.
    pub error: Option<String>,
    /// Every point measured, in order.
    pub points: Vec<Point>,
}

impl SetupResult {
    /// A setup before its first point.
    pub fn empty(setup: Setup) -> SetupResult {
        SetupResult {
            setup,
            capacity: 0,
            capacity_at_least: false,
            error: None,
            points: Vec::new(),
        }
    }
}

/// The config of a search's point of `n` calls: a repeated call count
/// gets another voice-activity seed (a confirming run with the same seed
/// would replay the same load).
pub fn search_point_cfg(cfg: &ExperimentConfig, res: &SetupResult, n: u32) -> ExperimentConfig {
    let repeats = res.points.iter().filter(|p| p.calls == n).count() as u64;
    let mut c = cfg.clone();
    c.seed = cfg.seed.wrapping_add(repeats * 7919);
    c
}

/// Keeps a search's measured point of `n` calls in `res` (printed, handed
/// to `on_point`) and says whether it was supported, or records its error
/// and returns None (the search stops).
pub fn keep_point(
    res: &mut SetupResult,
    n: u32,
    r: Result<Point>,
    on_point: impl FnOnce(&Point),
) -> Option<bool> {
    match r {
        Ok(p) => {
            eprintln!("{}", point_line(&p));
            on_point(&p);
            let ok = p.supported;
            res.points.push(p);
            Some(ok)
        }
        Err(e) => {
            eprintln!("[{:>15}] {n:>3} calls: ERROR {e:#}", res.setup.name());
            res.error = Some(format!("{n} calls: {e:#}"));
            None
        }
    }
}

/// Search the capacity of `setup`: 1 call, then doubling until a point fails
/// (or `max_calls`), bisection between the last success and the first
/// failure, and a confirming re-run of the capacity (walking down if the
/// confirmation fails). Progress goes to stderr.
pub fn capacity_search(
    cfg: &ExperimentConfig,
    setup: Setup,
    on_point: impl FnMut(&Point),
) -> SetupResult {
    capacity_search_with(cfg, setup, run_point, on_point)
}

/// [`capacity_search`] with another point runner (the ns-3 air's pure
/// simulation, [`crate::validate_sim::sim_point`]): the same search rule,
/// seeds and re-measuring for every kind of point.
pub fn capacity_search_with(
    cfg: &ExperimentConfig,
    setup: Setup,
    run_point: impl Fn(&ExperimentConfig, Setup, u32) -> Result<Point>,
    mut on_point: impl FnMut(&Point),
) -> SetupResult {
    let mut res = SetupResult::empty(setup);
    let mut measure = |n: u32, res: &mut SetupResult| -> Option<bool> {
        let c = search_point_cfg(cfg, res, n);
        let mut r = run_point(&c, setup, n);
        for _ in 0..2 {
            match remeasure_reason(&r) {
                Some(why) => {
                    eprintln!(
                        "[{:>15}] {n:>3} calls: {why} (machine busy?): measuring again",
                        setup.name()
                    );
                    r = run_point(&c, setup, n);
                }
                None => break,
            }
        }
        keep_point(res, n, r, &mut on_point)
    };
    let max = cfg.max_calls.max(1);
    let mut good = 0u32;
    let mut bad: Option<u32> = None;
    if crate::netns::interrupted() {
        res.error = Some("interrupted".into());
        return res;
    }
    let mut n = 1u32;
    loop {
        match measure(n, &mut res) {
            None => return res,
            Some(true) => good = n,
            Some(false) => {
                bad = Some(n);
                break;
            }
        }
        if n >= max {
            break;
        }
        n = (n * 2).min(max);
    }
    if let Some(mut hi) = bad {
        while hi - good > 1 {
            let mid = good + (hi - good) / 2;
            match measure(mid, &mut res) {
                None => return res,
                Some(true) => good = mid,
                Some(false) => hi = mid,
            }
        }
    }
    // confirm (the load is random with VAD): walk down on failure, at most 3 steps
    let mut tries = 0;
    while good > 1 && tries < 3 {
        match measure(good, &mut res) {
            None => return res,
            Some(true) => break,
            Some(false) => good -= 1,
        }
        tries += 1;
    }
    res.capacity = good;
    res.capacity_at_least = bad.is_none() && good >= max;
    res
}
