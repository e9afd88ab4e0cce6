//! The emulated search of a validation row, seeded by the pure simulation
//! (issue 10 point 6): start at the simulated capacity and walk one call at
//! a time to the first change of verdict, instead of doubling from one call.
//!
//! Why: the doubling search probes far beyond the capacity (16 calls on a
//! chain that carries 8), and a saturated point makes the real-time air lag
//! (docs/lab.md). Near agreement the walk finds the same capacity as the
//! doubling search (both assume more calls never pass where fewer fail),
//! with three points instead of eight to ten: the simulated capacity, its
//! neighbour on the other side of the edge, and the search's usual
//! confirming run. It never probes above the first count that already
//! disagrees ([`crate::validate::probe_bound`]); below the agreeing range it
//! falls back to the doubling search bounded there, so a disagreeing row
//! still gets an exact number.
//!
//! Owns: the walk's order of probes. Must not touch: how a point is
//! measured or judged ([`crate::experiment`]), the agreement rule
//! ([`crate::validate::agrees`]).

use crate::experiment::{
    capacity_search_with, keep_point, search_point_cfg, ExperimentConfig, Point, Setup, SetupResult,
};
use anyhow::Result;

/// What the walk decided, in call counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// The capacity (largest count that passed, confirmed as the doubling
    /// search confirms), `at_least` when even the upper bound passed.
    Capacity { calls: u32, at_least: bool },
    /// Every count down to the lower bound failed: search below it.
    Below(u32),
    /// A point could not be measured (the error is in the result).
    Error,
}

/// The walk over call counts: `pass(n)` measures `n` calls (`None`: no
/// result). `start` is the simulated capacity, `lo` the smallest count that
/// still agrees with it, `hi` the first count above it that disagrees.
pub fn walk(start: u32, lo: u32, hi: u32, mut pass: impl FnMut(u32) -> Option<bool>) -> Walk {
    let lo = lo.max(1);
    let hi = hi.max(lo);
    let start = start.clamp(lo, hi);
    let mut good;
    let mut at_least = false;
    match pass(start) {
        None => return Walk::Error,
        Some(true) => {
            good = start;
            let mut n = start;
            loop {
                if n >= hi {
                    at_least = true;
                    break;
                }
                n += 1;
                match pass(n) {
                    None => return Walk::Error,
                    Some(true) => good = n,
                    Some(false) => break,
                }
            }
        }
        Some(false) => {
            let mut n = start;
            loop {
                if n <= lo {
                    return Walk::Below(lo);
                }
                n -= 1;
                match pass(n) {
                    None => return Walk::Error,
                    Some(true) => {
                        good = n;
                        break;
                    }
                    Some(false) => {}
                }
            }
        }
    }
    // confirm as the doubling search does: walk down on failure, at most 3 steps
    let mut tries = 0;
    while good > 1 && tries < 3 && !at_least {
        match pass(good) {
            None => return Walk::Error,
            Some(true) => break,
            Some(false) => good -= 1,
        }
        tries += 1;
    }
    Walk::Capacity {
        calls: good,
        at_least,
    }
}

/// The emulated search of a row: [`walk`] from `start` (the simulated
/// capacity) between `lo` and `hi`, measuring points with `run_point` as
/// [`capacity_search_with`] does (another voice-activity seed for a
/// repeated count; every point kept, in order); below `lo` the doubling
/// search bounded at `lo - 1`.
pub fn walk_search(
    cfg: &ExperimentConfig,
    setup: Setup,
    run_point: impl Fn(&ExperimentConfig, Setup, u32) -> Result<Point>,
    start: u32,
    lo: u32,
    hi: u32,
) -> SetupResult {
    let mut res = SetupResult::empty(setup);
    let w = walk(start, lo, hi, |n| {
        let c = search_point_cfg(cfg, &res, n);
        let r = run_point(&c, setup, n);
        keep_point(&mut res, n, r, |_| {})
    });
    match w {
        Walk::Error => {}
        Walk::Capacity { calls, at_least } => {
            res.capacity = calls;
            res.capacity_at_least = at_least;
        }
        Walk::Below(lo) if lo <= 1 => res.capacity = 0,
        Walk::Below(lo) => {
            eprintln!(
                "[{:>15}] every count down to {lo} failed: searching below",
                setup.name()
            );
            let mut c = cfg.clone();
            c.max_calls = lo - 1;
            let below = capacity_search_with(&c, setup, run_point, |_| {});
            res.capacity = below.capacity;
            res.error = below.error;
            res.points.extend(below.points);
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row whose points pass up to `cap` calls; records the probes.
    fn run(start: u32, lo: u32, hi: u32, cap: u32) -> (Walk, Vec<u32>) {
        let mut probes = Vec::new();
        let w = walk(start, lo, hi, |n| {
            probes.push(n);
            Some(n <= cap)
        });
        (w, probes)
    }

    #[test]
    fn agreeing_rows_take_three_points() {
        // simulated 8, air 8: 8 passes, 9 fails, 8 confirmed
        assert_eq!(
            run(8, 7, 10, 8),
            (
                Walk::Capacity {
                    calls: 8,
                    at_least: false
                },
                vec![8, 9, 8]
            )
        );
        // air one call lower: 8 fails, 7 passes, 7 confirmed
        assert_eq!(
            run(8, 7, 10, 7),
            (
                Walk::Capacity {
                    calls: 7,
                    at_least: false
                },
                vec![8, 7, 7]
            )
        );
        // air one call higher: 8, 9 pass, 10 fails
        assert_eq!(
            run(8, 7, 10, 9),
            (
                Walk::Capacity {
                    calls: 9,
                    at_least: false
                },
                vec![8, 9, 10, 9]
            )
        );
    }

    #[test]
    fn the_walk_never_probes_beyond_the_verdict() {
        // air carries far more: stops at the first disagreeing count
        let (w, probes) = run(8, 7, 10, 30);
        assert_eq!(
            w,
            Walk::Capacity {
                calls: 10,
                at_least: true
            }
        );
        assert_eq!(probes, vec![8, 9, 10]);
        assert!(probes.iter().all(|&n| n <= 10));
        // air carries far less: hands over below the agreeing range
        let (w, probes) = run(30, 27, 34, 12);
        assert_eq!((w, probes), (Walk::Below(27), vec![30, 29, 28, 27]));
    }

    #[test]
    fn small_capacities_and_errors() {
        // simulated 0: start at one call; a failing single call is capacity 0
        assert_eq!(run(0, 0, 2, 0), (Walk::Below(1), vec![1]));
        assert_eq!(
            run(0, 0, 2, 1),
            (
                Walk::Capacity {
                    calls: 1,
                    at_least: false
                },
                vec![1, 2]
            )
        );
        // a failed measurement ends the walk
        let mut k = 0;
        let w = walk(5, 4, 7, |_| {
            k += 1;
            if k == 2 {
                None
            } else {
                Some(true)
            }
        });
        assert_eq!((w, k), (Walk::Error, 2));
    }

    #[test]
    fn a_failed_confirmation_walks_down_like_the_doubling_search() {
        // 8 passes once, then fails when confirmed (random load): 7 kept
        let mut seen8 = 0;
        let w = walk(8, 7, 10, |n| match n {
            8 => {
                seen8 += 1;
                Some(seen8 == 1)
            }
            9 => Some(false),
            _ => Some(n < 8),
        });
        assert_eq!(
            w,
            Walk::Capacity {
                calls: 7,
                at_least: false
            }
        );
    }
}
