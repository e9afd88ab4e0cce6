//! Pure simulation of the infrastructure cell (issue 14 point 10; `airpack
//! lab cell-sim`): the cell of [`crate::cell`] (one AP, stations, two outer
//! nodes on cables behind the AP, call k = station <-> outer node) inside
//! the ns-3 program alone, no taps, no daemons, so that cells the real-time
//! air cannot carry (802.11g at 54 Mbit/s, 50-110 calls) get a number.
//!
//! Owns: the program's config of a cell point ([`cell_config`]: the voice
//! flows uplink `S -> AP -> O` and downlink `O -> AP -> S`, the cables
//! carrying their wired hop, and with multiplexing the `mux_*` directives
//! of `crates/lab/ns3/air_cell.cc`), the per-packet entry sizes of the AP's
//! compact frames ([`entry_sizes`], measured on airpack-core's real
//! [`Mux`](airpack_core::downlink::mux::Mux)), the mux's report ([`MuxReport`]), a point ([`cell_point`],
//! judged by the quality path of every other point via
//! [`crate::validate_sim`]) and the command ([`main`]: capacity search per
//! setup and codec, against [`crate::cell::bound`]).
//!
//! Setups: `off` (each downlink packet a unicast frame from the AP),
//! `downlink-mux` (one frame per interval, or when full; no idle release
//! in this model), `downlink-mux-loss` (the same with the loss rule of
//! `airpack_core::downlink::loss`: `mux_loss`), `downlink-mux-red` / `-red2`
//! (redundancy depth 1 / 2).
//! `--send-jitter-us J`: each packet leaves up to J µs after its tick.
//! `--free-downlink` (setup `off` only): every call's downlink goes from its
//! outer node to its station over a cable of its own, so the AP sends no
//! voice on the air: the uplink's own capacity, the ceiling of any downlink
//! scheme (the bound's "uplink frames unchanged" with the DCF's collisions).
//! `--frame-copies N` (multiplexed setups): every frame is sent N times,
//! each copy its own channel access; a station takes the first it gets.
//! `--ap-vo` (any setup): the AP's voice (frames and unicast relays) on a
//! WMM access point's AC_VO queue (`ap_edca`, `crates/lab/ns3/air_edca.cc`;
//! stations keep the DCF's access): `off` with it is the fair control.
//! `--sta-vo-edca` (with `--ap-vo`): the stations' AC_VO kept at hostapd's
//! advertised values instead of the AP's own (which ns-3's beacons carry).
//! `--sta-be-edca` (with `--ap-vo`): the stations' AC_BE, where their voice
//! goes, kept at the given values (WMM's 3,15,1023) instead of the DCF's.
//! `--frame-guard` (multiplexed setups): before each frame the AP sends a
//! guard, an empty UDP datagram to the group that no station takes: what
//! collides when the AP's access meets a station's in one slot.
//! `--airtime-rule` (multiplexed setups): the daemon's per-frame airtime
//! rule (`Mux::close`: copies priced against unicast, unicast fallback) as
//! a table by entry count ([`rule_table`], computed by driving
//! airpack-core's real [`Mux`](airpack_core::downlink::mux::Mux) with the preset's rates; `mux_rule`).
//! `--uplink-agg` (any setup; presets with K >= 2 calls per station): each
//! station bundles its calls' uplink packets to the AP as the daemon's
//! hop-by-hop role does beside `[station]` (up to K packets, held at most
//! one interval; `agg_up`, `crates/lab/ns3/air_agg.cc`): `downlink-mux
//! --uplink-agg` is the emulated `downlink-mux-agg` without its repeats.
//! `--uplink-agg-busy` (with `--uplink-agg`): a station holds only while its
//! own radio has a frame queued or in flight (the daemon's `link_mode =
//! "hold-while-busy"` with the radio's queue as its busy signal;
//! `agg_up_busy`). `--call-arrival-ms A`: the calls join at random times
//! within A ms instead of all in the first interval ([`cell_flows`]).
//! Not modelled: the idle release, the airtime rule without
//! `--airtime-rule` (and with it, the pricing of repeated blocks), partial
//! repeats, RTP-context loss at the stations (docs/lab.md 5).
//!
//! Layout: the byte counts taken from airpack's own code in [`sizes`], the
//! command (`airpack lab cell-sim`: flags, capacity searches, JSON, table)
//! in `run`, its PNG plots in `plots`, a point's config and measurement
//! here.
//!
//! Must not touch: the emulated cell ([`crate::cell`], the daemons), the
//! E-model and support criterion, the search rule ([`crate::experiment`]).

mod plots;
mod run;
pub mod sizes;

pub use run::{config, main, table, CellSimArgs, Row};
pub use sizes::{
    bundle_sizes, cell_phy, entry_sizes, rule_directive, rule_table, voip_packet, voip_packet_to,
};

use crate::experiment::{voip_spec, ExperimentConfig, Point, Setup};
use crate::topology::Topology;
use crate::validate_sim::{sim_config, VoiceFlow};
use crate::voip::{Direction, Spec};
use airpack_core::downlink::airtime::CellPhy;
use airpack_core::downlink::compact;
use airpack_core::downlink::loss::LossConfig;
use airpack_core::downlink::mux::MuxConfig;
use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

/// Simulated seconds before the first call: every station associates
/// first (beacons every 102.4 ms; with 100 stations the association
/// requests collide and are retried).
pub const WARMUP_S: f64 = 3.0;

/// Redundancy depth of a setup in this model, None = no multiplexing.
pub fn depth(setup: Setup) -> Result<Option<u8>> {
    Ok(match setup {
        Setup::Off => None,
        Setup::DownlinkMux | Setup::DownlinkMuxInterval | Setup::DownlinkMuxLoss => Some(0),
        Setup::DownlinkMuxRed => Some(1),
        Setup::DownlinkMuxRed2 => Some(2),
        o => bail!(
            "cell-sim models off, downlink-mux, downlink-mux-loss, downlink-mux-red and downlink-mux-red2, not {}",
            o.name()
        ),
    })
}
/// The flows of `n` calls in `spec`'s cell for `cfg` (whose topology is
/// the cell of `n` calls): per call the uplink (a -> b: station -> AP ->
/// outer node) and the downlink (outer node -> AP -> station), each with a
/// random start phase as `airpack voip` draws. With `arrival_s` > 0 each
/// call joins at a uniform random time within the first `arrival_s`
/// seconds (its two directions at their phases after it) instead of every
/// call in the first interval; each call lasts `spec.duration_s` either way.
pub fn cell_flows(
    cfg: &ExperimentConfig,
    spec: &Spec,
    warmup_s: f64,
    arrival_s: f64,
) -> Result<Vec<VoiceFlow>> {
    let idx = |x: &str| {
        cfg.topo
            .nodes
            .iter()
            .position(|y| y == x)
            .with_context(|| format!("unknown node {x}"))
    };
    let ap = idx(crate::cell::AP)?;
    let interval_s = f64::from(spec.interval_ms) / 1000.0;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(spec.seed ^ 0xce11_5eed);
    let mut flows = Vec::new();
    for c in &spec.calls {
        let (s, o) = (idx(&c.a.node)?, idx(&c.b.node)?);
        let join = if arrival_s > 0.0 {
            rng.gen_range(0.0..arrival_s)
        } else {
            0.0 // no draw: the phases of runs without arrivals stay as they were
        };
        for (dir, path) in [
            (Direction::AToB, vec![s, ap, o]),
            (Direction::BToA, vec![o, ap, s]),
        ] {
            flows.push(VoiceFlow {
                call: c.id,
                dir,
                path,
                start_s: warmup_s + join + rng.gen_range(0.0..interval_s),
            });
        }
    }
    Ok(flows)
}

/// The program's config of a cell point: [`sim_config`]'s (nodes, links,
/// infrastructure mode, multicast rate, cables, flows and paths) with the
/// flows' warm-up `warmup_s`, plus the multiplexer's directives when `depth`
/// is set.
pub fn cell_config(
    cfg: &ExperimentConfig,
    spec: &Spec,
    flows: &[VoiceFlow],
    warmup_s: f64,
    depth: Option<u8>,
    packets: &Path,
    report: &Path,
) -> Result<String> {
    let text = sim_config(cfg, spec, flows, packets)?;
    // the last flow's start: one interval after the warm-up, later with arrivals
    let last_start = flows
        .iter()
        .map(|f| f.start_s)
        .fold(warmup_s + f64::from(spec.interval_ms) / 1000.0, f64::max);
    let duration = last_start + spec.duration_s + spec.grace_ms as f64 / 1000.0;
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("duration_s ") {
            out.push_str(&format!("duration_s {duration}\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    if let Some(d) = depth {
        let profile = spec.profile()?;
        let payload = airpack_voice::rtp::probe_payload_len(profile.payload_bytes());
        let (period, sizes) = entry_sizes(
            payload,
            profile.timestamp_step(),
            profile.params().payload_type,
        )?;
        let mc = MuxConfig::default();
        out.push_str(&format!(
            "mux_ap {} {} {} {} {} {d}\n",
            mc.interval,
            mc.max_frame,
            compact::HEADER_LEN,
            compact::REPEAT_LEN,
            mc.frame_overhead
        ));
        let s: Vec<String> = sizes.iter().map(u32::to_string).collect();
        out.push_str(&format!("mux_entry {period} {}\n", s.join(" ")));
        out.push_str(&format!("mux_report {}\n", report.display()));
    }
    Ok(out)
}

/// The `mux_loss` directive of the loss rule with `c`'s limits, one report
/// per station every `period_ms`, and its airtime guard priced by `phy`
/// (downlink packets of `ip_bytes`); new stations start on unicast with
/// `c.start_unicast`, with a trial `c.start_trial` later.
pub fn loss_directive(c: &LossConfig, phy: &CellPhy, ip_bytes: u32, period_ms: u32) -> String {
    let (m0, m1) = (phy.multicast_us(0), phy.multicast_us(1500));
    format!(
        "mux_loss {} {} {} {} {} {} {} {} {} {} {} {}\n",
        c.limit,
        c.clear,
        c.keep,
        c.min_frames,
        u64::from(period_ms) * 1000,
        c.airtime_budget,
        phy.unicast_us(ip_bytes),
        m0,
        (m1 - m0) / 1500.0,
        u8::from(c.start_unicast),
        c.start_check,
        c.start_trial
    )
}

/// One station's view of the multiplexed frames.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StationRx {
    /// Node name.
    pub node: String,
    /// Frames it received.
    pub frames: u64,
    /// Its packets taken from the frames' own entries.
    pub own: u64,
    /// Its packets taken from repeated blocks (the frame that carried them was lost).
    pub recovered: u64,
    /// Its packets it already had.
    pub duplicates: u64,
    /// Extra copies of frames it had already taken (`--frame-copies`).
    #[serde(default)]
    pub copies: u64,
    /// The most frames it missed in a row (after its first frame).
    #[serde(default)]
    pub max_gap: u64,
    /// Simulated time (µs) of the frame that ended that gap.
    #[serde(default)]
    pub max_gap_at_us: u64,
}

/// The multiplexer model's counters (`mux_report`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MuxReport {
    /// Frames sent (multicast; without the airtime rule's unicast frames).
    pub frames: u64,
    /// Packets in them (own entries).
    pub entries: u64,
    /// Frame bytes (UDP payload) sent.
    pub frame_bytes: u64,
    /// Frames closed because the next entry did not fit (the airtime
    /// rule's unicast frames included, as for the next field).
    pub closed_size: u64,
    /// Frames closed at the interval.
    pub closed_interval: u64,
    /// Entries repeated (redundancy).
    pub repeated: u64,
    /// Loss rule: moves of a station to unicast.
    #[serde(default)]
    pub loss_to_unicast: u64,
    /// Loss rule: returns to the frame.
    #[serde(default)]
    pub loss_to_multicast: u64,
    /// Loss rule: packets served by unicast instead of the frame.
    #[serde(default)]
    pub loss_unicast_packets: u64,
    /// Loss rule: reports of a station that received no frame while frames were sent.
    #[serde(default)]
    pub loss_blackouts: u64,
    /// Loss rule: moves to unicast refused by the airtime guard.
    #[serde(default)]
    pub loss_held_airtime: u64,
    /// Loss rule: returns to the frame because the load was above the budget.
    #[serde(default)]
    pub loss_shed: u64,
    /// Loss rule: new stations started on unicast.
    #[serde(default)]
    pub loss_start_unicast: u64,
    /// Loss rule: new stations the guard started in the frame.
    #[serde(default)]
    pub loss_start_held: u64,
    /// Loss rule: new stations moved to the frame by a clean report.
    #[serde(default)]
    pub loss_start_cleared: u64,
    /// Loss rule: trials of new stations (their packets in the frame and by unicast).
    #[serde(default)]
    pub loss_start_trials: u64,
    /// Loss rule: packets sent both in a frame and by unicast on a trial.
    #[serde(default)]
    pub loss_trial_packets: u64,
    /// Airtime rule (`--airtime-rule`): frames whose packets left as unicast.
    #[serde(default)]
    pub rule_unicast_frames: u64,
    /// Airtime rule: packets of those frames.
    #[serde(default)]
    pub rule_unicast_packets: u64,
    /// Airtime rule: copies not sent because they would not pay.
    #[serde(default)]
    pub rule_copies_priced_out: u64,
    /// Guard packets sent before frames (`--frame-guard`).
    #[serde(default)]
    pub guards: u64,
    /// Stations that received at least one frame.
    pub stations: Vec<StationRx>,
}

impl MuxReport {
    /// Parse the program's report (strict: every field present).
    pub fn parse(text: &str) -> Result<MuxReport> {
        let r: MuxReport = serde_json::from_str(text.trim()).context("mux report")?;
        if r.entries < r.frames
            || r.closed_size + r.closed_interval != r.frames + r.rule_unicast_frames
        {
            bail!("mux report inconsistent: {}", text.trim());
        }
        Ok(r)
    }
    /// Mean share of frames a station missed (%), over `stations` stations.
    pub fn lost_frames_pct(&self, stations: usize) -> f64 {
        if self.frames == 0 || stations == 0 {
            return 0.0;
        }
        let got: u64 = self.stations.iter().map(|s| s.frames).sum();
        100.0 * (1.0 - got as f64 / (self.frames as f64 * stations as f64))
    }
}

/// Measure `n` calls of `cfg`'s cell (its `topo.cell`) under `setup` in
/// pure simulation with the model's defaults ([`Knobs::default`]): the same
/// [`Point`] as an emulated point of the cell, judged the same way;
/// `downlink["AP.mux"]` holds the [`MuxReport`].
pub fn cell_point(cfg: &ExperimentConfig, setup: Setup, n: u32) -> Result<Point> {
    cell_point_with(cfg, setup, n, Knobs::default())
}

/// The model's options of a point (the run's flags).
#[derive(Clone, Copy, Debug, Default)]
pub struct Knobs {
    /// The AP's AC_VO at `[aifsn, cwmin, cwmax, txop_us]` (`--ap-vo`), or
    /// the DCF (None); with it the point's `downlink["AP.edca"]` holds the
    /// program's counters (AP packets tagged, MPDUs queued at the AP's
    /// AC_VO and AC_BE).
    pub edca: Option<[u32; 4]>,
    /// Every packet leaves up to this many µs after its tick
    /// (`--send-jitter-us`, 0: none).
    pub send_jitter_us: u32,
    /// Downlinks over cables of their own (`--free-downlink`, setup off).
    pub free_downlink: bool,
    /// Every multiplexed frame sent this many times (`--frame-copies`,
    /// the daemon's `ap.frame_copies`; 0 or 1: once).
    pub frame_copies: u32,
    /// The daemon's per-frame airtime rule (`--airtime-rule`,
    /// [`rule_table`]): copies priced against unicast, unicast fallback.
    pub airtime_rule: bool,
    /// With `edca`: the stations' AC_VO kept at `[aifsn, cwmin, cwmax]`
    /// (`--sta-vo-edca`, hostapd's advertised `wmm_ac_vo_*`); None: the
    /// stations take the AP's AC_VO from its beacons, as ns-3 does.
    pub sta_vo: Option<[u32; 3]>,
    /// With `edca`: the stations' AC_BE (their voice) kept at `[aifsn,
    /// cwmin, cwmax]` (`--sta-be-edca`, hostapd's advertised `wmm_ac_be_*`);
    /// None: the DCF's access.
    pub sta_be: Option<[u32; 3]>,
    /// Multiplexed setups: a guard (an empty UDP datagram to the group,
    /// 28 bytes of IPv4) before each frame (`--frame-guard`).
    pub frame_guard: bool,
    /// Each station bundles its calls' uplink packets to the AP
    /// (`--uplink-agg`; the preset's K calls per station, held at most one
    /// interval); `downlink["cell.agg_up"]` holds the program's counters.
    pub uplink_agg: bool,
    /// With `uplink_agg`: the longest a packet waits for its bundle, µs
    /// (`--uplink-hold-us`; None: one packet interval, as the lab's
    /// station daemons).
    pub uplink_hold_us: Option<u32>,
    /// With `uplink_agg`: a station's packet waits only while its radio has
    /// a frame queued or in flight (`--uplink-agg-busy`); the bundle leaves
    /// when the radio empties, when full or after the hold.
    pub uplink_busy: bool,
    /// Calls join at uniform random times within this many ms after the
    /// warm-up (`--call-arrival-ms`; 0: every call starts in the first
    /// interval, all at once), each lasting the point's duration.
    pub arrival_ms: u32,
    /// `downlink-mux-loss`: the airtime guard's budget (`--loss-budget`;
    /// None: `LossConfig::default()`'s).
    pub loss_budget: Option<f64>,
    /// `downlink-mux-loss`: new stations start on unicast (None:
    /// `LossConfig::default()`'s; `--loss-start-frame` says false).
    pub loss_start_unicast: Option<bool>,
    /// `downlink-mux-loss`: the stations' report period, ms (None: 1000).
    pub loss_report_ms: Option<u32>,
}

/// Between two stations' first looks for the AP when a point staggers the
/// association (ms, about one beacon interval: one station joins at a time).
pub const ASSOC_STAGGER_MS: u32 = 100;

/// [`cell_point`] with the model's options `knobs`. The calls start after
/// every station has associated: a point whose last association came after
/// its first packet is measured again with the warm-up extended past it;
/// a point where some station did not associate at all (all stations
/// answering the first beacon at once, their requests colliding again and
/// again, as with 60 stations under the AP-first access) is measured again
/// with the stations joining one by one, [`ASSOC_STAGGER_MS`] apart, as in a
/// real cell (`assoc_stagger_ms`); up to 60 simulated seconds of warm-up.
/// `downlink["cell.assoc"]` holds the warm-up used, the stagger and the
/// associations.
pub fn cell_point_with(
    cfg: &ExperimentConfig,
    setup: Setup,
    n: u32,
    knobs: Knobs,
) -> Result<Point> {
    let mut warmup_s = WARMUP_S;
    let mut stagger_ms = 0;
    loop {
        let p = cell_point_at(cfg, setup, n, knobs, warmup_s, stagger_ms)?;
        let a = &p.downlink["cell.assoc"];
        let all = a["associated"] == a["stations"];
        let last_s = a["last_assoc_us"].as_f64().unwrap_or(0.0) / 1e6;
        if all && last_s < a["first_packet_us"].as_f64().unwrap_or(0.0) / 1e6 {
            return Ok(p);
        }
        if warmup_s >= 60.0 {
            bail!(
                "{} of {} stations associated, the last at {last_s:.2} s, with a warm-up of {warmup_s} s (stagger {stagger_ms} ms)",
                a["associated"],
                a["stations"]
            );
        }
        let past = if all {
            // all associated: just past the last
            last_s + 1.0
        } else if stagger_ms == 0 {
            // one by one: the last station looks from (stations - 1) x stagger
            stagger_ms = ASSOC_STAGGER_MS;
            let stations = a["stations"].as_f64().unwrap_or(0.0);
            stations * f64::from(stagger_ms) / 1000.0 + 2.0
        } else {
            warmup_s * 2.0
        };
        warmup_s = past.ceil().max(warmup_s + 1.0).min(60.0);
    }
}

/// One run of [`cell_point_with`] with the calls starting after `warmup_s`.
fn cell_point_at(
    cfg: &ExperimentConfig,
    setup: Setup,
    n: u32,
    knobs: Knobs,
    warmup_s: f64,
    stagger_ms: u32,
) -> Result<Point> {
    let Knobs {
        edca,
        send_jitter_us,
        free_downlink: free,
        frame_copies,
        airtime_rule,
        sta_vo,
        sta_be,
        frame_guard,
        uplink_agg,
        uplink_hold_us,
        uplink_busy,
        arrival_ms,
        loss_budget,
        loss_start_unicast,
        loss_report_ms,
    } = knobs;
    let t0 = Instant::now();
    if crate::netns::interrupted() {
        bail!("interrupted");
    }
    let cell = cfg.topo.cell.clone().context("not a cell topology")?;
    let d = depth(setup)?;
    let mut cfg = cfg.clone();
    cfg.topo = cell.topology(n);
    let addr = |x: &str| {
        let i = cfg.topo.nodes.iter().position(|y| y == x).unwrap_or(0);
        Topology::addr_of(i).to_string()
    };
    let mut spec: Spec =
        serde_json::from_value(voip_spec(&cfg, &addr, n, 0)).context("voip spec type")?;
    spec.start_at_unix_ms = None;
    let mut flows = cell_flows(&cfg, &spec, warmup_s, f64::from(arrival_ms) / 1000.0)?;
    if free {
        if setup != Setup::Off {
            bail!(
                "--free-downlink models the setup off only, not {}",
                setup.name()
            );
        }
        free_downlink(&mut cfg.topo, &mut flows);
    }
    let dir = cfg
        .work_dir
        .join(format!("cellsim-{}-{n}-{}", setup.name(), cfg.seed));
    std::fs::create_dir_all(&dir)?;
    let (packets, report) = (dir.join("packets.txt"), dir.join("mux.json"));
    let mut text = cell_config(&cfg, &spec, &flows, warmup_s, d, &packets, &report)?;
    let first_packet_us = flows
        .iter()
        .map(|f| f.start_s)
        .fold(f64::INFINITY, f64::min)
        * 1e6;
    let profile = spec.profile()?;
    let payload = airpack_voice::rtp::probe_payload_len(profile.payload_bytes());
    // IP bytes of one voice packet (the loss rule's price, the bundles' sizes)
    let ip = voip_packet(0, 0, 0, 0, payload).len();
    if setup == Setup::DownlinkMuxLoss {
        let phy = cell_phy(&cfg)?;
        let d = LossConfig::default();
        let c = LossConfig {
            airtime_budget: loss_budget.unwrap_or(d.airtime_budget),
            start_unicast: loss_start_unicast.unwrap_or(d.start_unicast),
            ..d
        };
        let period_ms = loss_report_ms.unwrap_or(1000);
        text.push_str(&loss_directive(&c, &phy, ip as u32, period_ms));
    }
    if let Some(e) = edca {
        text.push_str(&edca_directive_sta(e, sta_vo, sta_be));
    }
    if send_jitter_us > 0 {
        text.push_str(&format!("send_jitter_us {send_jitter_us}\n"));
    }
    if stagger_ms > 0 {
        text.push_str(&format!("assoc_stagger_ms {stagger_ms}\n"));
    }
    if d.is_some() && frame_guard {
        text.push_str("mux_guard 28\n");
    }
    if uplink_agg {
        let k = cell.calls_per_station;
        if k < 2 {
            bail!("--uplink-agg needs presets with 2 or more calls per station (cell:PHY:MC:K), not K = {k}");
        }
        let ap = cfg
            .topo
            .nodes
            .iter()
            .position(|x| x == crate::cell::AP)
            .context("the cell has no AP")?;
        text.push_str(&agg_directive(
            ap,
            uplink_hold_us.unwrap_or(spec.interval_ms * 1000),
            &bundle_sizes(ip, k),
        ));
        if uplink_busy {
            text.push_str("agg_up_busy\n");
        }
    }
    if d.is_some() && frame_copies > 1 {
        text.push_str(&format!("mux_copies {frame_copies}\n"));
    }
    let mut rule = None;
    if d.is_some() && airtime_rule {
        let copies = u8::try_from(frame_copies.clamp(1, 4)).unwrap_or(1);
        let table = rule_table(
            cell_phy(&cfg)?,
            copies,
            payload,
            profile.timestamp_step(),
            profile.params().payload_type,
        )?;
        text.push_str(&rule_directive(&table));
        rule = Some(table);
    }
    let (mut p, r) =
        crate::validate_sim::run_program(&cfg, setup, n, &spec, &flows, &dir, text, &packets, t0)?;
    let stations = cfg.topo.nodes.len() - 1 - crate::cell::OUTER;
    let assoc = r["associated"].as_u64().unwrap_or(0);
    p.downlink.insert(
        "cell.assoc".into(),
        serde_json::json!({
            "warmup_s": warmup_s,
            "stagger_ms": stagger_ms,
            "associated": assoc,
            "stations": stations,
            "first_packet_us": first_packet_us.round(),
            "last_assoc_us": r["last_assoc_us"],
            "assoc_events": r["assoc_events"],
        }),
    );
    if uplink_agg {
        p.downlink.insert("cell.agg_up".into(), r["agg_up"].clone());
    }
    if edca.is_some() {
        let vo = r["ap_edca"]["ap_vo_mpdus"].as_u64();
        if vo.unwrap_or(0) == 0 {
            bail!(
                "--ap-vo: the AP queued no voice on AC_VO ({})",
                r["ap_edca"]
            );
        }
        p.downlink.insert("AP.edca".into(), r["ap_edca"].clone());
    }
    if d.is_some() {
        let m = MuxReport::parse(
            &std::fs::read_to_string(&report).context("the simulation's mux report")?,
        )?;
        if m.frames > 0 {
            p.aggregation_ratio = m.entries as f64 / m.frames as f64;
        }
        let mut v = serde_json::to_value(&m)?;
        v["lost_frames_pct"] = serde_json::json!(m.lost_frames_pct(stations));
        if let Some(t) = rule {
            v["rule_table"] = serde_json::json!(t);
        }
        p.downlink.insert("AP.mux".into(), v);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(p)
}

/// `--free-downlink`: each downlink flow's path becomes `[outer, station]`
/// over a cable of its own (added to `topo`, as the outer nodes' cables to
/// the AP), so only the uplink and the AP's relays onto the wire remain.
pub fn free_downlink(topo: &mut Topology, flows: &mut [VoiceFlow]) {
    let base = topo.wired.first().cloned();
    for f in flows.iter_mut().filter(|f| f.dir == Direction::BToA) {
        let (o, s) = (f.path[0], *f.path.last().expect("a path"));
        let (a, b) = (topo.nodes[o].clone(), topo.nodes[s].clone());
        if !topo.wired.iter().any(|w| w.a == a && w.b == b) {
            let (rate_mbit, delay_ms) = base
                .as_ref()
                .map_or((100.0, 0.0), |w| (w.rate_mbit, w.delay_ms));
            topo.wired.push(crate::air_opts::Wired {
                a,
                b,
                rate_mbit,
                delay_ms,
            });
        }
        f.path = vec![o, s];
    }
}

/// The `agg_up` directive: nodes other than the AP (node `ap`) bundle the
/// packets they send it, holding one at most `hold_us`; `sizes` are the IP
/// bytes of bundles of 2, 3, .. K packets ([`bundle_sizes`]).
pub fn agg_directive(ap: usize, hold_us: u32, sizes: &[u32]) -> String {
    let s: Vec<String> = sizes.iter().map(u32::to_string).collect();
    format!("agg_up {ap} {hold_us} {}\n", s.join(" "))
}

/// The AP's AC_VO of hostapd's defaults (`tx_queue_data0_aifs/cwmin/cwmax`;
/// `tx_queue_data0_burst` is 1.5 ms there, 0 here unless `--ap-vo-edca` says).
pub const AP_VO_DEFAULT: [u32; 4] = [1, 3, 7, 0];

/// The `ap_edca` directive: the AP's AC_VO at `[aifsn, cwmin, cwmax, txop_us]`.
pub fn edca_directive(e: [u32; 4]) -> String {
    edca_directive_sta(e, None, None)
}

/// [`edca_directive`] with the stations' AC_VO kept at `sta_vo` (`[aifsn,
/// cwmin, cwmax]`, `--sta-vo-edca`: the directive's optional last fields)
/// and their AC_BE at `sta_be` (`--sta-be-edca`: a `sta_be_edca` line).
pub fn edca_directive_sta(
    e: [u32; 4],
    sta_vo: Option<[u32; 3]>,
    sta_be: Option<[u32; 3]>,
) -> String {
    let mut d = format!("ap_edca {} {} {} {}", e[0], e[1], e[2], e[3]);
    if let Some(v) = sta_vo {
        d.push_str(&format!(" {} {} {}", v[0], v[1], v[2]));
    }
    d.push('\n');
    if let Some(b) = sta_be {
        d.push_str(&format!("sta_be_edca {} {} {}\n", b[0], b[1], b[2]));
    }
    d
}

/// Parse a station queue's `AIFSN,CWMIN,CWMAX` (`--sta-vo-edca`,
/// `--sta-be-edca`: [`parse_edca`]'s values without a TXOP).
pub fn parse_station_edca(s: &str) -> Result<[u32; 3]> {
    let e = parse_edca(s)?;
    if e[3] != 0 {
        bail!("{s}: AIFSN,CWMIN,CWMAX (a station's queue has no TXOP here)");
    }
    Ok([e[0], e[1], e[2]])
}

/// Parse `--ap-vo-edca` (`AIFSN,CWMIN,CWMAX[,TXOP_US]`; CW values 2^k - 1).
pub fn parse_edca(s: &str) -> Result<[u32; 4]> {
    let v: Vec<u32> = s
        .split(',')
        .map(|x| x.trim().parse::<u32>())
        .collect::<std::result::Result<_, _>>()
        .with_context(|| format!("--ap-vo-edca {s}: numbers expected"))?;
    if !(3..=4).contains(&v.len()) {
        bail!("--ap-vo-edca {s}: AIFSN,CWMIN,CWMAX[,TXOP_US]");
    }
    let e = [v[0], v[1], v[2], v.get(3).copied().unwrap_or(0)];
    let cw_ok = |c: u32| c <= 32767 && (c + 1).is_power_of_two();
    if !(1..=15).contains(&e[0]) || !cw_ok(e[1]) || !cw_ok(e[2]) || e[1] > e[2] || e[3] > 8160 {
        bail!("--ap-vo-edca {s}: AIFSN 1-15, CWMIN <= CWMAX of the form 2^k-1 (<= 32767), TXOP <= 8160 us");
    }
    Ok(e)
}

#[cfg(test)]
#[path = "cell_sim_tests.rs"]
mod tests;
