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
mod tests {
    use super::*;
    use crate::downlink::mux::{MuxConfig, UnicastReason, Verdict};
    use core::net::Ipv4Addr;

    const SEC: Micros = 1_000_000;

    fn sta(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
    }

    /// An 802.11b cell at 11 Mbit/s (unicast and multicast) and a mux with
    /// its airtime rule on, without streams.
    fn b11_airtime_mux() -> (crate::downlink::airtime::CellPhy, Mux) {
        use crate::downlink::airtime::{CellPhy, Rate};
        let phy = CellPhy {
            unicast: Rate::of(11.0, false).unwrap(),
            multicast: Rate::of(11.0, false).unwrap(),
        };
        let mux = Mux::new(MuxConfig {
            airtime: Some(phy),
            idle_release: false,
            ..MuxConfig::default()
        });
        (phy, mux)
    }

    fn rep(received: u32, missed: u32) -> LossReport {
        LossReport {
            received,
            missed,
            unrecovered: missed,
        }
    }

    #[test]
    fn lossy_station_goes_to_unicast_and_returns_when_clean() {
        let mut mux = Mux::new(MuxConfig::default());
        mux.add_stream(sta(1), 4000, 0).unwrap();
        let mut lc = LossControl::new(LossConfig::default());
        lc.report(SEC, sta(1), &rep(45, 5), 50, &mut mux);
        assert!(mux.is_unicast(sta(1)));
        assert_eq!(lc.stats().to_unicast, 1);
        // 0.6 % smoothed after one clean report: still above `clear`.
        lc.report(2 * SEC, sta(1), &rep(50, 0), 100, &mut mux);
        lc.report(3 * SEC, sta(1), &rep(50, 0), 150, &mut mux);
        assert!(
            mux.is_unicast(sta(1)),
            "hysteresis: 5/150 -> 2.5/175 -> 1.25/187"
        );
        for k in 4..8 {
            lc.report(k * SEC, sta(1), &rep(50, 0), 50 * k, &mut mux);
        }
        assert!(!mux.is_unicast(sta(1)));
        assert_eq!(lc.stats().to_multicast, 1);
    }

    #[test]
    fn blackout_is_charged_and_first_report_sets_the_mark() {
        let mut mux = Mux::new(MuxConfig::default());
        let mut lc = LossControl::new(LossConfig::default());
        lc.report(SEC, sta(2), &rep(0, 0), 1000, &mut mux);
        assert!(!mux.is_unicast(sta(2)), "no mark yet: no evidence");
        lc.report(2 * SEC, sta(2), &rep(0, 0), 1010, &mut mux);
        assert!(!mux.is_unicast(sta(2)), "10 frames < min_frames");
        lc.report(3 * SEC, sta(2), &rep(0, 0), 1060, &mut mux);
        assert!(mux.is_unicast(sta(2)));
        assert_eq!(lc.stats().blackouts, 1);
    }

    #[test]
    fn recovered_frames_do_not_count_and_disabled_never_moves() {
        let mut mux = Mux::new(MuxConfig::default());
        let mut lc = LossControl::new(LossConfig::default());
        let r = LossReport {
            received: 45,
            missed: 5,
            unrecovered: 0,
        };
        lc.report(SEC, sta(3), &r, 50, &mut mux);
        assert!(!mux.is_unicast(sta(3)));
        let mut off = LossControl::new(LossConfig {
            enabled: false,
            ..LossConfig::default()
        });
        off.report(SEC, sta(3), &rep(0, 50), 50, &mut mux);
        assert!(!mux.is_unicast(sta(3)));
        assert_eq!(off.stats().reports, 1);
    }

    #[test]
    fn probe_returns_for_a_trial_and_backs_off() {
        let mut mux = Mux::new(MuxConfig::default());
        let mut lc = LossControl::new(LossConfig::default());
        lc.report(0, sta(4), &rep(40, 10), 50, &mut mux);
        assert_eq!(lc.poll_timeout(), Some(30 * SEC));
        lc.handle_timeout(30 * SEC - 1, &mut mux);
        assert!(mux.is_unicast(sta(4)));
        lc.handle_timeout(30 * SEC, &mut mux);
        assert!(!mux.is_unicast(sta(4)));
        assert_eq!(lc.stats().probes, 1);
        lc.report(31 * SEC, sta(4), &rep(40, 10), 100, &mut mux);
        assert!(mux.is_unicast(sta(4)));
        assert_eq!(lc.poll_timeout(), Some(91 * SEC), "second wait 60 s");
    }

    #[test]
    fn table_is_bounded_and_forget_releases() {
        let mut mux = Mux::new(MuxConfig::default());
        let mut lc = LossControl::new(LossConfig {
            max_stations: 2,
            ..LossConfig::default()
        });
        for n in 1..=3 {
            lc.report(SEC, sta(n), &rep(0, 50), 50, &mut mux);
        }
        assert_eq!(lc.stations().count(), 2);
        assert_eq!(lc.stats().rejected, 1);
        assert_eq!(lc.on_unicast(), 2);
        lc.forget(sta(1), &mut mux);
        assert!(!mux.is_unicast(sta(1)));
        lc.retain(|_| false, &mut mux);
        assert_eq!(lc.stations().count(), 0);
        assert!(!mux.is_unicast(sta(2)));
    }

    #[test]
    fn mux_hands_back_a_lossy_stations_packets_and_restarts_its_context() {
        use crate::downlink::demux::{Demux, DemuxConfig};
        let mut mux = Mux::new(MuxConfig {
            idle_release: false,
            ..MuxConfig::default()
        });
        mux.add_stream(sta(5), 4000, 0).unwrap();
        let pkt = |seq: u16| voip_to(sta(5), 4000, seq);
        assert_eq!(mux.handle_packet(0, &pkt(1)), Verdict::Queued(0));
        mux.set_unicast(sta(5), true);
        assert_eq!(
            mux.handle_packet(1, &pkt(2)),
            Verdict::Unicast(UnicastReason::Loss)
        );
        // Registered later (new lease): follows the setting.
        mux.add_stream(sta(5), 4002, 1).unwrap();
        assert_eq!(
            mux.handle_packet(2, &voip_to(sta(5), 4002, 1)),
            Verdict::Unicast(UnicastReason::Loss)
        );
        mux.set_unicast(sta(5), false);
        assert_eq!(mux.handle_packet(3, &pkt(3)), Verdict::Queued(0));
        mux.flush();
        let mut d = Demux::new(DemuxConfig::default());
        d.add_stream(0, sta(5), 4000);
        let mut buf = vec![0u8; 2048];
        let mut scratch = vec![0u8; 2048];
        let mut got = 0;
        while let Some(t) = mux.poll_transmit(4, &mut buf) {
            got += d.handle_frame(&buf[..t.len], &mut scratch, |_| {}).unwrap();
        }
        assert_eq!(got, 2, "packets 1 and 3 rebuilt (3 from a full entry)");
        assert_eq!(d.stats().no_context, 0);
        let s = mux.stats();
        assert_eq!(s.unicast[UnicastReason::Loss as usize], 2);
        assert_eq!(
            s.handled,
            s.passed + s.unicast.iter().sum::<u64>() + s.queued
        );
    }

    #[test]
    fn new_station_starts_on_unicast_until_a_clean_report() {
        let mut mux = Mux::new(MuxConfig::default());
        let on = LossConfig {
            start_unicast: true,
            ..LossConfig::default()
        };
        let mut lc = LossControl::new(on);
        lc.admit(0, sta(6), &mut mux);
        assert!(!mux.is_unicast(sta(6)), "decided at its first check");
        assert_eq!(lc.poll_timeout(), Some(200_000));
        lc.handle_timeout(199_999, &mut mux);
        assert!(!mux.is_unicast(sta(6)));
        lc.handle_timeout(200_000, &mut mux);
        assert!(mux.is_unicast(sta(6)));
        assert_eq!(lc.stats().start_unicast, 1);
        lc.admit(1, sta(6), &mut mux);
        lc.handle_timeout(400_000, &mut mux);
        assert_eq!(lc.stats().start_unicast, 1, "known station: no-op");
        // Too little evidence: stays.
        lc.report(SEC, sta(6), &rep(10, 0), 10, &mut mux);
        assert!(mux.is_unicast(sta(6)));
        lc.report(2 * SEC, sta(6), &rep(50, 0), 60, &mut mux);
        assert!(!mux.is_unicast(sta(6)));
        assert_eq!((lc.stats().start_cleared, lc.stats().to_multicast), (1, 0));
        // A lossy first report keeps the next one on unicast, as any lossy station.
        lc.admit(2 * SEC, sta(7), &mut mux);
        lc.handle_timeout(2 * SEC + 200_000, &mut mux);
        assert!(mux.is_unicast(sta(7)));
        lc.report(3 * SEC, sta(7), &rep(45, 5), 50, &mut mux);
        assert!(mux.is_unicast(sta(7)));
        assert!(!lc.stations().any(|s| s.fresh));
        // Off: nothing happens before the first report.
        let mut off = LossControl::new(LossConfig {
            start_unicast: false,
            ..LossConfig::default()
        });
        off.admit(0, sta(8), &mut mux);
        off.handle_timeout(SEC, &mut mux);
        assert!(!mux.is_unicast(sta(8)));
        assert_eq!(off.stats().start_unicast, 0);
        assert_eq!(off.stations().count(), 0, "no record before a report");
    }

    #[test]
    fn start_guard_prices_new_stations_and_sheds_when_the_cell_does_not_fit() {
        let (phy, mut mux) = b11_airtime_mux();
        for n in 9..=13 {
            mux.add_stream(sta(n), 4000, u16::from(n)).unwrap();
        }
        // Prior: 50 packets/s of 60 bytes, 835 µs each at 11 Mbit/s: 0.042.
        let prior = 50.0 * phy.unicast_us(PRIOR_IP_BYTES) / 1e6;
        assert!((prior - 0.04175).abs() < 1e-9, "{prior}");
        // The trial's frames are priced by their own test.
        let mut lc = LossControl::new(LossConfig {
            airtime_budget: 0.1,
            start_unicast: true,
            start_trial: 0,
            ..LossConfig::default()
        });
        lc.admit(0, sta(9), &mut mux);
        lc.handle_timeout(200_000, &mut mux);
        assert!(mux.is_unicast(sta(9)), "2 x prior = 0.084 <= 0.1");
        assert_eq!(lc.poll_timeout(), Some(400_000), "next check");
        // It sends twice the prior's rate: 0.17 up + 0.17 down > 0.1.
        for k in 0..20u16 {
            let _ = mux.handle_packet(200_000 + u64::from(k) * 10_000, &voip_to(sta(9), 4000, k));
        }
        lc.handle_timeout(400_000, &mut mux);
        assert!(!mux.is_unicast(sta(9)), "0.33 > 0.1");
        assert_eq!(lc.stats().shed, 1);
        // The next one does not fit next to the measured one: held.
        lc.admit(500_000, sta(10), &mut mux);
        lc.handle_timeout(700_000, &mut mux);
        assert!(!mux.is_unicast(sta(10)));
        assert_eq!(lc.stats().start_held, 1);
        // Arrivals together: two would fit on unicast, three do not; all
        // are known at the first check, so none starts on unicast.
        let mut lc = LossControl::new(LossConfig {
            airtime_budget: 4.0 * prior + 1e-9,
            start_unicast: true,
            start_trial: 0,
            ..LossConfig::default()
        });
        lc.admit(0, sta(11), &mut mux);
        lc.admit(0, sta(12), &mut mux);
        lc.admit(10_000, sta(13), &mut mux);
        lc.handle_timeout(200_000, &mut mux);
        assert!(!mux.is_unicast(sta(11)) && !mux.is_unicast(sta(12)));
        lc.handle_timeout(210_000, &mut mux);
        assert!(!mux.is_unicast(sta(13)));
        assert_eq!((lc.stats().start_held, lc.stats().start_unicast), (3, 0));
        // One leaves: the two left fit, a later arrival's check sheds them.
        lc.forget(sta(13), &mut mux);
        let mut lc2 = LossControl::new(lc.config().clone());
        lc2.admit(0, sta(11), &mut mux);
        lc2.admit(0, sta(12), &mut mux);
        lc2.handle_timeout(200_000, &mut mux);
        assert!(mux.is_unicast(sta(11)) && mux.is_unicast(sta(12)));
        lc2.admit(300_000, sta(13), &mut mux);
        assert!(!mux.is_unicast(sta(11)) && !mux.is_unicast(sta(12)), "shed");
        assert_eq!(lc2.stats().shed, 2);
    }

    #[test]
    fn waiting_station_gets_a_trial_and_joins_or_stays_by_its_report() {
        let mut mux = Mux::new(MuxConfig {
            idle_release: false,
            ..MuxConfig::default()
        });
        for n in 20..=22 {
            mux.add_stream(sta(n), 4000, u16::from(n)).unwrap();
        }
        let mut lc = LossControl::new(LossConfig::default());
        for n in 20..=22 {
            lc.admit(0, sta(n), &mut mux);
        }
        lc.handle_timeout(200_000, &mut mux);
        assert_eq!(lc.on_unicast(), 3, "all fit: all on unicast");
        assert!(!mux.is_trial(sta(20)));
        let v = mux.handle_packet(300_000, &voip_to(sta(20), 4000, 1));
        assert_eq!(v, Verdict::Unicast(UnicastReason::Loss), "no frame yet");
        // Its trial is due 1 s after its start (checks every 200 ms).
        let mut t = 400_000;
        while t < 1_200_000 {
            assert_eq!(lc.poll_timeout(), Some(t));
            lc.handle_timeout(t, &mut mux);
            assert!(!mux.is_trial(sta(20)), "t {t}");
            t += 200_000;
        }
        assert_eq!(lc.poll_timeout(), Some(1_200_000));
        lc.handle_timeout(1_200_000, &mut mux);
        assert!(mux.is_trial(sta(20)) && mux.is_unicast(sta(20)));
        assert_eq!(lc.stats().start_trials, 3);
        assert!(lc.stations().all(|s| s.trial && s.fresh && s.unicast));
        // Its packets now go in the frame and by unicast.
        let v = mux.handle_packet(1_210_000, &voip_to(sta(20), 4000, 2));
        assert_eq!(v, Verdict::Trial(20));
        mux.flush();
        let mut buf = vec![0u8; 2048];
        let t = mux.poll_transmit(1_210_000, &mut buf).unwrap();
        assert!(!t.unicast && t.packets == 1);
        assert_eq!((mux.stats().trial, mux.stats().queued), (1, 1));
        // Too little evidence: the trial goes on.
        lc.report(1_500_000, sta(20), &rep(15, 0), 15, &mut mux);
        assert!(mux.is_trial(sta(20)));
        // Clean: joins. Lossy (between clear and limit): stays on unicast.
        lc.report(2_000_000, sta(20), &rep(50, 0), 65, &mut mux);
        assert!(!mux.is_unicast(sta(20)) && !mux.is_trial(sta(20)));
        assert_eq!(lc.stats().start_cleared, 1);
        lc.report(2_000_000, sta(21), &rep(129, 1), 65, &mut mux);
        assert!(mux.is_unicast(sta(21)) && !mux.is_trial(sta(21)));
        assert!(!lc
            .stations()
            .any(|s| s.addr == sta(21) && (s.fresh || s.trial)));
        // No traffic: sta 22's trial waits on (1 frame sent in 5 s).
        lc.handle_timeout(6_200_000, &mut mux);
        assert!(mux.is_trial(sta(22)));
        // Frames sent, no report with evidence: the trial ends in the frame.
        for k in 0..20u16 {
            let _ = mux.handle_packet(
                7_000_000 + u64::from(k) * 20_000,
                &voip_to(sta(22), 4000, k),
            );
            mux.flush();
            while mux.poll_transmit(7_000_000, &mut buf).is_some() {}
        }
        lc.handle_timeout(11_199_999, &mut mux);
        assert!(mux.is_trial(sta(22)));
        lc.handle_timeout(11_200_000, &mut mux);
        assert!(!mux.is_unicast(sta(22)));
        assert_eq!(lc.stats().probes, 1);
        assert_eq!(lc.poll_timeout(), Some(30_200_000), "sta 21's probe");

        // The guard prices the trial frames: a budget the unicast cell
        // fits but not with the frames sheds the waiting stations.
        let (phy, mut mux) = b11_airtime_mux();
        mux.add_stream(sta(23), 4000, 1).unwrap();
        let prior = 50.0 * phy.unicast_us(PRIOR_IP_BYTES) / 1e6;
        let frames = 50.0 * phy.multicast_us(28 + 4 + PRIOR_IP_BYTES) / 1e6;
        assert_eq!(crate::downlink::compact::HEADER_LEN, 4);
        let cfg = LossConfig {
            airtime_budget: 2.0 * prior + frames + 1e-9,
            ..LossConfig::default()
        };
        let mut lc = LossControl::new(cfg.clone());
        lc.admit(0, sta(23), &mut mux);
        lc.handle_timeout(200_000, &mut mux);
        lc.handle_timeout(1_200_000, &mut mux);
        assert!(mux.is_trial(sta(23)), "fits with its frames");
        let mut lc = LossControl::new(LossConfig {
            airtime_budget: 2.0 * prior + frames - 1e-6,
            ..cfg
        });
        mux.set_unicast(sta(23), false);
        lc.admit(0, sta(23), &mut mux);
        lc.handle_timeout(200_000, &mut mux);
        assert!(
            !mux.is_unicast(sta(23)),
            "the start counts the trial frames"
        );
        assert_eq!(lc.stats().start_held, 1);
    }

    #[test]
    fn report_window_takes_deltas() {
        let mut s = DemuxStats::default();
        let mut w = ReportWindow::new(&s);
        s.frames = 48;
        s.lost_frames = 2;
        s.recovered_frames = 1;
        assert_eq!(
            w.take(&s),
            LossReport {
                received: 48,
                missed: 2,
                unrecovered: 1
            }
        );
        s.frames = 98;
        assert_eq!(w.take(&s), rep(50, 0));
        let fresh = DemuxStats {
            frames: 3,
            ..DemuxStats::default()
        };
        assert_eq!(w.take(&fresh), rep(3, 0), "counters went backwards");
    }

    /// An IPv4/UDP/RTP packet to `dst`:`port` (RTP sequence `seq`).
    pub(crate) fn voip_to(dst: IpAddr, port: u16, seq: u16) -> Vec<u8> {
        let IpAddr::V4(d) = dst else { unreachable!() };
        let payload = 20;
        let udp_len = 8 + 12 + payload;
        let total = 20 + udp_len;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[1] = 0xb8;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[192, 168, 9, 9]);
        p[16..20].copy_from_slice(&d.octets());
        let ipc = !crate::downlink::csum_fold(crate::downlink::csum_add(0, &p[..20]));
        p[10..12].copy_from_slice(&ipc.to_be_bytes());
        p[20..22].copy_from_slice(&5004u16.to_be_bytes());
        p[22..24].copy_from_slice(&port.to_be_bytes());
        p[24..26].copy_from_slice(&(udp_len as u16).to_be_bytes());
        p[28] = 0x80;
        p[29] = 18;
        p[30..32].copy_from_slice(&seq.to_be_bytes());
        p[32..36].copy_from_slice(&(u32::from(seq) * 160).to_be_bytes());
        p[36..40].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        let src = IpAddr::V4(Ipv4Addr::new(192, 168, 9, 9));
        let c = crate::downlink::udp_checksum(&src, &dst, &p[20..]);
        let c = if c == 0 { 0xffff } else { c };
        p[26..28].copy_from_slice(&c.to_be_bytes());
        p
    }
}
