//! Loss-aware multiplexing (issue 14 point 10: "never lower capacity"):
//! multicast frames have no ACK and no retry, so a station whose frames
//! collide loses voice that unicast would have retried. Stations report
//! what they miss; the access point serves a station whose smoothed loss is
//! above a limit by unicast (its packets handed back as
//! [`UnicastReason::Loss`](super::mux::UnicastReason::Loss) and forwarded as
//! usual), the others stay multiplexed.
//!
//! Owns: the station's report window ([`ReportWindow`]: deltas of its
//! demultiplexer's frame counters), the AP's per-station smoothed loss and
//! the decision with hysteresis and probes ([`LossControl`]), their
//! counters. Must not touch: message bytes ([`super::register`]), replay
//! checks (the lease table's, [`super::lease::LeaseTable::accept_report`]),
//! sockets, clocks (time is passed in).
//!
//! Decisions:
//! * The measure is frames, not packets: a station counts the frame
//!   sequence numbers it saw and the gaps between them. Every frame goes to
//!   every station, so a station served by unicast keeps measuring the
//!   frames of the others, and returns as soon as they arrive again.
//!   With redundancy the loss is "after recovery": a missing frame whose
//!   entries came in a later frame's repeat block does not count.
//! * A station that received no frame at all in a window while the AP sent
//!   at least [`LossConfig::min_frames`] frames since its previous report
//!   (a station behind a filter, or out of range of the multicast rate)
//!   sees no gap; the AP charges it every frame it sent in between.
//! * Smoothing: sums of expected and lost frames, each multiplied by
//!   [`LossConfig::keep`] at every report before the new counts are added
//!   (about 1 / (1 - keep) reports of memory). A station goes to unicast
//!   when the smoothed loss is above `limit` with at least `min_frames`
//!   frames of evidence; it returns when the loss is below `clear` (<
//!   `limit`: hysteresis) with the same evidence.
//! * Probe: a station on unicast returns to the frame for a trial after
//!   `probe` (its sums start over), in case no frame could be measured (it
//!   was the only multiplexed station, so no frame was sent). A trial that
//!   ends in unicast again doubles the wait, up to `max_probe`; a return by
//!   clean reports resets it.
//! * Airtime guard (never lower capacity): unicast costs more airtime than
//!   a share of a frame, and near the cell's airtime limit moving stations
//!   to unicast adds collisions and loss for everyone (in simulation the
//!   802.11b G.729 cell fell from 23 to 17 calls without this guard). With
//!   the mux's airtime rule configured ([`super::mux::MuxConfig::airtime`]),
//!   each station's downlink packets are priced as unicast exchanges
//!   ([`Mux::station_unicast_us`]); the cell's voice load is estimated as
//!   the uplink (assumed equal to the downlink priced as unicast: voice
//!   calls are symmetric), plus the unicast stations' downlink, plus the
//!   frames' airtime. A station moves to unicast only if that load plus its
//!   own downlink stays within [`LossConfig::airtime_budget`] of the
//!   channel; a station on unicast returns to the frame when the load is
//!   above the budget (counted as `shed`). Without the airtime rule the
//!   prices are 0 and the guard never holds (docs/operator-guide.md: set
//!   the rates).
//! * New stations start on unicast ([`LossConfig::start_unicast`]): a
//!   station gets no report before its first window ends, and in
//!   simulation the first second of a call is when multicast frames collide
//!   most (all calls of a point start together), so the driver calls
//!   [`LossControl::admit`] when a station is first leased; at its first
//!   price check ([`LossConfig::start_check`] later: stations that arrive
//!   together are all known by then) it goes to unicast if the start
//!   guard allows it (below), and moves to the frame only when a report shows
//!   clean multicast reception (smoothed loss below `clear` with
//!   `min_frames` of evidence), measured on the frames carrying the other
//!   stations' packets, which it receives anyway. A report above `limit`
//!   makes it an ordinary lossy station (probe timer as above). The start
//!   guard is stricter than the move guard: a new station starts on
//!   unicast only while the whole cell would fit on unicast (every known
//!   station's uplink and downlink priced as unicast, within the budget:
//!   the regime where not multiplexing at all carries the cell), and when
//!   that estimate passes the budget every new station still on unicast
//!   returns to the frame at once (counted as `shed`). In simulation a mix
//!   near the airtime limit (a few stations on unicast, the others in the
//!   frame) lost whole runs of frames in 802.11b, and deciding at each
//!   arrival (the first stations on unicast until a later one tips the
//!   estimate) cost the 802.11b cell 10 calls in simulation, hence the
//!   decision at the first check. A new station's price is a prior until
//!   measured, one [`PRIOR_IP_BYTES`] packet per stream per mux interval
//!   (its uplink counts from its lease), re-measured at every check while
//!   it waits. Until its first check a new station is in the frame.
//! * Short first probe (the trial, [`LossConfig::start_trial`]): when
//!   every station fits on unicast no frame carries anything, so a new
//!   station waiting on unicast could measure nothing until its probe
//!   (30 s). A waiting station that still lacks `min_frames` of evidence
//!   `start_trial` after its start goes on a trial: its packets are queued
//!   in the frame *and* still sent by unicast ([`Mux::set_trial`]), so the
//!   AP sends frames it can measure while no packet depends on them. The
//!   trial costs the frames' airtime on top of the unicast cell, so it
//!   starts only while the whole cell on unicast plus the trial frames
//!   (priced as one frame per mux interval carrying a [`PRIOR_IP_BYTES`]
//!   packet per stream on trial, at the multicast rate) fits the budget;
//!   otherwise the waiting stations return to the frame at once (`shed`,
//!   as the start guard does: the frame costs less than their unicast).
//!   The trial ends at the station's first report with `min_frames` of
//!   evidence: below `clear` it joins the frame (`start_cleared`), else it
//!   stays on unicast as an ordinary lossy station (probe timer). A
//!   station without downlink traffic stays on its trial at no cost (no
//!   frame carries anything for it) until its packets come; one that gets
//!   no report with evidence to the AP within [`LossConfig::trial_len`]
//!   while at least `min_frames` frames were sent (a station that does not
//!   report) cannot be measured: it returns to the frame (counted as a
//!   probe), as it would be without the rule.
//! * Bounded: one record per station that reported while it held a lease
//!   (at most [`LossConfig::max_stations`]; reports beyond are rejected and
//!   counted); the record goes with the lease ([`LossControl::forget`]).

use super::demux::DemuxStats;
use super::mux::Mux;
use super::register::LossReport;
use crate::Micros;
use core::net::IpAddr;

/// The packet size the guard's prior charges a new station's streams
/// (IPv4/UDP/RTP with 20 bytes of voice: G.729 at 20 ms, the smallest
/// common voice packet, so the prior is a lower bound).
pub const PRIOR_IP_BYTES: u32 = 60;

/// Configuration (the daemon's `[ap]` `loss_*` fields).
#[derive(Clone, Debug, PartialEq)]
pub struct LossConfig {
    /// Off: reports are counted and ignored, every station is multiplexed.
    pub enabled: bool,
    /// Smoothed loss (fraction of frames) above which a station goes to unicast.
    pub limit: f64,
    /// Smoothed loss below which it returns (hysteresis; < `limit`).
    pub clear: f64,
    /// Weight the sums keep at each report (0 ..< 1).
    pub keep: f64,
    /// Frames of evidence (smoothed expected frames) before deciding.
    pub min_frames: u32,
    /// First probe after this long on unicast (µs).
    pub probe: Micros,
    /// Longest wait between probes (µs).
    pub max_probe: Micros,
    /// Station records.
    pub max_stations: usize,
    /// Share of the channel the estimated voice load may take with a
    /// station moved to unicast (airtime guard, module doc). The model
    /// charges a mean backoff per exchange, so 1.0 is the analytic bound's
    /// limit (ns-3's cells carry up to ~1.2 of it).
    pub airtime_budget: f64,
    /// New stations ([`LossControl::admit`]) start on unicast until a
    /// clean report (module doc); on by default. While every station fits
    /// on unicast no frame would carry anything: the trial
    /// (`start_trial`) sends one the new stations can measure.
    pub start_unicast: bool,
    /// When a new station's start is decided (after its lease), and how
    /// often its price is re-measured while it waits on unicast (µs).
    pub start_check: Micros,
    /// A new station on unicast without evidence this long after its
    /// start goes on a trial (module doc), µs; 0: no trial (it waits for
    /// its probe).
    pub start_trial: Micros,
    /// Longest trial without a report with evidence, µs.
    pub trial_len: Micros,
}

impl Default for LossConfig {
    fn default() -> Self {
        LossConfig {
            enabled: true,
            limit: 0.01,
            clear: 0.005,
            keep: 0.5,
            min_frames: 20,
            probe: 30_000_000,
            max_probe: 240_000_000,
            max_stations: 256,
            airtime_budget: 1.0,
            start_unicast: true,
            start_check: 200_000,
            start_trial: 1_000_000,
            trial_len: 5_000_000,
        }
    }
}

/// Counters (`airpack stats`, metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LossStats {
    /// Reports applied.
    pub reports: u64,
    /// Reports refused (no lease, replay, bad address, table full: the
    /// lease table's checks, counted by the driver with
    /// [`LossControl::rejected`]).
    pub rejected: u64,
    /// Reports of a station that received nothing while frames were sent
    /// (charged as all lost).
    pub blackouts: u64,
    /// Moves of a station to unicast.
    pub to_unicast: u64,
    /// Returns to the frame by clean reports.
    pub to_multicast: u64,
    /// Trials (returns to the frame by the probe timer).
    pub probes: u64,
    /// Moves to unicast refused by the airtime guard.
    pub held_airtime: u64,
    /// Returns to the frame because the cell's load was above the budget
    /// (new stations included).
    pub shed: u64,
    /// New stations started on unicast.
    pub start_unicast: u64,
    /// New stations the guard started on the frame.
    pub start_held: u64,
    /// New stations moved to the frame by a clean report.
    pub start_cleared: u64,
    /// Trials started (new stations' packets in the frame and by unicast).
    pub start_trials: u64,
}

/// One station as [`LossControl::stations`] shows it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StationLoss {
    /// The station.
    pub addr: IpAddr,
    /// Smoothed loss (fraction of frames), `None` before any evidence.
    pub loss: Option<f64>,
    /// Served by unicast now.
    pub unicast: bool,
    /// Reports applied.
    pub reports: u64,
    /// New and still waiting for a clean report (on unicast).
    pub fresh: bool,
    /// On a trial (its packets in the frame and by unicast).
    pub trial: bool,
    /// Smoothed expected frames (the evidence behind `loss`).
    pub evidence: f64,
}

#[derive(Clone, Debug)]
struct Record {
    addr: IpAddr,
    expected: f64,
    lost: f64,
    unicast: bool,
    probe_at: Micros,
    probe_wait: Micros,
    /// The AP's frames-sent counter at the previous report.
    sent_mark: Option<u64>,
    reports: u64,
    /// Its downlink priced as unicast: (time, µs so far) at the previous
    /// report, and the rate since, µs per second.
    air_mark: Option<(Micros, f64)>,
    air_rate: f64,
    /// Started on unicast, no clean report yet.
    fresh: bool,
    /// Admitted, its start decided at its first check.
    pending: bool,
    /// Its next price check while pending or fresh.
    check_at: Micros,
    /// Fresh: when its trial starts if it still lacks evidence; on a
    /// trial: when the trial ends without a report.
    trial_at: Micros,
    /// On a trial (module doc).
    trial: bool,
    /// The mux's frames sent when its trial started (or was extended).
    trial_mark: u64,
}

impl Record {
    /// A station first seen: no evidence yet, on the frame.
    fn new(addr: IpAddr, probe_wait: Micros) -> Record {
        Record {
            addr,
            expected: 0.0,
            lost: 0.0,
            unicast: false,
            probe_at: 0,
            probe_wait,
            sent_mark: None,
            reports: 0,
            air_mark: None,
            air_rate: 0.0,
            fresh: false,
            pending: false,
            check_at: 0,
            trial_at: 0,
            trial: false,
            trial_mark: 0,
        }
    }

    fn loss(&self) -> Option<f64> {
        (self.expected > 0.0).then(|| self.lost / self.expected)
    }
}

/// The AP's loss-aware rule.
#[derive(Debug)]
pub struct LossControl {
    cfg: LossConfig,
    records: Vec<Record>,
    stats: LossStats,
    /// The frames' airtime: (time, µs so far) at the last sample, and the
    /// rate since, µs per second (sampled at most once a second).
    frames_mark: Option<(Micros, u64)>,
    frames_rate: f64,
}

impl LossControl {
    /// No station yet. `clear` is clamped to at most `limit`, `keep` to
    /// 0..=0.99, `probe` to at least 1 s and `max_probe` to at least `probe`.
    pub fn new(mut cfg: LossConfig) -> Self {
        cfg.clear = cfg.clear.min(cfg.limit).max(0.0);
        cfg.keep = cfg.keep.clamp(0.0, 0.99);
        cfg.probe = cfg.probe.max(1_000_000);
        cfg.max_probe = cfg.max_probe.max(cfg.probe);
        LossControl {
            records: Vec::with_capacity(cfg.max_stations.min(4096)),
            cfg,
            stats: LossStats::default(),
            frames_mark: None,
            frames_rate: 0.0,
        }
    }

    /// The estimated voice load of the cell (module doc), share of the
    /// channel (0 without the airtime rule).
    pub fn load(&self) -> f64 {
        let up: f64 = self.records.iter().map(|r| r.air_rate).sum();
        let down: f64 = self
            .records
            .iter()
            .filter(|r| r.unicast)
            .map(|r| r.air_rate)
            .sum();
        (up + down + self.frames_rate) / 1e6
    }

    /// The configuration in force.
    pub fn config(&self) -> &LossConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &LossStats {
        &self.stats
    }

    /// Stations served by unicast now.
    pub fn on_unicast(&self) -> usize {
        self.records.iter().filter(|r| r.unicast).count()
    }

    /// The stations known (for `airpack peers`).
    pub fn stations(&self) -> impl Iterator<Item = StationLoss> + '_ {
        self.records.iter().map(|r| StationLoss {
            addr: r.addr,
            loss: r.loss(),
            unicast: r.unicast,
            reports: r.reports,
            fresh: r.fresh,
            trial: r.trial,
            evidence: r.expected,
        })
    }

    /// Counts a report the lease table refused.
    pub fn rejected(&mut self) {
        self.stats.rejected += 1;
    }

    /// Applies station `addr`'s report (already authenticated and checked
    /// against its lease and replay window). `frames_sent`: the mux's
    /// frames sent so far ([`super::mux::MuxStats::frames_sent`]). Moves the
    /// station's streams in `mux` when the decision changes.
    pub fn report(
        &mut self,
        now: Micros,
        addr: IpAddr,
        r: &LossReport,
        frames_sent: u64,
        mux: &mut Mux,
    ) {
        let i = match self.records.iter().position(|x| x.addr == addr) {
            Some(i) => i,
            None if self.records.len() < self.cfg.max_stations => {
                self.records.push(Record::new(addr, self.cfg.probe));
                self.records.len() - 1
            }
            None => {
                self.stats.rejected += 1;
                return;
            }
        };
        self.stats.reports += 1;
        let fus = mux.stats().airtime_frames_us;
        match self.frames_mark {
            Some((t0, f0)) if now >= t0 + 1_000_000 => {
                self.frames_rate = fus.saturating_sub(f0) as f64 * 1e6 / (now - t0) as f64;
                self.frames_mark = Some((now, fus));
            }
            None => self.frames_mark = Some((now, fus)),
            _ => {}
        }
        let air = mux.station_unicast_us(addr);
        let rec = &mut self.records[i];
        if let Some((t0, a0)) = rec.air_mark {
            if now > t0 {
                rec.air_rate = (air - a0).max(0.0) * 1e6 / (now - t0) as f64;
            }
        }
        rec.air_mark = Some((now, air));
        let load = self.load();
        let cfg = &self.cfg;
        let rec = &mut self.records[i];
        rec.reports += 1;
        let since = rec.sent_mark.map(|m| frames_sent.saturating_sub(m));
        rec.sent_mark = Some(frames_sent);
        let (mut expected, mut lost) = (
            f64::from(r.received) + f64::from(r.missed),
            f64::from(r.unrecovered),
        );
        if expected == 0.0 {
            match since {
                Some(n) if n >= u64::from(cfg.min_frames) => {
                    self.stats.blackouts += 1;
                    (expected, lost) = (n as f64, n as f64);
                }
                // Nothing sent (or first report): no evidence either way.
                _ => return,
            }
        }
        rec.expected = rec.expected * cfg.keep + expected;
        rec.lost = rec.lost * cfg.keep + lost;
        if !cfg.enabled {
            return;
        }
        if rec.unicast && load > cfg.airtime_budget {
            rec.fresh = false;
            rec.trial = false;
            rec.unicast = false;
            rec.probe_wait = cfg.probe;
            self.stats.shed += 1;
            mux.set_unicast(addr, false);
            return;
        }
        if rec.expected < f64::from(cfg.min_frames) {
            return;
        }
        let loss = rec.lost / rec.expected;
        if !rec.unicast && loss > cfg.limit && load + rec.air_rate / 1e6 > cfg.airtime_budget {
            self.stats.held_airtime += 1;
        } else if !rec.unicast && loss > cfg.limit {
            rec.unicast = true;
            rec.probe_at = now + rec.probe_wait;
            self.stats.to_unicast += 1;
            mux.set_unicast(addr, true);
        } else if rec.unicast && loss < cfg.clear {
            rec.unicast = false;
            rec.trial = false;
            rec.probe_wait = cfg.probe;
            if rec.fresh {
                rec.fresh = false;
                self.stats.start_cleared += 1;
            } else {
                self.stats.to_multicast += 1;
            }
            mux.set_unicast(addr, false);
        } else if loss > cfg.limit || rec.trial {
            // A new station whose first reports are lossy stays, as any
            // lossy station (probe timer); a trial ends at its first
            // report with evidence.
            rec.fresh = false;
            if rec.trial {
                rec.trial = false;
                mux.set_trial(addr, false);
            }
        }
    }

    /// Station `addr` was leased and has no record yet (a new lease):
    /// with [`LossConfig::start_unicast`] it starts on unicast if the
    /// airtime guard allows it (module doc). Does nothing without
    /// `start_unicast` (the station's record then starts at its first
    /// report) or for a known station; a full table is counted as
    /// `rejected`.
    pub fn admit(&mut self, now: Micros, addr: IpAddr, mux: &mut Mux) {
        if !(self.cfg.enabled && self.cfg.start_unicast)
            || self.records.iter().any(|r| r.addr == addr)
        {
            return;
        }
        if self.records.len() >= self.cfg.max_stations {
            self.stats.rejected += 1;
            return;
        }
        // The prior (module doc): 0 without the airtime rule.
        let prior = mux.config().airtime.map_or(0.0, |phy| {
            let per_s = 1e6 / mux.config().interval.max(1) as f64;
            mux.station_streams(addr) as f64 * per_s * phy.unicast_us(PRIOR_IP_BYTES)
        });
        let rec = Record {
            air_mark: Some((now, mux.station_unicast_us(addr))),
            air_rate: prior,
            pending: true,
            check_at: now + self.cfg.start_check,
            ..Record::new(addr, self.cfg.probe)
        };
        self.records.push(rec);
        // Its load may have pushed the cell past the start guard.
        self.shed_fresh(mux);
    }

    /// The cell's estimated voice load with every known station on
    /// unicast (the start guard, module doc), share of the channel.
    fn all_unicast_load(&self) -> f64 {
        self.records.iter().map(|r| 2.0 * r.air_rate).sum::<f64>() / 1e6
    }

    /// The trial frames' price (module doc), share of the channel: one
    /// frame per mux interval carrying a prior packet per stream of the
    /// stations on a trial and of those `also` selects (0 without the
    /// airtime rule or without such a stream).
    fn trial_load(&self, mux: &Mux, also: impl Fn(&Record) -> bool) -> f64 {
        let streams: usize = self
            .records
            .iter()
            .filter(|r| r.trial || also(r))
            .map(|r| mux.station_streams(r.addr))
            .sum();
        match (mux.config().airtime, streams) {
            (Some(phy), 1..) => {
                let per_s = 1e6 / mux.config().interval.max(1) as f64;
                let bytes = mux.config().frame_overhead
                    + super::compact::HEADER_LEN as u32
                    + streams as u32 * PRIOR_IP_BYTES;
                per_s * phy.multicast_us(bytes) / 1e6
            }
            _ => 0.0,
        }
    }

    /// The start guard's estimate: the whole cell on unicast plus the
    /// trial frames of the new stations (those waiting, and with
    /// `pending` those whose start is being decided).
    fn start_load(&self, mux: &Mux, pending: bool) -> f64 {
        let trials = self.cfg.start_trial > 0;
        self.all_unicast_load()
            + self.trial_load(mux, |r| trials && (r.fresh || (pending && r.pending)))
    }

    /// Returns every new station on unicast to the frame when the whole
    /// cell would not fit on unicast, trial frames included (module doc).
    fn shed_fresh(&mut self, mux: &mut Mux) {
        if self.start_load(mux, false) <= self.cfg.airtime_budget {
            return;
        }
        for rec in &mut self.records {
            if rec.fresh {
                rec.fresh = false;
                rec.trial = false;
                rec.unicast = false;
                self.stats.shed += 1;
                mux.set_unicast(rec.addr, false);
            }
        }
    }

    /// Probes that are due: those stations return to the frame for a trial.
    pub fn handle_timeout(&mut self, now: Micros, mux: &mut Mux) {
        // New stations' price checks: re-measure (a station that sent
        // nothing yet keeps its prior), shed, then decide the starts due.
        let is_due = |r: &Record| (r.fresh || r.pending) && r.check_at <= now;
        let mut due = false;
        for rec in self.records.iter_mut().filter(|r| is_due(r)) {
            due = true;
            let air = mux.station_unicast_us(rec.addr);
            if let Some((t0, a0)) = rec.air_mark {
                let rate = (air - a0).max(0.0) * 1e6 / now.saturating_sub(t0).max(1) as f64;
                if rate > 0.0 || !rec.pending {
                    rec.air_rate = rate;
                }
            }
            rec.air_mark = Some((now, air));
        }
        if due {
            self.shed_fresh(mux);
            // Every station's uplink and downlink as unicast, and the
            // new stations' trial frames.
            let fits = self.start_load(mux, true) <= self.cfg.airtime_budget;
            for rec in &mut self.records {
                if !is_due(rec) {
                    continue;
                }
                rec.check_at = now + self.cfg.start_check;
                if !rec.pending {
                    continue;
                }
                rec.pending = false;
                if rec.unicast {
                    // Moved by a report already.
                } else if fits && self.cfg.enabled {
                    rec.unicast = true;
                    rec.fresh = true;
                    rec.trial_at = now + self.cfg.start_trial;
                    rec.probe_at = now + rec.probe_wait;
                    self.stats.start_unicast += 1;
                    mux.set_unicast(rec.addr, true);
                } else {
                    self.stats.start_held += 1;
                }
            }
        }
        self.trials(now, mux);
        for rec in &mut self.records {
            if rec.unicast && rec.probe_at <= now {
                rec.fresh = false;
                rec.trial = false;
                rec.unicast = false;
                rec.expected = 0.0;
                rec.lost = 0.0;
                // A trial that fails waits twice as long for the next one.
                rec.probe_wait = (rec.probe_wait.saturating_mul(2)).min(self.cfg.max_probe);
                self.stats.probes += 1;
                mux.set_unicast(rec.addr, false);
            }
        }
    }

    /// Trials due (module doc): fresh stations without evidence start one
    /// if the guard allows it (else every fresh station returns to the
    /// frame); trials without a report end in the frame.
    fn trials(&mut self, now: Micros, mux: &mut Mux) {
        let (min, step) = (f64::from(self.cfg.min_frames), self.cfg.start_trial);
        let due =
            |r: &Record| r.fresh && !r.trial && step > 0 && r.trial_at <= now && r.expected < min;
        let sent = mux.stats().frames_sent();
        if self.records.iter().any(due) {
            let load = self.all_unicast_load() + self.trial_load(mux, due);
            let fits = load <= self.cfg.airtime_budget;
            for rec in &mut self.records {
                if !due(rec) {
                    continue;
                }
                if fits {
                    rec.trial = true;
                    rec.trial_at = now + self.cfg.trial_len;
                    rec.trial_mark = sent;
                    self.stats.start_trials += 1;
                    mux.set_trial(rec.addr, true);
                } else {
                    rec.fresh = false;
                    rec.unicast = false;
                    self.stats.shed += 1;
                    mux.set_unicast(rec.addr, false);
                }
            }
        }
        for rec in &mut self.records {
            if rec.trial && rec.trial_at <= now && sent < rec.trial_mark + min as u64 {
                // Nothing to measure yet (no traffic): wait on.
                rec.trial_at = now + self.cfg.trial_len;
                rec.trial_mark = sent;
            } else if rec.trial && rec.trial_at <= now {
                // Frames were sent, no report with evidence: cannot be measured.
                rec.trial = false;
                rec.fresh = false;
                rec.unicast = false;
                self.stats.probes += 1;
                mux.set_unicast(rec.addr, false);
            }
        }
    }

    /// The next probe, price check or trial event.
    pub fn poll_timeout(&self) -> Option<Micros> {
        let min = f64::from(self.cfg.min_frames);
        let trial = |r: &Record| {
            let waits = r.fresh && self.cfg.start_trial > 0 && r.expected < min;
            (r.trial || waits).then_some(r.trial_at)
        };
        let t = self.records.iter().filter_map(trial).min();
        let p = self
            .records
            .iter()
            .filter_map(|r| match (r.unicast, r.fresh || r.pending) {
                (true, true) => Some(r.probe_at.min(r.check_at)),
                (true, false) => Some(r.probe_at),
                (false, true) => Some(r.check_at),
                (false, false) => None,
            })
            .min();
        match (t, p) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Station `addr`'s lease ended: its record goes and its streams (if any
    /// come back) are multiplexed.
    pub fn forget(&mut self, addr: IpAddr, mux: &mut Mux) {
        if let Some(i) = self.records.iter().position(|r| r.addr == addr) {
            self.records.swap_remove(i);
            mux.set_unicast(addr, false);
        }
    }

    /// Keeps the records of stations `leased` says hold a lease (called
    /// after the lease table expired some).
    pub fn retain(&mut self, mut leased: impl FnMut(IpAddr) -> bool, mux: &mut Mux) {
        let mut k = 0;
        while k < self.records.len() {
            let a = self.records[k].addr;
            if leased(a) {
                k += 1;
            } else {
                self.records.swap_remove(k);
                mux.set_unicast(a, false);
            }
        }
    }

    /// Turns the rule on or off (reload); off returns every station to the frame.
    pub fn set_enabled(&mut self, on: bool, mux: &mut Mux) {
        self.cfg.enabled = on;
        if !on {
            for rec in &mut self.records {
                rec.fresh = false;
                rec.trial = false;
                rec.pending = false;
                if rec.unicast {
                    rec.unicast = false;
                    mux.set_unicast(rec.addr, false);
                }
            }
        }
    }
}

/// The station's side: turns its demultiplexer's cumulative counters into
/// one [`LossReport`] per window.
#[derive(Clone, Debug, Default)]
pub struct ReportWindow {
    frames: u64,
    lost: u64,
    recovered: u64,
}

impl ReportWindow {
    /// A window starting at `s`.
    pub fn new(s: &DemuxStats) -> Self {
        ReportWindow {
            frames: s.frames,
            lost: s.lost_frames,
            recovered: s.recovered_frames,
        }
    }

    /// The counts since the last call (or [`ReportWindow::new`]); starts the
    /// next window. Counters that went backwards (a new demultiplexer)
    /// start over from zero.
    pub fn take(&mut self, s: &DemuxStats) -> LossReport {
        let d = |now: u64, then: u64| now.checked_sub(then).unwrap_or(now);
        let received = d(s.frames, self.frames);
        let missed = d(s.lost_frames, self.lost);
        let recovered = d(s.recovered_frames, self.recovered).min(missed);
        *self = ReportWindow::new(s);
        let c = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
        LossReport {
            received: c(received),
            missed: c(missed),
            unrecovered: c(missed - recovered),
        }
    }
}

#[cfg(test)]
#[path = "loss_tests.rs"]
mod tests;
