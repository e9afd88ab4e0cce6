//! cell-sim's tests of the stations' uplink aggregation (`--uplink-agg`,
//! `--uplink-agg-busy`), the calls' arrivals (`--call-arrival-ms`) and the
//! run's plots; the helpers are the parent test module's.

use super::*;

/// `--uplink-agg`'s knobs: bundles of the preset's K, held one interval.
fn agg() -> Knobs {
    Knobs {
        uplink_agg: true,
        ..Knobs::default()
    }
}

/// The uplink (a -> b) value `k` of every call of the point.
fn uplink(p: &Point, k: &str) -> Vec<f64> {
    let c = p.call_results.as_array().unwrap();
    c.iter().map(|c| c["a_to_b"][k].as_f64().unwrap()).collect()
}

/// The uplink packets every call of the point sent.
fn uplink_sent(p: &Point) -> u64 {
    uplink(p, "sent").into_iter().map(|x| x as u64).sum()
}

fn mean(v: Vec<f64>) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// `--call-arrival-ms`: each call joins at its own random time within the
/// window, its two directions within one interval after that; the run
/// lasts until the last call's end; without a window the flows are the
/// cold start's, draw for draw.
#[test]
fn calls_arrive_over_the_window() {
    let c = config("cell:b11:11", "g729", &args(), &work("arrive")).unwrap();
    let (c, s) = spec_of(&c, 40);
    let cold = cell_flows(&c, &s, WARMUP_S, 0.0).unwrap();
    let again = cell_flows(&c, &s, WARMUP_S, 0.0).unwrap();
    let spread = cell_flows(&c, &s, WARMUP_S, 2.0).unwrap();
    let starts = |f: &[VoiceFlow]| f.iter().map(|f| f.start_s).collect::<Vec<_>>();
    assert_eq!(starts(&cold), starts(&again));
    assert!(starts(&cold)
        .iter()
        .all(|&t| (WARMUP_S..WARMUP_S + 0.02).contains(&t)));
    assert_eq!(spread.len(), 80);
    for call in spread.chunks(2) {
        let (a, b) = (call[0].start_s, call[1].start_s);
        assert_eq!(call[0].call, call[1].call);
        assert!(
            (a - b).abs() < 0.02,
            "one call's directions join together: {a} {b}"
        );
        assert!((WARMUP_S..WARMUP_S + 2.02).contains(&a), "{a}");
    }
    // spread over the window: every half second of it has some joins
    for q in 0..4 {
        let lo = WARMUP_S + 0.5 * f64::from(q);
        assert!(
            starts(&spread).iter().any(|&t| (lo..lo + 0.5).contains(&t)),
            "no call joins in [{lo}, {lo} + 0.5)"
        );
    }
    let last = starts(&spread).into_iter().fold(0.0, f64::max);
    let (pk, rp) = (Path::new("/x/p.txt"), Path::new("/x/m.json"));
    let conf = cell_config(&c, &s, &spread, WARMUP_S, None, pk, rp).unwrap();
    let d: f64 = conf
        .lines()
        .find_map(|l| l.strip_prefix("duration_s "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (d - (last + 4.0 + 1.0)).abs() < 1e-9,
        "{d} vs last start {last}"
    );
    let mut a = args();
    a.call_arrival_ms = 2000;
    assert!(run::knobs(&a).is_err(), "2 s of arrivals in a 4 s point");
    a.duration = 8.0;
    assert_eq!(run::knobs(&a).unwrap().arrival_ms, 2000);
}

/// The bundles' sizes are the bound's (`bundle_ip_bytes`): G.729 (60-byte
/// packets) 20 + 2 + j x 61, G.711 (200 bytes, 2-byte prefixes) 20 + 2 + j x 202.
#[test]
fn bundle_sizes_are_the_bounds() {
    use crate::downlink_bound::{bundle_ip_bytes, G711, G729};
    assert_eq!(bundle_sizes(60, 3), vec![144, 205]);
    assert_eq!(bundle_sizes(60, 1), Vec::<u32>::new());
    for j in 2..=4 {
        assert_eq!(
            bundle_sizes(60, j)[j as usize - 2],
            bundle_ip_bytes(&G729, j)
        );
        assert_eq!(
            bundle_sizes(200, j)[j as usize - 2],
            bundle_ip_bytes(&G711, j)
        );
    }
    assert_eq!(agg_directive(0, 20000, &[144]), "agg_up 0 20000 144\n");
}

/// `--uplink-agg` on `cell:b11:11:2` (two calls per station): each station's
/// two uplink packets of an interval leave as one 144-byte bundle, so the
/// stations send about half the frames; every packet arrives once, the one
/// that waits for its partner at most one interval later. A preset with one
/// call per station has nothing to bundle and is refused.
#[test]
fn small_cell_with_uplink_aggregation() {
    let Some((w, c)) = sim_cell("aggup", "cell:b11:11:2", "g729") else {
        return;
    };
    let agg = agg();
    let plain = cell_point_with(&c, Setup::Off, 4, Knobs::default()).unwrap();
    let bundled = cell_point_with(&c, Setup::Off, 4, agg).unwrap();
    let odd = cell_point_with(&c, Setup::Off, 3, agg).unwrap();
    let short_hold = Knobs {
        uplink_hold_us: Some(100),
        ..agg
    };
    let short = cell_point_with(&c, Setup::Off, 4, short_hold).unwrap();
    let k1 = config("cell:b11:11", "g729", &args(), &w).unwrap();
    let refused = cell_point_with(&k1, Setup::Off, 2, agg);
    let _ = std::fs::remove_dir_all(&w);
    let line = crate::experiment::point_line;
    assert!(refused.is_err(), "K = 1 has nothing to bundle");
    for p in [&plain, &bundled] {
        assert!(p.supported && p.loss_max == 0.0, "{}", line(p));
    }
    assert!(!plain.downlink.contains_key("cell.agg_up"));
    let a = &bundled.downlink["cell.agg_up"];
    let n = |k: &str| a[k].as_u64().unwrap();
    // every uplink packet the calls sent (4 calls, about 200 each) went in
    // a bundle of two or alone
    let sent = uplink_sent(&bundled);
    assert!((800..=808).contains(&sent), "{sent}");
    assert_eq!((n("k"), n("hold_us")), (2, 20000), "{a}");
    assert_eq!(n("bundled") + n("alone"), sent, "{a}");
    assert_eq!(n("bundled"), 2 * n("bundles"), "{a}");
    assert_eq!(
        n("split"),
        n("bundles"),
        "every bundle split at the AP: {a}"
    );
    assert!(n("bundles") >= 396 && n("closed_hold") <= 4, "{a}");
    for s in ["S1", "S2"] {
        let (p, b) = (plain.frames_per_node[s], bundled.frames_per_node[s]);
        assert!(b * 10 < p * 6, "{s}: {b} frames bundled, {p} without");
    }
    // the uplink (a -> b) waits for the partner packet, the downlink not
    let up = (
        mean(uplink(&plain, "delay_ms")),
        mean(uplink(&bundled, "delay_ms")),
    );
    assert!(up.1 > up.0 + 1.0, "uplink delay {up:?}");
    let max = |v: Vec<f64>| v.into_iter().fold(0.0, f64::max);
    let (m0, m1) = (
        max(uplink(&plain, "delay_max_ms")),
        max(uplink(&bundled, "delay_max_ms")),
    );
    assert!(m1 <= m0 + 22.0, "held at most one interval: {m1} vs {m0}");
    // three calls: the second station's one call is not held (its daemon's
    // `max_packets` is its calls), so its packets leave alone at once
    let a = &odd.downlink["cell.agg_up"];
    let n = |k: &str| a[k].as_u64().unwrap();
    assert!(odd.supported, "{}", line(&odd));
    assert!((200..=202).contains(&n("alone")), "{a}");
    assert!(n("closed_hold") <= 2, "{a}");
    let third = &odd.call_results.as_array().unwrap()[2]["a_to_b"];
    assert!(third["delay_max_ms"].as_f64().unwrap() < 10.0, "{third}");
    // a 0.1 ms hold: the partner (a random phase later) is not waited
    // for, nearly every packet leaves alone
    let a = &short.downlink["cell.agg_up"];
    let n = |k: &str| a[k].as_u64().unwrap();
    assert!(short.supported, "{}", line(&short));
    assert_eq!(n("hold_us"), 100, "{a}");
    assert!(n("alone") > 700 && n("closed_hold") > 700, "{a}");
    let m2 = max(uplink(&short, "delay_max_ms"));
    assert!(m2 <= m0 + 1.0, "held at most 0.1 ms: {m2} vs {m0}");
}

/// `--uplink-agg-busy` on `cell:b11:11:2`: a station holds a packet only
/// while its own radio has a frame queued or in flight. On a light cell
/// (4 calls) the radio is idle when a packet comes, so it leaves alone at
/// once: nothing is bundled and the uplink waits no longer than without
/// aggregation. At 16 calls (above `off`'s 13, the AP the bottleneck) the
/// fixed hold halves the stations' frames, the busy-only hold still finds
/// the stations' radios idle and bundles next to nothing; only far beyond
/// capacity (24 calls) do the radios back up and bundles form. Every uplink
/// packet leaves once either way.
#[test]
fn uplink_bundles_only_while_the_radio_is_busy() {
    let Some((w, c)) = sim_cell("aggbusy", "cell:b11:11:2", "g729") else {
        return;
    };
    let fixed = agg();
    let busy = Knobs {
        uplink_busy: true,
        ..fixed
    };
    let run = |n, k| cell_point_with(&c, Setup::Off, n, k).unwrap();
    let (light_plain, light_busy) = (run(4, Knobs::default()), run(4, busy));
    let (plain, held, loaded) = (run(16, Knobs::default()), run(16, fixed), run(16, busy));
    let over = run(24, busy); // far beyond `off`'s 13
    let _ = std::fs::remove_dir_all(&w);
    let mean_up = |p: &Point| mean(uplink(p, "delay_ms"));
    let sent = uplink_sent;
    let stations = |p: &Point| -> u64 {
        p.frames_per_node
            .iter()
            .filter(|(k, _)| k.starts_with('S'))
            .map(|(_, v)| *v)
            .sum()
    };
    for p in [&light_busy, &loaded] {
        let a = &p.downlink["cell.agg_up"];
        let n = |k: &str| a[k].as_u64().unwrap();
        assert_eq!(a["busy"], true, "{a}");
        assert_eq!(n("bundled") + n("alone"), sent(p), "every packet once: {a}");
        assert_eq!(n("split"), n("bundles"), "{a}");
    }
    // light: every packet finds the radio idle and leaves at once
    let a = &light_busy.downlink["cell.agg_up"];
    assert!(
        a["bundled"].as_u64().unwrap() * 50 <= sent(&light_busy),
        "{a}"
    );
    let (d0, d1) = (mean_up(&light_plain), mean_up(&light_busy));
    assert!((d1 - d0).abs() < 0.3, "light uplink delay {d0} vs {d1}");
    // loaded (the AP the bottleneck, the stations' radios mostly idle):
    // the fixed hold halves the stations' frames at a cost in delay, the
    // busy-only hold finds next to nothing to bundle and costs nothing
    let (p, h, b) = (stations(&plain), stations(&held), stations(&loaded));
    assert!(
        h * 10 < p * 6,
        "fixed hold: {h} station frames, {p} without"
    );
    assert!(b * 10 > p * 9, "busy-only: {b} station frames, {p} without");
    assert!(mean_up(&held) > mean_up(&plain) + 1.0);
    assert!(
        (mean_up(&loaded) - mean_up(&plain)).abs() < 0.5,
        "busy-only uplink delay {} vs {}",
        mean_up(&loaded),
        mean_up(&plain)
    );
    // overloaded: the stations' radios back up and what waited leaves
    // together when they empty
    let a = &over.downlink["cell.agg_up"];
    let n = |k: &str| a[k].as_u64().unwrap();
    assert!(n("bundles") > 0 && n("closed_idle") > 0, "{a}");
    assert_eq!(n("bundled") + n("alone"), sent(&over), "{a}");
}

/// `cell-sim` draws its run beside the JSON: four PNGs named after it, one
/// line per row (two rows of the same setup apart by preset and codec).
#[test]
fn plots_beside_the_json() {
    use crate::experiment::{summarize_point, SetupResult};
    let w = work("plots");
    let _ = std::fs::remove_dir_all(&w);
    let call = |mos: f64| {
        let d = serde_json::json!({"mos": mos, "loss_pct": 0.0, "delay_ms": 5.0, "sent": 400, "supported": mos >= 3.6});
        serde_json::json!({"supported": mos >= 3.6, "a_to_b": d, "b_to_a": d})
    };
    let row = |preset: &str, mos: [f64; 3]| {
        let mut r = SetupResult::empty(Setup::DownlinkMux);
        for (i, m) in mos.into_iter().enumerate() {
            let n = 1u32 << (i + 2);
            let calls = serde_json::Value::Array((0..n).map(|_| call(m)).collect());
            r.points.push(summarize_point(
                Setup::DownlinkMux,
                n,
                calls,
                Instant::now(),
            ));
        }
        r.capacity = 8;
        Row {
            preset: preset.into(),
            codec: "g729".into(),
            bound: 10,
            result: r,
        }
    };
    let rows = [
        row("cell:b11:11", [4.0, 3.9, 2.5]),
        row("cell:g54:6:4", [4.0, 4.0, 3.8]),
    ];
    assert!((rows[0].result.points[2].mos - 2.5).abs() < 1e-9);
    let v = serde_json::json!({ "rows": rows });
    let named = plots::named_rows(&v, None).unwrap();
    assert_eq!(named[0].0, "cell:b11:11 g729 downlink-mux");
    assert_eq!(named[1].0, "cell:g54:6:4 g729 downlink-mux");
    let files = plots::write_plots(&w.join("run.json"), &named).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "run-mos.png",
            "run-worst-mos.png",
            "run-loss.png",
            "run-delay.png"
        ]
    );
    for f in &files {
        let b = std::fs::read(f).unwrap();
        assert!(
            b.len() > 1000 && b.starts_with(b"\x89PNG\r\n\x1a\n"),
            "{}",
            f.display()
        );
    }
    // docs/results' files: tagged runs, a tag filter
    let docs = serde_json::json!({"runs": [
        {"tag": "cold", "rows": [v["rows"][0]]},
        {"tag": "arrivals", "rows": [v["rows"][1]]},
    ]});
    let all = plots::named_rows(&docs, None).unwrap();
    assert_eq!(
        all.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["cold", "arrivals"]
    );
    let one = plots::named_rows(&docs, Some(&["arrivals".to_string()])).unwrap();
    assert_eq!((one.len(), one[0].0.as_str()), (1, "arrivals"));
    assert!(plots::named_rows(&serde_json::json!({}), None).is_err());
    let _ = std::fs::remove_dir_all(&w);
}
