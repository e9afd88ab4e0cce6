//! The `search` rate controller: the seed's MOS bands, read as evidence
//! about where the mesh's leftover capacity lies, and a search for it that
//! remembers what it has learnt (issue 12 point 8; docs/gateway.md,
//! "The search controller").
//!
//! Owns: the search state (the last rate that went bad and when, the
//! highest rate known good, the hold-off after a cut, the highest rate still
//! inside the MOS window) and one step of it. Must not touch: the bands and
//! their adjustments (those are [`super::rate::RateConfig`]'s, shared with
//! the seed's controller), clocks, the MOS itself.
//!
//! Why not the seed's rule as is: the network MOS is an average over a
//! sliding window (4 s by default) while the seed steps every period (1 s).
//! A step's effect therefore shows only partly in the next reading, and one
//! burst of loss keeps the MOS low for a whole window: stepping on every
//! reading cuts the rate four times for one overload (measured: 1 000 ->
//! 64 kbit/s in 5 s, docs/results.md 7(b)) and, the other way, climbs four
//! steps past a limit before the first of them is seen. The +3-5 % steps
//! then take 30 s and more to find the rate again. The rules here:
//!
//! 1. **One cut per window.** A poor or choke reading cuts the rate by the
//!    band's adjustment (the seed's -10 % / -50 %), then no further cut for
//!    `settle_us` (the MOS window): the readings in between still contain
//!    the loss from before the cut, and on the air it goes on growing for
//!    2-3 s after it (the flows drain what is queued in the mesh). Only a
//!    choke reading at least `probe_us` after the cut and `WORSE_MARGIN`
//!    below every reading since it (new loss, so the cut was not enough)
//!    cuts again at once. The hold-off ends half a period early (the steps'
//!    times jitter around the period's grid: the 4th reading after a cut is
//!    judged, even 20 ms early). Within two windows of a cut, a bad reading
//!    `WORSE_MARGIN` above the worst since it and at least [`PASSING_STEP`]
//!    above the reading before it is that loss passing, and neither cuts nor
//!    is remembered; any other bad reading past the hold-off (choke or poor
//!    that no longer improves: the loss at the rate cut to) cuts again,
//!    blamed on the rate now. When the rate had been
//!    probing above the last rate known good, the cut goes back to that rate
//!    (or by the poor band's step if that is more) instead: the back-off is
//!    as large as the probe that failed, not half the rate.
//! 2. **Remember the bad rate.** A poor/choke reading is blamed on the
//!    highest rate in force within the window (`peak`): that rate, or the
//!    remembered one if lower, becomes `bad`. It holds for `bad_memory_us`,
//!    then rises, doubling every further `bad_memory_us`, so a limit that went
//!    away (a link that got faster, a call that ended unseen) is probed again.
//! 3. **Search between good and bad.** On fair/good readings, far below the
//!    remembered bad rate (below `bad * (1 - near)`) the rate grows fast once
//!    it has been in force for `probe_us`: to the geometric middle between
//!    it and the bad rate (bisection), at most by `fast_up` (+50 %) and never
//!    past `bad * (1 - near)`. Within `near` of the bad rate the steps are
//!    the bands' small ones (+3 / +5 %), wait for a full window each
//!    (`settle_us`), and stop `near / 2` below the bad rate: only the memory's
//!    decay lets the rate probe past it, once per `bad_memory_us` or so.
//! 4. **Start from the calls, probe gently, then faster.** Calls appearing
//!    from none set the rate to `start_per_call_bps` x the calls
//!    ([`START_PER_CALL_BPS`]: below what the calls leave at 90 % of the
//!    voice capacity on 1-5 hops). Without a remembered bad rate, a fast
//!    increase waits a full window (`settle_us`, not `probe_us`), and the
//!    first [`FIRST_PROBES`] past the start (or a cut, or a reading in the
//!    hold band) add at most `first_up` (+25 %): the step that crosses the
//!    knee is the overshoot. Then `fast_up`.
//! 5. **Calls joining and leaving.** The number of calls is the calls
//!    *heard* (the daemon: `Vpm::heard_calls`, a call from its first
//!    upstream packet until its BYE or silence), not the calls the MOS is
//!    taken over (judged only after 1 s of packets): a join is seen at the
//!    first step after the joiners' first packets, 1-2 s before their MOS
//!    counts (measured on the air with the judged count: 1.5-1.9 s at the
//!    rate of fewer calls failed 1-8 of 8 rejoining calls). The joiners'
//!    first judged readings (from 1-2 s after the join) and the windows that
//!    slide over them (4 s more) still fall within the two windows after
//!    the join below. More calls than at the last step make
//!    the rate known good stale (less capacity is left): it is forgotten.
//!    Fewer calls make the remembered bad rate stale: it is forgotten, and the
//!    rate searches up fast; for one window after they left, the remaining
//!    calls' windows still hold the busier network's loss, so a bad reading
//!    then cuts but is not remembered. The first calls after none set the rate to the
//!    start (rule 4; with `start_per_call_bps` 0, to at most `initial_bps`):
//!    without calls the rate grows freely (nothing to protect), which says
//!    nothing about the calls.
//!    Calls joining also end a cut's hold-off (rule 3): they are new load.
//!    Within two `settle_us` after calls joined, the MOS window holds the
//!    new calls' first packets (with the worst call as the network MOS one
//!    lost packet of a new call's first 50 reads as choke; measured: 16
//!    calls starting at 128 kbit/s of TCP read choke, choke, poor, poor,
//!    poor, then fine from the 6th second): a bad reading
//!    then cuts but is not remembered as a bad rate, and when the calls came
//!    from none (the rate is the start rate) it is not acted on at all.
//! 6. **Remember the good rate per number of calls** ([`super::search_memory`]).
//!    The rate known good is remembered for the number of calls it was
//!    learnt with (the last one per number; kept when a later bad reading
//!    makes it stale, as calls joining can: their loss may show in the
//!    step that first counts them). Calls joining (not from none) with a rate
//!    remembered for as many calls or more below the rate now: the rate goes
//!    there at once, before any bad reading (the joiners' first windows are
//!    not judged for a second, and the rate of fewer calls fails them), as a
//!    cut (its hold-off waits out the loss from before it). Calls leaving
//!    with a higher rate remembered for as many calls or more: the rate goes
//!    up there at once. Calls leaving with nothing (higher) remembered: the
//!    rate **climbs at once**: at the step that sees them gone by the calls'
//!    ratio (old / new, at most `fast_up`; from the rate remembered for more
//!    calls, if higher, by its calls' ratio), then by `fast_up` every
//!    `probe_us` (within half a period; no gentle first probes, no wait for a window, a cut's
//!    hold-off does not stop it, the hold band within the window after the
//!    leave neither), each rate climbed from counting as good; the climb ends
//!    at the first bad reading or reading in the hold band after that
//!    window (a bad one goes back to the rate before the last step: the
//!    probe that failed; within the window a bad reading cuts, rule 5, and
//!    the climb goes on from the rate cut to). Measured on the air before it (16 -> 8 calls at 2 hops): the
//!    gentle probes took 9.4-26.9 s to the 8 calls' rate, and 8 calls
//!    rejoining at that rate failed 2-6 of 8.
//!
//! The hold band holds; with no active call (no MOS) the reading is "good".

use super::rate::{Band, RateConfig};
use super::search_memory::GoodRates;
use crate::Micros;

/// During the hold-off after a cut (from `probe_us` after it), a choke
/// reading this far (MOS) below every reading since the cut means new loss:
/// cut again at once. Within two windows of a cut, a bad reading this far
/// above the worst since it is the loss from before the cut passing (while
/// it also improves by [`PASSING_STEP`] a step).
pub const WORSE_MARGIN: f64 = 0.2;

/// Past a cut's hold-off, a bad reading is the loss from before the cut
/// passing only while it improves on the reading before it by at least
/// this much (MOS; about half of what one lost packet of a call's 200 in
/// the window costs near 3.6): a window that sheds the loss gets better
/// every step, one that does not is loss at the rate cut to. Measured on
/// the air (docs/results.md, "Cutting again past a cut's hold-off"): a
/// 3-hop run held its rate through choke readings 3.27, 3.20, 3.27, 3.28
/// and poor 3.44, 3.43, 3.45, 3.54 after a cut (every call lost); where the
/// loss passed, the readings rose 3.06 -> 3.29 -> 3.62.
pub const PASSING_STEP: f64 = 0.05;

/// Readings within this many `settle_us` after calls joined still hold
/// the new calls' first packets (their own start, then a window that slides
/// over it; measured on the lab's mesh: bad readings for 5 s after 16 calls
/// started at 128 kbit/s of TCP, fine from the 6th).
pub const JOIN_WINDOWS: u64 = 2;

/// Increases past the start (or past a cut, or a reading in the hold
/// band) that add at most `first_up`, before a bad rate is known; then
/// `fast_up`. The per-call start is 0.65-0.9 of the capacity the calls
/// leave at 90 % of the voice capacity ([`START_PER_CALL_BPS`]); three
/// steps of +25 % reach 1.95 x the start. Measured on the air with two
/// (1.56 x): at 1 and 4 hops the rate was still fine there and the next
/// step, +50 %, overshot to 1.5 x the rate it had to back off to (750 ->
/// 1 125 kbit/s at 1 hop, 168 -> 253 at 4 hops). A rate still fine after
/// three means a lighter load, whose knee is further away.
pub const FIRST_PROBES: u32 = 3;

/// The percentile reading the plant tests feed the search controller (and
/// the daemon's reading when `gateway.mos_percentile = 0.25` is set; the
/// daemon's default for `search` is now the rank rule, the k-th worst call
/// with k = 1 + floor(log4 n), `gateway.mos_rank_base`, docs/gateway.md):
/// the 25th percentile of the active calls' window MOS (the 4th worst of
/// 16 calls, the 2nd worst of 7). Measured on the lab's 2-hop gateway with
/// 16 calls and 3 TCP flows (docs/results.md, "Calibrating the gateway's
/// voice reading"): the per-call readings agree with the calls' end-to-end
/// loss, but the worst of 16 calls' two directions over a 4 s window (200
/// packets, one lost packet 0.5 %) is the extreme of 32 small samples: at
/// the rate where every call still passed over a minute it read poor 46
/// of 55 s; the 25th percentile read poor 3 of 55 s, in the target band
/// (hold or fair) otherwise.
pub const MOS_PERCENTILE: f64 = 0.25;

/// The default start per active call (bit/s of TCP per call): below the
/// capacity the calls leave at up to 90 % of the voice capacity on every
/// chain of seed 003's string, 1-5 hops. Measured on the lab's ns-3 air
/// (G.729 20 ms, 802.11a 12 Mbit/s; docs/results.md, seed 003): TCP alone
/// carries 122-186 kbit/s per call of voice capacity (1 101-8 177 kbit/s
/// against 9-44 calls), so at a load of 90 % the calls leave
/// 0.1 / 0.9 x that = 13.5-20.6 kbit/s per active call, and more at lower
/// loads. The start 12 kbit/s x calls is 0.65-0.9 of the leftover at 90 %
/// there (96 kbit/s for 8 calls at 5 hops, whose leftover is about 120;
/// the old fixed 128 kbit/s start was above it), and 0.65 at 1 hop (480
/// for 40 calls, leftover about 740) where a fixed low start would take
/// a dozen probes to climb. A codec or PHY whose call costs more air
/// relative to TCP needs a lower value.
pub const START_PER_CALL_BPS: u64 = 12_000;

/// The search controller's settings (the bands and their adjustments are
/// [`RateConfig`]'s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchConfig {
    /// How long a rate must be in force before the MOS reflects it: no second
    /// cut within this after a cut, small increases at most once per this.
    /// Default: the VPM's MOS window, 4 s.
    pub settle_us: Micros,
    /// How long a rate must be in force before a fast increase (far below the
    /// remembered bad rate).
    pub probe_us: Micros,
    /// Fast multiplicative increase (0.5 = +50 %).
    pub fast_up: f64,
    /// Until a bad rate is known, the most a fast increase may add (0.25 =
    /// +25 %): the first search does not know where the knee is, and the
    /// step that crosses it is the overshoot.
    pub first_up: f64,
    /// Within this fraction below the remembered bad rate the steps are the
    /// bands' small ones.
    pub near: f64,
    /// The remembered bad rate holds this long, then doubles every this long.
    pub bad_memory_us: Micros,
    /// The start when calls appear from none: this much TCP per active call
    /// (bit/s), within the bounds; 0: the configured `initial_bps` at most
    /// (see [`START_PER_CALL_BPS`]).
    pub start_per_call_bps: u64,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            settle_us: 4_000_000,
            probe_us: 2_000_000,
            fast_up: 0.5,
            first_up: 0.25,
            near: 0.1,
            bad_memory_us: 30_000_000,
            start_per_call_bps: START_PER_CALL_BPS,
        }
    }
}

impl SearchConfig {
    /// Check the settings.
    pub fn valid(&self) -> bool {
        self.settle_us > 0
            && self.probe_us > 0
            && self.fast_up.is_finite()
            && (0.0..=10.0).contains(&self.fast_up)
            && self.first_up.is_finite()
            && (0.0..=10.0).contains(&self.first_up)
            && self.near.is_finite()
            && (0.0..1.0).contains(&self.near)
            && self.bad_memory_us > 0
    }
}

/// What the search is doing (for `airpack stats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// No step yet.
    Start,
    /// Within `settle_us` after a cut: waiting for the window to show it.
    HoldOff,
    /// Far below the remembered bad rate (or none): fast increases.
    Fast,
    /// Near or above the remembered bad rate: small increases.
    Near,
}

impl Phase {
    /// Its name in `airpack stats`.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Start => "start",
            Phase::HoldOff => "hold-off",
            Phase::Fast => "fast",
            Phase::Near => "near",
        }
    }
}

/// The search state.
#[derive(Clone, Debug, Default)]
pub struct Search {
    /// Highest rate known good (a full window at it, no bad reading) since
    /// the number of calls last rose.
    good: Option<u64>,
    /// The last bad rate and when it was (re)confirmed.
    bad: Option<(u64, Micros)>,
    /// When the rate last changed.
    changed_at: Option<Micros>,
    /// When the rate was last cut, and the MOS that caused it.
    cut: Option<(Micros, f64)>,
    /// The lowest reading since the last cut.
    cut_low: f64,
    /// The last reading (a finite MOS).
    last: Option<f64>,
    /// Half the controller's period: how early a step may come on the
    /// period's grid (the hold-off ends this much before `settle_us`).
    slack: Micros,
    /// Increases in a row without a bad rate known, since the start, the
    /// last cut or the last reading in the hold band.
    probes: u32,
    /// Highest rate left within the window, and until when it is in it.
    peak: Option<(u64, Micros)>,
    /// Calls (heard) at the last step.
    calls: usize,
    /// When the number of calls last rose, and whether from none.
    joined: Option<(Micros, bool)>,
    /// When the number of calls last fell.
    left: Option<Micros>,
    /// The start rate set when calls appeared from none (while the rate is
    /// still it, more calls joining in the first windows raise it).
    started: Option<u64>,
    /// The rate known good per number of calls (rule 6).
    memory: GoodRates,
    /// Climbing after calls left with nothing remembered (rule 6).
    climb: bool,
    /// Jumps to a remembered rate (rule 6).
    recalled: u64,
    /// Cuts made; of which, cuts again within two windows of a cut (new
    /// loss in the hold-off, or loss that does not pass after it).
    cuts: u64,
    recuts: u64,
    /// Readings ignored because a cut was still settling.
    held_off: u64,
}

/// A view of the search state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchView {
    /// What it is doing now.
    pub phase: Phase,
    /// Highest rate known good.
    pub good_bps: Option<u64>,
    /// The remembered bad rate as remembered, and as it counts now (risen
    /// after `bad_memory_us`).
    pub bad_bps: Option<u64>,
    /// See [`SearchView::bad_bps`].
    pub bad_now_bps: Option<u64>,
    /// Age of the remembered bad rate (µs).
    pub bad_age_us: Option<Micros>,
    /// Time since the last change of rate (µs).
    pub since_change_us: Option<Micros>,
    /// Highest rate still within the MOS window.
    pub window_peak_bps: u64,
    /// Active calls at the last step.
    pub calls: usize,
    /// Cuts, cuts again within two windows of a cut, readings held off.
    pub cuts: u64,
    /// See [`SearchView::cuts`].
    pub recuts: u64,
    /// See [`SearchView::cuts`].
    pub held_off: u64,
    /// Jumps to a rate remembered for a number of calls (rule 6).
    pub recalled: u64,
    /// Numbers of calls with a good rate remembered.
    pub remembered: usize,
    /// Climbing after calls left (rule 6).
    pub climbing: bool,
}

fn scale(rate: u64, factor: f64, round_down: bool) -> u64 {
    let x = rate as f64 * factor;
    (if round_down { x.floor() } else { x.round() }) as u64
}

impl Search {
    /// The remembered bad rate as it counts at `now`.
    pub fn bad_now(&self, s: &SearchConfig, now: Micros) -> Option<u64> {
        let (b, at) = self.bad?;
        let age = now.saturating_sub(at);
        if age <= s.bad_memory_us {
            return Some(b);
        }
        let doublings = (age - s.bad_memory_us) as f64 / s.bad_memory_us as f64;
        Some(scale(b, 2f64.powf(doublings.min(60.0)), false))
    }

    /// Highest rate in force within the window ending at `now`.
    fn window_peak(&self, rate: u64, now: Micros) -> u64 {
        match self.peak {
            Some((p, until)) if now < until => p.max(rate),
            _ => rate,
        }
    }

    fn in_hold_off(&self, s: &SearchConfig, now: Micros) -> bool {
        self.cut
            .is_some_and(|(at, _)| now.saturating_sub(at).saturating_add(self.slack) < s.settle_us)
    }

    /// A reading that did not cut: the lowest since the cut.
    fn note_after_cut(&mut self, mos: Option<f64>) {
        if let Some(m) = mos.filter(|m| m.is_finite()) {
            self.cut_low = self.cut_low.min(m);
        }
    }

    /// The state for `airpack stats`.
    pub fn view(&self, s: &SearchConfig, rate: u64, now: Micros) -> SearchView {
        let bad_now = self.bad_now(s, now);
        let phase = if self.changed_at.is_none() {
            Phase::Start
        } else if self.in_hold_off(s, now) {
            Phase::HoldOff
        } else if bad_now.is_some_and(|b| rate as f64 >= b as f64 * (1.0 - s.near)) {
            Phase::Near
        } else {
            Phase::Fast
        };
        SearchView {
            phase,
            good_bps: self.good,
            bad_bps: self.bad.map(|b| b.0),
            bad_now_bps: bad_now,
            bad_age_us: self.bad.map(|b| now.saturating_sub(b.1)),
            since_change_us: self.changed_at.map(|t| now.saturating_sub(t)),
            window_peak_bps: self.window_peak(rate, now),
            calls: self.calls,
            cuts: self.cuts,
            recuts: self.recuts,
            held_off: self.held_off,
            recalled: self.recalled,
            remembered: self.memory.len(),
            climbing: self.climb,
        }
    }

    /// Forget everything learnt (a change of controller); the rate stays.
    pub fn reset(&mut self) {
        *self = Search::default();
    }

    fn change(&mut self, old: u64, new: u64, now: Micros, s: &SearchConfig) {
        if new == old {
            return;
        }
        if new < old {
            // The old rate stays in the window for one more window.
            let keep = self.window_peak(old, now);
            self.peak = Some((keep, now.saturating_add(s.settle_us)));
        }
        self.changed_at = Some(now);
    }

    /// One step at `now` from `rate` for a reading (`mos`) with `calls`
    /// calls (heard: rule 5); returns the new rate, within the bounds.
    pub fn step(
        &mut self,
        c: &RateConfig,
        s: &SearchConfig,
        rate: u64,
        now: Micros,
        mos: Option<f64>,
        calls: usize,
    ) -> u64 {
        let clamp = |r: u64| r.clamp(c.floor_bps, c.ceiling_bps);
        let mut r = rate;
        self.slack = c.period_us / 2;
        let last = self.last;
        if let Some(m) = mos.filter(|m| m.is_finite()) {
            self.last = Some(m);
        }
        if self.changed_at.is_none() {
            self.changed_at = Some(now);
        }
        // 6. The rate known good with the calls of the last step (kept when
        // a bad reading later makes `good` stale: the calls that change the
        // number make the readings bad a second or two before the number
        // changes).
        if let Some(g) = self.good {
            self.memory.remember(self.calls, g, now);
        }
        let reading = mos.filter(|m| m.is_finite()).unwrap_or(0.0);
        // 5. Calls joining and leaving.
        let mut jumped = false;
        let mut climb_from = 0;
        if calls > self.calls {
            self.climb = false;
            self.good = None;
            // A cut's hold-off waits out the loss from before it; calls
            // joining are new load, not that loss: it ends (measured on the
            // air: 8 -> 16 calls one second after a cut read choke for 4 s
            // at the 8 calls' rate, held off, and failed rejoining calls).
            self.cut = None;
            // Calls appearing from none, or more of them while the start
            // holds (they need not all show in the same step).
            let starting = self.calls == 0
                || (self.started == Some(r)
                    && self.joined.is_some_and(|(at, none)| {
                        none && now.saturating_sub(at) < JOIN_WINDOWS * s.settle_us
                    }));
            self.joined = Some((now, starting));
            if starting {
                let start = if s.start_per_call_bps > 0 {
                    clamp((calls as u64).saturating_mul(s.start_per_call_bps))
                } else {
                    r.min(clamp(c.initial_bps.max(1)))
                };
                self.change(r, start, now, s);
                r = start;
                self.started = Some(start);
                self.probes = 0;
                // The window has not seen the calls at this rate yet.
                self.changed_at = Some(now);
            } else if let Some((m, _)) = self.memory.recall(calls, now).filter(|&(m, _)| m < r) {
                // 6. Back to the rate known good for this many calls, as a
                // cut: the loss before it still shows for a window.
                self.change(r, m, now, s);
                r = m;
                self.good = Some(m);
                self.cut = Some((now, reading));
                self.cut_low = reading;
                self.probes = 0;
                self.recalled += 1;
                // A bad rate learnt with fewer calls is far above this
                // many calls' knee, which is near the rate recalled: as a
                // guide it is stale (bisecting towards it, the first probe
                // after the rejoin was +50 %, measured on the air: 270 ->
                // 405 kbit/s with 16 calls, poor). The next probes are the
                // gentle first ones.
                self.bad = None;
            }
        } else if calls < self.calls {
            // More room than the rate held with more calls: fast steps.
            self.bad = None;
            self.probes = FIRST_PROBES;
            self.left = Some(now);
            self.climb = calls > 0;
            match self.memory.recall(calls, now) {
                Some((m, n)) if m > r && calls > 0 => {
                    // 6. Up to the rate known good for this many calls (or
                    // more: the climb's first step starts from it).
                    self.change(r, m, now, s);
                    r = m;
                    self.good = Some(m);
                    self.recalled += 1;
                    if n == calls {
                        // Its knee is near: the next probes are gentle.
                        jumped = true;
                        self.climb = false;
                        self.probes = 0;
                    } else {
                        climb_from = n;
                    }
                }
                _ => {}
            }
        }
        let left_now = calls < self.calls && !jumped;
        let old_calls = climb_from.max(self.calls);
        self.calls = calls;
        let since = now.saturating_sub(self.changed_at.unwrap_or(now));
        let settled = since >= s.settle_us;
        let band = c.band(mos);
        let bad_now = self.bad_now(s, now);
        // A window that saw calls join holds their first packets: a new
        // call's MOS over a few packets is noisy (one lost packet of the
        // first 50 reads as choke). From no call, the rate is the start rate
        // (safe by configuration): its first window is not judged. From
        // some calls, a bad reading cuts but is not remembered.
        let joining = self
            .joined
            .filter(|&(at, _)| now.saturating_sub(at) < JOIN_WINDOWS * s.settle_us)
            .map(|(_, from_none)| from_none);
        // For one window after calls left, the remaining calls' windows
        // still hold the loss of the busier network: a bad reading cuts but
        // is not remembered (measured on the air: remembered, it pinned the
        // rate of 8 calls at 0.95 x the bad rate of 16).
        let leaving = self
            .left
            .is_some_and(|at| now.saturating_sub(at) < s.settle_us);
        // 6. The climb after calls left ends at a bad reading or at the
        // target band, once the window no longer holds the busier network
        // (a bad reading within it still cuts, rule 5, and the climb goes on
        // from there).
        if self.climb && band <= Band::Hold && !leaving {
            self.climb = false;
        }
        let next = match band {
            Band::Poor | Band::Choke if joining == Some(true) => {
                self.held_off += 1;
                r
            }
            Band::Poor | Band::Choke => {
                let m = mos.filter(|m| m.is_finite()).unwrap_or(0.0);
                let since_cut = self.cut.map(|(at, _)| now.saturating_sub(at));
                let hold_off = self.in_hold_off(s, now);
                // The loss from before a cut keeps showing for a while (the
                // flows drain the mesh's queues, the window slides): only a
                // choke reading below every one since the cut, by the
                // margin, and at least `probe_us` after it is new loss.
                let worse = hold_off
                    && band == Band::Choke
                    && since_cut.is_some_and(|t| t >= s.probe_us)
                    && m < self.cut_low - WORSE_MARGIN;
                // Past the hold-off, within two windows of a cut, a bad
                // reading that is better than the worst since the cut by the
                // margin and still improving (the window sheds the loss) is
                // that loss passing: not held against the rate cut to. Any
                // other is the loss at the rate cut to: cut again.
                let after = !hold_off
                    && since_cut.is_some_and(|t| t.saturating_add(self.slack) < 2 * s.settle_us);
                let recovering = after
                    && m > self.cut_low + WORSE_MARGIN
                    && last.is_some_and(|l| m >= l + PASSING_STEP);
                let again = worse || (after && !recovering);
                self.cut_low = self.cut_low.min(m);
                // Blame the highest rate in the window; loss after a cut
                // that is new or does not pass blames the rate now.
                let peak = if again { r } else { self.window_peak(r, now) };
                if joining.is_none() && !leaving && !recovering {
                    let b = bad_now.map_or(peak, |b| b.min(peak));
                    self.bad = Some((b, now));
                }
                if (hold_off && !worse) || recovering {
                    self.held_off += 1;
                    r
                } else {
                    if again {
                        self.recuts += 1;
                    }
                    self.cuts += 1;
                    if again || (settled && self.good.is_some_and(|g| g >= r)) {
                        // Bad at a rate that held a good window, or loss at
                        // the rate cut back to: stale.
                        self.good = None;
                    }
                    let n = match self.good.filter(|&g| g < r) {
                        // Probing above the known good rate failed: back to
                        // it, and at least the poor band's step.
                        Some(g) => g.min(scale(r, 1.0 + c.r_poor, true)),
                        None => scale(r, 1.0 + c.adjustment(band), true),
                    };
                    self.cut = Some((now, m));
                    self.cut_low = m;
                    self.probes = 0;
                    n
                }
            }
            Band::Hold | Band::Fair | Band::Good if self.climb => {
                self.note_after_cut(mos);
                // (Within half a period: the steps' times jitter around
                // the period's grid.)
                let due = since.saturating_add(c.period_us / 2) >= s.probe_us;
                if left_now || due {
                    if due {
                        // Fine for a probe's time: the rate a failed step
                        // goes back to.
                        self.good = Some(self.good.map_or(r, |g| g.max(r)));
                    }
                    let f = if left_now {
                        (old_calls as f64 / calls.max(1) as f64 - 1.0).min(s.fast_up)
                    } else {
                        s.fast_up
                    };
                    scale(r.max(c.restart_bps), 1.0 + f, false).max(r)
                } else {
                    r
                }
            }
            Band::Hold => {
                self.note_after_cut(mos);
                self.probes = 0;
                if settled {
                    self.good = Some(self.good.map_or(r, |g| g.max(r)));
                }
                r
            }
            Band::Fair | Band::Good => {
                self.note_after_cut(mos);
                if settled {
                    self.good = Some(self.good.map_or(r, |g| g.max(r)));
                }
                if self.in_hold_off(s, now) {
                    r
                } else {
                    let cap = bad_now.map(|b| scale(b, 1.0 - s.near, true));
                    match cap {
                        Some(cap) if r >= cap => {
                            // Small steps, up to just below the bad rate
                            // (only its decay lets the rate past it).
                            let below =
                                bad_now.map_or(u64::MAX, |b| scale(b, 1.0 - s.near / 2.0, true));
                            if settled {
                                scale(r.max(c.restart_bps), 1.0 + c.adjustment(band), false)
                                    .min(below)
                                    .max(r)
                            } else {
                                r
                            }
                        }
                        _ => {
                            let wait = if cap.is_some() {
                                s.probe_us
                            } else {
                                s.settle_us
                            };
                            if since >= wait {
                                let base = r.max(c.restart_bps);
                                let mut up = scale(base, 1.0 + s.fast_up, false);
                                if let (Some(cap), Some(b)) = (cap, bad_now) {
                                    // Bisect between here and the bad rate.
                                    let mid = (base as f64 * b as f64).sqrt() as u64;
                                    up = up.min(mid).min(cap);
                                } else {
                                    // No bad rate known: the first probes
                                    // past the start are gentle, then the
                                    // steps grow (the knee is further away
                                    // than the start's estimate).
                                    let f = if self.probes < FIRST_PROBES {
                                        s.first_up
                                    } else {
                                        s.fast_up
                                    };
                                    up = scale(base, 1.0 + f, false);
                                    self.probes = self.probes.saturating_add(1);
                                }
                                up.max(r)
                            } else {
                                r
                            }
                        }
                    }
                }
            }
        };
        let next = clamp(next);
        self.change(r, next, now, s);
        next
    }
}
