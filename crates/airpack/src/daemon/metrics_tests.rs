//! Tests of [`super`]: the layout of a whole answer built from the real
//! JSON builders, checked line by line.

use super::*;
use crate::daemon::accounting::Accounting;
use crate::daemon::stats::{counters_json, daemon_json, stats_json, DaemonCounters};
use airpack_core::engine::{DropReason, Stats};
use serde_json::json;

/// A document shaped like the daemon's, from the real JSON builders.
fn doc() -> (Value, Vec<Value>) {
    let mut s = Stats::default();
    s.counters.packets_in = 100;
    s.counters.bundles = 9;
    s.counters.aggregated_packets = 90;
    s.counters.unaggregated_packets = 10;
    s.counters.dropped[DropReason::QueueBytes.index()] = 3;
    for v in [0, 40, 40, 900, 1_000_000] {
        s.hold_time_us.record(v);
    }
    for v in [2, 10, 10] {
        s.bundle_packets.record(v);
    }
    let mut d = DaemonCounters::default();
    d.timer_late_us.record(7);
    d.send_error(&std::io::Error::from_raw_os_error(libc::ENOBUFS), 4);
    let mut total = stats_json(&s);
    total.insert("daemon".into(), daemon_json(&d));
    let head = json!({
        "version": "0.1.0", "mode": "hop-by-hop", "link_mode": "always",
        "link_busy": false, "uptime_s": 2.5,
        "queued": {"packets": 1, "bytes": 60},
        "links": [{"interface": "wlan0", "up": true}, {"interface": "x", "up": null}],
        "tun": {"name": "ap0", "queue_drops": 0, "read_by_daemon": 5,
                "written_by_daemon": 6, "rx_dropped": 0},
        "total": total,
        "accounting": Accounting::new(&s.counters, 1, &d, Some(2), 0).json(),
        "note": null,
    });
    let mut peer = stats_json(&s);
    peer.insert("peer".into(), "10.0.0.2".into());
    peer.insert("configured".into(), true.into());
    let mut odd = counters_json(&Default::default());
    odd.insert("peer".into(), "fe80::1%we\"ird".into());
    odd.insert("configured".into(), false.into());
    (head, vec![Value::Object(peer), Value::Object(odd)])
}

/// Families as (name, type, help, sample lines), checking the layout:
/// HELP then TYPE then only that family's samples.
fn families(text: &str) -> Vec<(String, String, String, Vec<String>)> {
    let mut out: Vec<(String, String, String, Vec<String>)> = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        let help = l
            .strip_prefix("# HELP ")
            .unwrap_or_else(|| panic!("expected HELP: {l}"));
        let (name, help) = help.split_once(' ').unwrap();
        let ty = lines.next().unwrap();
        let (tname, ty) = ty.strip_prefix("# TYPE ").unwrap().split_once(' ').unwrap();
        assert_eq!(name, tname);
        let mut samples = Vec::new();
        while let Some(s) = lines.next_if(|s| !s.starts_with('#')) {
            let metric = s.split(['{', ' ']).next().unwrap();
            let suffix = metric
                .strip_prefix(name)
                .unwrap_or_else(|| panic!("{s} in {name}"));
            let ok: &[&str] = if ty == "histogram" {
                &["_bucket", "_sum", "_count"]
            } else {
                &[""]
            };
            assert!(ok.contains(&suffix), "{s} in {ty} {name}");
            let v = s.rsplit_once(' ').unwrap().1;
            assert!(v.parse::<f64>().is_ok() || v == "+Inf", "{s}");
            samples.push(s.to_owned());
        }
        assert!(!samples.is_empty(), "{name} has no samples");
        assert!(!out.iter().any(|f| f.0 == name), "{name} twice");
        out.push((name.into(), ty.into(), help.into(), samples));
    }
    out
}

#[test]
fn families_are_grouped_typed_and_documented() {
    let (head, peers) = doc();
    let text = render(&head, peers);
    let fams = families(&text);
    for (name, ty, help, _) in &fams {
        assert_ne!(help, UNDOCUMENTED, "{name} is not in META");
        assert_eq!(
            ty == "counter",
            name.ends_with("_total"),
            "{name} is a {ty}"
        );
    }
    let get = |n: &str| {
        fams.iter()
            .find(|f| f.0 == n)
            .unwrap_or_else(|| panic!("{n}:\n{text}"))
    };
    let has = |n: &str, line: &str| assert!(get(n).3.iter().any(|s| s == line), "{line}:\n{text}");
    has("airpack_packets_in_total", "airpack_packets_in_total 100");
    has(
        "airpack_dropped_total",
        "airpack_dropped_total{reason=\"queue_bytes\"} 3",
    );
    has("airpack_dropped_all_total", "airpack_dropped_all_total 3");
    has(
        "airpack_daemon_send_errors_total",
        "airpack_daemon_send_errors_total{errno=\"enobufs\"} 1",
    );
    has(
        "airpack_daemon_send_failed_packets_total",
        "airpack_daemon_send_failed_packets_total{errno=\"enobufs\"} 4",
    );
    has(
        "airpack_aggregation_ratio",
        &format!("airpack_aggregation_ratio {}", 100.0 / 19.0),
    );
    has("airpack_queued_packets", "airpack_queued_packets 1");
    has("airpack_link_up", "airpack_link_up{interface=\"wlan0\"} 1");
    assert_eq!(
        get("airpack_link_up").3.len(),
        1,
        "unknown state is left out"
    );
    has(
        "airpack_info",
        "airpack_info{version=\"0.1.0\",mode=\"hop-by-hop\",link_mode=\"always\"} 1",
    );
    has(
        "airpack_accounting_send_queued",
        "airpack_accounting_send_queued 1",
    );
    has(
        "airpack_accounting_before_daemon_tun_queue_drops_total",
        "airpack_accounting_before_daemon_tun_queue_drops_total 2",
    );
    has("airpack_uptime_seconds", "airpack_uptime_seconds 2.5");
    // Peers are labels of one family each, not families per peer.
    has(
        "airpack_peer_packets_in_total",
        "airpack_peer_packets_in_total{peer=\"10.0.0.2\"} 100",
    );
    has(
        "airpack_peer_packets_in_total",
        "airpack_peer_packets_in_total{peer=\"fe80::1%we\\\"ird\"} 0",
    );
    has(
        "airpack_peer_configured",
        "airpack_peer_configured{peer=\"10.0.0.2\"} 1",
    );
    has(
        "airpack_peer_dropped_total",
        "airpack_peer_dropped_total{peer=\"10.0.0.2\",reason=\"queue_bytes\"} 3",
    );
    assert!(get("airpack_peer_configured").2.starts_with("Per peer: "));
    // Histograms: cumulative buckets, +Inf = _count, _sum.
    let h = &get("airpack_hold_time_us").3;
    let bounds = Stats::default().hold_time_us.bounds.len();
    assert_eq!(h.len(), bounds + 1 + 2, "{h:?}");
    let counts: Vec<u64> = h
        .iter()
        .filter(|s| s.contains("_bucket"))
        .map(|s| s.rsplit_once(' ').unwrap().1.parse().unwrap())
        .collect();
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{h:?}");
    has(
        "airpack_hold_time_us",
        "airpack_hold_time_us_bucket{le=\"0\"} 1",
    );
    has(
        "airpack_hold_time_us",
        "airpack_hold_time_us_bucket{le=\"50\"} 3",
    );
    has(
        "airpack_hold_time_us",
        "airpack_hold_time_us_bucket{le=\"1000\"} 4",
    );
    has(
        "airpack_hold_time_us",
        "airpack_hold_time_us_bucket{le=\"100000\"} 4",
    );
    has(
        "airpack_hold_time_us",
        "airpack_hold_time_us_bucket{le=\"+Inf\"} 5",
    );
    has("airpack_hold_time_us", "airpack_hold_time_us_sum 1000980");
    has("airpack_hold_time_us", "airpack_hold_time_us_count 5");
    has(
        "airpack_peer_bundle_packets",
        "airpack_peer_bundle_packets_bucket{peer=\"10.0.0.2\",le=\"10\"} 3",
    );
    has(
        "airpack_daemon_timer_late_us",
        "airpack_daemon_timer_late_us_bucket{le=\"10\"} 1",
    );
    // Strings (tun name, note) are not samples.
    assert!(!text.contains("ap0"), "{text}");
}

#[test]
fn unknown_values_are_marked_undocumented() {
    let text = render(&json!({"queued": {"new_thing": 3}}), []);
    assert!(
        text.contains(&format!("# HELP airpack_queued_new_thing {UNDOCUMENTED}\n")),
        "{text}"
    );
    assert!(text.contains("\nairpack_queued_new_thing 3\n"), "{text}");
    assert_eq!(
        number(&json!(f64::NAN)),
        None,
        "JSON has no NaN; null is skipped"
    );
    assert_eq!(number(&json!(1.5)), Some("1.5".into()));
    assert_eq!(number(&json!(u64::MAX)), Some(u64::MAX.to_string()));
}

#[test]
fn every_meta_path_is_unique() {
    for (i, a) in META.iter().enumerate() {
        assert!(
            !META[i + 1..]
                .iter()
                .any(|b| b.path == a.path || b.family() == a.family()),
            "{}",
            a.path
        );
        assert!(a.label.is_empty() || a.kind == Kind::Counter);
    }
}
