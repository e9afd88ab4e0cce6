//! The link-adaptive bundle size in experiments (issue 11 points 4-5): the
//! `link-adaptive` setup, and what a point records about it.
//!
//! Owns: the setup's `[discovery]` section (hop-by-hop without static
//! peers: every daemon finds its neighbours by hellos and asks each for the
//! bundle size its hello loss calls for, `docs/adaptive.md`), the wait
//! until every daemon has all its radio neighbours up and its link
//! estimates have had time to settle ([`wait_discovered`]), the sizes the
//! daemons applied per directed link, sampled while the calls run
//! ([`Sampler`]), and the air's per-link bit error counters
//! ([`ber_frames`]).
//!
//! Must not touch: the size model (the daemon's `neighbor::quality`), the
//! point's flow ([`crate::experiment::run_point`] calls in here).

use crate::topology::{Mesh, Topology};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Hello interval of the lab's daemons (the daemon's default).
pub const HELLO_INTERVAL_MS: u32 = 1000;

/// Seconds the daemons exchange hellos after every neighbour is up and
/// before the calls start, unless `AIRPACK_LAB_DISCOVERY_WARMUP_S` says
/// otherwise: the hello delivery EWMA (weight 1/8, one sample per hello)
/// needs about 8 hellos to reflect a link's loss; without it a point's
/// first seconds would run at the 1500-byte size of a fresh estimate.
pub const WARMUP_S: f64 = 10.0;

fn warmup() -> Duration {
    let s = std::env::var("AIRPACK_LAB_DISCOVERY_WARMUP_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .unwrap_or(WARMUP_S);
    Duration::from_secs_f64(s)
}

/// The `[discovery]` section of the `link-adaptive` setup: hellos over IPv4
/// only (the lab's radios have IPv6 off), the size model at the PHY's data
/// rate.
pub fn discovery_section(rate_mbps: f64) -> String {
    format!(
        "\n[discovery]\nenabled = true\nipv6 = false\ninterval_ms = {HELLO_INTERVAL_MS}\nrate_mbps = {rate_mbps}\n"
    )
}

/// A daemon of the point: node, namespace, control socket.
#[derive(Debug, Clone)]
pub struct Daemon {
    /// Node name.
    pub node: String,
    /// Its namespace's name.
    pub ns: String,
    /// Its control socket.
    pub socket: PathBuf,
}

/// The daemons of `mesh` for `(node, socket)` pairs.
pub fn daemons(mesh: &Mesh, socks: &[(String, PathBuf)]) -> Vec<Daemon> {
    socks
        .iter()
        .filter_map(|(n, s)| {
            Some(Daemon {
                node: n.clone(),
                ns: mesh.node(n)?.ns.name().to_string(),
                socket: s.clone(),
            })
        })
        .collect()
}

fn peers_json(bin: &Path, d: &Daemon) -> Result<Value> {
    let out = crate::netns::run(
        "ip",
        &[
            "netns",
            "exec",
            &d.ns,
            &bin.to_string_lossy(),
            "peers",
            "--socket",
            &d.socket.to_string_lossy(),
            "--json",
        ],
    )?;
    serde_json::from_str(&out).context("airpack peers --json output")
}

/// Addresses of the neighbours `peers` shows up (discovered peers).
fn up_neighbours(peers: &Value) -> Vec<String> {
    let mut v = Vec::new();
    for l in peers["discovery"]["links"].as_array().into_iter().flatten() {
        for n in l["neighbors"].as_array().into_iter().flatten() {
            if n["up"].as_bool() == Some(true) {
                v.extend(n["address"].as_str().map(str::to_string));
            }
        }
    }
    v
}

/// Wait until every daemon has each of its radio neighbours up (at most
/// 20 s; `alive` is checked between polls), then [`WARMUP_S`].
pub fn wait_discovered(
    topo: &Topology,
    bin: &Path,
    daemons: &[Daemon],
    mut alive: impl FnMut() -> Result<()>,
) -> Result<()> {
    let addr = |x: &str| {
        let i = topo.nodes.iter().position(|y| y == x).expect("known node");
        Topology::addr_of(i).to_string()
    };
    let t = Instant::now();
    for d in daemons {
        let want: Vec<String> = topo.neighbours(&d.node).iter().map(|n| addr(n)).collect();
        loop {
            alive()?;
            let up = peers_json(bin, d)
                .map(|p| up_neighbours(&p))
                .unwrap_or_default();
            if want.iter().all(|w| up.contains(w)) {
                break;
            }
            if crate::netns::interrupted() {
                bail!("interrupted");
            }
            if t.elapsed() > Duration::from_secs(20) {
                bail!(
                    "discovery: {} has {up:?} up of its neighbours {want:?} after 20 s",
                    d.node
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let end = Instant::now() + warmup();
    while Instant::now() < end {
        alive()?;
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// One reading of a daemon: per peer address, the engine's `max_size` (the
/// size it sends that neighbour), its bundles and packets, and the share of
/// that neighbour's hellos received (`rx_ratio`).
fn reading(peers: &Value) -> BTreeMap<String, Value> {
    let mut m = BTreeMap::new();
    let mut rx = BTreeMap::new();
    for l in peers["discovery"]["links"].as_array().into_iter().flatten() {
        for n in l["neighbors"].as_array().into_iter().flatten() {
            if let Some(a) = n["address"].as_str() {
                rx.insert(a.to_string(), n["rx_ratio"].clone());
            }
        }
    }
    for p in peers["peers"].as_array().into_iter().flatten() {
        if let Some(a) = p["peer"].as_str() {
            let ip = a.split(['%', ':']).next().unwrap_or(a).to_string();
            m.insert(
                ip.clone(),
                json!({
                    "max_size": p["max_size"],
                    "bundles": p["bundles"],
                    "packets_in": p["packets_in"],
                    "rx_ratio": rx.get(&ip).cloned().unwrap_or(Value::Null),
                }),
            );
        }
    }
    m
}

/// One daemon's reading ([`reading`]), with its node.
type Sample = (String, BTreeMap<String, Value>);

/// Samples every daemon's peers once a second in a thread of its own, while
/// a point's calls run.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    samples: Arc<Mutex<Vec<Sample>>>,
}

impl Sampler {
    /// Start sampling.
    pub fn start(bin: &Path, daemons: Vec<Daemon>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s2, out, bin) = (stop.clone(), samples.clone(), bin.to_path_buf());
        let thread = std::thread::spawn(move || {
            while !s2.load(Ordering::Relaxed) {
                for d in &daemons {
                    if let Ok(p) = peers_json(&bin, d) {
                        out.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((d.node.clone(), reading(&p)));
                    }
                }
                for _ in 0..10 {
                    if s2.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        Sampler {
            stop,
            thread: Some(thread),
            samples,
        }
    }

    /// Stop, and summarise per directed link `"A->B"` (A's engine sending to
    /// B): every `max_size` sampled, their min / median / max, B's share of
    /// A's hellos (what B's size request for A was computed from), and A's
    /// bundles and packets to B over the point (last minus first sample).
    pub fn finish(mut self, topo: &Topology) -> BTreeMap<String, Value> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let samples = std::mem::take(&mut *self.samples.lock().unwrap_or_else(|e| e.into_inner()));
        summarise(topo, &samples)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn summarise(topo: &Topology, samples: &[Sample]) -> BTreeMap<String, Value> {
    // the receiver's rx_ratio of the sender's hellos: from the receiver's
    // samples, keyed by the sender's address
    let mut out = BTreeMap::new();
    for (node, _) in samples {
        for nb in topo.neighbours(node) {
            let key = format!("{node}->{nb}");
            if out.contains_key(&key) {
                continue;
            }
            let ip_nb = {
                let i = topo.nodes.iter().position(|y| *y == nb).expect("known");
                Topology::addr_of(i).to_string()
            };
            let ip_me = {
                let i = topo.nodes.iter().position(|y| y == node).expect("known");
                Topology::addr_of(i).to_string()
            };
            let mine: Vec<&Value> = samples
                .iter()
                .filter(|(n, _)| n == node)
                .filter_map(|(_, r)| r.get(&ip_nb))
                .collect();
            let theirs: Vec<f64> = samples
                .iter()
                .filter(|(n, _)| *n == nb)
                .filter_map(|(_, r)| r.get(&ip_me)?.get("rx_ratio")?.as_f64())
                .collect();
            let sizes: Vec<u64> = mine.iter().filter_map(|v| v["max_size"].as_u64()).collect();
            if sizes.is_empty() {
                continue;
            }
            let mut sorted = sizes.clone();
            sorted.sort_unstable();
            let d = |k: &str| {
                let f = mine.first().and_then(|v| v[k].as_u64()).unwrap_or(0);
                let l = mine.last().and_then(|v| v[k].as_u64()).unwrap_or(0);
                l.saturating_sub(f)
            };
            let (bundles, packets) = (d("bundles"), d("packets_in"));
            out.insert(
                key,
                json!({
                    "max_size": sizes,
                    "max_size_min": sorted[0],
                    "max_size_median": sorted[sorted.len() / 2],
                    "max_size_max": sorted[sorted.len() - 1],
                    "receiver_rx_ratio": theirs,
                    "bundles": bundles,
                    "packets_per_bundle": if bundles > 0 { packets as f64 / bundles as f64 } else { 0.0 },
                }),
            );
        }
    }
    out
}

/// Per directed link `"A->B"` with a bit error rate: the frames from A that
/// B's PHY received (and the rate was drawn for) and those lost to it, from
/// the ns-3 air's counters (`ber_from`, `crates/lab/ns3/air_ber.cc`);
/// cumulative over the air's life. Empty on the tc air or without errors.
pub fn ber_frames(mesh: &Mesh) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let Some(air) = mesh.ns3.as_ref() else {
        return out;
    };
    let Ok(c) = air.counters() else {
        return out;
    };
    for n in c["nodes"].as_array().into_iter().flatten() {
        let rx = n["name"].as_str().unwrap_or("?");
        for (tx, v) in n["ber_from"].as_object().into_iter().flatten() {
            let frames = v["frames"].as_u64().unwrap_or(0);
            let lost = v["lost"].as_u64().unwrap_or(0);
            out.insert(
                format!("{tx}->{rx}"),
                json!({
                    "ber": mesh.topo.wifi.ber(tx, rx),
                    "frames": frames,
                    "lost": lost,
                    "lost_pct": if frames > 0 { 100.0 * lost as f64 / frames as f64 } else { 0.0 },
                }),
            );
        }
    }
    out
}

/// `after - before` of two [`ber_frames`] readings (frames and losses
/// during the calls).
pub fn ber_delta(
    before: &BTreeMap<String, Value>,
    after: &BTreeMap<String, Value>,
) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (k, a) in after {
        let g = |v: Option<&Value>, f: &str| v.and_then(|v| v[f].as_u64()).unwrap_or(0);
        let frames = g(Some(a), "frames").saturating_sub(g(before.get(k), "frames"));
        let lost = g(Some(a), "lost").saturating_sub(g(before.get(k), "lost"));
        out.insert(
            k.clone(),
            json!({
                "ber": a["ber"],
                "frames": frames,
                "lost": lost,
                "lost_pct": if frames > 0 { 100.0 * lost as f64 / frames as f64 } else { 0.0 },
            }),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_directed_links_and_takes_the_receivers_ratio() {
        let topo = Topology::preset("seed001").unwrap();
        // C = 10.201.0.3, D = 10.201.0.4
        let c = |size: u64, b: u64| {
            BTreeMap::from([(
                "10.201.0.4".to_string(),
                json!({"max_size": size, "bundles": b, "packets_in": 5 * b, "rx_ratio": 0.9}),
            )])
        };
        let d = BTreeMap::from([(
            "10.201.0.3".to_string(),
            json!({"max_size": 1500, "bundles": 0, "packets_in": 0, "rx_ratio": 0.8}),
        )]);
        let samples = vec![
            ("C".to_string(), c(600, 10)),
            ("D".to_string(), d.clone()),
            ("C".to_string(), c(400, 30)),
            ("C".to_string(), c(500, 50)),
            ("D".to_string(), d),
        ];
        let s = summarise(&topo, &samples);
        let cd = &s["C->D"];
        assert_eq!(cd["max_size"], json!([600, 400, 500]));
        assert_eq!(
            (
                cd["max_size_min"].as_u64(),
                cd["max_size_median"].as_u64(),
                cd["max_size_max"].as_u64()
            ),
            (Some(400), Some(500), Some(600))
        );
        assert_eq!(
            cd["receiver_rx_ratio"],
            json!([0.8, 0.8]),
            "D's view of C's hellos"
        );
        assert_eq!(cd["bundles"], 40);
        assert_eq!(cd["packets_per_bundle"], 5.0);
        assert_eq!(s["D->C"]["max_size_max"], 1500);
        assert!(!s.contains_key("C->A"), "no samples of C's peer A");
    }

    #[test]
    fn discovery_section_is_hop_by_hop_ipv4_at_the_phy_rate() {
        let s = discovery_section(2.0);
        assert!(
            s.contains("[discovery]\nenabled = true\nipv6 = false\n"),
            "{s}"
        );
        assert!(s.contains("rate_mbps = 2\n"), "{s}");
    }
}
