//! # airpack-lab: measure every claim
//!
//! Owns: the emulated 802.11 medium and topologies built from network
//! namespaces ([`medium`], [`topology`], [`netns`]), the VoIP traffic tool
//! ([`voip`]: real RTP calls, one process per node), and the capacity
//! experiments and their reports ([`experiment`], [`report`]), and the
//! `airpack lab` command line (this file).
//!
//! Must not touch: aggregation logic (it runs the real `airpack` daemon) or
//! voice-quality math (that is `airpack-voice`).

pub mod air_ns3;
pub mod air_ns3_conf;
pub mod air_obs;
pub mod air_opts;
pub mod babel;
pub mod baresip;
pub mod cell;
pub mod cell_sim;
pub mod downlink_bound;
pub mod experiment;
pub mod gw;
pub mod link_size;
pub mod medium;
pub mod netns;
pub mod report;
pub mod tcp_bulk;
pub mod tcp_voice;
pub mod topology;
pub mod validate;
pub mod validate_sim;
pub mod validate_walk;
pub mod voip;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use experiment::{ExperimentConfig, Setup, SetupResult};
use std::path::PathBuf;
use topology::{MediumOpts, Topology};

/// `airpack lab` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct LabArgs {
    #[command(subcommand)]
    cmd: LabCmd,
}

#[derive(Subcommand, Debug, Clone)]
enum LabCmd {
    /// Measure VoIP call capacity per aggregation setup on an emulated mesh
    /// (default: seed 001's 2 Mbit/s testbed, G.729 with voice activity).
    Run(RunArgs),
    /// Measure one point: N calls under one setup (prints the merged results).
    Point(PointArgs),
    /// Validate the ns-3 air: voice capacity (no aggregation, CBR) in pure
    /// ns-3 simulation vs emulated on the ns-3 air and on the tc air.
    Validate(validate::ValidateArgs),
    /// The infrastructure cell in pure ns-3 simulation (no root, no
    /// daemons): capacity off and with downlink multiplexing against the
    /// analytic bound, for cells the real-time air cannot carry.
    CellSim(cell_sim::CellSimArgs),
    /// N calls plus M bulk TCP flows (`--tcp-flows M`) between the call
    /// endpoints, per setup and repetition: the TCP goodput left beside
    /// voice (issue 11 point 9, seed 004; docs/lab.md section 7).
    TcpVoice(TcpVoiceArgs),
    /// Print the 802.11 airtime presets and single-hop capacities.
    Presets,
    /// Delete namespaces left by crashed lab runs (`--all`: every lab namespace).
    Clean {
        /// Also delete namespaces of running lab processes.
        #[arg(long)]
        all: bool,
    },
}

/// Options shared by `run` and `point`.
#[derive(Parser, Debug, Clone)]
struct Common {
    /// Topology preset: seed001, seed000, string:N (1..5 hops), an
    /// infrastructure cell cell:PHY[:MULTICAST_MBIT] (ns-3 air; one station per call),
    /// or seed 003's gateway gw:N[:DELAY_MS[:RATE_MBIT]][:cs2|:geo] (server S -cable- G, N radio hops to MN; cs2: nodes two hops apart in carrier-sense range; geo: seed 003's ns-2 geometry, every pair at its two-ray loss, frame capture).
    #[arg(long, default_value = "seed001", conflicts_with = "topology")]
    preset: String,
    /// Topology file (TOML; see docs/lab.md).
    #[arg(long)]
    topology: Option<PathBuf>,
    /// Routing: static shortest paths, or babel (one babeld per node, needs
    /// the babeld package); default: the topology file's, else static.
    #[arg(long, value_parser = ["static", "babel"])]
    routing: Option<String>,
    /// Air between the radios: ns3 (ns-3's 802.11 model in real time;
    /// needs libns3-dev and g++) or tc (one HTB, fast); default: the
    /// topology file's, else ns3.
    #[arg(long, value_parser = ["tc", "ns3"])]
    air: Option<String>,
    /// PHY preset (b1, b2, b5.5, b11, b11s, a6, a12, a24, a54); default: the topology's, else b2.
    #[arg(long)]
    phy: Option<String>,
    /// Codec: g729 or g711.
    #[arg(long, default_value = "g729")]
    codec: String,
    /// Packet interval (ms).
    #[arg(long, default_value_t = 20)]
    interval_ms: u32,
    /// Voice activity (on/off talk spurts) or constant bit rate.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    vad: String,
    /// Seconds of calls per point.
    #[arg(long)]
    duration: Option<f64>,
    /// Support criterion: mos (MOS >= 3.6 both ways) or seeds (loss < 4 %, mean delay + mean jitter < 150 ms).
    #[arg(long, default_value = "mos", value_parser = ["mos", "seeds"])]
    criterion: String,
    /// Playout buffer (ms) for late loss.
    #[arg(long, default_value_t = 60)]
    playout_ms: u32,
    /// Per-node MAC queue limit (packets).
    #[arg(long, default_value_t = 50)]
    queue_limit: u32,
    /// Random frame loss on the air (%).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Aggregation hold time (µs): the longest a packet waits for company
    /// (default one packet interval: every active flow can contribute one packet).
    #[arg(long, default_value_t = 20000)]
    hold_us: u32,
    /// Seed of the voice-activity model.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Who makes the calls: airpack (the project's RTP generator) or baresip
    /// (real SIP phones calling by IP; G.711 CBR only: --codec g711 --vad off).
    #[arg(long, default_value = "airpack", value_parser = ["airpack", "baresip"])]
    client: String,
    /// The airpack binary to run in the namespaces (default: this executable).
    #[arg(long, env = "AIRPACK_BIN")]
    bin: Option<PathBuf>,
    #[command(flatten)]
    gw: GwArgs,
    /// Cell presets, downlink setups: an `[ap]` setting KEY=VALUE (TOML
    /// value) added to the access point's daemon config, replacing the
    /// setup's own, e.g. `loss_airtime_budget=0.8`; repeatable.
    #[arg(long = "ap-set", value_name = "KEY=VALUE")]
    ap_set: Vec<String>,
}

/// Options of the gateway presets (`--preset gw:N`, seed 003; docs/lab.md).
#[derive(clap::Args, Debug, Clone)]
struct GwArgs {
    /// Gateway presets: TCP bulk flows from the server S to the mesh end MN during each point.
    #[arg(long, default_value_t = 0)]
    tcp_flows: u32,
    /// Gateway presets: the TCP senders' congestion control (TCP_CONGESTION: cubic, reno, ...).
    #[arg(long, default_value = "cubic")]
    tcp_cc: String,
    /// Gateway presets, setup fixed-shaper: the TCP class's rate at the gateway (kbit/s).
    #[arg(long, default_value_t = 1000)]
    shaper_kbps: u64,
    /// Gateway presets: root rate of the gateway's qdiscs (kbit/s; default: one saturated hop of the PHY).
    #[arg(long)]
    link_kbps: Option<u64>,
    /// Gateway presets, setup pacer: the controller's initial TCP rate
    /// (kbit/s), before any call (the search controller starts at
    /// `start_per_call_kbps` x the calls when they appear).
    #[arg(long, default_value_t = 64)]
    pacer_initial_kbps: u64,
    /// Gateway presets, setup pacer: the rate controller (`gateway.controller`: search, seed).
    #[arg(long, default_value = "search", value_parser = ["search", "seed"])]
    pacer_controller: String,
    /// Gateway presets, setup pacer: a `[gateway]` setting KEY=VALUE (TOML
    /// value) added to the daemon's config, e.g. `mos_percentile=0.25`;
    /// repeatable. `min_rate_kbps=296 max_rate_kbps=296` with
    /// `--pacer-initial-kbps 296` pins the rate (the gateway then only reads).
    #[arg(long = "pacer-set", value_name = "KEY=VALUE")]
    pacer_set: Vec<String>,
}

#[derive(clap::Args, Debug, Clone)]
struct RunArgs {
    #[command(flatten)]
    common: Common,
    /// Setups to measure, comma separated.
    #[arg(long, default_value = "off,hop-by-hop,end-to-end,hold-while-busy")]
    setups: String,
    /// Upper bound of the call search.
    #[arg(long)]
    max_calls: Option<u32>,
    /// Results directory (default: results/<topology>-<unix time>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Short run: 4 s per point and at most 16 calls (a smoke test, not a measurement).
    #[arg(long)]
    quick: bool,
}

#[derive(clap::Args, Debug, Clone)]
struct TcpVoiceArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    opts: tcp_voice::Opts,
}

#[derive(clap::Args, Debug, Clone)]
struct PointArgs {
    #[command(flatten)]
    common: Common,
    /// Setup.
    #[arg(long, default_value = "off")]
    setup: String,
    /// Number of calls.
    #[arg(long, default_value_t = 1)]
    calls: u32,
    /// Gateway presets: from SECONDS after the calls' start on, CALLS calls
    /// are active (calls leave from the highest number down, join from the
    /// lowest up; each active interval is judged on its own); repeatable,
    /// e.g. `--calls 16 --calls-at 30:8 --calls-at 60:16`. The point's JSON
    /// gets `mid_run` (docs/lab.md section 6).
    #[arg(long = "calls-at", value_name = "SECONDS:CALLS")]
    calls_at: Vec<String>,
    /// Scratch directory (default: /tmp/airpack-lab-<pid>).
    #[arg(long)]
    work: Option<PathBuf>,
}

/// The air of `airpack lab run` and `point` when neither `--air` nor the
/// topology file's `air` key names one: ns-3's 802.11 model since it agreed
/// with pure simulation and a default run still takes under 10 minutes
/// (issue 10 point 8; docs/lab.md section 2b). `--air tc` is the fast option.
pub const DEFAULT_AIR: topology::Air = topology::Air::Ns3;

/// The air a run uses: `--air`, else the topology file's `air` key, else
/// [`DEFAULT_AIR`] (`file` is the topology file's text, None for a preset).
pub fn choose_air(cli: Option<&str>, file: Option<&str>) -> Result<topology::Air> {
    if let Some(a) = cli {
        return topology::Air::parse(a);
    }
    if let Some(text) = file {
        let table: toml::Table = toml::from_str(text).context("bad topology file")?;
        if let Some(a) = table.get("air") {
            return topology::Air::parse(a.as_str().context("air must be a string")?);
        }
    }
    Ok(DEFAULT_AIR)
}

fn build_config(
    c: &Common,
    duration: f64,
    max_calls: u32,
    work_dir: PathBuf,
) -> Result<ExperimentConfig> {
    let text = match &c.topology {
        Some(f) => {
            Some(std::fs::read_to_string(f).with_context(|| format!("read {}", f.display()))?)
        }
        None => None,
    };
    let topo = match &text {
        Some(t) => Topology::from_toml(t)?,
        None => Topology::preset(&c.preset)?,
    };
    let mut topo = topo;
    if let Some(r) = &c.routing {
        topo.routing = topology::Routing::parse(r)?;
    }
    topo.air = choose_air(c.air.as_deref(), text.as_deref())?;
    if topo.routing == topology::Routing::Babel {
        babel::check_available()?;
        if !topo.routes.is_empty() {
            eprintln!(
                "lab: WARNING: the topology's explicit routes are ignored with babel routing"
            );
        }
    }
    for (a, b) in if topo.routing == topology::Routing::Static {
        topo.asymmetric_calls()
    } else {
        Vec::new()
    } {
        eprintln!(
            "lab: WARNING: the route {a} -> {b} is not the reverse of {b} -> {a}; with hop-by-hop aggregation the daemons' source check will drop that traffic"
        );
    }
    match topo.gw.as_mut() {
        Some(g) => {
            g.tcp_flows = c.gw.tcp_flows;
            g.tcp_cc.clone_from(&c.gw.tcp_cc);
            g.shaper_kbps = c.gw.shaper_kbps;
            g.link_kbps = c.gw.link_kbps;
            g.pacer_initial_kbps = c.gw.pacer_initial_kbps;
            g.pacer_controller.clone_from(&c.gw.pacer_controller);
            g.pacer_set = gw::pacer_settings(&c.gw.pacer_set)?;
            if topo.air != topology::Air::Ns3 {
                bail!("the gateway presets need the ns-3 air (their wired link)");
            }
        }
        None if c.gw.tcp_flows > 0 => bail!("--tcp-flows needs a gateway preset (--preset gw:N)"),
        None => {}
    }
    topo.wifi.ap_set = cell::ap_settings(&c.ap_set)?;
    if !topo.wifi.ap_set.is_empty() && topo.wifi.ap.is_none() {
        bail!("--ap-set needs a cell preset (--preset cell:...)");
    }
    let phy_name = c
        .phy
        .clone()
        .or_else(|| topo.phy.clone())
        .unwrap_or_else(|| "b2".into());
    let phy = medium::preset(&phy_name)
        .with_context(|| format!("unknown PHY preset {phy_name:?} (see `airpack lab presets`)"))?;
    if !(0.0..=100.0).contains(&c.loss) {
        bail!("--loss must be a percentage");
    }
    if !matches!(c.codec.as_str(), "g729" | "g711") {
        bail!("--codec must be g729 or g711");
    }
    let bin = match &c.bin {
        Some(b) => b.clone(),
        None => std::env::current_exe().context("locate the airpack executable")?,
    };
    Ok(ExperimentConfig {
        bin,
        topo,
        medium: MediumOpts {
            phy,
            queue_limit: c.queue_limit,
            loss_pct: c.loss,
        },
        codec: c.codec.clone(),
        interval_ms: c.interval_ms,
        vad: c.vad == "on",
        duration_s: duration,
        playout_ms: c.playout_ms,
        criterion: c.criterion.clone(),
        hold_time_us: c.hold_us,
        max_calls,
        seed: c.seed,
        work_dir,
        client: experiment::Client::parse(&c.client)?,
    })
}

/// `--tcp-flows` outside the gateway presets: the common options without
/// them (the gateway's flows stay with `gw:N`) and the TCP load of
/// [`tcp_voice`] (None without flows or on a gateway preset).
fn tcp_voice_split(
    c: &Common,
    class: &str,
    max_len: u16,
) -> Result<(Common, Option<tcp_voice::TcpLoad>)> {
    if c.gw.tcp_flows == 0 || (c.topology.is_none() && gw::GwSpec::parse(&c.preset).is_some()) {
        return Ok((c.clone(), None));
    }
    let load = tcp_voice::TcpLoad {
        flows: c.gw.tcp_flows,
        cc: c.gw.tcp_cc.clone(),
        class: tcp_voice::TcpClass::parse(class)?,
        max_len,
    };
    let mut rest = c.clone();
    rest.gw.tcp_flows = 0;
    Ok((rest, Some(load)))
}

fn prepare() -> Result<()> {
    if let Err(why) = netns::check_privileges() {
        bail!("airpack lab needs root and ip/tc/nft/sysctl: {why}");
    }
    netns::catch_interrupts();
    let gone = netns::clean(false)?;
    if !gone.is_empty() {
        eprintln!(
            "lab: removed {} namespaces left by earlier runs",
            gone.len()
        );
    }
    babel::clean_dirs(false);
    Ok(())
}

/// Entry point of `airpack lab`.
pub fn main(args: LabArgs) -> Result<()> {
    match args.cmd {
        LabCmd::Presets => {
            print!("{}", medium::preset_table_text());
            println!("stab overhead: bytes added per frame to an HTB at the PHY rate on an Ethernet device (14 B header already counted) so it charges T(L).");
            Ok(())
        }
        LabCmd::Clean { all } => {
            let gone = netns::clean(all)?;
            for g in &gone {
                println!("deleted {g}");
            }
            // babeld files of those runs (their daemons were killed with the namespaces)
            for d in babel::clean_dirs(all) {
                println!("deleted {}", d.display());
            }
            println!("{} namespaces deleted", gone.len());
            Ok(())
        }
        LabCmd::Point(p) => {
            prepare()?;
            let setup = Setup::parse(&p.setup)?;
            let work = p.work.clone().unwrap_or_else(|| {
                PathBuf::from(format!("/tmp/airpack-lab-{}", std::process::id()))
            });
            // outside the gateway presets, --tcp-flows are tcp-voice's downloads between the call endpoints
            let (common, tcp) = tcp_voice_split(&p.common, "opportunistic", 750)?;
            let mut cfg = build_config(&common, p.common.duration.unwrap_or(10.0), p.calls, work)?;
            if !p.calls_at.is_empty() {
                let s = experiment::Schedule::parse(p.calls, &p.calls_at, cfg.duration_s)?;
                cfg.topo
                    .gw
                    .as_mut()
                    .context("--calls-at needs a gateway preset (--preset gw:N)")?
                    .schedule = Some(s);
            }
            let point = experiment::run_point_with(&cfg, setup, p.calls, tcp.as_ref())?;
            eprintln!("{}", experiment::point_line(&point));
            println!("{}", serde_json::to_string_pretty(&point)?);
            Ok(())
        }
        LabCmd::Run(r) => run(r),
        LabCmd::TcpVoice(t) => {
            prepare()?;
            let (common, tcp) = tcp_voice_split(&t.common, &t.opts.tcp_class, t.opts.tcp_max_len)?;
            let tcp = tcp.context(
                "tcp-voice needs --tcp-flows M on a topology without a gateway (not gw:N)",
            )?;
            let work = std::fs::canonicalize(".")?.join(&t.opts.out).join("work");
            let cfg = build_config(&common, t.common.duration.unwrap_or(20.0), 0, work)?;
            let command = std::env::args().collect::<Vec<_>>().join(" ");
            tcp_voice::run(&cfg, &tcp, &t.opts, &command)
        }
        LabCmd::Validate(v) => {
            prepare()?;
            validate::main(v)
        }
        LabCmd::CellSim(c) => cell_sim::main(c),
    }
}

fn run(r: RunArgs) -> Result<()> {
    prepare()?;
    let setups: Vec<Setup> = r
        .setups
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(Setup::parse)
        .collect::<Result<_>>()?;
    if setups.is_empty() {
        bail!("--setups is empty");
    }
    let duration = r.common.duration.unwrap_or(if r.quick { 4.0 } else { 8.0 });
    let max_calls = r.max_calls.unwrap_or(if r.quick { 16 } else { 64 });
    let topo_name = match &r.common.topology {
        Some(f) => f
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "topology".into()),
        None => r.common.preset.replace(':', ""),
    };
    let out = out_or_default(&r.out, &topo_name, "");
    let work = out.join("work");
    let cfg = build_config(
        &r.common,
        duration,
        max_calls,
        std::fs::canonicalize(".")?.join(&work),
    )?;
    let info = report::RunInfo {
        command: std::env::args()
            .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
            .collect::<Vec<_>>()
            .join(" "),
        topology: match cfg.topo.routing {
            topology::Routing::Static => cfg.topo.name.clone(),
            r => format!("{} ({} routing)", cfg.topo.name, r.name()),
        } + if cfg.topo.air == topology::Air::Ns3 {
            " on the ns-3 air"
        } else {
            " on the tc air"
        },
        phy: experiment::phy_label(&cfg.medium.phy),
        codec: match cfg.client {
            experiment::Client::Airpack => cfg.codec.clone(),
            experiment::Client::Baresip => format!("{} (baresip phones)", cfg.codec),
        },
        vad: cfg.vad,
        duration_s: cfg.duration_s,
        criterion: cfg.criterion.clone(),
        queue_limit: cfg.medium.queue_limit,
        loss_pct: cfg.medium.loss_pct,
        hold_time_us: cfg.hold_time_us,
        max_calls,
    };
    eprintln!(
        "lab: {} on {} ({}), {}{}, {} s per point, setups {}; results in {}",
        cfg.topo.name,
        cfg.medium.phy.name,
        info.phy,
        cfg.codec,
        if cfg.vad { " + VAD" } else { " CBR" },
        duration,
        setups
            .iter()
            .map(|s| s.name())
            .collect::<Vec<_>>()
            .join(","),
        out.display()
    );
    if let Some(c) = &cfg.topo.cell {
        if let Ok((u, m)) = cell::bound(c, &cfg.codec) {
            eprintln!("lab: analytic bound of {} for {}: {u} calls without multiplexing, {m} with it (docs/results.md)", c.name(), cfg.codec);
        }
    }
    let started = std::time::Instant::now();
    let mut results: Vec<SetupResult> = Vec::new();
    for s in setups {
        let res = experiment::capacity_search(&cfg, s, |_| {});
        eprintln!(
            "lab: {} capacity {}{} calls ({:.0} s elapsed)",
            s.name(),
            if res.capacity_at_least { ">= " } else { "" },
            res.capacity,
            started.elapsed().as_secs_f64()
        );
        results.push(res);
        report::write(&out, &info, &results)?; // keep partial results
    }
    let files = report::write(&out, &info, &results)?;
    println!(
        "\nCapacity ({} on {}, {}{}):\n",
        cfg.topo.name,
        info.phy,
        cfg.codec,
        if cfg.vad { " + VAD" } else { " CBR" }
    );
    print!("{}", report::capacity_table(&results));
    println!("\nAdded one-way delay at one call:\n");
    print!("{}", report::one_call_delays(&results));
    println!(
        "\nReport: {} ({:.0} s)",
        files[0].display(),
        started.elapsed().as_secs_f64()
    );
    if results.iter().any(|r| r.error.is_some()) {
        bail!("some setups stopped on errors (see the report)");
    }
    Ok(())
}

/// `out`, or the run's default output `results/<stem>-<unix seconds><suffix>`.
pub(crate) fn out_or_default(out: &Option<PathBuf>, stem: &str, suffix: &str) -> PathBuf {
    out.clone().unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        PathBuf::from(format!("results/{stem}-{secs}{suffix}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology::Air;

    #[test]
    fn tcp_flows_outside_a_gateway_preset_are_tcp_voice_downloads() {
        let c = |args: &[&str]| Common::try_parse_from([&["lab"], args].concat()).unwrap();
        // seed001: the flows move to tcp-voice's load, the rest of the options stay
        let (rest, load) =
            tcp_voice_split(&c(&["--tcp-flows", "3", "--tcp-cc", "reno"]), "bundle", 200).unwrap();
        let load = load.unwrap();
        assert_eq!(
            (load.flows, load.cc.as_str(), load.class, load.max_len),
            (3, "reno", tcp_voice::TcpClass::Bundle, 200)
        );
        assert_eq!(
            rest.gw.tcp_flows, 0,
            "build_config would refuse flows without a gateway preset"
        );
        assert_eq!(rest.preset, "seed001");
        // a gateway preset keeps its own flows (S -> MN)
        let (rest, load) = tcp_voice_split(
            &c(&["--preset", "gw:2", "--tcp-flows", "3"]),
            "opportunistic",
            750,
        )
        .unwrap();
        assert!(load.is_none());
        assert_eq!(rest.gw.tcp_flows, 3);
        // no flows, no load; a bad class is an error
        assert!(tcp_voice_split(&c(&[]), "opportunistic", 750)
            .unwrap()
            .1
            .is_none());
        assert!(tcp_voice_split(&c(&["--tcp-flows", "1"]), "bypass", 750).is_err());
    }

    #[test]
    fn the_air_is_the_flag_else_the_files_else_ns3() {
        assert_eq!(DEFAULT_AIR, Air::Ns3);
        assert_eq!(choose_air(None, None).unwrap(), Air::Ns3);
        assert_eq!(choose_air(Some("tc"), None).unwrap(), Air::Tc);
        let file = "name = \"x\"\nair = \"tc\"\n";
        assert_eq!(choose_air(None, Some(file)).unwrap(), Air::Tc);
        assert_eq!(choose_air(Some("ns3"), Some(file)).unwrap(), Air::Ns3);
        assert_eq!(choose_air(None, Some("name = \"x\"\n")).unwrap(), Air::Ns3);
        assert!(choose_air(Some("radio"), None).is_err());
        assert!(choose_air(None, Some("air = 3\n")).is_err());
    }
}
