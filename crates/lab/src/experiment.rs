//! Capacity experiments: run N calls over an emulated mesh for each setup
//! and search the largest N whose calls are all supported.
//!
//! Owns: one measurement point ([`run_point`]: build the mesh, start the
//! `airpack run` daemons with generated configs, start `airpack voip` in every
//! call endpoint with a common start time, collect and merge the voice
//! results, the daemons' `airpack stats --json` and the frame counters of the
//! air, tear everything down). Its parts: the setups and their daemon
//! configs (in `setups`), the point's record and summary (in `point`), and
//! the search over the number of calls (in `search`, [`capacity_search`]:
//! doubling, then bisection, then a confirming run), and points whose calls
//! join and leave on a schedule (in `midrun`, with the pacer's settle times
//! from `settle`).
//!
//! Must not touch: voice-quality math (`airpack_lab::voip::merge` and
//! `airpack-voice` decide "supported"), aggregation (the daemon), the medium
//! model ([`crate::topology`]).

mod midrun;
mod point;
mod search;
mod settle;
mod setups;

pub use midrun::Schedule;
use point::summarize;
pub use point::{downlink_drops, point_line, Point, MAX_SEND_LAG_MS};
pub(crate) use point::{remeasure_reason, summarize_point};
pub use search::{
    capacity_search, capacity_search_with, keep_point, search_point_cfg, SetupResult,
};
use setups::gateway_shaping;
pub use setups::{daemon_config, Setup};

use crate::medium::Phy;
use crate::topology::{MediumOpts, Mesh, Topology, RADIO};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Everything an experiment needs.
#[derive(Debug, Clone)]
pub struct ExperimentConfig {
    /// The `airpack` binary (run inside namespaces).
    pub bin: PathBuf,
    /// Topology.
    pub topo: Topology,
    /// Medium.
    pub medium: MediumOpts,
    /// `g729` or `g711`.
    pub codec: String,
    /// Packet interval in ms.
    pub interval_ms: u32,
    /// On/off voice activity.
    pub vad: bool,
    /// Seconds of calls per point.
    pub duration_s: f64,
    /// Playout buffer (ms).
    pub playout_ms: u32,
    /// `mos` or `seeds`.
    pub criterion: String,
    /// Aggregation hold time (µs).
    pub hold_time_us: u32,
    /// Upper bound of the call search.
    pub max_calls: u32,
    /// Seed of the voice-activity model.
    pub seed: u64,
    /// Scratch directory (specs, results, configs, logs).
    pub work_dir: PathBuf,
    /// Who makes the calls: `airpack voip` or real SIP phones (baresip).
    pub client: Client,
}

impl ExperimentConfig {
    /// The validation searches' config (`lab validate`, `lab cell-sim`): CBR
    /// voice every 20 ms, 60 ms playout, the MOS criterion, hold 20 ms
    /// (unused without aggregation), seed 1, `airpack voip` calls.
    pub fn cbr(
        bin: PathBuf,
        topo: Topology,
        medium: MediumOpts,
        codec: &str,
        duration_s: f64,
        max_calls: u32,
        work_dir: PathBuf,
    ) -> ExperimentConfig {
        ExperimentConfig {
            bin,
            topo,
            medium,
            codec: codec.into(),
            interval_ms: 20,
            vad: false,
            duration_s,
            playout_ms: 60,
            criterion: "mos".into(),
            hold_time_us: 20000,
            max_calls,
            seed: 1,
            work_dir,
            client: Client::Airpack,
        }
    }
}

/// Who makes a point's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Client {
    /// The project's own RTP generator and receiver (`airpack voip`).
    #[default]
    Airpack,
    /// baresip user agents calling each other by IP (`crate::baresip`),
    /// measured from RTP captures in the endpoints' namespaces.
    Baresip,
}

impl Client {
    /// `airpack` or `baresip`.
    pub fn parse(s: &str) -> Result<Client> {
        match s {
            "airpack" => Ok(Client::Airpack),
            "baresip" => Ok(Client::Baresip),
            _ => bail!("unknown client {s:?} (airpack or baresip)"),
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The call endpoints of call `k`: (a node, b node).
fn call_pair(topo: &Topology, k: u32) -> (&str, &str) {
    let p = &topo.calls[k as usize % topo.calls.len()];
    (&p[0], &p[1])
}

/// Nodes that terminate at least one of `n` calls.
fn endpoints(topo: &Topology, n: u32) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for k in 0..n {
        let (a, b) = call_pair(topo, k);
        for x in [a, b] {
            if !v.iter().any(|y| y == x) {
                v.push(x.to_string());
            }
        }
    }
    v
}

/// The `airpack voip` spec (CONTRACT in the voice brief) for `n` calls.
pub fn voip_spec(
    cfg: &ExperimentConfig,
    mesh_addr: &dyn Fn(&str) -> String,
    n: u32,
    start_at_unix_ms: u64,
) -> Value {
    let calls: Vec<Value> = (0..n)
        .map(|k| {
            let (a, b) = call_pair(&cfg.topo, k);
            let port = 16000 + 2 * k;
            json!({"id": k,
                   "a": {"node": a, "addr": mesh_addr(a), "port": port},
                   "b": {"node": b, "addr": mesh_addr(b), "port": port}})
        })
        .collect();
    json!({
        "codec": cfg.codec, "interval_ms": cfg.interval_ms, "vad": cfg.vad, "seed": cfg.seed,
        "duration_s": cfg.duration_s, "start_at_unix_ms": start_at_unix_ms,
        "playout_ms": cfg.playout_ms, "criterion": cfg.criterion, "calls": calls
    })
}

/// A child process killed (TERM, then KILL) on drop.
struct Proc {
    child: Child,
    what: String,
    log: PathBuf,
}

impl Proc {
    fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(2) {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
    fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Real-time priority for the processes of a point (SCHED_RR 10 through
/// `chrt`), so builds or other load on the machine cannot starve the voice
/// senders and the daemons; the kernel's RT throttling still leaves 5 % of
/// the CPU to everything else. Off when `chrt` is missing or
/// `AIRPACK_LAB_NO_RT` is set.
pub(crate) fn realtime() -> bool {
    static RT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *RT.get_or_init(|| {
        std::env::var_os("AIRPACK_LAB_NO_RT").is_none()
            && std::process::Command::new("chrt")
                .arg("-m")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false)
    })
}

fn spawn_in(
    mesh: &Mesh,
    node: &str,
    bin: &Path,
    args: &[&str],
    log: &Path,
    what: &str,
) -> Result<Proc> {
    let n = mesh.node(node).context("unknown node")?;
    let f = std::fs::File::create(log)?;
    let mut cmd = if realtime() {
        let mut c = n.ns.command(Path::new("chrt"));
        c.args(["-r", "10"]).arg(bin);
        c
    } else {
        n.ns.command(bin)
    };
    let child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(f.try_clone()?)
        .stderr(f)
        .spawn()
        .with_context(|| format!("spawn {what}"))?;
    Ok(Proc {
        child,
        what: what.to_string(),
        log: log.to_path_buf(),
    })
}

fn daemon_stats(mesh: &Mesh, node: &str, bin: &Path, socket: &Path) -> Result<Value> {
    let n = mesh.node(node).context("unknown node")?;
    let out = n.ns.exec(
        &bin.to_string_lossy(),
        &["stats", "--socket", &socket.to_string_lossy(), "--json"],
    )?;
    serde_json::from_str(&out).context("airpack stats --json output")
}

/// Err if the mesh's ns-3 air has died (exit status and stderr tail).
fn check_air(mesh: &mut Mesh) -> Result<()> {
    match mesh.ns3.as_mut() {
        Some(a) => a.check_running(),
        None => Ok(()),
    }
}

/// Err if the air or a daemon of the point has died.
fn check_daemons(mesh: &mut Mesh, daemons: &mut [(String, PathBuf, Proc)]) -> Result<()> {
    check_air(mesh)?;
    for (_, _, p) in daemons.iter_mut() {
        if let Ok(Some(st)) = p.child.try_wait() {
            bail!("{} exited ({st}):\n{}", p.what, p.log_tail());
        }
    }
    Ok(())
}

/// Measure one point: `n` calls under `setup`.
pub fn run_point(cfg: &ExperimentConfig, setup: Setup, n: u32) -> Result<Point> {
    run_point_with(cfg, setup, n, None)
}

/// The cell of `n` calls, keeping what the command line put on the
/// preset's topology (`--ap-set`; until 2026-11-26 it was dropped here,
/// so emulated cell points ran without it).
pub fn scaled_cell(c: &crate::cell::CellSpec, topo: &Topology, n: u32) -> Topology {
    let mut t = c.topology(n);
    t.wifi.ap_set.clone_from(&topo.wifi.ap_set);
    t
}

/// [`run_point`] with bulk TCP flows between the call endpoints beside the
/// calls and, in every daemon, a class for their small packets
/// ([`crate::tcp_voice`]; the gateway presets' flows are [`crate::gw`]'s).
pub fn run_point_with(
    cfg: &ExperimentConfig,
    setup: Setup,
    n: u32,
    tcp_load: Option<&crate::tcp_voice::TcpLoad>,
) -> Result<Point> {
    let t0 = Instant::now();
    // a cell preset is built with one station per call ([`crate::cell`])
    let scaled;
    let cfg = match &cfg.topo.cell {
        Some(c) => {
            scaled = ExperimentConfig {
                topo: scaled_cell(c, &cfg.topo, n),
                ..cfg.clone()
            };
            &scaled
        }
        None => cfg,
    };
    let sched = cfg.topo.gw.as_ref().and_then(|g| g.schedule.as_ref());
    if sched.is_some() && cfg.client != Client::Airpack {
        bail!("calls joining and leaving (--calls-at) need the airpack client");
    }
    if setup.gateway_arm() && cfg.topo.gw.is_none() {
        bail!(
            "setup {} needs a gateway preset (--preset gw:N)",
            setup.name()
        );
    }
    let mut mesh = Mesh::build(&cfg.topo, &cfg.medium).context("build the emulated mesh")?;
    if mesh.babel.is_some()
        && matches!(
            setup,
            Setup::HopByHop | Setup::HoldWhileBusy | Setup::Adaptive | Setup::LinkAdaptive
        )
    {
        // the daemons' peers are the radio neighbours' IPv4 addresses, which
        // are babeld's next hops; its source check needs symmetric routes
        for (a, b) in mesh.asymmetric_installed_routes()? {
            eprintln!("lab: WARNING: babel's route {a} -> {b} is not the reverse of {b} -> {a}; the hop-by-hop daemons will drop that traffic");
        }
    }
    let dir = cfg.work_dir.join(format!("{}-{n}", setup.name()));
    std::fs::create_dir_all(&dir)?;
    // daemons
    let mut daemons: Vec<(String, PathBuf, Proc)> = Vec::new();
    for node in &cfg.topo.nodes {
        let sock = dir.join(format!("{node}.sock"));
        let air_file = mesh.ns3.as_ref().map(|a| a.obs_path(node));
        let Some(mut conf) = daemon_config(cfg, setup, node, n, &sock, air_file.as_deref()) else {
            continue;
        };
        if let Some(t) = tcp_load {
            conf.push_str(&t.daemon_class());
        }
        let path = dir.join(format!("{node}.toml"));
        std::fs::write(&path, conf)?;
        let log = dir.join(format!("{node}.daemon.log"));
        let p = spawn_in(
            &mesh,
            node,
            &cfg.bin,
            &["run", "--config", &path.to_string_lossy()],
            &log,
            &format!("daemon on {node}"),
        )?;
        daemons.push((node.clone(), sock, p));
    }
    // wait until every daemon answers on its control socket
    for (node, sock, p) in daemons.iter_mut() {
        let t = Instant::now();
        loop {
            if let Ok(Some(st)) = p.child.try_wait() {
                check_air(&mut mesh)?;
                bail!("{} exited ({st}) at start:\n{}", p.what, p.log_tail());
            }
            if daemon_stats(&mesh, node, &cfg.bin, sock).is_ok() {
                break;
            }
            if crate::netns::interrupted() {
                bail!("interrupted");
            }
            if t.elapsed() > Duration::from_secs(10) {
                bail!(
                    "{} did not answer `airpack stats` within 10 s:\n{}",
                    p.what,
                    p.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    if setup.downlink() {
        wait_registered(&mut mesh, cfg, &daemons)?;
    }
    let socks: Vec<(String, PathBuf)> = daemons
        .iter()
        .map(|(n, s, _)| (n.clone(), s.clone()))
        .collect();
    let sampler = if setup == Setup::LinkAdaptive {
        let ds = crate::link_size::daemons(&mesh, &socks);
        crate::link_size::wait_discovered(&cfg.topo, &cfg.bin, &ds, || {
            check_daemons(&mut mesh, &mut daemons)
        })?;
        Some(crate::link_size::Sampler::start(&cfg.bin, ds))
    } else {
        None
    };
    let ber0 = crate::link_size::ber_frames(&mesh);
    if let (Some(g), Some(how)) = (&cfg.topo.gw, gateway_shaping(setup)) {
        let script =
            crate::gw::qdisc_script(RADIO, how, g.link_kbps(&cfg.medium.phy), g.shaper_kbps);
        std::fs::write(dir.join("gateway-qdisc.tc"), &script)?;
        let gwn = mesh.node(crate::gw::GW).context("gateway node")?;
        crate::netns::run_stdin(
            "ip",
            &["netns", "exec", gwn.ns.name(), "tc", "-batch", "-"],
            &script,
        )
        .context("gateway qdisc")?;
    }
    let air0 = mesh.frames_on_air()?;
    let drops0 = mesh.queue_drops()?;
    // calls
    let start_at = unix_ms() + 1500;
    let addr_of = |x: &str| mesh.node(x).map(|m| m.addr.to_string()).unwrap_or_default();
    let spec = voip_spec(cfg, &addr_of, n, start_at);
    let spec_path = dir.join("calls.json");
    if sched.is_none() {
        std::fs::write(&spec_path, serde_json::to_vec_pretty(&spec)?)?;
    }
    let spec_t: crate::voip::Spec = serde_json::from_value(spec).context("voip spec type")?;
    let flows = match &cfg.topo.gw {
        Some(g) if g.tcp_flows > 0 => {
            let end = start_at + (cfg.duration_s * 1000.0) as u64;
            Some(crate::tcp_bulk::start(
                &gw_flows(&mesh, g)?,
                &g.tcp_cc,
                start_at,
                end,
            )?)
        }
        _ => match tcp_load {
            Some(t) if t.flows > 0 => {
                let end = start_at + (cfg.duration_s * 1000.0) as u64;
                Some(crate::tcp_bulk::start(
                    &t.flow_specs(&cfg.topo, &mesh)?,
                    &t.cc,
                    start_at,
                    end,
                )?)
            }
            _ => None,
        },
    };
    let mut mid = None;
    let (results, signalling) = match (sched, cfg.client) {
        (Some(s), _) => {
            // the gateway daemon's rate, sampled with the lab's clock
            let sampler = match (
                daemons.iter().find(|d| d.0 == crate::gw::GW),
                mesh.node(crate::gw::GW),
            ) {
                (Some((_, sock, _)), Some(g)) => Some(midrun::RateSampler::start(
                    &cfg.bin,
                    g.ns.name(),
                    sock,
                    start_at,
                )),
                _ => None,
            };
            let (r, merged) = midrun::run_sessions(cfg, &mut mesh, &dir, s, start_at)?;
            let samples = sampler.map(|x| x.finish()).unwrap_or_default();
            mid = Some((s, merged, samples));
            (r, None)
        }
        (None, Client::Airpack) => (run_voips(cfg, &mut mesh, &dir, &spec_path, n)?, None),
        (None, Client::Baresip) => {
            let r = crate::baresip::run_calls(&mesh, &spec_t, &dir);
            // a dead air takes the taps with it: name it, not its victims
            check_air(&mut mesh)?;
            let (r, s) = r?;
            (r, Some(serde_json::to_value(s)?))
        }
    };
    let tcp_cc = cfg
        .topo
        .gw
        .as_ref()
        .map(|g| g.tcp_cc.clone())
        .or_else(|| tcp_load.map(|t| t.cc.clone()))
        .unwrap_or_default();
    let tcp = flows.map(|f| crate::tcp_bulk::TcpSummary::of(&tcp_cc, f.finish()));
    // collect
    let link_sizes = sampler.map(|s| s.finish(&cfg.topo)).unwrap_or_default();
    let ber_frames = crate::link_size::ber_delta(&ber0, &crate::link_size::ber_frames(&mesh));
    let air1 = mesh.frames_on_air()?;
    let drops1 = mesh.queue_drops()?;
    let delta = |a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
        b.iter()
            .map(|(k, v)| (k.clone(), v.saturating_sub(a.get(k).copied().unwrap_or(0))))
            .collect()
    };
    let frames_per_node = delta(&air0, &air1);
    let drops_per_node = delta(&drops0, &drops1);
    let mut daemon_totals = BTreeMap::new();
    let mut downlink = BTreeMap::new();
    let mut gateway = None;
    let (mut num, mut den) = (0.0f64, 0.0f64);
    check_air(&mut mesh)?;
    for (node, sock, p) in daemons.iter_mut() {
        if let Ok(Some(st)) = p.child.try_wait() {
            bail!("{} died during the run ({st}):\n{}", p.what, p.log_tail());
        }
        let st = daemon_stats(&mesh, node, &cfg.bin, sock)
            .with_context(|| format!("stats of {}", p.what))?;
        let total = st.get("total").cloned().unwrap_or(Value::Null);
        if matches!(setup, Setup::Pacer | Setup::PacerTim | Setup::PacerAgg)
            && node == crate::gw::GW
        {
            gateway = st.get("gateway").cloned();
        }
        if setup.downlink() {
            // the multiplexing ratio: downlink packets per multicast frame
            if let Some(ap) = st.get("ap") {
                num += ap.get("packets").and_then(Value::as_f64).unwrap_or(0.0);
                den += ap.get("frames").and_then(Value::as_f64).unwrap_or(0.0);
            }
            for role in ["ap", "station"] {
                if let Some(v) = st.get(role) {
                    downlink.insert(format!("{node}.{role}"), v.clone());
                }
            }
        } else {
            let g = |k: &str| total.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            num += g("aggregated_packets") + g("unaggregated_packets");
            den += g("bundles") + g("unaggregated_packets");
        }
        daemon_totals.insert(node.clone(), total);
    }
    for (_, _, p) in daemons.iter_mut() {
        p.stop();
    }
    // the air's real-time discipline over the point (its whole life)
    let air = match mesh.ns3.as_mut() {
        Some(a) => {
            let r = a.stop().context("stop the ns-3 air")?;
            let s = crate::air_ns3::AirStats::from_report(&r);
            eprintln!("lab: {}", crate::air_ns3::lag_line(&r));
            Some(s)
        }
        None => None,
    };
    let aggregation_ratio = if den > 0.0 { num / den } else { 1.0 };
    let merged = match &mid {
        Some((_, m, _)) => m.clone(),
        None => crate::voip::merge(&spec_t, &results),
    };
    let call_results = serde_json::to_value(&merged)?;
    // with a schedule, each call session is judged (and counted) on its own
    let n = if mid.is_some() {
        merged.len() as u32
    } else {
        n
    };
    let max_send_lag_ms = results
        .iter()
        .flat_map(|r| r.streams.iter())
        .filter_map(|s| s.max_send_lag_ms)
        .fold(0.0f64, f64::max);
    let mut point = summarize(
        setup,
        n,
        call_results,
        aggregation_ratio,
        frames_per_node.values().sum(),
        drops_per_node.values().sum(),
        daemon_totals,
        t0,
    );
    point.frames_per_node = frames_per_node;
    point.drops_per_node = drops_per_node;
    point.max_send_lag_ms = max_send_lag_ms;
    point.signalling = signalling;
    point.air = air;
    point.downlink_drops = downlink_drops(&downlink);
    point.downlink = downlink;
    point.link_sizes = link_sizes;
    point.ber_frames = ber_frames;
    point.tcp = tcp;
    point.gateway = gateway;
    if let Some((s, merged, samples)) = &mid {
        let (v, settles) = midrun::record(s, &s.sessions(), merged, samples);
        eprint!("{}", midrun::settle_lines(&settles));
        point.mid_run = Some(v);
    }
    let _ = std::fs::write(
        dir.join("point.json"),
        serde_json::to_vec_pretty(&point).unwrap_or_default(),
    );
    drop(mesh);
    Ok(point)
}

/// The TCP flows of a gateway point: `S -> MN`, one port each.
fn gw_flows(mesh: &Mesh, g: &crate::gw::GwSpec) -> Result<Vec<crate::tcp_bulk::FlowSpec>> {
    let src = mesh.node(crate::gw::SERVER).context("server node")?;
    let dst = mesh.node(&g.mesh_end()).context("mesh end node")?;
    Ok((0..g.tcp_flows)
        .map(|k| crate::tcp_bulk::FlowSpec {
            src: src.name.clone(),
            dst: dst.name.clone(),
            src_ns: src.ns.name().to_string(),
            dst_ns: dst.ns.name().to_string(),
            dst_addr: dst.addr,
            port: crate::gw::TCP_PORT + k as u16,
            // the mesh client opens its download (seed 003; the TCP
            // Improvement Module tracks flows from the client's SYN)
            connect_to_src: Some(src.addr),
        })
        .collect())
}

/// Runs `airpack voip` on every endpoint of `n` calls and reads their results.
fn run_voips(
    cfg: &ExperimentConfig,
    mesh: &mut Mesh,
    dir: &Path,
    spec_path: &Path,
    n: u32,
) -> Result<Vec<crate::voip::NodeResult>> {
    let mut voips = spawn_voips(cfg, mesh, dir, spec_path, &endpoints(&cfg.topo, n), "")?;
    wait_voips(cfg, mesh, &mut voips)
}

/// Starts `airpack voip --spec spec_path` on each of `nodes`; results go to
/// `<node><tag>.result.json`, logs to `<node><tag>.voip.log` in `dir`.
fn spawn_voips(
    cfg: &ExperimentConfig,
    mesh: &Mesh,
    dir: &Path,
    spec_path: &Path,
    nodes: &[String],
    tag: &str,
) -> Result<Vec<(String, PathBuf, Proc)>> {
    let mut voips = Vec::new();
    for node in nodes {
        let out = dir.join(format!("{node}{tag}.result.json"));
        let _ = std::fs::remove_file(&out);
        let log = dir.join(format!("{node}{tag}.voip.log"));
        let p = spawn_in(
            mesh,
            node,
            &cfg.bin,
            &[
                "voip",
                "--spec",
                &spec_path.to_string_lossy(),
                "--node",
                node,
                "--out",
                &out.to_string_lossy(),
            ],
            &log,
            &format!("voip on {node}"),
        )?;
        voips.push((node.clone(), out, p));
    }
    Ok(voips)
}

/// Waits until every `airpack voip` of `voips` has finished (at most the
/// point's length plus 16.5 s) and reads their results, in order.
fn wait_voips(
    cfg: &ExperimentConfig,
    mesh: &mut Mesh,
    voips: &mut [(String, PathBuf, Proc)],
) -> Result<Vec<crate::voip::NodeResult>> {
    let deadline = Instant::now() + Duration::from_secs_f64(1.5 + cfg.duration_s + 15.0);
    for (_, _, p) in voips.iter_mut() {
        loop {
            // a dead air takes the taps with it: name it, not its victims
            check_air(mesh)?;
            match p.child.try_wait()? {
                Some(st) if st.success() => break,
                Some(st) => bail!("{} failed ({st}):\n{}", p.what, p.log_tail()),
                None if Instant::now() > deadline => {
                    bail!("{} did not finish in time:\n{}", p.what, p.log_tail())
                }
                None if crate::netns::interrupted() => bail!("interrupted"),
                None => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    let mut results = Vec::new();
    for (node, out, _) in voips.iter() {
        let text =
            std::fs::read_to_string(out).with_context(|| format!("result of voip on {node}"))?;
        results.push(
            serde_json::from_str::<crate::voip::NodeResult>(&text)
                .with_context(|| format!("parse {}", out.display()))?,
        );
    }
    Ok(results)
}

/// Waits (at most 15 s) until the AP has a lease for every station daemon
/// of the point and every station reports itself registered.
fn wait_registered(
    mesh: &mut Mesh,
    cfg: &ExperimentConfig,
    daemons: &[(String, PathBuf, Proc)],
) -> Result<()> {
    let ap = cfg
        .topo
        .wifi
        .ap
        .clone()
        .context("a downlink setup needs an infrastructure topology ([wifi] ap)")?;
    let stations = daemons.iter().filter(|(n, _, _)| *n != ap).count() as u64;
    let t = Instant::now();
    loop {
        let mut ok = true;
        for (node, sock, _) in daemons {
            let st = daemon_stats(mesh, node, &cfg.bin, sock)?;
            ok &= if *node == ap {
                st.pointer("/ap/stations").and_then(Value::as_u64) == Some(stations)
            } else {
                st.pointer("/station/registered").and_then(Value::as_bool) == Some(true)
            };
        }
        if ok {
            return Ok(());
        }
        check_air(mesh)?;
        if crate::netns::interrupted() {
            bail!("interrupted");
        }
        if t.elapsed() > Duration::from_secs(15) {
            bail!("the AP did not register all {stations} stations within 15 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Describe a PHY for reports.
pub fn phy_label(p: &Phy) -> String {
    format!("{} ({} Mbit/s)", p.name, p.rate_mbps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::medium::preset;

    /// `--ap-set` survives the cell's scaling to the point's calls (it was
    /// dropped there: emulated cell points ran without it).
    #[test]
    fn scaled_cell_keeps_the_ap_settings() {
        let mut t = Topology::preset("cell:b11:11:2").unwrap();
        t.wifi.ap_set = crate::cell::ap_settings(&["frame_copies=2".into()]).unwrap();
        let c = t.cell.clone().unwrap();
        let s = scaled_cell(&c, &t, 6);
        assert_eq!(s.nodes.iter().filter(|n| n.starts_with('S')).count(), 3);
        assert_eq!(
            s.wifi.ap_set,
            [("frame_copies".to_string(), "2".to_string())]
        );
        assert!(
            c.topology(6).wifi.ap_set.is_empty(),
            "the preset alone has none"
        );
    }

    pub(super) fn cfg() -> ExperimentConfig {
        ExperimentConfig {
            bin: "/bin/true".into(),
            topo: Topology::preset("seed001").unwrap(),
            medium: MediumOpts {
                phy: preset("b2").unwrap(),
                queue_limit: 50,
                loss_pct: 0.0,
            },
            codec: "g729".into(),
            interval_ms: 20,
            vad: true,
            duration_s: 5.0,
            playout_ms: 60,
            criterion: "mos".into(),
            hold_time_us: 5000,
            max_calls: 8,
            seed: 1,
            work_dir: "/tmp".into(),
            client: Client::Airpack,
        }
    }

    #[test]
    fn spec_alternates_call_pairs() {
        let c = cfg();
        let spec = voip_spec(&c, &|n: &str| format!("addr-{n}"), 3, 42);
        let calls = spec["calls"].as_array().unwrap();
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[0]["a"]["node"], "A");
        assert_eq!(calls[1]["a"]["node"], "B");
        assert_eq!(calls[2]["a"]["node"], "A");
        assert_eq!(calls[2]["b"]["addr"], "addr-D");
        assert_eq!(calls[1]["b"]["port"], 16002);
        assert_eq!(spec["start_at_unix_ms"], 42);
        assert_eq!(endpoints(&c.topo, 1), ["A", "D"]);
        assert_eq!(endpoints(&c.topo, 2), ["A", "D", "B"]);
    }
}
