//! TCP beside voice (issue 11 point 9, seed 004's infrastructure scenario):
//! N calls plus M bulk TCP flows (real kernel TCP, [`crate::tcp_bulk`])
//! through a mesh, measured per setup and repetition, so the TCP goodput
//! left beside the calls can be compared with aggregation off, with the
//! fixed hold (`hop-by-hop`) and with the medium-aware hold (`adaptive`).
//!
//! Owns: the flows' placement ([`TcpLoad::flow_specs`]: flow k is a download
//! from the far end of call pair k to its near end, e.g. `D -> A`, `D -> B`
//! on seed 001's testbed, so data and ACKs cross the relay), the daemon class
//! of their small packets ([`TcpLoad::daemon_class`]: seed 004 concatenates
//! TCP ACKs and small segments; SYN, FIN and RST are never held whatever the
//! class, which the engine enforces and `crates/core/tests/tcp_control.rs`
//! checks), the grid of points (`airpack lab tcp-voice`: call counts x
//! repetitions x setups, interleaved so that machine load drifts across all
//! setups alike; a repetition uses the same voice-activity seed in every
//! setup), the results file (`DIR/tcp-voice.json`, appended to by later
//! runs into the same directory, so a grid can be measured in several short
//! runs) and its summary table (`DIR/summary.md`).
//!
//! Must not touch: a point's measurement ([`crate::experiment::run_point_with`]),
//! the flows' own measurement ([`crate::tcp_bulk`]), voice-quality math.

use crate::experiment::{ExperimentConfig, Point, Setup};
use crate::tcp_bulk::FlowSpec;
use crate::topology::{Mesh, Topology};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The class the daemons give the flows' small TCP packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpClass {
    /// Joins a bundle only while the link is busy, never waits on an idle
    /// link (seed 004's treatment as the issue states it).
    Opportunistic,
    /// May wait up to the hold time like voice (seed 004's "concatenate"
    /// class, which its infrastructure experiment gives non-voice traffic).
    Bundle,
    /// Not steered: TCP crosses the daemons' nodes untouched.
    None,
}

impl TcpClass {
    /// `opportunistic`, `bundle` or `none`.
    pub fn parse(s: &str) -> Result<TcpClass> {
        Ok(match s {
            "opportunistic" => TcpClass::Opportunistic,
            "bundle" => TcpClass::Bundle,
            "none" => TcpClass::None,
            o => bail!("unknown TCP class {o:?} (opportunistic, bundle, none)"),
        })
    }
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            TcpClass::Opportunistic => "opportunistic",
            TcpClass::Bundle => "bundle",
            TcpClass::None => "none",
        }
    }
}

/// The TCP load of a point.
#[derive(Debug, Clone)]
pub struct TcpLoad {
    /// Bulk flows (0: the class only).
    pub flows: u32,
    /// The senders' congestion control (`TCP_CONGESTION`).
    pub cc: String,
    /// The daemons' class for TCP packets of at most `max_len` bytes.
    pub class: TcpClass,
    /// Largest IP packet (bytes) put in the class: ACKs and small segments;
    /// full-size segments are not steered (the engine would pass anything
    /// over half a bundle unchanged anyway).
    pub max_len: u16,
}

impl TcpLoad {
    /// The `[[class]]` appended to every daemon's config (after the voice
    /// class, which it cannot overlap: voice is UDP). Empty for
    /// [`TcpClass::None`].
    pub fn daemon_class(&self) -> String {
        if self.class == TcpClass::None {
            return String::new();
        }
        format!(
            "\n[[class]]\nclass = \"{}\"\nprotocol = \"tcp\"\nlen = \"0-{}\"\n",
            self.class.name(),
            self.max_len
        )
    }

    /// Flow k: from the second node of call pair `k mod pairs` to the first
    /// (seed 001: `D -> A`, `D -> B`, ...), port `gw::TCP_PORT + k`.
    pub fn flow_specs(&self, topo: &Topology, mesh: &Mesh) -> Result<Vec<FlowSpec>> {
        if topo.calls.is_empty() {
            bail!("the topology has no call pairs to place TCP flows on");
        }
        (0..self.flows)
            .map(|k| {
                let pair = &topo.calls[k as usize % topo.calls.len()];
                let src = mesh
                    .node(&pair[1])
                    .with_context(|| format!("node {}", pair[1]))?;
                let dst = mesh
                    .node(&pair[0])
                    .with_context(|| format!("node {}", pair[0]))?;
                Ok(FlowSpec {
                    src: src.name.clone(),
                    dst: dst.name.clone(),
                    src_ns: src.ns.name().to_string(),
                    dst_ns: dst.ns.name().to_string(),
                    dst_addr: dst.addr,
                    port: crate::gw::TCP_PORT + k as u16,
                    connect_to_src: None,
                })
            })
            .collect()
    }
}

/// `airpack lab tcp-voice` options (with the common options, `--tcp-flows`
/// and `--tcp-cc` among them).
#[derive(clap::Args, Debug, Clone)]
pub struct Opts {
    /// Call counts, comma separated (0: TCP alone).
    #[arg(long, default_value = "2,4,6")]
    pub calls: String,
    /// Setups, comma separated.
    #[arg(long, default_value = "off,hop-by-hop,adaptive")]
    pub setups: String,
    /// Repetitions of every (calls, setup) cell.
    #[arg(long, default_value_t = 2)]
    pub reps: u32,
    /// First repetition's index (a later run into the same directory
    /// continues the numbering, e.g. `--first-rep 2`).
    #[arg(long, default_value_t = 0)]
    pub first_rep: u32,
    /// The daemons' class for small TCP packets: opportunistic, bundle or none.
    #[arg(long, default_value = "opportunistic")]
    pub tcp_class: String,
    /// Largest TCP packet (IP bytes) in that class.
    #[arg(long, default_value_t = 750)]
    pub tcp_max_len: u16,
    /// Results directory (points are added to DIR/tcp-voice.json).
    #[arg(long)]
    pub out: PathBuf,
}

/// Parse a comma-separated list of numbers.
pub fn parse_list(s: &str) -> Result<Vec<u32>> {
    s.split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| {
            x.trim()
                .parse::<u32>()
                .with_context(|| format!("bad number {x:?}"))
        })
        .collect()
}

/// The results file in `dir`.
pub fn results_path(dir: &Path) -> PathBuf {
    dir.join("tcp-voice.json")
}

/// Run the grid and write `DIR/tcp-voice.json` and `DIR/summary.md`
/// after every point (partial results survive an interruption).
pub fn run(cfg: &ExperimentConfig, load: &TcpLoad, o: &Opts, command: &str) -> Result<()> {
    let calls = parse_list(&o.calls)?;
    let setups: Vec<Setup> = o
        .setups
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(Setup::parse)
        .collect::<Result<_>>()?;
    if calls.is_empty() || setups.is_empty() || o.reps == 0 {
        bail!("nothing to measure (--calls, --setups, --reps)");
    }
    if load.flows == 0 {
        bail!("tcp-voice needs --tcp-flows M (M > 0)");
    }
    std::fs::create_dir_all(&o.out)?;
    let path = results_path(&o.out);
    let mut doc: Value = match std::fs::read_to_string(&path) {
        Ok(t) => serde_json::from_str(&t).with_context(|| format!("parse {}", path.display()))?,
        Err(_) => json!({"points": []}),
    };
    let runs = doc
        .as_object_mut()
        .context("results file is not an object")?;
    let entry = json!({
        "command": command,
        "topology": cfg.topo.name, "air": format!("{:?}", cfg.topo.air).to_lowercase(),
        "phy": crate::experiment::phy_label(&cfg.medium.phy), "codec": cfg.codec, "vad": cfg.vad,
        "duration_s": cfg.duration_s, "hold_time_us": cfg.hold_time_us, "queue_limit": cfg.medium.queue_limit,
        "tcp_flows": load.flows, "tcp_cc": load.cc, "tcp_class": load.class.name(), "tcp_max_len": load.max_len,
        "started_unix_s": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
    });
    runs.entry("runs")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .context("runs")?
        .push(entry);
    for &n in &calls {
        for rep in o.first_rep..o.first_rep + o.reps {
            for &setup in &setups {
                if crate::netns::interrupted() {
                    bail!("interrupted");
                }
                let mut c = cfg.clone();
                c.seed = cfg.seed.wrapping_add(u64::from(rep) * 7919);
                c.work_dir = cfg.work_dir.join(format!("rep{rep}"));
                let mut r = crate::experiment::run_point_with(&c, setup, n, Some(load));
                for _ in 0..2 {
                    match crate::experiment::remeasure_reason(&r) {
                        Some(why) => {
                            eprintln!("[{:>15}] {n:>3} calls rep {rep}: {why} (machine busy?): measuring again", setup.name());
                            r = crate::experiment::run_point_with(&c, setup, n, Some(load));
                        }
                        None => break,
                    }
                }
                let p =
                    r.with_context(|| format!("{} calls under {} (rep {rep})", n, setup.name()))?;
                eprintln!("rep {rep} {}", crate::experiment::point_line(&p));
                let v = record(&p, rep, c.seed, load)?;
                doc["points"].as_array_mut().context("points")?.push(v);
                std::fs::write(&path, serde_json::to_vec_pretty(&doc)?)?;
                std::fs::write(o.out.join("summary.md"), summary_md(&doc))?;
            }
        }
    }
    print!("{}", summary_md(&doc));
    Ok(())
}

/// One point of the results file: the point's JSON plus its repetition,
/// seed and TCP class.
fn record(p: &Point, rep: u32, seed: u64, load: &TcpLoad) -> Result<Value> {
    let mut v = serde_json::to_value(p)?;
    let m = v.as_object_mut().context("point")?;
    m.insert("rep".into(), json!(rep));
    m.insert("seed".into(), json!(seed));
    m.insert("tcp_class".into(), json!(load.class.name()));
    Ok(v)
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// One cell of the summary: every repetition of (calls, setup, class).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Cell {
    /// Each repetition's total goodput (kbit/s).
    pub goodput: Vec<f64>,
    /// Mean goodput of each flow over the repetitions (kbit/s), by flow index.
    pub per_flow: Vec<f64>,
    /// Mean MOS over call directions, per repetition.
    pub mos: Vec<f64>,
    /// Lowest MOS of any direction over the repetitions.
    pub mos_min: f64,
    /// Mean loss (%), per repetition.
    pub loss: Vec<f64>,
    /// Worst loss of any direction (%).
    pub loss_max: f64,
    /// Calls supported / calls, summed over repetitions.
    pub supported: (u64, u64),
    /// Aggregation ratio, per repetition.
    pub agg: Vec<f64>,
    /// Mean one-way delay (ms), per repetition.
    pub delay: Vec<f64>,
    /// Mean smoothed RTT of the flows (ms), per repetition.
    pub rtt: Vec<f64>,
}

/// The cells of a results document, keyed (calls, setup name, TCP class).
pub fn cells(doc: &Value) -> BTreeMap<(u64, String, String), Cell> {
    let mut out: BTreeMap<(u64, String, String), Cell> = BTreeMap::new();
    let mut flows: BTreeMap<(u64, String, String), Vec<Vec<f64>>> = BTreeMap::new();
    for p in doc["points"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let f = |k: &str| p[k].as_f64().unwrap_or(f64::NAN);
        let calls = p["calls"].as_u64().unwrap_or(0);
        let key = (
            calls,
            p["setup"].as_str().unwrap_or("?").to_string(),
            p["tcp_class"].as_str().unwrap_or("?").to_string(),
        );
        let c = out.entry(key.clone()).or_insert_with(|| Cell {
            mos_min: f64::INFINITY,
            ..Default::default()
        });
        c.goodput
            .push(p["tcp"]["goodput_kbps"].as_f64().unwrap_or(0.0));
        c.rtt
            .push(p["tcp"]["rtt_mean_ms"].as_f64().unwrap_or(f64::NAN));
        flows.entry(key).or_default().push(
            p["tcp"]["per_flow"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|x| x["goodput_kbps"].as_f64().unwrap_or(0.0))
                        .collect()
                })
                .unwrap_or_default(),
        );
        c.agg.push(f("aggregation_ratio"));
        if calls > 0 {
            c.mos.push(f("mos"));
            c.mos_min = c.mos_min.min(f("mos_min"));
            c.loss.push(f("loss"));
            c.loss_max = c.loss_max.max(f("loss_max"));
            c.delay.push(f("delay_ms"));
        }
        c.supported.0 += p["supported_calls"].as_u64().unwrap_or(0);
        c.supported.1 += calls;
    }
    for (k, reps) in flows {
        let n = reps.iter().map(Vec::len).max().unwrap_or(0);
        let c = out.get_mut(&k).expect("same keys");
        c.per_flow = (0..n)
            .map(|i| {
                mean(
                    &reps
                        .iter()
                        .filter_map(|r| r.get(i).copied())
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
    }
    out
}

/// The summary table: per call count and setup, TCP goodput (mean of the
/// repetitions, each repetition, per flow), its change against `off` at the
/// same call count and class, and the calls' quality.
pub fn summary_md(doc: &Value) -> String {
    let cells = cells(doc);
    let mut s = String::from(
        "| calls | setup | TCP class | reps | TCP goodput kbit/s (mean) | each rep | per flow (mean) | vs off | mean RTT ms | calls supported | MOS mean / min | loss mean / max % | mean delay ms | agg ratio |\n| ---: | --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: | --- | --- | ---: | ---: |\n",
    );
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    for ((calls, setup, class), c) in &cells {
        let g = mean(&c.goodput);
        let off = cells
            .get(&(*calls, "off".to_string(), class.clone()))
            .map(|o| mean(&o.goodput));
        let vs = match off {
            Some(o) if setup != "off" && o > 0.0 => format!("{:+.0} %", (g / o - 1.0) * 100.0),
            _ => String::new(),
        };
        let q = if *calls > 0 {
            (
                format!("{:.2} / {:.2}", mean(&c.mos), c.mos_min),
                format!("{:.1} / {:.1}", mean(&c.loss), c.loss_max),
                format!("{:.1}", mean(&c.delay)),
            )
        } else {
            ("—".into(), "—".into(), "—".into())
        };
        s.push_str(&format!(
            "| {calls} | {setup} | {class} | {} | {g:.0} | {} | {} | {vs} | {:.0} | {}/{} | {} | {} | {} | {:.2} |\n",
            c.goodput.len(),
            fmt(&c.goodput),
            fmt(&c.per_flow),
            mean(&c.rtt),
            c.supported.0,
            c.supported.1,
            q.0,
            q.1,
            q.2,
            mean(&c.agg),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_section_is_valid_toml_after_peers() {
        let l = TcpLoad {
            flows: 2,
            cc: "cubic".into(),
            class: TcpClass::Opportunistic,
            max_len: 750,
        };
        // a daemon config ends with its [[peer]]s; the class is appended after them
        let conf = format!(
            "[daemon]\nmode = \"hop-by-hop\"\n\n[[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"16000-32000\"\n\n[[peer]]\naddress = \"10.201.0.3\"\n{}",
            l.daemon_class()
        );
        let v: toml::Value = toml::from_str(&conf).unwrap();
        let classes = v["class"].as_array().unwrap();
        assert_eq!(classes.len(), 2, "{conf}");
        assert_eq!(
            classes[0]["protocol"].as_str(),
            Some("udp"),
            "voice stays first"
        );
        assert_eq!(classes[1]["class"].as_str(), Some("opportunistic"));
        assert_eq!(classes[1]["protocol"].as_str(), Some("tcp"));
        assert_eq!(classes[1]["len"].as_str(), Some("0-750"));
        assert_eq!(v["peer"].as_array().unwrap().len(), 1);
        let b = TcpLoad {
            class: TcpClass::Bundle,
            max_len: 200,
            ..l.clone()
        };
        assert!(
            b.daemon_class().contains("class = \"bundle\"")
                && b.daemon_class().contains("\"0-200\"")
        );
        assert_eq!(
            TcpLoad {
                class: TcpClass::None,
                ..l
            }
            .daemon_class(),
            ""
        );
        for n in ["opportunistic", "bundle", "none"] {
            assert_eq!(TcpClass::parse(n).unwrap().name(), n);
        }
        assert!(TcpClass::parse("bypass").is_err());
        assert_eq!(parse_list("0, 2,4,").unwrap(), [0, 2, 4]);
        assert!(parse_list("2,x").is_err());
    }

    fn point(calls: u64, setup: &str, goodput: &[f64], mos: f64, supported: u64) -> Value {
        json!({"calls": calls, "setup": setup, "tcp_class": "opportunistic", "mos": mos, "mos_min": mos - 0.5,
               "loss": 1.0, "loss_max": 2.0, "delay_ms": 10.0, "aggregation_ratio": 1.5, "supported_calls": supported,
               "tcp": {"goodput_kbps": goodput.iter().sum::<f64>(), "rtt_mean_ms": 100.0,
                       "per_flow": goodput.iter().map(|g| json!({"goodput_kbps": g})).collect::<Vec<_>>()}})
    }

    #[test]
    fn cells_average_repetitions_and_compare_with_off() {
        let doc = json!({"points": [
            point(4, "off", &[300.0, 100.0], 3.0, 2),
            point(4, "off", &[200.0, 200.0], 3.2, 3),
            point(4, "hop-by-hop", &[500.0, 500.0], 4.0, 4),
            point(4, "hop-by-hop", &[300.0, 300.0], 4.2, 4),
            point(0, "off", &[900.0, 900.0], 0.0, 0),
        ]});
        let c = cells(&doc);
        let off = &c[&(4, "off".into(), "opportunistic".into())];
        assert_eq!(off.goodput, [400.0, 400.0]);
        assert_eq!(off.per_flow, [250.0, 150.0]);
        assert_eq!(off.supported, (5, 8));
        assert!((off.mos_min - 2.5).abs() < 1e-9);
        let hbh = &c[&(4, "hop-by-hop".into(), "opportunistic".into())];
        assert_eq!(mean(&hbh.goodput), 800.0);
        let zero = &c[&(0, "off".into(), "opportunistic".into())];
        assert!(zero.mos.is_empty(), "no calls, no voice quality");
        let md = summary_md(&doc);
        assert!(
            md.contains(
                "| 4 | hop-by-hop | opportunistic | 2 | 800 | 1000 / 600 | 400 / 400 | +100 % |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| 4 | off | opportunistic | 2 | 400 | 400 / 400 | 250 / 150 |  |"),
            "{md}"
        );
        assert!(
            md.contains("| 0 | off | opportunistic | 1 | 1800 |"),
            "{md}"
        );
    }
}
