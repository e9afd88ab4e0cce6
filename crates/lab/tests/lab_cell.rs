//! The infrastructure cell of issue 14 (`cell:PHY[:MC]`, `crate::cell`) on
//! the ns-3 air: the topology builds with one station per call, and a short
//! point of 3 G.729 CBR calls (802.11b 11 Mbit/s, multicast at 11 Mbit/s)
//! runs with downlink multiplexing off and on:
//! - off: every call supported, no daemon;
//! - on: the AP registered the 3 stations and sent the downlink in
//!   multicast frames (at this light load mostly one packet per frame: the
//!   idle release), each station received every frame, skipped the other
//!   stations' packets and rebuilt
//!   their packets (every call supported), nothing was dropped inside the
//!   multiplexer or demultiplexers.
//!
//! Needs root, ip/tc/nft, Debian's libns3-dev + g++ (the ns-3 air) and the
//! `airpack` binary (AIRPACK_BIN, or `airpack` beside this test's target
//! directory); prints SKIP otherwise. No timing assertions: 3 calls use
//! about a quarter of the air, and the quality checks (supported, no
//! drops) are made on a point whose senders and air kept real time
//! (re-measured up to 3 times, else SKIP for those checks only).
//!
//! Multicast frames have no ACK and no retry: one that collides with a
//! station's uplink frame is lost to every station (none in 12 points on an
//! idle machine, a lost frame in 3 of 14 points beside 3 busy loops).
//! That is the air, not the multiplexer, so it is checked as accounting on
//! every point (each call's receiver got what its station rebuilt, and a
//! station that lost no frame rebuilt every packet), and the support check is
//! made on a point whose air delivered every multicast frame (re-measured
//! like a lagging one).

mod common;
use airpack_lab::experiment::{
    point_line, run_point, ExperimentConfig, Point, Setup, MAX_SEND_LAG_MS,
};
use airpack_lab::medium::preset;
use airpack_lab::topology::{MediumOpts, Topology};
use std::path::PathBuf;

fn ready() -> Option<PathBuf> {
    if !common::ns3_ready("lab_cell", " (the cell runs on the ns-3 air only)") {
        return None;
    }
    let Some(bin) = common::airpack_bin() else {
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

/// A point, measured again (at most 3 tries) while its senders lagged more
/// than the lab allows or its air fell behind real time: a loaded machine
/// is not a measurement of the cell. Returns the point and whether it is a
/// valid measurement (if not, the quality checks print SKIP).
fn measure(cfg: &ExperimentConfig, setup: Setup) -> (Point, bool) {
    let mut last = None;
    for _ in 0..3 {
        let p = run_point(cfg, setup, 3).expect("point");
        eprintln!("{}", point_line(&p));
        if !p.downlink.is_empty() {
            check_accounting(&p);
        }
        let valid = p.max_send_lag_ms <= MAX_SEND_LAG_MS
            && p.air.is_some_and(|a| a.kept_up())
            && air_lost_frames(&p) == 0;
        if valid {
            return (p, true);
        }
        last = Some(p);
    }
    eprintln!(
        "SKIP lab_cell quality check of {}: senders or the ns-3 air lagged, or the air lost \
         multicast frames, on every try (machine busy)",
        setup.name()
    );
    (last.expect("a point"), false)
}

/// Multicast frames the stations missed (gaps in the AP's frame numbers;
/// none without a downlink setup).
fn air_lost_frames(p: &Point) -> u64 {
    p.downlink
        .iter()
        .filter(|(k, _)| k.ends_with(".station"))
        .map(|(_, st)| st["lost_frames"].as_u64().unwrap_or(0))
        .sum()
}

/// Packets call `k` sent on its downlink (outer node to station).
fn downlink_sent(p: &Point, k: usize) -> u64 {
    p.call_results[k]["b_to_a"]["sent"].as_u64().unwrap()
}

/// Packets of call `k`'s downlink that its receiver never got.
fn downlink_lost(p: &Point, k: usize) -> u64 {
    let got = p.call_results[k]["b_to_a"]["received"].as_u64().unwrap();
    downlink_sent(p, k).saturating_sub(got)
}

/// Whatever the load: call k's receiver got what station S(k+1) rebuilt,
/// and the station rebuilt every packet unless the air lost one of its
/// frames.
fn check_accounting(p: &Point) {
    for k in 0..3 {
        let s = format!("S{}", k + 1);
        let st = &p.downlink[&format!("{s}.station")];
        let (sent, lost) = (downlink_sent(p, k), downlink_lost(p, k));
        let rebuilt = st["packets"].as_u64().unwrap();
        assert_eq!(
            sent - lost,
            rebuilt,
            "{s}'s call got what {s} rebuilt: {st}"
        );
        if st["lost_frames"] == 0 {
            assert_eq!(lost, 0, "{s} lost packets but no frame: {st}");
        }
    }
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
    let (off, off_valid) = measure(&cfg, Setup::Off);
    assert!(off.downlink.is_empty());
    if off_valid {
        assert!(
            off.supported,
            "3 calls without multiplexing: {}",
            point_line(&off)
        );
    }

    let (on, on_valid) = measure(&cfg, Setup::DownlinkMux);
    // what the roles did does not depend on the machine's load
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
        // every frame reaches every station: the others' packets are skipped
        let others = st["packets_for_others"].as_u64().unwrap();
        assert!(
            others >= 2 * 150 * 9 / 10,
            "{s} saw the other stations' packets: {st}"
        );
        assert!(
            st["packets"].as_u64().unwrap() >= 150 * 9 / 10,
            "{s} rebuilt its packets: {st}"
        );
    }
    // quality and loss only from a point that measured the air, not the load
    if on_valid {
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
    }
    let _ = std::fs::remove_dir_all(&work);
}
