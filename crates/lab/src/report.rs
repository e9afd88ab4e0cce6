//! Reports of capacity experiments.
//!
//! Owns: the results directory: `summary.md` (capacity table and the
//! one-call delay comparison), `results.json` (every measured point and per
//! setup capacity) and PNG plots of MOS, loss, delay and aggregation ratio
//! against the number of calls (plotters, bitmap backend).
//!
//! Fonts: plotters' `ab_glyph` feature draws text with a TrueType font
//! registered at run time; we load DejaVu Sans from Debian's
//! `fonts-dejavu-core` (`/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf`,
//! or the file named by `AIRPACK_FONT`). Without a font the plots are drawn
//! without any text (axes, grid and lines only) and summary.md says so.
//!
//! Must not touch: measurements (it only renders [`crate::experiment`] data).

use crate::experiment::{Point, SetupResult};
use anyhow::{Context, Result};
use plotters::prelude::*;
use serde::Serialize;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What was measured, for the report header.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    /// The command line that produced the report.
    pub command: String,
    /// Topology name.
    pub topology: String,
    /// PHY preset label.
    pub phy: String,
    /// Codec.
    pub codec: String,
    /// Voice activity on/off.
    pub vad: bool,
    /// Seconds per point.
    pub duration_s: f64,
    /// Support criterion.
    pub criterion: String,
    /// Per-node MAC queue limit (packets).
    pub queue_limit: u32,
    /// Random frame loss (%).
    pub loss_pct: f64,
    /// Aggregation hold time (µs).
    pub hold_time_us: u32,
    /// Call search bound.
    pub max_calls: u32,
}

static FONT: OnceLock<bool> = OnceLock::new();

/// Register DejaVu Sans with plotters once; false if no font is available.
pub fn fonts_available() -> bool {
    *FONT.get_or_init(|| {
        let path = std::env::var("AIRPACK_FONT")
            .unwrap_or_else(|_| "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf".to_string());
        match std::fs::read(&path) {
            Ok(bytes) => {
                let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                plotters::style::register_font("sans-serif", FontStyle::Normal, leaked).is_ok()
            }
            Err(_) => false,
        }
    })
}

/// The capacity table in markdown.
pub fn capacity_table(setups: &[SetupResult]) -> String {
    let off = setups
        .iter()
        .find(|s| s.setup == crate::experiment::Setup::Off)
        .map(|s| s.capacity);
    let mut t = String::from("| setup | capacity (calls, all supported) | vs off | points measured | note |\n| --- | --- | --- | --- | --- |\n");
    for s in setups {
        let cap = format!(
            "{}{}",
            if s.capacity_at_least { ">= " } else { "" },
            s.capacity
        );
        let ratio = match off {
            Some(o) if o > 0 => format!("{:.2}x", s.capacity as f64 / o as f64),
            _ => "-".into(),
        };
        let note = s
            .error
            .clone()
            .map(|e| format!("stopped: {}", first_line(&e)))
            .unwrap_or_default();
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            s.setup.name(),
            cap,
            ratio,
            s.points.len(),
            note
        ));
    }
    t
}

fn first_line(s: &str) -> String {
    let l = s.lines().next().unwrap_or("");
    l.chars().take(160).collect()
}

/// The one-call delay comparison (mean and median over call directions).
pub fn one_call_delays(setups: &[SetupResult]) -> String {
    fn one(s: &SetupResult) -> Vec<&Point> {
        s.points.iter().filter(|p| p.calls == 1).collect()
    }
    let off: Vec<&Point> = setups
        .iter()
        .filter(|s| s.setup == crate::experiment::Setup::Off)
        .flat_map(one)
        .collect();
    let avg = |v: &[&Point], f: fn(&Point) -> f64| {
        v.iter().map(|p| f(p)).sum::<f64>() / v.len().max(1) as f64
    };
    let off_mean = (!off.is_empty()).then(|| avg(&off, |p| p.delay_ms));
    let off_median = (!off.is_empty()).then(|| avg(&off, |p| p.delay_median_ms));
    let mut t = String::from(
        "| setup | median one-way delay at 1 call (ms) | added vs off (ms) | mean (ms) | added vs off (ms) |\n| --- | --- | --- | --- | --- |\n",
    );
    for s in setups {
        let pts = one(s);
        if pts.is_empty() {
            continue;
        }
        let (med, mean) = (avg(&pts, |p| p.delay_median_ms), avg(&pts, |p| p.delay_ms));
        let add = |o: Option<f64>, d: f64| {
            o.map(|o| format!("{:+.2}", d - o))
                .unwrap_or_else(|| "-".into())
        };
        t.push_str(&format!(
            "| {} | {:.2} | {} | {:.2} | {} |\n",
            s.setup.name(),
            med,
            add(off_median, med),
            mean,
            add(off_mean, mean)
        ));
    }
    t
}

/// Every point as a markdown table.
pub fn points_table(setups: &[SetupResult]) -> String {
    let mut t = String::from("| setup | calls | supported | MOS mean / min | loss % mean / max | late % | delay ms mean / p95 | jitter ms mean / max | aggregation ratio | frames on air |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for s in setups {
        for p in &s.points {
            t.push_str(&format!(
                "| {} | {} | {} ({}/{}) | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} | {:.1} / {:.1} | {:.1} / {:.1} | {:.2} | {} |\n",
                s.setup.name(),
                p.calls,
                if p.supported { "yes" } else { "no" },
                p.supported_calls,
                p.calls,
                p.mos,
                p.mos_min,
                p.loss,
                p.loss_max,
                p.late,
                p.delay_ms,
                p.delay_p95_ms,
                p.jitter_mean_ms,
                p.jitter_max_ms,
                p.aggregation_ratio,
                p.frames_on_air
            ));
        }
    }
    t
}

/// The points with TCP flows (gateway presets, [`crate::tcp_bulk`]): the
/// calls' MOS beside each flow's goodput and the total; empty without TCP.
pub fn tcp_table(setups: &[SetupResult]) -> String {
    let mut t = String::new();
    for s in setups {
        for p in &s.points {
            let Some(tcp) = &p.tcp else { continue };
            if t.is_empty() {
                t.push_str("| setup | calls | supported | MOS mean / min | TCP flows (cc) | goodput kbit/s per flow | goodput kbit/s total | throughput kbit/s total | mean RTT ms |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
            }
            let per: Vec<String> = tcp
                .per_flow
                .iter()
                .map(|f| format!("{:.0}", f.goodput_kbps))
                .collect();
            t.push_str(&format!(
                "| {} | {} | {}/{} | {:.2} / {:.2} | {} ({}) | {} | {:.0} | {:.0} | {:.0} |\n",
                s.setup.name(),
                p.calls,
                p.supported_calls,
                p.calls,
                p.mos,
                p.mos_min,
                tcp.flows,
                tcp.cc,
                per.join(" / "),
                tcp.goodput_kbps,
                tcp.throughput_kbps,
                tcp.rtt_mean_ms
            ));
        }
    }
    t
}

/// Write summary.md, results.json and the plots into `dir`. Returns the
/// paths written.
pub fn write(dir: &Path, info: &RunInfo, setups: &[SetupResult]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let mut written = Vec::new();
    let capacity: serde_json::Map<String, serde_json::Value> = setups
        .iter()
        .map(|s| (s.setup.name().to_string(), json!(s.capacity)))
        .collect();
    let points: Vec<&Point> = setups.iter().flat_map(|s| s.points.iter()).collect();
    let results = json!({
        "run": info,
        "capacity": capacity,
        "setups": setups,
        "points": points,
    });
    let rj = dir.join("results.json");
    std::fs::write(&rj, serde_json::to_vec_pretty(&results)?)?;
    written.push(rj);

    let mut plots = Vec::new();
    let fonts = fonts_available();
    type Metric = (&'static str, &'static str, fn(&Point) -> f64);
    let metrics: [Metric; 4] = [
        ("mos", "MOS (mean over call directions)", |p| p.mos),
        ("loss", "loss % (mean over call directions)", |p| p.loss),
        ("delay", "one-way delay ms (mean)", |p| p.delay_ms),
        ("aggregation", "aggregation ratio", |p| p.aggregation_ratio),
    ];
    for (file, label, f) in metrics {
        let path = dir.join(format!("{file}.png"));
        let series: Vec<(&str, Vec<(u32, f64)>)> = setups
            .iter()
            .map(|s| {
                (
                    s.setup.name(),
                    s.points.iter().map(|p| (p.calls, f(p))).collect(),
                )
            })
            .collect();
        plot(&path, label, &series, fonts).with_context(|| format!("plot {}", path.display()))?;
        plots.push(path.clone());
        written.push(path);
    }

    let mut md = String::new();
    md.push_str(&format!(
        "# airpack lab: {} ({}), {}{}\n\n",
        info.topology,
        info.phy,
        info.codec,
        if info.vad { " + VAD" } else { " CBR" }
    ));
    md.push_str(&format!("Command: `{}`\n\n", info.command));
    md.push_str(&format!(
        "{} s per point, criterion `{}`, MAC queue {} packets, frame loss {} %, hold time {} µs, search bound {} calls.\n\n",
        info.duration_s, info.criterion, info.queue_limit, info.loss_pct, info.hold_time_us, info.max_calls
    ));
    md.push_str("## Capacity\n\n");
    md.push_str(&capacity_table(setups));
    md.push_str("\n## Added one-way delay at one call\n\n");
    md.push_str(&one_call_delays(setups));
    md.push_str("\n## Every point\n\n");
    md.push_str(&points_table(setups));
    let tcp = tcp_table(setups);
    if !tcp.is_empty() {
        md.push_str("\n## TCP flows\n\n");
        md.push_str(&tcp);
    }
    md.push_str("\n## Plots\n\n");
    for p in &plots {
        let n = p.file_name().unwrap_or_default().to_string_lossy();
        md.push_str(&format!("![{n}]({n})\n"));
    }
    if !fonts {
        md.push_str("\n(No TrueType font found: plots are drawn without text. Install fonts-dejavu-core or set AIRPACK_FONT.)\n");
    }
    let sm = dir.join("summary.md");
    std::fs::write(&sm, md)?;
    written.insert(0, sm);
    Ok(written)
}

const COLORS: [RGBColor; 6] = [
    RGBColor(200, 40, 40),
    RGBColor(30, 100, 200),
    RGBColor(30, 150, 60),
    RGBColor(190, 120, 0),
    RGBColor(120, 60, 170),
    RGBColor(90, 90, 90),
];

/// One PNG of a metric (`label`) against the number of calls: a line per
/// named series of (calls, value) points (repeated call counts drawn as
/// their mean on the line, every point as a dot).
pub fn plot(
    path: &Path,
    label: &str,
    series: &[(&str, Vec<(u32, f64)>)],
    fonts: bool,
) -> Result<()> {
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let xs: Vec<u32> = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|p| p.0))
        .collect();
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|p| p.1))
        .filter(|y| y.is_finite())
        .collect();
    let xmax = xs.iter().copied().max().unwrap_or(1).max(1) as f64 + 1.0;
    let ymax = ys.iter().copied().fold(0.0f64, f64::max);
    let ymax = if ymax <= 0.0 { 1.0 } else { ymax * 1.1 };
    let mut b = ChartBuilder::on(&root);
    b.margin(15).x_label_area_size(45).y_label_area_size(60);
    if fonts {
        b.caption(format!("{label} vs calls"), ("sans-serif", 22));
    }
    let mut chart = b
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut mesh = chart.configure_mesh();
    if fonts {
        mesh.x_desc("simultaneous calls")
            .y_desc(label)
            .label_style(("sans-serif", 14));
    } else {
        mesh.disable_x_mesh().x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|e| anyhow::anyhow!("{e}"))?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut pts: Vec<(f64, f64)> = points
            .iter()
            .map(|&(x, y)| (f64::from(x), y))
            .filter(|(_, y)| y.is_finite())
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        // repeated call counts (confirming runs): plot their mean on the line
        let mut line: Vec<(f64, f64)> = Vec::new();
        for (x, y) in &pts {
            match line.last_mut() {
                Some((lx, ly)) if *lx == *x => *ly = (*ly + *y) / 2.0,
                _ => line.push((*x, *y)),
            }
        }
        let drawn = chart
            .draw_series(LineSeries::new(line, color.stroke_width(2)))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if fonts {
            drawn.label(*name).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
        chart
            .draw_series(
                pts.iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    if fonts {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::Setup;
    use std::collections::BTreeMap;

    fn pt(setup: Setup, calls: u32, ok: bool, mos: f64) -> Point {
        Point {
            setup,
            calls,
            supported: ok,
            supported_calls: if ok { calls } else { 0 },
            mos,
            mos_min: mos,
            loss: 4.5 - mos,
            loss_max: 4.5 - mos,
            late: 0.0,
            delay_ms: calls as f64,
            delay_median_ms: calls as f64,
            delay_p95_ms: 2.0 * calls as f64,
            jitter_ms: 1.0,
            jitter_mean_ms: 1.5,
            jitter_max_ms: 4.0,
            aggregation_ratio: if setup == Setup::Off { 1.0 } else { 3.0 },
            frames_on_air: 100 * calls as u64,
            mac_queue_drops: 0,
            frames_per_node: BTreeMap::new(),
            drops_per_node: BTreeMap::new(),
            call_results: serde_json::Value::Null,
            daemon_totals: BTreeMap::new(),
            wall_s: 1.0,
            max_send_lag_ms: 0.0,
            signalling: None,
            downlink: BTreeMap::new(),
            downlink_drops: 0,
            air: None,
            link_sizes: BTreeMap::new(),
            ber_frames: BTreeMap::new(),
            tcp: None,
            gateway: None,
            mid_run: None,
        }
    }

    #[test]
    fn writes_summary_json_and_plots() {
        let setups = vec![
            SetupResult {
                setup: Setup::Off,
                capacity: 4,
                capacity_at_least: false,
                error: None,
                points: vec![
                    pt(Setup::Off, 1, true, 4.1),
                    pt(Setup::Off, 4, true, 3.9),
                    pt(Setup::Off, 8, false, 2.0),
                ],
            },
            SetupResult {
                setup: Setup::HopByHop,
                capacity: 10,
                capacity_at_least: false,
                error: None,
                points: vec![
                    pt(Setup::HopByHop, 1, true, 4.0),
                    pt(Setup::HopByHop, 10, true, 3.7),
                    pt(Setup::HopByHop, 16, false, 1.5),
                ],
            },
        ];
        let info = RunInfo {
            command: "airpack lab run".into(),
            topology: "seed001".into(),
            phy: "b2".into(),
            codec: "g729".into(),
            vad: true,
            duration_s: 8.0,
            criterion: "mos".into(),
            queue_limit: 50,
            loss_pct: 0.0,
            hold_time_us: 5000,
            max_calls: 64,
        };
        let dir = std::env::temp_dir().join(format!("airpack-report-test-{}", std::process::id()));
        let files = write(&dir, &info, &setups).unwrap();
        let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
        assert!(md.contains("| off | 4 | 1.00x |"), "{md}");
        assert!(md.contains("| hop-by-hop | 10 | 2.50x |"), "{md}");
        assert!(
            md.contains("| hop-by-hop | 1.00 | +0.00 | 1.00 | +0.00 |"),
            "{md}"
        );
        let j: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
        assert_eq!(j["capacity"]["hop-by-hop"], 10);
        assert_eq!(j["points"].as_array().unwrap().len(), 6);
        for k in [
            "setup",
            "calls",
            "supported",
            "mos",
            "loss",
            "delay_ms",
            "jitter_ms",
            "aggregation_ratio",
            "frames_on_air",
        ] {
            assert!(j["points"][0].get(k).is_some(), "{k}");
        }
        for f in ["mos.png", "loss.png", "delay.png", "aggregation.png"] {
            let b = std::fs::read(dir.join(f)).unwrap();
            assert_eq!(&b[1..4], b"PNG");
            assert!(files.contains(&dir.join(f)));
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn tcp_table_lists_points_with_flows_only() {
        let mut with = pt(Setup::Pacer, 7, true, 3.9);
        let f = |g: f64| crate::tcp_bulk::FlowResult {
            goodput_kbps: g,
            throughput_kbps: g,
            rtt_mean_ms: 80.0,
            connected: true,
            ..Default::default()
        };
        with.tcp = Some(crate::tcp_bulk::TcpSummary::of(
            "reno",
            vec![f(100.0), f(250.0)],
        ));
        let none = SetupResult {
            setup: Setup::Off,
            capacity: 1,
            capacity_at_least: false,
            error: None,
            points: vec![pt(Setup::Off, 1, true, 4.0)],
        };
        assert_eq!(tcp_table(std::slice::from_ref(&none)), "");
        let s = SetupResult {
            setup: Setup::Pacer,
            capacity: 7,
            capacity_at_least: false,
            error: None,
            points: vec![with, pt(Setup::Pacer, 8, false, 3.0)],
        };
        let t = tcp_table(&[none, s]);
        assert_eq!(t.lines().count(), 3, "header, rule, one point: {t}");
        assert!(
            t.contains("| pacer | 7 | 7/7 | 3.90 / 3.90 | 2 (reno) | 100 / 250 | 350 | 350 | 80 |"),
            "{t}"
        );
    }
}
