//! `airpack lab validate` (issue 10 point 6): for each PHY preset, codec
//! and topology, the voice capacity (no aggregation, CBR) in pure ns-3
//! simulation ([`crate::validate_sim`]), emulated on the ns-3 air and
//! emulated on the tc air, all found by the same search
//! ([`crate::experiment::capacity_search_with`]; emulated rows walk from the
//! simulated capacity, [`crate::validate_walk`]); a row agrees when the
//! ns-3 air is within one call or 10 % of the simulation, whichever is
//! larger ([`agrees`]). An emulated point is measured until its senders
//! and air keep up, at most [`MAX_TRIES`] times, else its row is "not
//! measured" ([`until_kept_up`]). Prints a markdown table and writes every
//! point as JSON.
//!
//! Must not touch: how a point is measured or judged ([`crate::experiment`],
//! [`crate::validate_sim`], `airpack-voice`).

use crate::experiment::{capacity_search_with, run_point, ExperimentConfig, Setup, SetupResult};
use crate::topology::{Air, MediumOpts, Topology};
use crate::validate_walk::walk_search;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::PathBuf;

/// `airpack lab validate` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct ValidateArgs {
    /// PHY presets, comma separated; `ht0`..`ht7`: 802.11n HT at that MCS
    /// with the MAC's aggregation off (A-MPDU and A-MSDU; control frames
    /// at 6 Mbit/s; ns-3 only, no tc row).
    #[arg(long, default_value = "b2")]
    presets: String,
    /// Codecs, comma separated (g729, g711).
    #[arg(long, default_value = "g729,g711")]
    codecs: String,
    /// Topology presets, comma separated (`string:1..5` expands to string:1,...,string:5).
    #[arg(long, default_value = "string:1..5,seed001")]
    topologies: String,
    /// Which capacities to measure: sim (pure ns-3), ns3 (emulated on the
    /// ns-3 air), tc (emulated on the tc air).
    #[arg(long, default_value = "sim,ns3,tc")]
    airs: String,
    /// Seconds of calls per point (simulated and emulated alike).
    #[arg(long, default_value_t = 8.0)]
    duration: f64,
    /// Upper bound of the call search.
    #[arg(long, default_value_t = 64)]
    max_calls: u32,
    /// JSON of the run (default: results/ns3-validation-<unix time>.json).
    #[arg(long)]
    out: Option<PathBuf>,
    /// string:1 and string:2, G.729 only (a few minutes).
    #[arg(long)]
    quick: bool,
    /// The airpack binary to run in the namespaces (default: this executable).
    #[arg(long, env = "AIRPACK_BIN")]
    bin: Option<PathBuf>,
    /// Search emulated rows by doubling from one call, as the simulation,
    /// instead of walking from the simulated capacity
    /// ([`crate::validate_walk`]).
    #[arg(long)]
    full_search: bool,
    /// Take the pure-simulation capacities from an earlier run's JSON
    /// (rows of the same preset, codec and topology; a row missing there,
    /// or with an error, is simulated again if `sim` is among the airs;
    /// emulated rows always walk from these capacities). The pure simulation is
    /// deterministic and needs no quiet machine, so it can run ahead at
    /// low priority while the emulated rows wait for the lab.
    #[arg(long)]
    sim_from: Option<PathBuf>,
}

/// Measures one point of `n` calls.
type PointRunner = fn(&ExperimentConfig, Setup, u32) -> Result<crate::experiment::Point>;

/// Tries of one emulated point before its row is given up as "not
/// measured" ([`until_kept_up`]).
pub const MAX_TRIES: u32 = 5;

/// Pause before each further try (s times the try number): lets a burst
/// of other work on the machine pass.
const RETRY_PAUSE_S: u64 = 10;

/// Start of the error of a point that never kept up (the row's cell reads
/// "not measured").
pub const TOO_LOADED: &str = "not measured: machine too loaded";

/// Runs `run(try)` until `why` finds nothing wrong with the result (its
/// senders and air kept up), at most `tries` times; then fails with
/// [`TOO_LOADED`] and the last reason instead of returning a starved
/// point. Validation's rule: the experiments' search accepts a point
/// after its third lagging try, which once produced a false
/// disagreement (b11 G.729 one hop, docs/lab.md).
pub fn until_kept_up<T>(
    tries: u32,
    mut run: impl FnMut(u32) -> Result<T>,
    why: impl Fn(&Result<T>) -> Option<String>,
) -> Result<T> {
    let mut last = String::new();
    for k in 0..tries {
        let r = run(k);
        match why(&r) {
            None => return r,
            Some(w) => {
                eprintln!("lab validate: try {}/{tries}: {w}", k + 1);
                last = w;
            }
        }
    }
    bail!("{TOO_LOADED} ({tries} tries; last: {last})")
}

/// An emulated point, measured until it kept up ([`until_kept_up`]).
fn kept_up_point(c: &ExperimentConfig, s: Setup, n: u32) -> Result<crate::experiment::Point> {
    until_kept_up(
        MAX_TRIES,
        |k| {
            if k > 0 {
                std::thread::sleep(std::time::Duration::from_secs(RETRY_PAUSE_S * u64::from(k)));
            }
            run_point(c, s, n)
        },
        crate::experiment::remeasure_reason,
    )
}

/// Within one call or 10 % of the simulated capacity, whichever is larger.
pub fn tolerance(sim: u32) -> f64 {
    (0.1 * f64::from(sim)).max(1.0)
}

/// Whether an emulated capacity agrees with the simulated one (issue 10
/// point 6's rule, [`tolerance`]).
pub fn agrees(sim: u32, emulated: u32) -> bool {
    (f64::from(emulated) - f64::from(sim)).abs() <= tolerance(sim) + 1e-9
}

/// The most calls an emulated search of a row probes, given the pure
/// simulation's result: the smallest count that already disagrees by the
/// rule ([`agrees`]), so the verdict is decided while no point runs far
/// beyond capacity. Such a point saturates every hop, and the real-time air
/// could not keep up with it (16 calls on 5-hop chains whose capacity is 8:
/// lag p99 1.4-15 ms on every try on a quiet machine). An emulated search
/// stopped by this bound reports "at least" it, a disagreement. Without a
/// usable simulation result, `max_calls`.
pub fn probe_bound(sim: Option<&SetupResult>, max_calls: u32) -> u32 {
    match sim {
        Some(s) if s.error.is_none() && !s.capacity_at_least => {
            let mut n = s.capacity + 1;
            while agrees(s.capacity, n) {
                n += 1;
            }
            n.max(2).min(max_calls)
        }
        _ => max_calls,
    }
}

/// The smallest call count that still agrees with a simulated capacity
/// ([`agrees`]): where an emulated walk stops looking downwards.
pub fn agree_floor(sim: u32) -> u32 {
    let mut n = sim;
    while n > 0 && agrees(sim, n - 1) {
        n -= 1;
    }
    n
}

/// Published single-hop capacity (calls; `../shared/reference/`: Gast's
/// table after Cisco's 7920 guide), for 802.11b presets.
pub fn published_single_hop(preset: &str, codec: &str) -> Option<u32> {
    let (g711, g729) = match preset {
        "b1" => (3, 6),
        "b2" => (5, 8),
        "b5.5" => (8, 10),
        "b11" => (10, 11),
        "b11s" => (13, 15),
        _ => return None,
    };
    Some(if codec == "g711" { g711 } else { g729 })
}

/// The HT MCS of a validation preset `ht0`..`ht7` (None: a plain
/// `medium` preset).
pub fn ht_mcs(preset: &str) -> Result<Option<u8>> {
    match preset.strip_prefix("ht") {
        None => Ok(None),
        Some(m) => match m.parse::<u8>() {
            Ok(m) if m <= 7 => Ok(Some(m)),
            _ => bail!("unknown HT preset {preset:?} (ht0 .. ht7)"),
        },
    }
}

/// Expand `string:1..5` ranges in a comma-separated topology list.
pub fn expand_topologies(s: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for t in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        match t.strip_prefix("string:").and_then(|r| r.split_once("..")) {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse()?, b.parse()?);
                if a > b {
                    bail!("empty range {t}");
                }
                out.extend((a..=b).map(|k| format!("string:{k}")));
            }
            None => out.push(t.to_string()),
        }
    }
    Ok(out)
}

/// One row: a preset, codec and topology, and its capacities.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// PHY preset.
    pub preset: String,
    /// Codec.
    pub codec: String,
    /// Topology preset.
    pub topology: String,
    /// Pure ns-3 simulation.
    pub sim: Option<SetupResult>,
    /// Emulated on the ns-3 air.
    pub ns3: Option<SetupResult>,
    /// Emulated on the tc air.
    pub tc: Option<SetupResult>,
    /// Published single-hop capacity (1-hop rows of 802.11b presets).
    pub published: Option<u32>,
    /// Whether the ns-3 air agrees with the simulation (None: not both measured).
    pub agree: Option<bool>,
}

impl Row {
    fn judge(&mut self) {
        self.agree = match (&self.sim, &self.ns3) {
            (Some(s), Some(e)) if s.error.is_none() && e.error.is_none() => {
                Some(agrees(s.capacity, e.capacity))
            }
            _ => None,
        };
    }
}

fn cell(r: &Option<SetupResult>) -> String {
    match r {
        None => "-".into(),
        Some(r) if r.error.as_deref().is_some_and(|e| e.contains(TOO_LOADED)) => {
            "not measured (machine too loaded)".into()
        }
        Some(r) if r.error.is_some() => format!("error ({})", r.capacity),
        Some(r) => format!(
            "{}{}",
            if r.capacity_at_least { ">= " } else { "" },
            r.capacity
        ),
    }
}

/// Worst real-time lag p99 (ms) of the ns-3 air over a search's points.
fn worst_lag(r: &Option<SetupResult>) -> String {
    let lag = r
        .iter()
        .flat_map(|r| r.points.iter())
        .filter_map(|p| p.air.map(|a| a.lag_p99_ms))
        .fold(f64::NAN, f64::max);
    if lag.is_nan() {
        "-".into()
    } else {
        format!("{lag:.2}")
    }
}

/// The markdown table of `rows`.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| preset | codec | topology | pure ns-3 sim | ns-3 air | tc air | published | ns-3 air vs sim | worst air lag p99 (ms) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.preset,
            r.codec,
            r.topology,
            cell(&r.sim),
            cell(&r.ns3),
            cell(&r.tc),
            r.published
                .map(|p| p.to_string())
                .unwrap_or_else(|| "-".into()),
            match r.agree {
                Some(true) => "agree",
                Some(false) => "DISAGREE",
                None => "-",
            },
            worst_lag(&r.ns3)
        ));
    }
    s
}

/// The run's JSON document.
#[derive(Debug, Serialize)]
struct Run<'a> {
    command: String,
    started_unix_s: u64,
    duration_s: f64,
    rule: &'static str,
    /// How emulated rows were searched.
    search: &'static str,
    /// Where the pure-simulation capacities came from, if not this run
    /// (their points are in that file).
    sim_from: Option<String>,
    rows: &'a [Row],
}

/// The pure-simulation result of `preset`/`codec`/`topo` in an earlier
/// run's JSON (`--sim-from`), without its points; None when the file has
/// no such row or the row's simulation failed.
pub fn sim_from_run(
    run: &serde_json::Value,
    preset: &str,
    codec: &str,
    topo: &str,
) -> Option<SetupResult> {
    let row = run["rows"]
        .as_array()?
        .iter()
        .find(|r| r["preset"] == preset && r["codec"] == codec && r["topology"] == topo)?;
    let sim = &row["sim"];
    if !sim["error"].is_null() {
        return None;
    }
    Some(SetupResult {
        setup: Setup::Off,
        capacity: u32::try_from(sim["capacity"].as_u64()?).ok()?,
        capacity_at_least: sim["capacity_at_least"].as_bool()?,
        error: None,
        points: Vec::new(),
    })
}

fn config(
    a: &ValidateArgs,
    preset: &str,
    codec: &str,
    topo: &str,
    air: Air,
    work: PathBuf,
) -> Result<ExperimentConfig> {
    let mut t = Topology::preset(topo)?;
    t.air = air;
    let ht = ht_mcs(preset)?;
    if let Some(m) = ht {
        if air == Air::Tc {
            bail!("HT presets run on the ns-3 air only");
        }
        // no aggregation, as every validation row: the MAC's off too
        t.wifi.ht_mcs = Some(m);
        t.wifi.ampdu = Some(false);
        t.wifi.amsdu = Some(false);
    }
    let phy_name = if ht.is_some() { "a6" } else { preset };
    let phy = crate::medium::preset(phy_name)
        .with_context(|| format!("unknown PHY preset {preset:?}"))?;
    let bin = match &a.bin {
        Some(b) => b.clone(),
        None => std::env::current_exe().context("locate the airpack executable")?,
    };
    Ok(ExperimentConfig::cbr(
        bin,
        t,
        MediumOpts {
            phy,
            queue_limit: 50,
            loss_pct: 0.0,
        },
        codec,
        a.duration,
        a.max_calls,
        work,
    ))
}

/// Entry point of `airpack lab validate` (the caller has checked privileges).
pub fn main(a: ValidateArgs) -> Result<()> {
    let list = |s: &str| {
        s.split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect::<Vec<_>>()
    };
    let presets = list(&a.presets);
    let (codecs, topologies) = if a.quick {
        (
            vec!["g729".to_string()],
            vec!["string:1".to_string(), "string:2".to_string()],
        )
    } else {
        (list(&a.codecs), expand_topologies(&a.topologies)?)
    };
    let airs = list(&a.airs);
    for x in &airs {
        if !matches!(x.as_str(), "sim" | "ns3" | "tc") {
            bail!("unknown air {x:?} (sim, ns3, tc)");
        }
    }
    for c in &codecs {
        if !matches!(c.as_str(), "g729" | "g711") {
            bail!("unknown codec {c:?} (g729, g711)");
        }
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("results/ns3-validation-{secs}.json")));
    let work = std::fs::canonicalize(".")?.join(out.with_extension("work"));
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let sim_from = match &a.sim_from {
        Some(p) => Some(
            serde_json::from_slice::<serde_json::Value>(
                &std::fs::read(p).with_context(|| format!("reading {}", p.display()))?,
            )
            .with_context(|| format!("parsing {}", p.display()))?,
        ),
        None => None,
    };
    let mut rows: Vec<Row> = Vec::new();
    for preset in &presets {
        for codec in &codecs {
            for topo in &topologies {
                let mut row = Row {
                    preset: preset.clone(),
                    codec: codec.clone(),
                    topology: topo.clone(),
                    sim: None,
                    ns3: None,
                    tc: None,
                    published: if topo == "string:1" {
                        published_single_hop(preset, codec)
                    } else {
                        None
                    },
                    agree: None,
                };
                let dir = work.join(format!("{preset}-{codec}-{}", topo.replace(':', "")));
                if let Some(res) = sim_from
                    .as_ref()
                    .and_then(|run| sim_from_run(run, preset, codec, topo))
                {
                    eprintln!(
                        "lab validate: {preset} {codec} {topo}: sim capacity {} (from --sim-from)",
                        cell(&Some(res.clone()))
                    );
                    row.sim = Some(res);
                }
                for air in &airs {
                    if air == "tc" && ht_mcs(preset)?.is_some() {
                        eprintln!("lab validate: {preset}: no tc row (HT needs the ns-3 air)");
                        continue;
                    }
                    if air == "sim" && row.sim.is_some() {
                        continue;
                    }
                    eprintln!("lab validate: {preset} {codec} {topo}: {air}");
                    let (kind, runner): (Air, PointRunner) = match air.as_str() {
                        "sim" => (Air::Ns3, |c, _, n| crate::validate_sim::sim_point(c, n)),
                        "ns3" => (Air::Ns3, kept_up_point),
                        _ => (Air::Tc, kept_up_point),
                    };
                    let mut cfg = config(&a, preset, codec, topo, kind, dir.join(air))?;
                    let seed = row
                        .sim
                        .as_ref()
                        .filter(|s| s.error.is_none() && !s.capacity_at_least)
                        .map(|s| s.capacity);
                    if air != "sim" {
                        cfg.max_calls = probe_bound(row.sim.as_ref(), a.max_calls);
                    }
                    let res = match seed {
                        Some(sim) if air != "sim" && !a.full_search => walk_search(
                            &cfg,
                            Setup::Off,
                            runner,
                            sim,
                            agree_floor(sim),
                            cfg.max_calls,
                        ),
                        _ => capacity_search_with(&cfg, Setup::Off, runner, |_| {}),
                    };
                    eprintln!(
                        "lab validate: {preset} {codec} {topo}: {air} capacity {}",
                        cell(&Some(res.clone()))
                    );
                    match air.as_str() {
                        "sim" => row.sim = Some(res),
                        "ns3" => row.ns3 = Some(res),
                        _ => row.tc = Some(res),
                    }
                    if crate::netns::interrupted() {
                        bail!("interrupted");
                    }
                }
                row.judge();
                rows.push(row);
                // keep partial results
                if let Some(p) = out.parent() {
                    std::fs::create_dir_all(p)?;
                }
                let run = Run {
                    command: command.clone(),
                    started_unix_s: secs,
                    duration_s: a.duration,
                    rule: "agree: |ns-3 air - pure sim| <= max(1 call, 10 % of pure sim)",
                    search: if a.full_search {
                        "doubling from 1 call, bisection, confirming run (as the simulation)"
                    } else {
                        "emulated: walk from the simulated capacity, confirming run (validate_walk)"
                    },
                    sim_from: a.sim_from.as_ref().map(|p| p.display().to_string()),
                    rows: &rows,
                };
                std::fs::write(&out, serde_json::to_vec_pretty(&run)?)?;
            }
        }
    }
    println!(
        "\nVoice capacity, no aggregation, CBR, {} s per point (calls):\n",
        a.duration
    );
    print!("{}", table(&rows));
    println!("\nJSON: {}", out.display());
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_is_one_call_or_ten_percent_whichever_is_larger() {
        assert!(agrees(9, 8) && agrees(9, 10) && agrees(2, 1) && agrees(0, 1));
        assert!(!agrees(9, 7) && !agrees(2, 0) && !agrees(3, 5));
        // above 10 calls, 10 % is the larger tolerance
        assert_eq!(tolerance(30), 3.0);
        assert!(agrees(30, 27) && agrees(30, 33) && !agrees(30, 26) && !agrees(30, 34));
        assert_eq!(tolerance(5), 1.0);
    }

    #[test]
    fn topology_ranges_expand_and_published_numbers_come_from_the_reference() {
        assert_eq!(
            expand_topologies("string:1..3, seed001").unwrap(),
            ["string:1", "string:2", "string:3", "seed001"]
        );
        assert!(expand_topologies("string:3..1").is_err());
        assert_eq!(published_single_hop("b2", "g729"), Some(8));
        assert_eq!(published_single_hop("b2", "g711"), Some(5));
        assert_eq!(published_single_hop("a6", "g729"), None);
        assert_eq!(ht_mcs("ht0").unwrap(), Some(0));
        assert_eq!(ht_mcs("b2").unwrap(), None);
        assert!(ht_mcs("ht8").is_err() && ht_mcs("htx").is_err());
    }

    #[test]
    fn ht_presets_turn_the_macs_aggregation_off_and_refuse_the_tc_air() {
        let a = ValidateArgs {
            presets: "ht0".into(),
            codecs: "g729".into(),
            topologies: "string:1".into(),
            airs: "sim,ns3".into(),
            duration: 8.0,
            max_calls: 64,
            out: None,
            quick: false,
            bin: Some(PathBuf::from("/bin/true")),
            full_search: false,
            sim_from: None,
        };
        let c = config(&a, "ht3", "g729", "string:2", Air::Ns3, PathBuf::from("/x")).unwrap();
        assert_eq!(
            (c.topo.wifi.ht_mcs, c.topo.wifi.ampdu, c.topo.wifi.amsdu),
            (Some(3), Some(false), Some(false))
        );
        assert_eq!(c.medium.phy.name, "a6");
        assert!(config(&a, "ht0", "g729", "string:1", Air::Tc, PathBuf::from("/x")).is_err());
        let b = config(&a, "b11", "g729", "string:1", Air::Tc, PathBuf::from("/x")).unwrap();
        assert_eq!(b.topo.wifi.ht_mcs, None);
    }

    #[test]
    fn a_point_is_measured_until_it_keeps_up_and_never_accepted_starved() {
        let why = |r: &Result<u32>| match r {
            Ok(lag) if *lag > 50 => Some(format!("senders lagged {lag} ms")),
            _ => None,
        };
        // kept up on the third try: that try's result, after three runs
        let lags = [150, 120, 3, 0];
        let mut runs = Vec::new();
        let r = until_kept_up(
            MAX_TRIES,
            |k| {
                runs.push(k);
                Ok(lags[k as usize])
            },
            why,
        );
        assert_eq!((r.unwrap(), runs), (3, vec![0, 1, 2]));
        // never kept up: no point, an error naming the machine and the last reason
        let mut n = 0;
        let e = until_kept_up(
            MAX_TRIES,
            |_| {
                n += 1;
                Ok(151)
            },
            why,
        )
        .unwrap_err();
        assert_eq!(n, MAX_TRIES);
        let e = format!("{e:#}");
        assert!(
            e.starts_with(TOO_LOADED) && e.contains("senders lagged 151 ms"),
            "{e}"
        );
        // a failed point that is not a lag (why: None) is returned at once
        let mut n = 0;
        assert!(until_kept_up(
            MAX_TRIES,
            |_| {
                n += 1;
                Err::<u32, _>(anyhow::anyhow!("boom"))
            },
            why
        )
        .is_err());
        assert_eq!(n, 1);
        // the row reads "not measured" and is not judged
        let res = SetupResult {
            setup: Setup::Off,
            capacity: 11,
            capacity_at_least: false,
            error: Some(format!("12 calls: {e}")),
            points: Vec::new(),
        };
        assert_eq!(cell(&Some(res)), "not measured (machine too loaded)");
    }

    #[test]
    fn rows_are_judged_only_when_both_capacities_were_measured() {
        let res = |c: u32| SetupResult {
            setup: Setup::Off,
            capacity: c,
            capacity_at_least: false,
            error: None,
            points: Vec::new(),
        };
        let mut r = Row {
            preset: "b2".into(),
            codec: "g729".into(),
            topology: "string:1".into(),
            sim: Some(res(9)),
            ns3: Some(res(7)),
            tc: None,
            published: Some(8),
            agree: None,
        };
        r.judge();
        assert_eq!(r.agree, Some(false));
        r.ns3 = Some(res(8));
        r.judge();
        assert_eq!(r.agree, Some(true));
        r.ns3.as_mut().unwrap().error = Some("boom".into());
        r.judge();
        assert_eq!(r.agree, None);
        let t = table(&[r]);
        assert!(
            t.contains("| b2 | g729 | string:1 | 9 | error (8) | - | 8 | - | - |"),
            "{t}"
        );
    }

    #[test]
    fn emulated_searches_stop_where_the_verdict_is_decided() {
        let sim = |capacity, at_least| SetupResult {
            setup: Setup::Off,
            capacity,
            capacity_at_least: at_least,
            error: None,
            points: Vec::new(),
        };
        // 8 calls: 9 agrees (one call), 10 is the first that disagrees.
        assert_eq!(probe_bound(Some(&sim(8, false)), 64), 10);
        assert!(agrees(8, 9) && !agrees(8, 10));
        // 30 calls: 10 % is 3, so 34 is the first disagreement.
        assert_eq!(probe_bound(Some(&sim(30, false)), 64), 34);
        assert!(agrees(30, 33) && !agrees(30, 34));
        // 0 calls: 2 (one call still agrees), and never above --max-calls.
        assert_eq!(probe_bound(Some(&sim(0, false)), 64), 2);
        assert_eq!(probe_bound(Some(&sim(60, false)), 64), 64);
        // No usable simulation: the configured bound.
        assert_eq!(probe_bound(Some(&sim(64, true)), 64), 64);
        assert_eq!(probe_bound(None, 40), 40);
        // ... and look no lower than the last agreeing count
        assert_eq!(
            (
                agree_floor(8),
                agree_floor(30),
                agree_floor(1),
                agree_floor(0)
            ),
            (7, 27, 0, 0)
        );
        assert!(agrees(30, 27) && !agrees(30, 26));
    }

    #[test]
    fn sim_from_takes_the_matching_row_and_never_a_failed_one() {
        let run = serde_json::json!({"rows": [
            {"preset": "ht1", "codec": "g729", "topology": "string:1",
             "sim": {"capacity": 41, "capacity_at_least": false, "error": null, "points": []}},
            {"preset": "ht1", "codec": "g711", "topology": "string:1",
             "sim": {"capacity": 3, "capacity_at_least": false, "error": "ns-3 failed", "points": []}},
            {"preset": "ht2", "codec": "g729", "topology": "string:1",
             "sim": {"capacity": 64, "capacity_at_least": true, "error": null, "points": []}},
        ]});
        let r = sim_from_run(&run, "ht1", "g729", "string:1").unwrap();
        assert_eq!(
            (r.capacity, r.capacity_at_least, r.points.len()),
            (41, false, 0)
        );
        assert!(sim_from_run(&run, "ht1", "g711", "string:1").is_none());
        assert!(sim_from_run(&run, "ht1", "g729", "string:2").is_none());
        assert!(
            sim_from_run(&run, "ht2", "g729", "string:1")
                .unwrap()
                .capacity_at_least
        );
    }
}
