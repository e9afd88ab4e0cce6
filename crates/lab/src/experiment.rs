//! Capacity experiments: run N calls over an emulated mesh for each setup
//! and search the largest N whose calls are all supported.
//!
//! Owns: one measurement point ([`run_point`]: build the mesh, start the
//! `airpack run` daemons with generated configs, start `airpack voip` in every
//! call endpoint with a common start time, collect and merge the voice
//! results, the daemons' `airpack stats --json` and the frame counters of the
//! air, tear everything down), and the search over the number of calls
//! ([`capacity_search`]: doubling, then bisection, then a confirming run).
//!
//! Must not touch: voice-quality math (`airpack_lab::voip::merge` and
//! `airpack-voice` decide "supported"), aggregation (the daemon), the medium
//! model ([`crate::topology`]).

use crate::medium::Phy;
use crate::topology::{Mesh, MediumOpts, Topology, RADIO};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How the nodes aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Setup {
    /// No daemon: plain forwarding.
    Off,
    /// Every node aggregates to its next hop (peers = its neighbours), fixed hold time.
    HopByHop,
    /// Call endpoints aggregate to the far endpoint; relays only forward.
    EndToEnd,
    /// Hop-by-hop with `link_mode = "hold-while-busy"`.
    HoldWhileBusy,
    /// Hop-by-hop with `link_mode = "adaptive"`; on the ns-3 air each daemon
    /// reads its node's `NODE.air` counters (`[medium] file`).
    Adaptive,
    /// Hop-by-hop with the fixed hold, peers discovered by hellos instead
    /// of `[[peer]]`s, each link's largest bundle from its hello loss
    /// (link-adaptive size, [`crate::link_size`]); `hop-by-hop` is the
    /// same with a fixed 1500-byte maximum on every link.
    LinkAdaptive,
    /// Infrastructure cell ([`crate::cell`]): `[ap]` on the access point,
    /// `[station]` on every station of a call; a lone packet leaves at once
    /// while the AP's medium is idle (its `NODE.air` file on the ns-3 air).
    DownlinkMux,
    /// As [`Setup::DownlinkMux`] without the idle release: one frame per
    /// 20 ms interval (or when full).
    DownlinkMuxInterval,
    /// As [`Setup::DownlinkMux`] with `ap.redundancy = true` (each frame
    /// also carries the previous frame's packets when it has room) and the
    /// airtime rule on the preset's rates (`ap.unicast_rate`,
    /// `ap.multicast_rate`, `ap.preamble`: a frame is sent only when it
    /// costs less airtime than unicast).
    DownlinkMuxRed,
    /// `downlink-mux-red` plus uplink aggregation: each station bundles its
    /// calls' uplink packets to the AP (`crate::cell::station_uplink_agg`).
    DownlinkMuxAgg,
    /// `downlink-mux-red` at redundancy depth 2 (the last two frames).
    DownlinkMuxRed2,
    /// `downlink-mux-agg` with `ap.redundancy_partial` (a rotating window of
    /// the previous frame's entries when the whole block does not fit).
    DownlinkMuxAggPartial,
    /// Seed 003's gateway ([`crate::gw`]), arm "no control": no daemon, no
    /// qdisc (as `off`, named for the experiment's table).
    NoControl,
    /// Gateway arm: an HTB at the gateway's radio with voice (DSCP EF) in a
    /// priority class ([`crate::gw::qdisc_script`]).
    VoicePriority,
    /// Gateway arm: the same with TCP in a class at a fixed rate (`--shaper-kbps`).
    FixedShaper,
    /// Gateway arm: the daemon's `[gateway]` role (the voice-adaptive pacer) on the gateway.
    Pacer,
    /// Gateway arm: the pacer plus the TCP Improvement Module with
    /// queue-aware window control (`gateway.tcp_improvement`).
    PacerTim,
}

impl Setup {
    /// Parse a setup name.
    pub fn parse(s: &str) -> Result<Setup> {
        Ok(match s.trim() {
            "off" => Setup::Off,
            "hop-by-hop" | "hbh" => Setup::HopByHop,
            "end-to-end" | "e2e" => Setup::EndToEnd,
            "hold-while-busy" | "hwb" => Setup::HoldWhileBusy,
            "adaptive" => Setup::Adaptive,
            "link-adaptive" | "la" => Setup::LinkAdaptive,
            "downlink-mux" | "mux" => Setup::DownlinkMux,
            "downlink-mux-interval" | "mux-interval" => Setup::DownlinkMuxInterval,
            "downlink-mux-red" | "mux-red" => Setup::DownlinkMuxRed,
            "downlink-mux-agg" | "mux-agg" => Setup::DownlinkMuxAgg,
            "downlink-mux-red2" | "mux-red2" => Setup::DownlinkMuxRed2,
            "downlink-mux-agg-partial" | "mux-agg-partial" => Setup::DownlinkMuxAggPartial,
            "no-control" => Setup::NoControl,
            "voice-priority" => Setup::VoicePriority,
            "fixed-shaper" => Setup::FixedShaper,
            "pacer" => Setup::Pacer,
            "pacer-tim" => Setup::PacerTim,
            o => bail!("unknown setup {o:?} (off, hop-by-hop, end-to-end, hold-while-busy, adaptive, link-adaptive, downlink-mux, downlink-mux-interval, downlink-mux-red, downlink-mux-red2, downlink-mux-agg, downlink-mux-agg-partial; gateway presets: no-control, voice-priority, fixed-shaper, pacer, pacer-tim)"),
        })
    }
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Setup::Off => "off",
            Setup::HopByHop => "hop-by-hop",
            Setup::EndToEnd => "end-to-end",
            Setup::HoldWhileBusy => "hold-while-busy",
            Setup::Adaptive => "adaptive",
            Setup::LinkAdaptive => "link-adaptive",
            Setup::DownlinkMux => "downlink-mux",
            Setup::DownlinkMuxInterval => "downlink-mux-interval",
            Setup::DownlinkMuxRed => "downlink-mux-red",
            Setup::DownlinkMuxAgg => "downlink-mux-agg",
            Setup::DownlinkMuxRed2 => "downlink-mux-red2",
            Setup::DownlinkMuxAggPartial => "downlink-mux-agg-partial",
            Setup::NoControl => "no-control",
            Setup::VoicePriority => "voice-priority",
            Setup::FixedShaper => "fixed-shaper",
            Setup::Pacer => "pacer",
            Setup::PacerTim => "pacer-tim",
        }
    }
    /// The arms of seed 003's gateway experiment (need a `gw:N` preset).
    pub fn gateway_arm(self) -> bool {
        matches!(self, Setup::NoControl | Setup::VoicePriority | Setup::FixedShaper | Setup::Pacer | Setup::PacerTim)
    }
    /// The downlink-multiplexing setups (a cell's AP and stations run daemons).
    pub fn downlink(self) -> bool {
        matches!(self, Setup::DownlinkMux | Setup::DownlinkMuxInterval | Setup::DownlinkMuxRed | Setup::DownlinkMuxAgg | Setup::DownlinkMuxRed2 | Setup::DownlinkMuxAggPartial)
    }
}

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

/// One measured point.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Setup name.
    pub setup: Setup,
    /// Number of simultaneous calls.
    pub calls: u32,
    /// All calls supported (both directions).
    pub supported: bool,
    /// Calls supported.
    pub supported_calls: u32,
    /// Mean MOS over call directions.
    pub mos: f64,
    /// Lowest MOS of any call direction.
    pub mos_min: f64,
    /// Mean loss over call directions (%).
    pub loss: f64,
    /// Worst loss of any call direction (%).
    pub loss_max: f64,
    /// Mean late loss behind the playout buffer (%).
    pub late: f64,
    /// Mean one-way network delay (ms), mean over call directions.
    pub delay_ms: f64,
    /// Median one-way delay (ms): the mean over call directions of each
    /// direction's median (`delay_p50_ms`), or of its mean if absent.
    pub delay_median_ms: f64,
    /// Worst p95 delay of any call direction (ms).
    pub delay_p95_ms: f64,
    /// RFC 3550 jitter at the end of each call (ms), mean over call directions.
    pub jitter_ms: f64,
    /// Each direction's mean jitter over its call (ms), mean over call directions.
    pub jitter_mean_ms: f64,
    /// Highest jitter any call direction reached (ms).
    pub jitter_max_ms: f64,
    /// Network-wide aggregation ratio: (aggregated + unaggregated packets) /
    /// (bundles + unaggregated packets) over all daemons; 1 when off.
    pub aggregation_ratio: f64,
    /// Frames sent on the emulated air (all nodes).
    pub frames_on_air: u64,
    /// Frames dropped by the nodes' MAC queues.
    pub mac_queue_drops: u64,
    /// Frames sent on the air, per node.
    pub frames_per_node: BTreeMap<String, u64>,
    /// MAC queue drops, per node.
    pub drops_per_node: BTreeMap<String, u64>,
    /// Per-call results as merged by `airpack_lab::voip::merge`.
    pub call_results: Value,
    /// Per-node daemon totals (`airpack stats --json` `total`).
    pub daemon_totals: BTreeMap<String, Value>,
    /// Seconds the point took, wall clock.
    pub wall_s: f64,
    /// Largest lateness of any RTP send behind its schedule (ms): a point
    /// whose senders were starved of CPU is not a measurement of the air.
    pub max_send_lag_ms: f64,
    /// With real phones (`Client::Baresip`): per call, the SIP setup time
    /// and the phones' own RTCP summaries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signalling: Option<Value>,
    /// `link-adaptive`: per directed link `"A->B"`, the `max_size` A's
    /// engine used toward B, sampled every second of the calls
    /// ([`crate::link_size::Sampler`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub link_sizes: BTreeMap<String, Value>,
    /// Links with a bit error rate (ns-3 air): frames received and lost to
    /// it per directed link `"A->B"` during the calls.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ber_frames: BTreeMap<String, Value>,
    /// Downlink-multiplexing setups: each daemon's `ap` / `station` object
    /// of `airpack stats --json`, keyed `NODE.ap` / `NODE.station`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub downlink: BTreeMap<String, Value>,
    /// Packets lost inside the multiplexer and demultiplexers (the sum of
    /// their `drops` other than refused registrations; frames lost on the
    /// air are the stations' `lost_frames`, not counted here).
    pub downlink_drops: u64,
    /// The ns-3 air's real-time discipline during the point (None on the tc
    /// air): a point whose air lagged more than
    /// [`crate::air_ns3::MAX_LAG_P99_MS`] p99 is re-measured.
    pub air: Option<crate::air_ns3::AirStats>,
    /// Gateway presets with TCP flows: each flow's goodput, throughput and
    /// RTT, and their totals ([`crate::tcp_bulk`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<crate::tcp_bulk::TcpSummary>,
    /// `pacer`: the gateway daemon's `gateway` object of `airpack stats
    /// --json` at the end of the point (network MOS, rate, history).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<Value>,
}

/// A point whose senders lagged more than this (ms) is re-measured.
pub const MAX_SEND_LAG_MS: f64 = 50.0;

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

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
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
pub fn voip_spec(cfg: &ExperimentConfig, mesh_addr: &dyn Fn(&str) -> String, n: u32, start_at_unix_ms: u64) -> Value {
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

/// The daemon config (daemon contract TOML) of `node` for `setup`, or None
/// if the node runs no daemon in that setup. `air_file`: the node's medium
/// counters file (ns-3 air), given to the adaptive setup's daemon.
pub fn daemon_config(
    cfg: &ExperimentConfig,
    setup: Setup,
    node: &str,
    n: u32,
    socket: &Path,
    air_file: Option<&Path>,
) -> Option<String> {
    let topo = &cfg.topo;
    let idx = |x: &str| topo.nodes.iter().position(|y| y == x).expect("known node");
    let addr = |x: &str| Topology::addr_of(idx(x)).to_string();
    let (mode, link_mode, peers): (&str, &str, Vec<(String, Option<String>)>) = match setup {
        Setup::Off | Setup::NoControl | Setup::VoicePriority | Setup::FixedShaper => return None,
        Setup::Pacer | Setup::PacerTim => {
            let g = topo.gw.as_ref()?;
            let tim = setup == Setup::PacerTim;
            return (node == crate::gw::GW).then(|| crate::gw::pacer_config(&socket.to_string_lossy(), g, &cfg.medium.phy, cfg.playout_ms, tim));
        }
        Setup::DownlinkMux | Setup::DownlinkMuxInterval | Setup::DownlinkMuxRed | Setup::DownlinkMuxAgg | Setup::DownlinkMuxRed2 | Setup::DownlinkMuxAggPartial => {
            let sock = socket.to_string_lossy();
            let ap = topo.wifi.ap.as_deref()?;
            let agg = matches!(setup, Setup::DownlinkMuxAgg | Setup::DownlinkMuxAggPartial);
            if node == ap {
                let release = if setup == Setup::DownlinkMuxInterval { crate::cell::Release::Interval } else { crate::cell::Release::Medium };
                let f = air_file.map(|f| f.to_string_lossy().into_owned());
                let red = matches!(setup, Setup::DownlinkMuxRed | Setup::DownlinkMuxAgg | Setup::DownlinkMuxRed2 | Setup::DownlinkMuxAggPartial).then(|| crate::cell::Redundancy {
                    depth: if setup == Setup::DownlinkMuxRed2 { 2 } else { 1 },
                    partial: setup == Setup::DownlinkMuxAggPartial,
                    ..crate::cell::Redundancy::of(&cfg.medium.phy, topo.wifi.multicast_mbit)
                });
                let mut s = crate::cell::ap_config(&sock, f.as_deref(), release, red);
                if agg {
                    let st: Vec<String> = topo.neighbours(ap).iter().filter(|x| endpoints(topo, n).contains(x)).map(|x| addr(x)).collect();
                    s.push_str(&crate::cell::ap_uplink_peers(&st));
                }
                return Some(s);
            }
            if !topo.neighbours(ap).iter().any(|x| x == node) {
                return None; // an outer node (or a node of no BSS)
            }
            // a station: the ports of its calls (one port, or the range
            // spanning them when it has several calls)
            let ports: Vec<u32> = (0..n)
                .filter(|&k| {
                    let (a, b) = call_pair(topo, k);
                    a == node || b == node
                })
                .map(|k| 16000 + 2 * k)
                .collect();
            let (lo, hi) = (*ports.iter().min()?, *ports.iter().max()?);
            let spec = if lo == hi { lo.to_string() } else { format!("\"{lo}-{hi}\"") };
            let mut s = crate::cell::station_config(&sock, &addr(ap), &spec);
            if agg {
                s.push_str(&crate::cell::station_uplink_agg(&addr(ap), ports.len() as u32, cfg.interval_ms * 1000));
            }
            return Some(s);
        }
        Setup::HopByHop | Setup::HoldWhileBusy | Setup::Adaptive | Setup::LinkAdaptive => (
            "hop-by-hop",
            match setup {
                Setup::HoldWhileBusy => "hold-while-busy",
                Setup::Adaptive => "adaptive",
                _ => "fixed",
            },
            if setup == Setup::LinkAdaptive {
                Vec::new() // discovered (a static peer would keep its fixed size)
            } else {
                topo.neighbours(node).iter().map(|nb| (addr(nb), None)).collect()
            },
        ),
        Setup::EndToEnd => {
            let mut far: Vec<String> = Vec::new();
            for k in 0..n {
                let (a, b) = call_pair(topo, k);
                let other = if a == node { b } else if b == node { a } else { continue };
                if !far.iter().any(|f| f == other) {
                    far.push(other.to_string());
                }
            }
            if far.is_empty() {
                return None;
            }
            ("end-to-end", "fixed", far.iter().map(|f| (addr(f), Some(format!("{}/32", addr(f))))).collect())
        }
    };
    let mut s = format!(
        "# generated by airpack lab for node {node}, setup {}\n[daemon]\nmode = \"{mode}\"\ntun = \"airpack0\"\ncontrol_socket = \"{}\"\nlog = \"warn\"\ninterfaces = [\"{RADIO}\"]\n\n[aggregation]\nencoding = \"native\"\nhold_time_us = {}\nlink_mode = \"{link_mode}\"\n\n[[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"16000-32000\"\n",
        setup.name(),
        socket.display(),
        cfg.hold_time_us
    );
    if let (Setup::Adaptive, Some(f)) = (setup, air_file) {
        s.push_str(&format!("\n[medium]\nfile = \"{}\"\n", f.display()));
    }
    if setup == Setup::LinkAdaptive {
        s.push_str(&crate::link_size::discovery_section(cfg.medium.phy.rate_mbps));
        // On the ns-3 air: the radio's per-peer signal and MAC counters too.
        if let Some(f) = air_file {
            s.push_str(&format!("radio_file = \"{}\"\n", f.display()));
        }
    }
    for (a, allowed) in peers {
        s.push_str(&format!("\n[[peer]]\naddress = \"{a}\"\n"));
        if let Some(al) = allowed {
            s.push_str(&format!("allowed_ips = [\"{al}\"]\n"));
        }
    }
    Some(s)
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
            && std::process::Command::new("chrt").arg("-m").stdout(Stdio::null()).stderr(Stdio::null()).status().map(|s| s.success()).unwrap_or(false)
    })
}

fn spawn_in(mesh: &Mesh, node: &str, bin: &Path, args: &[&str], log: &Path, what: &str) -> Result<Proc> {
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
    Ok(Proc { child, what: what.to_string(), log: log.to_path_buf() })
}

fn daemon_stats(mesh: &Mesh, node: &str, bin: &Path, socket: &Path) -> Result<Value> {
    let n = mesh.node(node).context("unknown node")?;
    let out = n
        .ns
        .exec(&bin.to_string_lossy(), &["stats", "--socket", &socket.to_string_lossy(), "--json"])?;
    serde_json::from_str(&out).context("airpack stats --json output")
}

/// Every JSON object under `v` that has all `keys` (the per-direction results).
fn objects_with<'a>(v: &'a Value, keys: &[&str], out: &mut Vec<&'a serde_json::Map<String, Value>>) {
    match v {
        Value::Object(m) => {
            if keys.iter().all(|k| m.contains_key(*k)) {
                out.push(m);
            } else {
                for x in m.values() {
                    objects_with(x, keys, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| objects_with(x, keys, out)),
        _ => {}
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
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

/// Why a measured point is not a measurement of the air and is measured
/// again: its senders lagged, its air lagged, or its air aborted on the
/// real-time hard limit (a stalled machine).
pub(crate) fn remeasure_reason(r: &Result<Point>) -> Option<String> {
    match r {
        Ok(p) if p.max_send_lag_ms > MAX_SEND_LAG_MS => {
            Some(format!("senders lagged {:.0} ms behind schedule", p.max_send_lag_ms))
        }
        Ok(Point { air: Some(a), .. }) if !a.kept_up() => Some(format!(
            "the ns-3 air lagged {:.2} ms p99 (> {} ms; max {:.1} ms)",
            a.lag_p99_ms,
            crate::air_ns3::MAX_LAG_P99_MS,
            a.lag_max_ms
        )),
        Err(e) if format!("{e:#}").contains(crate::air_ns3::HARD_LIMIT_ABORT) => {
            Some("the ns-3 air aborted on its real-time hard limit".into())
        }
        Err(e) if format!("{e:#}").contains(crate::air_ns3::IGNORED_SIGTERM) => {
            Some("the ns-3 air did not stop after SIGTERM".into())
        }
        _ => None,
    }
}

/// Measure one point: `n` calls under `setup`.
pub fn run_point(cfg: &ExperimentConfig, setup: Setup, n: u32) -> Result<Point> {
    run_point_with(cfg, setup, n, None)
}

/// [`run_point`] with bulk TCP flows between the call endpoints beside the
/// calls and, in every daemon, a class for their small packets
/// ([`crate::tcp_voice`]; the gateway presets' flows are [`crate::gw`]'s).
pub fn run_point_with(cfg: &ExperimentConfig, setup: Setup, n: u32, tcp_load: Option<&crate::tcp_voice::TcpLoad>) -> Result<Point> {
    let t0 = Instant::now();
    // a cell preset is built with one station per call ([`crate::cell`])
    let scaled;
    let cfg = match &cfg.topo.cell {
        Some(c) => {
            scaled = ExperimentConfig { topo: c.topology(n), ..cfg.clone() };
            &scaled
        }
        None => cfg,
    };
    if setup.gateway_arm() && cfg.topo.gw.is_none() {
        bail!("setup {} needs a gateway preset (--preset gw:N)", setup.name());
    }
    let mut mesh = Mesh::build(&cfg.topo, &cfg.medium).context("build the emulated mesh")?;
    if mesh.babel.is_some() && matches!(setup, Setup::HopByHop | Setup::HoldWhileBusy | Setup::Adaptive | Setup::LinkAdaptive) {
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
        let Some(mut conf) = daemon_config(cfg, setup, node, n, &sock, air_file.as_deref()) else { continue };
        if let Some(t) = tcp_load {
            conf.push_str(&t.daemon_class());
        }
        let path = dir.join(format!("{node}.toml"));
        std::fs::write(&path, conf)?;
        let log = dir.join(format!("{node}.daemon.log"));
        let p = spawn_in(&mesh, node, &cfg.bin, &["run", "--config", &path.to_string_lossy()], &log, &format!("daemon on {node}"))?;
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
                bail!("{} did not answer `airpack stats` within 10 s:\n{}", p.what, p.log_tail());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    if setup.downlink() {
        wait_registered(&mut mesh, cfg, &daemons)?;
    }
    let socks: Vec<(String, PathBuf)> = daemons.iter().map(|(n, s, _)| (n.clone(), s.clone())).collect();
    let sampler = if setup == Setup::LinkAdaptive {
        let ds = crate::link_size::daemons(&mesh, &socks);
        crate::link_size::wait_discovered(&cfg.topo, &cfg.bin, &ds, || check_daemons(&mut mesh, &mut daemons))?;
        Some(crate::link_size::Sampler::start(&cfg.bin, ds))
    } else {
        None
    };
    let ber0 = crate::link_size::ber_frames(&mesh);
    if let (Some(g), Some(how)) = (&cfg.topo.gw, gateway_shaping(setup)) {
        let script = crate::gw::qdisc_script(RADIO, how, g.link_kbps(&cfg.medium.phy), g.shaper_kbps);
        std::fs::write(dir.join("gateway-qdisc.tc"), &script)?;
        let gwn = mesh.node(crate::gw::GW).context("gateway node")?;
        crate::netns::run_stdin("ip", &["netns", "exec", gwn.ns.name(), "tc", "-batch", "-"], &script).context("gateway qdisc")?;
    }
    let air0 = mesh.frames_on_air()?;
    let drops0 = mesh.queue_drops()?;
    // calls
    let start_at = unix_ms() + 1500;
    let addr_of = |x: &str| mesh.node(x).map(|m| m.addr.to_string()).unwrap_or_default();
    let spec = voip_spec(cfg, &addr_of, n, start_at);
    let spec_path = dir.join("calls.json");
    std::fs::write(&spec_path, serde_json::to_vec_pretty(&spec)?)?;
    let spec_t: crate::voip::Spec = serde_json::from_value(spec).context("voip spec type")?;
    let flows = match &cfg.topo.gw {
        Some(g) if g.tcp_flows > 0 => {
            let end = start_at + (cfg.duration_s * 1000.0) as u64;
            Some(crate::tcp_bulk::start(&gw_flows(&mesh, g)?, &g.tcp_cc, start_at, end)?)
        }
        _ => match tcp_load {
            Some(t) if t.flows > 0 => {
                let end = start_at + (cfg.duration_s * 1000.0) as u64;
                Some(crate::tcp_bulk::start(&t.flow_specs(&cfg.topo, &mesh)?, &t.cc, start_at, end)?)
            }
            _ => None,
        },
    };
    let (results, signalling) = match cfg.client {
        Client::Airpack => (run_voips(cfg, &mut mesh, &dir, &spec_path, n)?, None),
        Client::Baresip => {
            let r = crate::baresip::run_calls(&mesh, &spec_t, &dir);
            // a dead air takes the taps with it: name it, not its victims
            check_air(&mut mesh)?;
            let (r, s) = r?;
            (r, Some(serde_json::to_value(s)?))
        }
    };
    let tcp_cc = cfg.topo.gw.as_ref().map(|g| g.tcp_cc.clone()).or_else(|| tcp_load.map(|t| t.cc.clone())).unwrap_or_default();
    let tcp = flows.map(|f| crate::tcp_bulk::TcpSummary::of(&tcp_cc, f.finish()));
    // collect
    let link_sizes = sampler.map(|s| s.finish(&cfg.topo)).unwrap_or_default();
    let ber_frames = crate::link_size::ber_delta(&ber0, &crate::link_size::ber_frames(&mesh));
    let air1 = mesh.frames_on_air()?;
    let drops1 = mesh.queue_drops()?;
    let delta = |a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
        b.iter().map(|(k, v)| (k.clone(), v.saturating_sub(a.get(k).copied().unwrap_or(0)))).collect()
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
        let st = daemon_stats(&mesh, node, &cfg.bin, sock).with_context(|| format!("stats of {}", p.what))?;
        let total = st.get("total").cloned().unwrap_or(Value::Null);
        if matches!(setup, Setup::Pacer | Setup::PacerTim) {
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
    let merged = crate::voip::merge(&spec_t, &results);
    let call_results = serde_json::to_value(&merged)?;
    let max_send_lag_ms = results
        .iter()
        .flat_map(|r| r.streams.iter())
        .filter_map(|s| s.max_send_lag_ms)
        .fold(0.0f64, f64::max);
    let mut point = summarize(setup, n, call_results, aggregation_ratio, frames_per_node.values().sum(), drops_per_node.values().sum(), daemon_totals, t0);
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
    let _ = std::fs::write(dir.join("point.json"), serde_json::to_vec_pretty(&point).unwrap_or_default());
    drop(mesh);
    Ok(point)
}

/// The lab qdisc a gateway arm puts on the gateway's radio, if any.
fn gateway_shaping(setup: Setup) -> Option<crate::gw::Shaping> {
    match setup {
        Setup::VoicePriority => Some(crate::gw::Shaping::VoicePriority),
        Setup::FixedShaper => Some(crate::gw::Shaping::FixedShaper),
        _ => None,
    }
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
fn run_voips(cfg: &ExperimentConfig, mesh: &mut Mesh, dir: &Path, spec_path: &Path, n: u32) -> Result<Vec<crate::voip::NodeResult>> {
    let mut voips = Vec::new();
    for node in endpoints(&cfg.topo, n) {
        let out = dir.join(format!("{node}.result.json"));
        let _ = std::fs::remove_file(&out);
        let log = dir.join(format!("{node}.voip.log"));
        let p = spawn_in(
            mesh,
            &node,
            &cfg.bin,
            &["voip", "--spec", &spec_path.to_string_lossy(), "--node", &node, "--out", &out.to_string_lossy()],
            &log,
            &format!("voip on {node}"),
        )?;
        voips.push((node, out, p));
    }
    let deadline = Instant::now() + Duration::from_secs_f64(1.5 + cfg.duration_s + 15.0);
    for (_, _, p) in voips.iter_mut() {
        loop {
            // a dead air takes the taps with it: name it, not its victims
            check_air(mesh)?;
            match p.child.try_wait()? {
                Some(st) if st.success() => break,
                Some(st) => bail!("{} failed ({st}):\n{}", p.what, p.log_tail()),
                None if Instant::now() > deadline => bail!("{} did not finish in time:\n{}", p.what, p.log_tail()),
                None if crate::netns::interrupted() => bail!("interrupted"),
                None => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    let mut results = Vec::new();
    for (node, out, _) in &voips {
        let text = std::fs::read_to_string(out).with_context(|| format!("result of voip on {node}"))?;
        results.push(serde_json::from_str::<crate::voip::NodeResult>(&text).with_context(|| format!("parse {}", out.display()))?);
    }
    Ok(results)
}

/// A point from merged call results alone (no daemons, no air counters):
/// the pure simulation's points ([`crate::validate_sim`]).
pub(crate) fn summarize_point(setup: Setup, n: u32, call_results: Value, t0: Instant) -> Point {
    summarize(setup, n, call_results, 1.0, 0, 0, BTreeMap::new(), t0)
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    setup: Setup,
    n: u32,
    call_results: Value,
    aggregation_ratio: f64,
    frames_on_air: u64,
    mac_queue_drops: u64,
    daemon_totals: BTreeMap<String, Value>,
    t0: Instant,
) -> Point {
    let mut dirs = Vec::new();
    objects_with(&call_results, &["mos", "loss_pct", "delay_ms"], &mut dirs);
    dirs.retain(|m| m.get("sent").and_then(Value::as_u64) != Some(0));
    // directions without a value (e.g. no delay when nothing arrived) are skipped
    let col = |k: &str| dirs.iter().filter_map(|m| m.get(k).and_then(Value::as_f64)).collect::<Vec<f64>>();
    let calls = call_results.as_array().cloned().unwrap_or_default();
    // A call is supported when each direction is supported or sent nothing
    // at all (voice activity can keep a direction silent for a whole short
    // run; there is no speech to judge, so it cannot fail the call).
    let dir_ok = |d: Option<&Value>| match d {
        Some(q) => q.get("supported").and_then(Value::as_bool) == Some(true) || q.get("sent").and_then(Value::as_u64) == Some(0),
        None => false,
    };
    let supported_calls = calls
        .iter()
        .filter(|c| {
            c.get("supported").and_then(Value::as_bool) == Some(true) || (dir_ok(c.get("a_to_b")) && dir_ok(c.get("b_to_a")))
        })
        .count() as u32;
    let all = supported_calls == n && calls.len() == n as usize && n > 0;
    Point {
        setup,
        calls: n,
        supported: all,
        supported_calls,
        mos: mean(&col("mos")),
        mos_min: col("mos").into_iter().fold(f64::INFINITY, f64::min).min(5.0),
        loss: mean(&col("loss_pct")),
        loss_max: col("loss_pct").into_iter().fold(0.0, f64::max),
        late: mean(&col("late_pct")),
        delay_ms: mean(&col("delay_ms")),
        delay_median_ms: {
            let p50 = col("delay_p50_ms");
            if p50.is_empty() {
                median(&col("delay_ms"))
            } else {
                mean(&p50)
            }
        },
        delay_p95_ms: col("delay_p95_ms").into_iter().fold(0.0, f64::max),
        jitter_ms: mean(&col("jitter_ms")),
        jitter_mean_ms: mean(&col("jitter_mean_ms")),
        jitter_max_ms: col("jitter_max_ms").into_iter().fold(0.0, f64::max),
        aggregation_ratio,
        frames_on_air,
        mac_queue_drops,
        frames_per_node: BTreeMap::new(),
        drops_per_node: BTreeMap::new(),
        call_results,
        daemon_totals,
        wall_s: t0.elapsed().as_secs_f64(),
        max_send_lag_ms: 0.0,
        signalling: None,
        downlink: BTreeMap::new(),
        downlink_drops: 0,
        air: None,
        link_sizes: BTreeMap::new(),
        ber_frames: BTreeMap::new(),
        tcp: None,
        gateway: None,
    }
}

/// Packets the multiplexer or a demultiplexer dropped: the AP's
/// `queue_full`, `frame_send_failed`, `unicast_send_failed` and the
/// stations' drops of frames or entries (`wrong_epoch`, `stale`,
/// `no_context`, `bad_entry`, `tun_write_failed`); registration refusals and
/// frames from other sources are not packets of a call. Reads the daemon's
/// stats layout (`drops.frames.*`, `drops.packets.*`) and the flat one of
/// earlier daemons (`drops.no_context`, ...).
pub fn downlink_drops(downlink: &BTreeMap<String, Value>) -> u64 {
    let mut n = 0;
    for (k, v) in downlink {
        let keys: &[&str] = if k.ends_with(".ap") {
            &["queue_full", "frame_send_failed", "unicast_send_failed"]
        } else {
            &[
                "wrong_epoch",
                "stale_frames",
                "no_context",
                "bad_entry",
                "tun_write_errors",
                "frames/wrong_epoch",
                "frames/stale",
                "packets/no_context",
                "packets/bad_entry",
                "packets/tun_write_failed",
            ]
        };
        for key in keys {
            n += v.pointer(&format!("/drops/{key}")).and_then(Value::as_u64).unwrap_or(0);
        }
    }
    n
}

/// Waits (at most 15 s) until the AP has a lease for every station daemon
/// of the point and every station reports itself registered.
fn wait_registered(mesh: &mut Mesh, cfg: &ExperimentConfig, daemons: &[(String, PathBuf, Proc)]) -> Result<()> {
    let ap = cfg.topo.wifi.ap.clone().context("a downlink setup needs an infrastructure topology ([wifi] ap)")?;
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

/// One line of progress for a point.
pub fn point_line(p: &Point) -> String {
    format!(
        "[{:>15}] {:>3} calls: {} ({}/{} ok)  MOS {:.2} (min {:.2})  loss {:.2} % (max {:.2})  delay {:.1} ms  jitter {:.1} ms (max {:.1})  agg {:.2}  frames {}  ({:.0} s, send lag {:.1} ms{})",
        p.setup.name(),
        p.calls,
        if p.supported { "supported  " } else { "UNSUPPORTED" },
        p.supported_calls,
        p.calls,
        p.mos,
        p.mos_min,
        p.loss,
        p.loss_max,
        p.delay_ms,
        p.jitter_mean_ms,
        p.jitter_max_ms,
        p.aggregation_ratio,
        p.frames_on_air,
        p.wall_s,
        p.max_send_lag_ms,
        p.air.map(|a| format!(", air lag p99 {:.2} ms", a.lag_p99_ms)).unwrap_or_default()
    ) + &p
        .tcp
        .as_ref()
        .map(|t| format!("  TCP {} flows {:.0} kbit/s goodput ({}), {:.0} kbit/s throughput, RTT mean/median/p95 {:.0}/{:.0}/{:.0} ms", t.flows, t.goodput_kbps, t.per_flow.iter().map(|f| format!("{:.0}", f.goodput_kbps)).collect::<Vec<_>>().join("/"), t.throughput_kbps, t.rtt_mean_ms, t.rtt_median_ms, t.rtt_p95_ms))
        .unwrap_or_default()
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
pub fn keep_point(res: &mut SetupResult, n: u32, r: Result<Point>, on_point: impl FnOnce(&Point)) -> Option<bool> {
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
pub fn capacity_search(cfg: &ExperimentConfig, setup: Setup, on_point: impl FnMut(&Point)) -> SetupResult {
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
    let mut res = SetupResult { setup, capacity: 0, capacity_at_least: false, error: None, points: Vec::new() };
    let mut measure = |n: u32, res: &mut SetupResult| -> Option<bool> {
        let c = search_point_cfg(cfg, res, n);
        let mut r = run_point(&c, setup, n);
        for _ in 0..2 {
            match remeasure_reason(&r) {
                Some(why) => {
                    eprintln!("[{:>15}] {n:>3} calls: {why} (machine busy?): measuring again", setup.name());
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

/// Describe a PHY for reports.
pub fn phy_label(p: &Phy) -> String {
    format!("{} ({} Mbit/s)", p.name, p.rate_mbps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::medium::preset;

    fn cfg() -> ExperimentConfig {
        ExperimentConfig {
            bin: "/bin/true".into(),
            topo: Topology::preset("seed001").unwrap(),
            medium: MediumOpts { phy: preset("b2").unwrap(), queue_limit: 50, loss_pct: 0.0 },
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
    fn configs_per_setup() {
        let c = cfg();
        let s = Path::new("/tmp/x.sock");
        assert!(daemon_config(&c, Setup::Off, "C", 2, s, None).is_none());
        let hbh = daemon_config(&c, Setup::HopByHop, "C", 2, s, None).unwrap();
        assert_eq!(hbh.matches("[[peer]]").count(), 3, "{hbh}");
        assert!(hbh.contains("link_mode = \"fixed\""));
        let ad = daemon_config(&c, Setup::Adaptive, "A", 2, s, Some(Path::new("/dev/shm/x/A.air"))).unwrap();
        assert!(ad.contains("link_mode = \"adaptive\"") && ad.contains("[medium]\nfile = \"/dev/shm/x/A.air\""));
        assert!(!daemon_config(&c, Setup::Adaptive, "A", 2, s, None).unwrap().contains("[medium]"));
        let hwb = daemon_config(&c, Setup::HoldWhileBusy, "A", 2, s, None).unwrap();
        assert!(hwb.contains("hold-while-busy") && hwb.contains("10.201.0.3"), "{hwb}");
        // link-adaptive: the fixed hold, no static peer (it would keep 1500
        // bytes), discovery with the size model at the PHY's rate
        let la = daemon_config(&c, Setup::LinkAdaptive, "C", 2, s, None).unwrap();
        assert!(la.contains("mode = \"hop-by-hop\"") && la.contains("link_mode = \"fixed\""), "{la}");
        assert!(!la.contains("[[peer]]"), "{la}");
        assert!(la.contains("[discovery]\nenabled = true\n") && la.contains(&format!("rate_mbps = {}\n", c.medium.phy.rate_mbps)), "{la}");
        assert!(!la.contains("radio_file"), "{la}");
        let la3 = daemon_config(&c, Setup::LinkAdaptive, "C", 2, s, Some(Path::new("/dev/shm/x/C.air"))).unwrap();
        assert!(la3.contains("[discovery]\nenabled = true\n") && la3.contains("radio_file = \"/dev/shm/x/C.air\"\n"), "{la3}");
        assert_eq!(Setup::parse("link-adaptive").unwrap(), Setup::LinkAdaptive);
        assert_eq!(Setup::parse("la").unwrap().name(), "link-adaptive");
        // end-to-end: relay C runs nothing; D talks to A and B; A only to D
        assert!(daemon_config(&c, Setup::EndToEnd, "C", 2, s, None).is_none());
        let d = daemon_config(&c, Setup::EndToEnd, "D", 2, s, None).unwrap();
        assert!(d.contains("allowed_ips = [\"10.201.0.1/32\"]") && d.contains("10.201.0.2/32"), "{d}");
        let a = daemon_config(&c, Setup::EndToEnd, "A", 1, s, None).unwrap();
        assert_eq!(a.matches("[[peer]]").count(), 1);
        // one call: B is no endpoint
        assert!(daemon_config(&c, Setup::EndToEnd, "B", 1, s, None).is_none());
        for t in [hbh, hwb, d, a] {
            toml::from_str::<toml::Value>(&t).unwrap();
        }
    }

    #[test]
    fn downlink_configs_in_a_cell() {
        let mut c = cfg();
        c.topo = crate::cell::CellSpec::parse("cell:b11:11:2").unwrap().unwrap().topology(3);
        let s = Path::new("/tmp/x.sock");
        let f = Path::new("/dev/shm/x/AP.air");
        let ap = daemon_config(&c, Setup::DownlinkMux, "AP", 3, s, Some(f)).unwrap();
        assert!(ap.contains("[ap]") && ap.contains("idle_release = true") && ap.contains("file = \"/dev/shm/x/AP.air\""), "{ap}");
        let ap = daemon_config(&c, Setup::DownlinkMuxInterval, "AP", 3, s, Some(f)).unwrap();
        assert!(ap.contains("idle_release = false") && !ap.contains("[medium]"), "{ap}");
        // S1 carries calls 0 and 1 (ports 16000, 16002), S2 call 2
        let s1 = daemon_config(&c, Setup::DownlinkMux, "S1", 3, s, None).unwrap();
        assert!(s1.contains("ports = \"16000-16002\"") && s1.contains("ap = \"10.201.0.1\""), "{s1}");
        let s2 = daemon_config(&c, Setup::DownlinkMux, "S2", 3, s, None).unwrap();
        assert!(s2.contains("ports = 16004"), "{s2}");
        assert!(daemon_config(&c, Setup::DownlinkMux, "O1", 3, s, None).is_none(), "outer nodes run nothing");
        assert!(daemon_config(&c, Setup::Off, "AP", 3, s, None).is_none());
        for t in [ap, s1, s2] {
            toml::from_str::<toml::Value>(&t).unwrap();
        }
        // no access point, no downlink daemons
        assert!(daemon_config(&cfg(), Setup::DownlinkMux, "C", 2, s, None).is_none());
        assert_eq!(Setup::parse("mux").unwrap(), Setup::DownlinkMux);
        assert!(Setup::DownlinkMuxInterval.downlink() && !Setup::HopByHop.downlink());
        // redundancy: the setup's names, and the airtime rule of the preset's rates
        for n in ["downlink-mux-red", "mux-red"] {
            assert_eq!(Setup::parse(n).unwrap(), Setup::DownlinkMuxRed);
        }
        assert_eq!(Setup::DownlinkMuxRed.name(), "downlink-mux-red");
        assert!(Setup::DownlinkMuxRed.downlink());
        assert!(!daemon_config(&c, Setup::DownlinkMux, "AP", 3, s, Some(f)).unwrap().contains("redundancy"));
        c.medium.phy = crate::medium::preset("b11").unwrap();
        let ap = daemon_config(&c, Setup::DownlinkMuxRed, "AP", 3, s, Some(f)).unwrap();
        let v = toml::from_str::<toml::Value>(&ap).unwrap();
        assert_eq!(v["ap"]["redundancy"].as_bool(), Some(true), "{ap}");
        assert_eq!(v["ap"]["idle_release"].as_bool(), Some(true), "{ap}");
        assert_eq!((v["ap"]["unicast_rate"].as_float(), v["ap"]["multicast_rate"].as_float()), (Some(11.0), Some(11.0)), "{ap}");
        assert_eq!(v["medium"]["file"].as_str(), Some("/dev/shm/x/AP.air"), "{ap}");
        // stations are those of downlink-mux (they recover without a key of their own)
        assert_eq!(daemon_config(&c, Setup::DownlinkMuxRed, "S1", 3, s, None), daemon_config(&c, Setup::DownlinkMux, "S1", 3, s, None));
        // uplink aggregation beside the mux: the AP takes bundles from the
        // stations of the point's calls, a station bundles its calls to the AP
        assert_eq!(Setup::parse("mux-agg").unwrap(), Setup::DownlinkMuxAgg);
        assert_eq!(Setup::parse("downlink-mux-red2").unwrap().name(), "downlink-mux-red2");
        let ap2 = daemon_config(&c, Setup::DownlinkMuxRed2, "AP", 3, s, Some(f)).unwrap();
        assert_eq!(toml::from_str::<toml::Value>(&ap2).unwrap()["ap"]["redundancy"].as_integer(), Some(2), "{ap2}");
        let app = daemon_config(&c, Setup::DownlinkMuxAggPartial, "AP", 3, s, Some(f)).unwrap();
        let v = toml::from_str::<toml::Value>(&app).unwrap();
        assert_eq!((v["ap"]["redundancy_partial"].as_bool(), v["peer"].as_array().map(|p| p.len())), (Some(true), Some(2)), "{app}");
        assert_eq!(daemon_config(&c, Setup::DownlinkMuxAggPartial, "S1", 3, s, None), daemon_config(&c, Setup::DownlinkMuxAgg, "S1", 3, s, None));
        assert!(Setup::DownlinkMuxAgg.downlink());
        let ap = daemon_config(&c, Setup::DownlinkMuxAgg, "AP", 3, s, Some(f)).unwrap();
        let v = toml::from_str::<toml::Value>(&ap).unwrap();
        assert_eq!(v["ap"]["redundancy"].as_bool(), Some(true), "{ap}");
        let peers: Vec<&str> = v["peer"].as_array().unwrap().iter().map(|p| p["address"].as_str().unwrap()).collect();
        assert_eq!(peers, ["10.201.0.2", "10.201.0.3"], "{ap}");
        let s1 = daemon_config(&c, Setup::DownlinkMuxAgg, "S1", 3, s, None).unwrap();
        let v = toml::from_str::<toml::Value>(&s1).unwrap();
        assert_eq!(v["aggregation"]["max_packets"].as_integer(), Some(2), "{s1}");
        assert_eq!(v["peer"][0]["address"].as_str(), Some("10.201.0.1"), "{s1}");
        let s2 = daemon_config(&c, Setup::DownlinkMuxAgg, "S2", 3, s, None).unwrap();
        assert_eq!(toml::from_str::<toml::Value>(&s2).unwrap()["aggregation"]["max_packets"].as_integer(), Some(1), "{s2}");
    }

    #[test]
    fn mux_drops_count_the_roles_packet_losses_only() {
        let mut d = BTreeMap::new();
        d.insert("AP.ap".to_string(), json!({"drops": {"queue_full": 2, "registration_bad_tag": 9}}));
        d.insert("S1.station".to_string(), json!({"drops": {"no_context": 3, "not_from_ap": 7, "bad_entry": 1}, "lost_frames": 40}));
        assert_eq!(downlink_drops(&d), 6);
        // the daemon's nested layout (drops.frames.*, drops.packets.*)
        let mut d = BTreeMap::new();
        d.insert("AP.ap".to_string(), json!({"drops": {"queue_full": 1, "frame_send_failed": 2, "unicast_send_failed": 4}, "registrations": {"rejected": {"bad_tag": 9}}}));
        d.insert(
            "S1.station".to_string(),
            json!({"drops": {"frames": {"not_from_ap": 7, "stale": 8, "wrong_epoch": 16, "refused_truncated": 5}, "packets": {"no_context": 32, "bad_entry": 64, "tun_write_failed": 128}}, "lost_frames": 40, "duplicates": 3}),
        );
        assert_eq!(downlink_drops(&d), 255);
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

    #[test]
    fn summary_reads_direction_objects() {
        let calls = json!([
            {"call": 0, "supported": true,
             "a_to_b": {"mos": 4.0, "loss_pct": 1.0, "delay_ms": 10.0, "delay_p95_ms": 20.0, "jitter_ms": 1.0, "jitter_mean_ms": 2.0, "jitter_max_ms": 9.0, "late_pct": 0.0},
             "b_to_a": {"mos": 3.0, "loss_pct": 3.0, "delay_ms": 30.0, "delay_p95_ms": 50.0, "jitter_ms": 3.0, "jitter_mean_ms": 4.0, "jitter_max_ms": 7.0, "late_pct": 2.0}},
            {"call": 1, "supported": false,
             "a_to_b": {"mos": 2.0, "loss_pct": 5.0, "delay_ms": 20.0, "delay_p95_ms": 40.0, "jitter_ms": 2.0, "late_pct": 1.0},
             "b_to_a": {"mos": 3.0, "loss_pct": 3.0, "delay_ms": 40.0, "delay_p95_ms": 45.0, "jitter_ms": 2.0, "late_pct": 1.0}}
        ]);
        let p = summarize(Setup::Off, 2, calls, 1.0, 10, 0, BTreeMap::new(), Instant::now());
        assert!(!p.supported);
        // a silent direction (nothing sent) neither fails a call nor enters the means
        let silent = json!([{"call": 0, "supported": false,
            "a_to_b": {"sent": 10, "supported": true, "mos": 4.0, "loss_pct": 0.0, "delay_ms": 10.0},
            "b_to_a": {"sent": 0, "supported": false, "mos": 1.0, "loss_pct": 100.0, "delay_ms": null}}]);
        let q = summarize(Setup::Off, 1, silent, 1.0, 10, 0, BTreeMap::new(), Instant::now());
        assert!(q.supported);
        assert_eq!(q.mos, 4.0);
        let lost = json!([{"call": 0, "supported": false,
            "a_to_b": {"sent": 10, "supported": true, "mos": 4.0, "loss_pct": 0.0, "delay_ms": 10.0},
            "b_to_a": {"sent": 5, "supported": false, "mos": 1.0, "loss_pct": 100.0, "delay_ms": null}}]);
        assert!(!summarize(Setup::Off, 1, lost, 1.0, 10, 0, BTreeMap::new(), Instant::now()).supported);
        assert_eq!(p.supported_calls, 1);
        assert_eq!(p.mos, 3.0);
        assert_eq!(p.mos_min, 2.0);
        assert_eq!(p.loss_max, 5.0);
        assert_eq!(p.delay_ms, 25.0);
        assert_eq!(p.delay_median_ms, 25.0);
        assert_eq!(p.delay_p95_ms, 50.0);
        assert_eq!(p.jitter_ms, 2.0);
        // Only two directions carry mean / max jitter: the mean is theirs, the max the largest.
        assert_eq!((p.jitter_mean_ms, p.jitter_max_ms), (3.0, 9.0));
    }

    #[test]
    fn lagging_air_or_hard_limit_abort_is_measured_again() {
        use crate::air_ns3::AirStats;
        let calls = json!([{"call": 0, "supported": true, "a_to_b": {"mos": 4.0, "loss_pct": 0.0, "delay_ms": 1.0}}]);
        let mut p = summarize(Setup::Off, 1, calls, 1.0, 10, 0, BTreeMap::new(), Instant::now());
        assert_eq!(remeasure_reason(&Ok(p.clone())), None, "tc air, senders on time");
        let stats = |p99: f64| AirStats { lag_p50_ms: 0.05, lag_p99_ms: p99, lag_max_ms: 9.0, events_per_s: 5000.0, cpu_pct: 10.0 };
        p.air = Some(stats(0.4));
        assert_eq!(remeasure_reason(&Ok(p.clone())), None);
        p.air = Some(stats(1.5));
        assert!(remeasure_reason(&Ok(p.clone())).unwrap().contains("air lagged 1.50 ms p99"));
        p.air = Some(stats(0.4));
        p.max_send_lag_ms = MAX_SEND_LAG_MS + 1.0;
        assert!(remeasure_reason(&Ok(p)).unwrap().contains("senders lagged"));
        let abort = anyhow::anyhow!("the ns-3 air died during the point (signal: 6):\nmsg=\"RealtimeSimulatorImpl::ProcessOneEvent (): Hard real-time limit exceeded (jitter = 931313919)\"");
        assert!(remeasure_reason(&Err(abort)).is_some());
        let stuck = anyhow::anyhow!("the ns-3 air ignored SIGTERM for 20 s: ").context("stop the ns-3 air");
        assert!(remeasure_reason(&Err(stuck)).unwrap().contains("did not stop"));
        assert_eq!(remeasure_reason(&Err(anyhow::anyhow!("voip on A failed"))), None);
        // the point's JSON carries the air's numbers
        let mut q = summarize(Setup::Off, 1, json!([]), 1.0, 0, 0, BTreeMap::new(), Instant::now());
        q.air = Some(stats(0.4));
        let v = serde_json::to_value(&q).unwrap();
        assert_eq!(v["air"]["lag_p99_ms"], 0.4);
        assert_eq!(v["air"]["events_per_s"], 5000.0);
    }
}
