//! The command `airpack lab cell-sim`: its flags ([`CellSimArgs`], read once
//! into the model's [`Knobs`]), the capacity search per preset, codec and
//! setup against the analytic bound, the run's JSON and its markdown table
//! (the plots: `super::plots`).
//!
//! Must not touch: a point's config and measurement (the parent module), the
//! search rule ([`crate::experiment`]).

use super::{cell_point_with, depth, parse_edca, parse_station_edca, Knobs};
use crate::air_ns3;
use crate::cell::CellSpec;
use crate::experiment::{ExperimentConfig, Setup, SetupResult};
use crate::topology::MediumOpts;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// `airpack lab cell-sim` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct CellSimArgs {
    /// Cell presets, comma separated (`cell:PHY[:MC[:K]]`, as `lab run --preset`).
    #[arg(long, default_value = "cell:b11:11")]
    pub(super) presets: String,
    /// Codecs, comma separated (g729, g711).
    #[arg(long, default_value = "g729,g711")]
    pub(super) codecs: String,
    /// Setups, comma separated (off, downlink-mux, downlink-mux-loss, downlink-mux-red, downlink-mux-red2).
    #[arg(long, default_value = "off,downlink-mux,downlink-mux-red")]
    pub(super) setups: String,
    /// Seconds of calls per point.
    #[arg(long, default_value_t = 8.0)]
    pub(super) duration: f64,
    /// Upper bound of the call search (default: the setup's analytic
    /// bound x 1.25 + 2; overloaded points of a large cell cost minutes).
    #[arg(long)]
    pub(super) max_calls: Option<u32>,
    /// MAC queue limit (packets), as the lab's `--queue-limit`.
    #[arg(long, default_value_t = 50)]
    pub(super) queue_limit: u32,
    /// JSON of the run (default: `results/cell-sim-<unix time>.json`).
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// `downlink-mux-loss`: the airtime guard's budget (share of the
    /// channel; default `LossConfig::default().airtime_budget`).
    #[arg(long)]
    pub(super) loss_budget: Option<f64>,
    /// `downlink-mux-loss`: the stations' report period, ms (the daemon's
    /// `station.report_ms`).
    #[arg(long, default_value_t = 1000)]
    pub(super) loss_report_ms: u32,
    /// `downlink-mux-loss`: new stations start on unicast until a clean
    /// report, with a trial (`ap.loss_start_unicast = true`, the daemon's
    /// default; kept for old command lines).
    #[arg(long)]
    pub(super) loss_start_unicast: bool,
    /// Every setup: the AP sends its voice (multiplexed frames and unicast
    /// downlink) on a WMM AP's AC_VO queue, the stations keep the DCF's
    /// access (docs/lab.md 5; `off` with it is the control).
    #[arg(long)]
    pub(super) ap_vo: bool,
    /// With `--ap-vo`: the AP's AC_VO as `AIFSN,CWMIN,CWMAX[,TXOP_US]`
    /// (default hostapd's 1,3,7 without TXOP bursts).
    #[arg(long, default_value = "1,3,7,0")]
    pub(super) ap_vo_edca: String,
    /// Every packet of a call leaves up to this many µs (uniform) after
    /// its nominal 20-ms tick, as a phone's scheduler jitters (default 0:
    /// exactly periodic, which can phase-lock a station's uplink with the
    /// AP's frame, docs/results.md).
    #[arg(long, default_value_t = 0)]
    pub(super) send_jitter_us: u32,
    /// `downlink-mux-loss`: new stations start in the frame
    /// (`ap.loss_start_unicast = false`).
    #[arg(long, conflicts_with = "loss_start_unicast")]
    pub(super) loss_start_frame: bool,
    /// Setup `off` only: every call's downlink reaches its station over a
    /// cable of its own (no voice from the AP on the air): the capacity of
    /// the uplink alone, the ceiling of any downlink scheme.
    #[arg(long)]
    pub(super) free_downlink: bool,
    /// Multiplexed setups: every frame is sent this many times (1-4), each
    /// copy its own channel access (the daemon's `ap.frame_copies`).
    #[arg(long, default_value_t = 1)]
    pub(super) frame_copies: u32,
    /// Multiplexed setups: the daemon's per-frame airtime rule with the
    /// preset's rates (`Mux::close`: a frame is sent as many times, up to
    /// `--frame-copies`, as still cost less than its packets as unicast,
    /// and its packets leave as unicast when one copy does not pay).
    #[arg(long)]
    pub(super) airtime_rule: bool,
    /// With `--ap-vo`: keep the stations' AC_VO at `AIFSN,CWMIN,CWMAX`
    /// (hostapd advertises `wmm_ac_vo_*`, 2,3,7, apart from the AP's own
    /// queue; without it the stations take the AP's AC_VO from its beacons).
    #[arg(long)]
    pub(super) sta_vo_edca: Option<String>,
    /// With `--ap-vo`: keep the stations' AC_BE, where their voice goes, at
    /// `AIFSN,CWMIN,CWMAX` (a WMM station's best effort: 3,15,1023 in g,
    /// 3,31,1023 in b; without it the DCF's 2,CWMIN,1023).
    #[arg(long)]
    pub(super) sta_be_edca: Option<String>,
    /// Multiplexed setups: before each frame the AP sends a guard, an empty
    /// UDP datagram to the group (28 bytes) that no station takes; what
    /// collides when the AP's first slot meets a station's.
    #[arg(long)]
    pub(super) frame_guard: bool,
    /// Each station bundles its calls' uplink packets to the AP, as the
    /// daemon's hop-by-hop role beside `[station]` (presets with K >= 2
    /// calls per station: up to K packets, held at most one interval).
    #[arg(long)]
    pub(super) uplink_agg: bool,
    /// With `--uplink-agg`: the longest a packet waits for its bundle, µs
    /// (default: one packet interval, as the lab's station daemons'
    /// `hold_time_us`).
    #[arg(long)]
    pub(super) uplink_hold_us: Option<u32>,
    /// With `--uplink-agg`: a station's packet waits only while its radio
    /// has a frame queued or in flight (the daemon's `link_mode =
    /// "hold-while-busy"` with the radio's queue as busy signal), still at
    /// most the hold and K packets.
    #[arg(long, requires = "uplink_agg")]
    pub(super) uplink_agg_busy: bool,
    /// Calls join one by one at uniform random times within this many ms
    /// (below half of `--duration`), as calls arrive in a cell in use,
    /// instead of all within the first packet interval (0, the default: a
    /// cold start of every call at once); each call still lasts
    /// `--duration`, all of them together for `--duration` minus this.
    #[arg(long, default_value_t = 0)]
    pub(super) call_arrival_ms: u32,
    /// Draw the plots of saved runs and exit, simulating nothing: one or
    /// more JSON files (as `--out` writes them, or docs/results' files of
    /// tagged runs), every row a line; the plots are named after `--out`
    /// (default: the first file).
    #[arg(long, num_args = 1..)]
    pub(super) replot: Vec<PathBuf>,
    /// With `--replot`: only the runs with these tags (comma separated) of
    /// docs/results' files.
    #[arg(long, requires = "replot")]
    pub(super) replot_tags: Option<String>,
}

/// One row of the run: a preset, codec and setup's capacity and its bound.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Cell preset.
    pub preset: String,
    /// Codec.
    pub codec: String,
    /// Analytic bound of the setup ([`crate::cell::bound_agg`]: off or mux,
    /// with `--uplink-agg` the preset's K calls per bundle).
    pub bound: u32,
    /// The search (capacity and every point).
    pub result: SetupResult,
}

/// The experiment config of a cell preset (pure simulation: no binary runs
/// in namespaces).
pub fn config(preset: &str, codec: &str, a: &CellSimArgs, work: &Path) -> Result<ExperimentConfig> {
    let cell = CellSpec::parse(preset).context("not a cell preset (cell:PHY[:MC[:K]])")??;
    let topo = cell.topology(1);
    let phy = crate::medium::preset(&cell.phy).context("cell PHY")?;
    Ok(ExperimentConfig::cbr(
        "/bin/true".into(),
        topo,
        MediumOpts {
            phy,
            queue_limit: a.queue_limit,
            loss_pct: 0.0,
        },
        codec,
        a.duration,
        a.max_calls.unwrap_or(64),
        work.to_path_buf(),
    ))
}

/// The model's options of the run's flags, checked.
pub(super) fn knobs(a: &CellSimArgs) -> Result<Knobs> {
    if let Some(b) = a.loss_budget {
        if !(b > 0.0 && b <= 4.0) {
            bail!("--loss-budget {b}: must be above 0 and at most 4");
        }
    }
    if !(50..=60_000).contains(&a.loss_report_ms) {
        bail!("--loss-report-ms {}: must be in 50-60000", a.loss_report_ms);
    }
    let edca = parse_edca(&a.ap_vo_edca)?;
    if a.send_jitter_us >= 20_000 {
        bail!("--send-jitter-us {}: must be below 20000", a.send_jitter_us);
    }
    if !(1..=4).contains(&a.frame_copies) {
        bail!("--frame-copies {}: must be 1-4", a.frame_copies);
    }
    if f64::from(a.call_arrival_ms) >= a.duration * 500.0 {
        bail!(
            "--call-arrival-ms {}: must be below half of --duration ({} s)",
            a.call_arrival_ms,
            a.duration
        );
    }
    if let Some(h) = a.uplink_hold_us {
        if !a.uplink_agg || !(1..=1_000_000).contains(&h) {
            bail!("--uplink-hold-us {h}: with --uplink-agg, 1-1000000");
        }
    }
    let station_edca = |flag: &str, v: &Option<String>| -> Result<Option<[u32; 3]>> {
        let Some(v) = v else { return Ok(None) };
        let e = parse_station_edca(v).with_context(|| format!("--{flag}"))?;
        if !a.ap_vo {
            bail!("--{flag} needs --ap-vo (every node a QoS node)");
        }
        Ok(Some(e))
    };
    Ok(Knobs {
        edca: a.ap_vo.then_some(edca),
        send_jitter_us: a.send_jitter_us,
        free_downlink: a.free_downlink,
        frame_copies: a.frame_copies,
        airtime_rule: a.airtime_rule,
        sta_vo: station_edca("sta-vo-edca", &a.sta_vo_edca)?,
        sta_be: station_edca("sta-be-edca", &a.sta_be_edca)?,
        frame_guard: a.frame_guard,
        uplink_agg: a.uplink_agg,
        uplink_hold_us: a.uplink_hold_us,
        uplink_busy: a.uplink_agg_busy,
        arrival_ms: a.call_arrival_ms,
        loss_budget: a.loss_budget,
        loss_start_unicast: Some(!a.loss_start_frame),
        loss_report_ms: Some(a.loss_report_ms),
    })
}

/// Run the searches and write the JSON.
pub fn main(a: CellSimArgs) -> Result<()> {
    if !a.replot.is_empty() {
        return super::plots::replot(&a.replot, a.replot_tags.as_deref(), a.out.as_deref());
    }
    air_ns3::check_available().map_err(|e| anyhow::anyhow!(e))?;
    let knobs = knobs(&a)?;
    crate::netns::catch_interrupts();
    let split = |s: &str| -> Vec<String> {
        s.split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect()
    };
    let setups: Vec<Setup> = split(&a.setups)
        .iter()
        .map(|s| Setup::parse(s))
        .collect::<Result<_>>()?;
    for s in &setups {
        depth(*s)?;
    }
    let out = crate::out_or_default(&a.out, "cell-sim", ".json");
    let work = std::env::temp_dir().join(format!("airpack-cell-sim-{}", std::process::id()));
    let mut rows = Vec::new();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let mut run = run_json(&command, &rows); // as written after each row
    for preset in split(&a.presets) {
        for codec in split(&a.codecs) {
            let cfg = config(&preset, &codec, &a, &work)?;
            let cell = cfg.topo.cell.clone().expect("cell");
            let k = if a.uplink_agg {
                cell.calls_per_station
            } else {
                1
            };
            let (b_off, b_mux) = crate::cell::bound_agg(&cell, &codec, k)?;
            for &setup in &setups {
                let bound = if setup == Setup::Off { b_off } else { b_mux };
                eprintln!(
                    "cell-sim: {preset} {codec} {} (bound {bound}), pure simulation",
                    setup.name()
                );
                let mut cfg = cfg.clone();
                cfg.max_calls = a.max_calls.unwrap_or(bound * 5 / 4 + 2);
                let result = crate::experiment::capacity_search_with(
                    &cfg,
                    setup,
                    |c, s, n| cell_point_with(c, s, n, knobs),
                    |p| eprintln!("  {}", crate::experiment::point_line(p)),
                );
                eprintln!("  capacity {} (bound {bound})", result.capacity);
                rows.push(Row {
                    preset: preset.clone(),
                    codec: codec.clone(),
                    bound,
                    result,
                });
                run = run_json(&command, &rows);
                write_json(&out, &run)?;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    for p in super::plots::write_plots(&out, &super::plots::named_rows(&run, None)?)? {
        eprintln!("cell-sim: wrote {}", p.display());
    }
    println!("{}", table(&rows));
    Ok(())
}

fn run_json(command: &str, rows: &[Row]) -> serde_json::Value {
    serde_json::json!({
        "note": "pure ns-3 simulation of the cell (airpack lab cell-sim), not emulated",
        "command": command,
        "rows": rows,
    })
}

fn write_json(out: &Path, run: &serde_json::Value) -> Result<()> {
    if let Some(d) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(out, serde_json::to_string(run)?)?;
    Ok(())
}

/// Markdown table of the rows: capacity against the bound.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| preset | codec | setup | bound | pure sim | sim / bound |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        let c = r.result.capacity;
        let cap = match (&r.result.error, r.result.capacity_at_least) {
            (Some(e), _) => format!("error: {e}"),
            (None, true) => format!(">= {c}"),
            (None, false) => c.to_string(),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {cap} | {:.0} % |\n",
            r.preset,
            r.codec,
            r.result.setup.name(),
            r.bound,
            100.0 * f64::from(c) / f64::from(r.bound.max(1))
        ));
    }
    s
}
