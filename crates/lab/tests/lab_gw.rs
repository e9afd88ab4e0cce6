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
