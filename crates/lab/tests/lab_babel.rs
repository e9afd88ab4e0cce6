//! babeld as the lab's routing daemon (`--routing babel`): a 3-node chain
//! (`string:2`, N0 - N1 - N2) where babeld, one per node namespace, learns
//! every route over the emulated air. Checks that the routes converge, that
//! they are the chain's (symmetric, via the relay, IPv4 next hops the
//! hop-by-hop daemon can use as peers), that a few G.729 calls are all
//! supported with aggregation off and hop-by-hop, and that hop-by-hop
//! aggregation lowers the frames on the air (babel's own hellos included).
//!
//! Needs root, ip/tc/nft, babeld (`apt-get install -y babeld`) and the
//! `airpack` binary (AIRPACK_BIN, or `airpack` next to this test's target
//! directory, as built by `cargo build -p airpack`); prints SKIP otherwise.

mod common;
use airpack_lab::babel;
use airpack_lab::experiment::{point_line, run_point, ExperimentConfig, Setup};
use airpack_lab::medium::preset;
use airpack_lab::netns;
use airpack_lab::topology::{MediumOpts, Mesh, Routing, Topology};

fn chain() -> Topology {
    let mut t = Topology::preset("string:2").unwrap();
    t.routing = Routing::Babel;
    t
}

fn skip() -> bool {
    if let Err(why) = netns::check_privileges() {
        eprintln!("SKIP lab_babel: {why} (needs root with ip, tc, nft)");
        return true;
    }
    if let Err(why) = babel::check_available() {
        eprintln!("SKIP lab_babel: {why:#}");
        return true;
    }
    false
}

#[test]
fn babel_routes_converge_symmetric_and_go_away_with_the_mesh() {
    if skip() {
        return;
    }
    let opts = MediumOpts {
        phy: preset("a24").unwrap(),
        queue_limit: 50,
        loss_pct: 0.0,
    };
    let mesh = Mesh::build(&chain(), &opts).expect("mesh with babel converges");
    let nh = mesh.installed_next_hops().unwrap();
    let t = &mesh.topo;
    assert_eq!(
        t.path(&nh, "N0", "N2").unwrap(),
        ["N0", "N1", "N2"],
        "{nh:?}"
    );
    assert_eq!(
        t.path(&nh, "N2", "N0").unwrap(),
        ["N2", "N1", "N0"],
        "{nh:?}"
    );
    assert_eq!(nh[&("N1".to_string(), "N0".to_string())], "N0");
    assert!(mesh.asymmetric_installed_routes().unwrap().is_empty());
    // the routes are babeld's (no static route was added)
    let r = mesh
        .node("N0")
        .unwrap()
        .ns
        .ip(&["-4", "route", "show", "proto", "babel"])
        .unwrap();
    assert!(r.contains("10.201.0.3 via 10.201.0.2"), "{r}");
    let b = mesh.babel.as_ref().unwrap();
    let conv = b.converged_in.unwrap();
    eprintln!("babel converged in {:.1} s", conv.as_secs_f64());
    assert!(conv < babel::CONVERGE_TIMEOUT);
    // babel's control traffic crosses the emulated air: a few frames per
    // node per second with 1 s hellos, none of it a data packet
    let f0: u64 = mesh.frames_on_air().unwrap().values().sum();
    std::thread::sleep(std::time::Duration::from_secs(4));
    let f1: u64 = mesh.frames_on_air().unwrap().values().sum();
    let per_node_s = (f1 - f0) as f64 / 3.0 / 4.0;
    eprintln!(
        "babel control frames on the idle air: {} in 4 s ({per_node_s:.2} per node per second)",
        f1 - f0
    );
    assert!(per_node_s > 0.5 && per_node_s < 10.0, "{per_node_s}");
    let dir = b.dir().to_path_buf();
    assert!(dir.join("N0.pid").exists(), "pid file in {}", dir.display());
    let names: Vec<String> = mesh.nodes.iter().map(|n| n.ns.name().to_string()).collect();
    drop(mesh);
    let left = netns::list().unwrap();
    assert!(
        names.iter().all(|n| !left.contains(n)),
        "namespaces left: {left:?}"
    );
    assert!(!dir.exists(), "babel dir left: {}", dir.display());
}

#[test]
fn calls_supported_and_aggregation_lowers_frames_with_babel() {
    if skip() {
        return;
    }
    let Some(bin) = common::airpack_bin() else {
        eprintln!("SKIP lab_babel: no airpack binary (set AIRPACK_BIN or run `cargo build -p airpack` first)");
        return;
    };
    let work = std::env::temp_dir().join(format!("airpack-lab-babel-{}", std::process::id()));
    let cfg = ExperimentConfig {
        bin,
        topo: chain(),
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
    eprintln!("{}", point_line(&off));
    let hbh = run_point(&cfg, Setup::HopByHop, 4).expect("hop-by-hop point");
    eprintln!("{}", point_line(&hbh));
    // 4 calls x 2 directions x 50 packets/s x 3 s x 2 hops = 2400, plus
    // babel's hellos/IHUs/updates (a few per node per second) over ~5 s
    assert!(
        off.frames_on_air >= 2300 && off.frames_on_air <= 2600,
        "off frames {}",
        off.frames_on_air
    );
    assert!(off.supported, "off: {}", point_line(&off));
    assert!(hbh.supported, "hop-by-hop: {}", point_line(&hbh));
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
