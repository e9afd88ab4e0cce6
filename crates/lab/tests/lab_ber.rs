//! Per-link bit errors on the ns-3 air (issue 11 point 5; `[[wifi.link]]`
//! `ber`, `crates/lab/ns3/air_ber.cc`), in pure simulation (the same program
//! without taps; needs what `lab_ns3` needs and prints SKIP otherwise):
//! - at BER 1e-4 a 1400-byte frame is lost far more often than a 60-byte one,
//!   each as `1 - (1 - BER)^(8 (L + 36))` predicts;
//! - `directional = true` leaves the other direction untouched.

mod common;
use airpack_lab::air_ns3::{self, FlowKind, SimFlow};
use airpack_lab::air_opts::LinkBer;
use airpack_lab::medium::preset;
use airpack_lab::topology::{MediumOpts, Topology};
use serde_json::Value;

fn pair(ber: f64, directional: bool) -> Topology {
    let mut t = Topology::from_toml(
        "name = 'pair'\nnodes = ['A', 'B']\nlinks = [['A', 'B']]\ncalls = [['A', 'B']]\nair = 'ns3'\n",
    )
    .unwrap();
    t.wifi.multicast_mbit = Some(11.0);
    t.wifi.link_ber = vec![LinkBer {
        a: "A".into(),
        b: "B".into(),
        ber,
        directional,
    }];
    t
}

/// 4 s of group-addressed frames (no ACK, no retry: each frame is drawn
/// once): A sends 60-byte IP packets, B 1400-byte ones, 300 of each per
/// second at 11 Mbit/s (about half the air).
fn run(topo: &Topology, tag: &str) -> Value {
    let opts = MediumOpts {
        phy: preset("b11").unwrap(),
        queue_limit: 400,
        loss_pct: 0.0,
    };
    let dir = std::env::temp_dir().join(format!("airpack-lab-ber-{tag}-{}", std::process::id()));
    let flows = [
        SimFlow::unicast(0, 1, 300.0, 60, 0.5, 4.5).over(FlowKind::Bcast),
        // half a period later: two CBR flows in step would collide every time
        SimFlow::unicast(1, 0, 300.0, 1400, 0.5 + 1.0 / 600.0, 4.5).over(FlowKind::Bcast),
    ];
    let r = air_ns3::simulate(topo, &opts, &flows, 5.0, &dir).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// (frames drawn for, lost) at node `rx` for frames from node `tx`.
fn drawn(r: &Value, rx: usize, tx: &str) -> (u64, u64) {
    let b = &r["nodes"][rx]["ber_from"][tx];
    (
        b["frames"].as_u64().unwrap_or(0),
        b["lost"].as_u64().unwrap_or(0),
    )
}

fn fer(ip_bytes: f64, ber: f64) -> f64 {
    1.0 - (1.0 - ber).powf(8.0 * (ip_bytes + 36.0))
}

#[test]
fn long_frames_lose_more_at_the_same_bit_error_rate() {
    if !common::ns3_ready("lab_ber", "") {
        return;
    }
    let ber = 1e-4;
    let r = run(&pair(ber, false), "sym");
    let (small_n, small_lost) = drawn(&r, 1, "A"); // 60-byte frames at B
    let (large_n, large_lost) = drawn(&r, 0, "B"); // 1400-byte frames at A
    let small = small_lost as f64 / small_n as f64;
    let large = large_lost as f64 / large_n as f64;
    eprintln!(
        "BER {ber:e}: 60-byte frames lost {small_lost}/{small_n} = {:.3} (model {:.3}), \
         1400-byte {large_lost}/{large_n} = {:.3} (model {:.3})",
        small,
        fer(60.0, ber),
        large,
        fer(1400.0, ber)
    );
    // about 1200 frames each: 3 standard deviations are under 0.03 / 0.04
    assert!(small_n > 1000 && large_n > 1000, "{r}");
    assert!((small - fer(60.0, ber)).abs() < 0.03, "{r}");
    assert!((large - fer(1400.0, ber)).abs() < 0.04, "{r}");
    assert!(large > 3.0 * small, "{r}");
    // every frame lost to the BER is one the flow's receiver did not get
    let flows = r["flows"].as_array().unwrap();
    let received = |k: usize| flows[k]["received"].as_u64().unwrap();
    assert_eq!(received(0), small_n - small_lost, "{r}");
    assert_eq!(received(1), large_n - large_lost, "{r}");
    assert_eq!(r["nodes"][1]["ber_lost"].as_u64(), Some(small_lost));

    // directional A -> B: B's 1400-byte frames reach A untouched
    let r = run(&pair(ber, true), "dir");
    let (n, lost) = drawn(&r, 1, "A");
    assert!(n > 1000 && lost > 0, "{r}");
    assert_eq!(drawn(&r, 0, "B"), (0, 0), "{r}");
    assert_eq!(r["nodes"][0]["ber_lost"].as_u64(), Some(0), "{r}");
    let flows = r["flows"].as_array().unwrap();
    let sent = flows[1]["sent"].as_u64().unwrap();
    let got = flows[1]["received"].as_u64().unwrap();
    // (only collisions with A's frames can lose some)
    assert!(got as f64 > 0.95 * sent as f64, "{r}");
}
