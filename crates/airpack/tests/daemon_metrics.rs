//! `/metrics` of a real daemon (two namespaces, voice-like load between them)
//! read by a real Prometheus parser: `prometheus_client`'s text parser
//! (`text_string_to_metric_families`, the Python client library; Debian's
//! python3-prometheus-client, installed by scripts/setup.sh) must accept the
//! whole answer, give every family its type and help, and agree with the
//! daemon's own JSON; the Grafana dashboard (dist/grafana/airpack.json) is
//! valid JSON and queries only metrics the daemon exports; every family is
//! documented in docs/operator-guide.md.

mod common;
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Parses exposition text with prometheus_client; families by name (the
/// parser's name: counters without `_total`) as JSON, `None` when no Python
/// with prometheus_client is installed. Panics on a parse error.
fn parse(text: &str) -> Option<BTreeMap<String, Value>> {
    const SCRIPT: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(sys.stdin.read()):
    if f.name in out:
        raise SystemExit("family %s twice (samples not grouped)" % f.name)
    out[f.name] = {"type": f.type, "help": f.documentation,
                   "samples": [[s.name, s.labels, s.value] for s in f.samples]}
print(json.dumps(out))
"#;
    let py = ["/usr/bin/python3", "python3"].into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import prometheus_client"])
            .output()
            .is_ok_and(|o| o.status.success())
    })?;
    let dir = std::env::temp_dir().join(format!("airpack-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("metrics.txt");
    std::fs::write(&input, text).unwrap();
    let out = Command::new(py)
        .args(["-c", SCRIPT])
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

fn scrape(ns: &str, port: u16) -> String {
    let resp = metrics_response(ns, port);
    assert!(resp.starts_with("HTTP/1.0 200 OK"), "{resp}");
    assert!(
        resp.contains("Content-Type: text/plain; version=0.0.4"),
        "{resp}"
    );
    resp.split_once("\r\n\r\n").unwrap().1.to_owned()
}

/// The value of the sample `name` with exactly `labels`.
fn sample(fams: &BTreeMap<String, Value>, family: &str, name: &str, labels: Value) -> f64 {
    let f = fams
        .get(family)
        .unwrap_or_else(|| panic!("no family {family}"));
    f["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s[0] == name && s[1] == labels)
        .unwrap_or_else(|| panic!("no {name} {labels} in {f}"))[2]
        .as_f64()
        .unwrap()
}

/// Metric names (`airpack_*`) a PromQL expression refers to.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("airpack_") {
        let s = i + at;
        let mut e = s;
        while e < b.len() && (b[e].is_ascii_alphanumeric() || b[e] == b'_') {
            e += 1;
        }
        if s == 0 || !(b[s - 1].is_ascii_alphanumeric() || b[s - 1] == b'_') {
            out.push(expr[s..e].to_owned());
        }
        i = e;
    }
    out
}

fn dashboard_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("dist/grafana/airpack.json")).unwrap();
    let dash: Value = serde_json::from_str(&text).expect("dist/grafana/airpack.json is JSON");
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            exprs.push(t["expr"].as_str().expect("expr").to_owned());
        }
    }
    exprs
}

fn config(iface: &str, peer: &str, port: u16) -> String {
    format!(
        "[daemon]\ninterfaces = [\"{iface}\"]\nprometheus = \"127.0.0.1:{port}\"\n\
         [aggregation]\nhold_time_us = 5000\nlink_mode = \"fixed\"\n\
         [[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"16000-32000\"\n\
         [[peer]]\naddress = \"{peer}\"\n"
    )
}

#[test]
fn metrics_parse_with_prometheus_client() {
    if !can_run("metrics_parse_with_prometheus_client") {
        return;
    }
    let (net, a, b, ip_a, ip_b) = two("opsmetrics", 121);
    let port = 9481;
    let mut da = net.daemon(&a, &config("va", &ip_b.to_string(), port), &[]);
    let mut db = net.daemon(&b, &config("vb", &ip_a.to_string(), port), &[]);
    let load = Load {
        src: ip_a.into(),
        dst: ip_b.into(),
        src_port: 17000,
        dst_port: 20000,
        flows: 10,
        per_flow: 100,
        payload_len: 32,
        pps: 5_000,
    };
    let rx = receive_load(
        &b,
        load.clone(),
        load.total(),
        Duration::from_secs(3),
        Duration::from_secs(60),
    );
    assert_eq!(send_load(&a, load.clone()).join().unwrap(), load.total());
    rx.join().unwrap();

    let text = scrape(&a, port);
    let Some(fams) = parse(&text) else {
        println!("SKIP metrics_parse_with_prometheus_client: no python3 with prometheus_client (scripts/setup.sh installs python3-prometheus-client)");
        return;
    };
    let stats = da.stats();

    // Types and help of every family; counters named *_total.
    for (name, f) in &fams {
        assert!(name.starts_with("airpack_"), "{name}");
        let help = f["help"].as_str().unwrap();
        assert!(
            !help.is_empty() && help != "undocumented",
            "{name}: help {help:?}"
        );
        let ty = f["type"].as_str().unwrap();
        assert!(
            ["counter", "gauge", "histogram"].contains(&ty),
            "{name}: {ty}"
        );
        for s in f["samples"].as_array().unwrap() {
            let sname = s[0].as_str().unwrap();
            if ty == "counter" {
                assert_eq!(sname, format!("{name}_total"), "counter sample");
            }
        }
    }
    let ty = |n: &str| fams.get(n).map(|f| f["type"].as_str().unwrap().to_owned());
    assert_eq!(ty("airpack_packets_in").as_deref(), Some("counter"));
    assert_eq!(ty("airpack_dropped").as_deref(), Some("counter"));
    assert_eq!(ty("airpack_peer_packets_in").as_deref(), Some("counter"));
    assert_eq!(ty("airpack_aggregation_ratio").as_deref(), Some("gauge"));
    assert_eq!(ty("airpack_queued_packets").as_deref(), Some("gauge"));
    for h in [
        "airpack_hold_time_us",
        "airpack_bundle_packets",
        "airpack_daemon_timer_late_us",
        "airpack_peer_hold_time_us",
    ] {
        assert_eq!(ty(h).as_deref(), Some("histogram"), "{h}");
    }

    // Values agree with the daemon's JSON (the load is over: they are still).
    let t = &stats["total"];
    let u = |v: &Value| v.as_u64().unwrap() as f64;
    assert_eq!(
        sample(
            &fams,
            "airpack_packets_in",
            "airpack_packets_in_total",
            serde_json::json!({})
        ),
        load.total() as f64
    );
    assert_eq!(
        sample(
            &fams,
            "airpack_bundles",
            "airpack_bundles_total",
            serde_json::json!({})
        ),
        u(&t["bundles"])
    );
    let peer = serde_json::json!({"peer": ip_b.to_string()});
    assert_eq!(
        sample(
            &fams,
            "airpack_peer_packets_in",
            "airpack_peer_packets_in_total",
            peer.clone()
        ),
        load.total() as f64
    );
    assert_eq!(
        sample(
            &fams,
            "airpack_peer_configured",
            "airpack_peer_configured",
            peer
        ),
        1.0
    );
    assert_eq!(
        sample(
            &fams,
            "airpack_dropped",
            "airpack_dropped_total",
            serde_json::json!({"reason": "queue_bytes"})
        ),
        0.0
    );
    let ratio = sample(
        &fams,
        "airpack_aggregation_ratio",
        "airpack_aggregation_ratio",
        serde_json::json!({}),
    );
    assert!(
        (ratio - t["aggregation_ratio"].as_f64().unwrap()).abs() < 1e-9,
        "{ratio}"
    );
    assert!(ratio > 1.0, "bundles were sent: {ratio}");
    assert_eq!(
        sample(
            &fams,
            "airpack_accounting_balanced",
            "airpack_accounting_balanced",
            serde_json::json!({})
        ),
        1.0
    );

    // The hold-time histogram: cumulative buckets up to +Inf = _count, _sum, as in the JSON.
    let h = &fams["airpack_hold_time_us"]["samples"];
    let buckets: Vec<(String, f64)> = h
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s[0] == "airpack_hold_time_us_bucket")
        .map(|s| {
            (
                s[1]["le"].as_str().unwrap().to_owned(),
                s[2].as_f64().unwrap(),
            )
        })
        .collect();
    let json_buckets = t["hold_time_us"]["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), json_buckets.len());
    assert_eq!(buckets.last().unwrap().0, "+Inf");
    let mut cum = 0.0;
    for ((le, n), jb) in buckets.iter().zip(json_buckets) {
        cum += u(&jb["count"]);
        assert_eq!(*n, cum, "le={le}");
        if le != "+Inf" {
            assert_eq!(le.parse::<f64>().unwrap(), u(&jb["le"]));
        }
    }
    let count = sample(
        &fams,
        "airpack_hold_time_us",
        "airpack_hold_time_us_count",
        serde_json::json!({}),
    );
    assert_eq!(count, cum);
    assert!(
        count >= load.total() as f64,
        "every packet that left was timed: {count}"
    );
    assert_eq!(
        sample(
            &fams,
            "airpack_hold_time_us",
            "airpack_hold_time_us_sum",
            serde_json::json!({})
        ),
        u(&t["hold_time_us"]["sum"])
    );

    // The dashboard queries only what the daemon exports.
    let names: BTreeSet<String> = fams
        .values()
        .flat_map(|f| {
            f["samples"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s[0].as_str().unwrap().to_owned())
        })
        .collect();
    let exprs = dashboard_exprs();
    assert!(exprs.len() >= 10, "{exprs:?}");
    let mut queried = 0;
    for e in &exprs {
        for m in metric_names(e) {
            assert!(
                names.contains(&m),
                "the dashboard queries {m}, which /metrics does not have ({e})"
            );
            queried += 1;
        }
    }
    assert!(queried >= 20);

    // The receiving side parses too (bundles received, per-peer).
    let text_b = scrape(&b, port);
    let fb = parse(&text_b).unwrap();
    assert_eq!(
        sample(
            &fb,
            "airpack_bundles_received",
            "airpack_bundles_received_total",
            serde_json::json!({})
        ),
        u(&db.stats()["total"]["bundles_received"])
    );
    println!(
        "metrics: {} families, {} sample names, {queried} dashboard references checked",
        fams.len(),
        names.len()
    );
    assert_eq!(da.stop(), 0);
    assert_eq!(db.stop(), 0);
}

#[test]
fn dashboard_is_json_and_every_family_is_documented() {
    // No root: the dashboard's metric names are families the daemon documents,
    // and the operator guide lists every family.
    let guide = std::fs::read_to_string(repo().join("docs/operator-guide.md")).unwrap();
    let families = airpack::daemon::metrics::families();
    for (name, ..) in &families {
        assert!(
            guide.contains(name.as_str()),
            "docs/operator-guide.md does not list {name}"
        );
    }
    let known: BTreeSet<String> = families
        .iter()
        .flat_map(|(n, kind, ..)| {
            if *kind == "histogram" {
                vec![
                    format!("{n}_bucket"),
                    format!("{n}_sum"),
                    format!("{n}_count"),
                ]
            } else {
                vec![n.clone()]
            }
        })
        .collect();
    for e in dashboard_exprs() {
        for m in metric_names(&e) {
            assert!(
                known.contains(&m),
                "dashboard: {m} is not a documented metric ({e})"
            );
        }
    }
    assert_eq!(
        metric_names("rate(airpack_a_total[1m]) / xairpack_b + airpack_c_bucket"),
        ["airpack_a_total", "airpack_c_bucket"]
    );
}

/// Size and render time of `/metrics` with 1000 peers (numbers for
/// docs/operator-guide.md; prints, asserts only the layout). Run with
/// `cargo test --release -p airpack --test daemon_metrics -- --ignored --nocapture`.
#[test]
#[ignore = "measurement; run with --ignored --nocapture"]
fn render_1000_peers() {
    use airpack::daemon::stats::{daemon_json, stats_json, DaemonCounters};
    let mut total = stats_json(&airpack_core::Stats::default());
    total.insert("daemon".into(), daemon_json(&DaemonCounters::default()));
    let head = serde_json::json!({"version": "0.1.0", "mode": "hop-by-hop", "total": total});
    let peers: Vec<Value> = (0..1000)
        .map(|i| {
            let mut m = stats_json(&airpack_core::Stats::default());
            m.insert(
                "peer".into(),
                format!("10.96.{}.{}", i / 250, i % 250).into(),
            );
            m.insert("configured".into(), true.into());
            Value::Object(m)
        })
        .collect();
    let t = std::time::Instant::now();
    let text = airpack::daemon::metrics::render(&head, peers);
    let dt = t.elapsed();
    let families = text.lines().filter(|l| l.starts_with("# TYPE")).count();
    println!(
        "/metrics with 1000 peers: {} bytes, {} lines, {families} families, rendered in {dt:?}",
        text.len(),
        text.lines().count()
    );
    let last = "airpack_peer_hold_time_us_bucket{peer=\"10.96.3.249\",le=\"+Inf\"} 0\n";
    assert!(text.contains(last), "the last peer's histogram");
}
