//! An end-to-end lab run small enough for CI: 3 nodes in a line (A - C - D),
//! 4 G.729 calls A <-> D through relay C for 3 s, with aggregation off and
//! hop-by-hop. Checks that aggregation lowers the number of frames on the
//! emulated air and that all calls are supported at this low load.
//!
//! Needs root, ip/tc/nft, and the `airpack` binary (AIRPACK_BIN, or
//! `airpack` next to this test's target directory, as built by
//! `cargo build --workspace`); prints SKIP otherwise.

mod common;
use airpack_lab::experiment::{run_point, ExperimentConfig, Setup};
use airpack_lab::medium::preset;
use airpack_lab::netns;
use airpack_lab::topology::{MediumOpts, Topology};

#[test]
fn aggregation_lowers_frames_on_air_and_calls_are_supported() {
    if let Err(why) = netns::check_privileges() {
        eprintln!("SKIP lab_e2e: {why} (needs root with ip, tc, nft)");
        return;
    }
    let Some(bin) = common::airpack_bin() else {
        eprintln!("SKIP lab_e2e: no airpack binary (set AIRPACK_BIN or run `cargo build -p airpack` first)");
        return;
    };
    let topo = Topology::from_toml(
        "name = 'line3'\nnodes = ['A', 'C', 'D']\nlinks = [['A', 'C'], ['C', 'D']]\ncalls = [['A', 'D']]\n",
    )
    .unwrap();
    let work = std::env::temp_dir().join(format!("airpack-lab-e2e-{}", std::process::id()));
    let cfg = ExperimentConfig {
        bin,
        topo,
        // 24 Mbit/s OFDM: 4 calls over 2 hops use about 30 % of the air
        medium: MediumOpts {
            phy: preset("a24").unwrap(),
            queue_limit: 50,
            loss_pct: 0.0,
        },
        codec: "g729".into(),
        interval_ms: 20,
        vad: false,
        duration_s: 3.0,
        playout_ms: 60,
        criterion: "mos".into(),
        hold_time_us: 5000,
        max_calls: 4,
        seed: 7,
        work_dir: work.clone(),
        client: Default::default(),
    };
    let off = run_point(&cfg, Setup::Off, 4).expect("off point");
    eprintln!("{}", airpack_lab::experiment::point_line(&off));
    let hbh = run_point(&cfg, Setup::HopByHop, 4).expect("hop-by-hop point");
    eprintln!("{}", airpack_lab::experiment::point_line(&hbh));
    // 4 calls x 2 directions x 50 packets/s x 3 s x 2 hops
    assert!(
        off.frames_on_air >= 2300 && off.frames_on_air <= 2500,
        "off frames {}",
        off.frames_on_air
    );
    assert!(
        off.supported,
        "off: {}",
        airpack_lab::experiment::point_line(&off)
    );
    assert!(
        hbh.supported,
        "hop-by-hop: {}",
        airpack_lab::experiment::point_line(&hbh)
    );
    assert!(
        (hbh.frames_on_air as f64) < 0.8 * off.frames_on_air as f64,
        "aggregation did not lower frames on air: {} vs {}",
        hbh.frames_on_air,
        off.frames_on_air
    );
    assert!(
        hbh.aggregation_ratio > 1.2,
        "ratio {}",
        hbh.aggregation_ratio
    );
    assert!(off.loss_max < 1.0 && hbh.loss_max < 1.0);
    std::fs::remove_dir_all(&work).ok();
}
