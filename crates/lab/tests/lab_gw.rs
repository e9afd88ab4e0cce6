//! Seed 003's gateway scenario (`gw:N`, `crate::gw`; issue 12 point 6) on
//! the ns-3 air: a server S on a 30 ms cable to the gateway G, one 802.11a
//! 12 Mbit/s hop to the mesh node M1, one G.729 call S <-> M1 and one real
//! kernel TCP download S -> M1 (cubic) for a few seconds, with no control at
//! the gateway. Asserted:
//! - the call is measured in both directions (packets arrived);
//! - the TCP flow connected and moved bytes (goodput > 0, sent >= received);
//! - the cable's one-way delay is in the call's delay (median >= 30 ms);
//! - with the pacer arm, the gateway daemon saw the call and paced the flow.
//!
//! Needs root, ip/tc/nft, Debian's libns3-dev + g++ (the ns-3 air) and the
//! `airpack` binary (AIRPACK_BIN, or `airpack` beside this test's target
//! directory); prints SKIP otherwise. No throughput or quality thresholds:
//! only that traffic moved and the delay line is there.

mod common;
use airpack_lab::experiment::{point_line, run_point, ExperimentConfig, Setup};
use airpack_lab::medium::preset;
use airpack_lab::topology::{MediumOpts, Topology};
use serde_json::Value;
use std::path::PathBuf;

fn config(bin: PathBuf, work: PathBuf) -> ExperimentConfig {
    let mut topo = Topology::preset("gw:1").unwrap();
    let g = topo.gw.as_mut().expect("a gateway preset");
    g.tcp_flows = 1;
    g.tcp_cc = "cubic".into();
    ExperimentConfig {
        bin,
        topo,
        medium: MediumOpts {
            phy: preset("a12").unwrap(),
            queue_limit: 50,
            loss_pct: 0.0,
        },
        codec: "g729".into(),
        interval_ms: 20,
        vad: false,
        duration_s: 4.0,
        playout_ms: 60,
        criterion: "mos".into(),
        hold_time_us: 20000,
        max_calls: 1,
        seed: 3,
        work_dir: work,
        client: Default::default(),
    }
}

fn received(p: &airpack_lab::experiment::Point, dir: &str) -> u64 {
    p.call_results[0][dir]["received"].as_u64().unwrap_or(0)
}

#[test]
fn a_gateway_point_carries_a_call_and_a_tcp_flow_across_the_wired_delay() {
    if !common::ns3_ready("lab_gw", " (the wired link runs on the ns-3 air only)") {
        return;
    }
    let Some(bin) = common::airpack_bin() else {
        eprintln!("SKIP lab_gw: no airpack binary (set AIRPACK_BIN or run `cargo build -p airpack` first)");
        return;
    };
    let work = std::env::temp_dir().join(format!("airpack-lab-gw-{}", std::process::id()));
    let cfg = config(bin, work.clone());
    let p = run_point(&cfg, Setup::NoControl, 1).expect("point");
    eprintln!("{}", point_line(&p));
    assert_eq!(
        p.call_results.as_array().map(Vec::len),
        Some(1),
        "{}",
        p.call_results
    );
    for d in ["a_to_b", "b_to_a"] {
        assert!(
            received(&p, d) > 0,
            "call direction {d} measured: {}",
            p.call_results
        );
    }
    let tcp = p.tcp.as_ref().expect("TCP results");
    assert_eq!(tcp.flows, 1);
    let f = &tcp.per_flow[0];
    assert!(f.connected && f.error.is_none(), "{f:?}");
    assert!(
        f.bytes_received > 0 && f.goodput_kbps > 0.0,
        "the flow moved bytes: {f:?}"
    );
    assert!(f.bytes_sent >= f.bytes_received, "{f:?}");
    assert!(
        f.rtt_min_ms >= 60.0,
        "the RTT crosses the 30 ms cable twice: {f:?}"
    );
    assert!(
        p.delay_median_ms >= 30.0,
        "the cable's 30 ms one-way delay is in the call's delay: {}",
        point_line(&p)
    );

    // the pacer arm: the gateway daemon sees the call and paces the flow
    let q = run_point(&cfg, Setup::Pacer, 1).expect("pacer point");
    eprintln!("{}", point_line(&q));
    let gw = q.gateway.as_ref().expect("the gateway daemon's stats");
    let n = |v: &Value, k: &str| v.pointer(k).and_then(Value::as_u64).unwrap_or(0);
    assert!(n(gw, "/calls") >= 1, "the gateway saw the call: {gw}");
    assert!(
        n(gw, "/flows/added") >= 1,
        "the gateway paced the download: {gw}"
    );
    let f = &q.tcp.as_ref().expect("TCP results").per_flow[0];
    assert!(f.bytes_received > 0, "the paced flow moved bytes: {f:?}");
    let _ = std::fs::remove_dir_all(&work);
}

/// Calls joining and leaving (`--calls-at`, issue 12 point 8) with the
/// pacer: 2 calls, call 1 leaves at 2 s and joins again at 4 s of 6. Each
/// active interval is its own session, measured over its own time only, and
/// the gateway's rate is sampled with timestamps over the point.
#[test]
fn calls_join_and_leave_during_a_pacer_point() {
    if !common::ns3_ready("lab_gw", " (the wired link runs on the ns-3 air only)") {
        return;
    }
    let Some(bin) = common::airpack_bin() else {
        eprintln!("SKIP lab_gw: no airpack binary (set AIRPACK_BIN or run `cargo build -p airpack` first)");
        return;
    };
    let work = std::env::temp_dir().join(format!("airpack-lab-gw-mid-{}", std::process::id()));
    let mut cfg = config(bin, work.clone());
    cfg.duration_s = 6.0;
    let g = cfg.topo.gw.as_mut().unwrap();
    g.tcp_flows = 0;
    let at = ["2:1".to_string(), "4:2".to_string()];
    g.schedule = Some(airpack_lab::experiment::Schedule::parse(2, &at, 6.0).unwrap());
    let p = run_point(&cfg, Setup::Pacer, 2).expect("point");
    eprintln!("{}", point_line(&p));
    let m = p.mid_run.as_ref().expect("mid_run");
    let sessions = m["sessions"].as_array().unwrap();
    // call 0 for 6 s; call 1 for 0-2 s and 4-6 s
    let spans: Vec<(u64, f64, f64)> = sessions
        .iter()
        .map(|s| {
            (
                s["call"].as_u64().unwrap(),
                s["start_s"].as_f64().unwrap(),
                s["end_s"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(spans, [(0, 0.0, 6.0), (1, 0.0, 2.0), (1, 4.0, 6.0)]);
    assert_eq!(p.calls, 3, "calls count sessions");
    let results = p.call_results.as_array().unwrap();
    assert_eq!(results.len(), 3, "{}", p.call_results);
    // each session was sent and received over its own interval (50 packets/s)
    for (s, (_, a, b)) in sessions.iter().zip(&spans) {
        let id = s["id"].as_u64().unwrap();
        let r = results
            .iter()
            .find(|r| r["call"].as_u64() == Some(id))
            .expect("a result per session");
        for d in ["a_to_b", "b_to_a"] {
            let sent = r[d]["sent"].as_u64().unwrap_or(0);
            let want = ((b - a) * 50.0) as u64;
            assert!(
                sent.abs_diff(want) <= 2,
                "session {id} {d}: sent {sent}, want {want}"
            );
            assert!(
                r[d]["received"].as_u64().unwrap_or(0) > 0,
                "session {id} {d}: {r}"
            );
        }
    }
    // the gateway's rate over the point, with times relative to the calls' start
    let samples = m["rate_samples"].as_array().unwrap();
    let t: Vec<f64> = samples.iter().map(|s| s["t_s"].as_f64().unwrap()).collect();
    assert!(
        t.first().is_some_and(|&x| x < 1.0) && t.last().is_some_and(|&x| x > 5.0),
        "samples cover the point: {t:?}"
    );
    assert!(t.windows(2).all(|w| w[0] < w[1]), "{t:?}");
    assert!(samples
        .iter()
        .all(|s| s["rate_bps"].as_f64().unwrap() > 0.0));
    assert!(
        samples
            .iter()
            .any(|s| s["calls_with_mos"].as_u64() == Some(2)),
        "the gateway saw both calls: {samples:?}"
    );
    assert_eq!(m["settle"].as_array().map(Vec::len), Some(3));
    let _ = std::fs::remove_dir_all(&work);
}
