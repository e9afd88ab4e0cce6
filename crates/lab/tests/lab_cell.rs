//! The infrastructure cell of issue 14 (`cell:PHY[:MC]`, `crate::cell`) on
//! the ns-3 air: the topology builds with one station per call, and a short
//! point of 3 G.729 CBR calls (802.11b 11 Mbit/s, multicast at 11 Mbit/s)
//! runs with downlink multiplexing off and on:
//! - off: every call supported, no daemon;
//! - on: the AP registered the 3 stations, multiplexed the downlink into
//!   multicast frames (fewer frames than packets), the stations rebuilt
//!   their packets (every call supported), nothing was dropped inside the
//!   multiplexer or demultiplexers.
//!
//! Needs root, ip/tc/nft, Debian's libns3-dev + g++ (the ns-3 air) and the
//! `airpack` binary (AIRPACK_BIN, or `airpack` beside this test's target
//! directory); prints SKIP otherwise. No timing assertions: 3 calls use
//! about a quarter of the air.

use airpack_lab::air_ns3;
use airpack_lab::experiment::{point_line, run_point, ExperimentConfig, Setup};
use airpack_lab::medium::preset;
use airpack_lab::netns;
use airpack_lab::topology::{MediumOpts, Topology};
use std::path::PathBuf;

fn airpack_bin() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("AIRPACK_BIN") {
        return Some(PathBuf::from(p)).filter(|p| p.exists());
    }
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("airpack");
    p.exists().then_some(p)
}

fn ready() -> Option<PathBuf> {
    if let Err(why) = netns::check_privileges() {
        eprintln!("SKIP lab_cell: {why} (needs root with ip, tc, nft)");
        return None;
    }
    if air_ns3::check_available().is_err() {
        let ok = std::process::Command::new("apt-get")
            .args([
                "install",
                "-y",
                "-qq",
                "--no-install-recommends",
                "libns3-dev",
                "g++",
                "pkg-config",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            eprintln!("SKIP lab_cell: Debian's libns3-dev/g++ are missing and cannot be installed (the cell runs on the ns-3 air only)");
            return None;
        }
    }
    if let Err(why) = air_ns3::check_available() {
        eprintln!("SKIP lab_cell: {why}");
        return None;
    }
    let Some(bin) = airpack_bin() else {
        eprintln!("SKIP lab_cell: no airpack binary (set AIRPACK_BIN or run `cargo build -p airpack` first)");
        return None;
    };
    Some(bin)
}

#[test]
fn cell_preset_scales_with_the_calls() {
    let t = Topology::preset("cell:b11:11").unwrap();
    let c = t.cell.clone().expect("a cell preset");
    assert_eq!(t.wifi.ap.as_deref(), Some("AP"));
    let t7 = c.topology(7);
    t7.validate().unwrap();
    assert_eq!(t7.nodes.iter().filter(|n| n.starts_with('S')).count(), 7);
    assert!(t7
        .calls
        .iter()
        .all(|[s, o]| s.starts_with('S') && o.starts_with('O')));
    assert!(
        Topology::preset("cell:g54:2").is_err(),
        "802.11g runs as 802.11a on the ns-3 air"
    );
}

#[test]
fn a_short_cell_point_runs_with_multiplexing_off_and_on() {
    let Some(bin) = ready() else { return };
    let topo = Topology::preset("cell:b11:11").unwrap();
    let work = std::env::temp_dir().join(format!("airpack-lab-cell-{}", std::process::id()));
    let cfg = ExperimentConfig {
        bin,
        topo,
        medium: MediumOpts {
            phy: preset("b11").unwrap(),
            queue_limit: 50,
            loss_pct: 0.0,
        },
        codec: "g729".into(),
        interval_ms: 20,
        vad: false,
        duration_s: 3.0,
        playout_ms: 60,
        criterion: "mos".into(),
        hold_time_us: 20000,
        max_calls: 3,
        seed: 7,
        work_dir: work.clone(),
        client: Default::default(),
    };
    let off = run_point(&cfg, Setup::Off, 3).expect("off point");
    eprintln!("{}", point_line(&off));
    assert!(
        off.supported,
        "3 calls without multiplexing: {}",
        point_line(&off)
    );
    assert!(off.downlink.is_empty());

    let on = run_point(&cfg, Setup::DownlinkMux, 3).expect("downlink-mux point");
    eprintln!("{}", point_line(&on));
    let ap = &on.downlink["AP.ap"];
    assert_eq!(ap["stations"], 3, "{ap}");
    let (packets, frames) = (
        ap["packets"].as_u64().unwrap(),
        ap["frames"].as_u64().unwrap(),
    );
    assert!(
        packets >= 3 * 150 * 9 / 10,
        "the AP multiplexed the downlink: {ap}"
    );
    assert!(frames > 0 && frames <= packets, "{ap}");
    for s in ["S1", "S2", "S3"] {
        let st = &on.downlink[&format!("{s}.station")];
        assert_eq!(st["registered"], true, "{s}: {st}");
        assert!(
            st["packets"].as_u64().unwrap() >= 150 * 9 / 10,
            "{s} rebuilt its packets: {st}"
        );
    }
    assert_eq!(
        on.downlink_drops, 0,
        "drops inside the mux/demux: {:?}",
        on.downlink
    );
    assert!(
        on.supported,
        "3 calls with multiplexing: {}",
        point_line(&on)
    );
    let _ = std::fs::remove_dir_all(&work);
}
