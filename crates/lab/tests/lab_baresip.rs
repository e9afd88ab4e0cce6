//! Real SIP phones through the daemons (issue 13, point 7), small enough for
//! CI: two baresip calls (G.711, audio from a WAV file, calling by IP) over
//! the one-hop `string:1` mesh with hop-by-hop aggregation, 6 s.
//!
//! Checks that SIP signalling crosses the daemons (every call established,
//! with its setup time), that the phones' RTP was bundled (aggregation ratio
//! above 1) and delivered whole, measured from captures in the endpoints'
//! namespaces, and that both phones printed their own RTCP summary.
//!
//! Needs root, ip/tc/nft, baresip (Debian `baresip-core`, installed by
//! scripts/setup.sh) and the `airpack` binary; prints SKIP otherwise.

mod common;
use airpack_lab::experiment::{run_point, Client, ExperimentConfig, Setup};
use airpack_lab::medium::preset;
use airpack_lab::netns;
use airpack_lab::topology::{MediumOpts, Topology};

#[test]
fn baresip_calls_cross_the_daemons() {
    if let Err(why) = netns::check_privileges() {
        eprintln!("SKIP lab_baresip: {why} (needs root with ip, tc, nft)");
        return;
    }
    if let Err(why) = airpack_lab::baresip::check_available() {
        eprintln!("SKIP lab_baresip: {why}");
        return;
    }
    let Some(bin) = common::airpack_bin() else {
        eprintln!("SKIP lab_baresip: no airpack binary (set AIRPACK_BIN or run `cargo build -p airpack` first)");
        return;
    };
    let work = std::env::temp_dir().join(format!("airpack-lab-baresip-{}", std::process::id()));
    let cfg = ExperimentConfig {
        bin,
        topo: Topology::preset("string:1").unwrap(),
        medium: MediumOpts {
            phy: preset("a24").unwrap(),
            queue_limit: 50,
            loss_pct: 0.0,
        },
        codec: "g711".into(),
        interval_ms: 20,
        vad: false,
        duration_s: 6.0,
        playout_ms: 60,
        criterion: "mos".into(),
        hold_time_us: 20000,
        max_calls: 2,
        seed: 7,
        work_dir: work.clone(),
        client: Client::Baresip,
    };
    let p = run_point(&cfg, Setup::HopByHop, 2).expect("hop-by-hop point with baresip");
    eprintln!("{}", airpack_lab::experiment::point_line(&p));
    let sig = p.signalling.clone().expect("signalling of real phones");
    let calls = sig.as_array().unwrap();
    assert_eq!(calls.len(), 2, "{sig}");
    for c in calls {
        let setup = c["setup_ms"].as_f64();
        assert!(
            setup.is_some_and(|ms| ms < 10_000.0),
            "call not established: {c}"
        );
        for side in ["rtcp_caller", "rtcp_callee"] {
            // printed at every call's end: the figures, or an ERROR when no
            // RTCP report had arrived yet
            assert_eq!(
                c[side]["EX"], "BareSip",
                "no RTCP summary from the {side}: {c}"
            );
        }
    }
    assert!(
        p.aggregation_ratio > 1.5,
        "the phones' RTP was not bundled: ratio {}",
        p.aggregation_ratio
    );
    for c in p.call_results.as_array().unwrap() {
        for d in ["a_to_b", "b_to_a"] {
            let q = &c[d];
            let sent = q["sent"].as_u64().unwrap();
            // 6 s at 50 packets/s from the moment the call was established
            assert!(
                sent >= 250,
                "{d}: only {sent} RTP packets seen leaving the phone: {c}"
            );
            assert_eq!(q["received"].as_u64(), Some(sent), "{d}: {c}");
            assert!(q["delay_ms"].as_f64().unwrap() < 40.0, "{d}: {c}");
        }
    }
    assert!(p.supported, "{}", p.call_results);
    let _ = std::fs::remove_dir_all(&work);
}
