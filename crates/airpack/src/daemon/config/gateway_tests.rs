//! Tests of `[gateway]` parsing and validation.

use super::super::parse;

fn err(text: &str) -> String {
    format!("{:#}", parse("t.toml", text, &[], &[]).unwrap_err())
}

const BASE: &str = "[gateway]\nenabled = true\ninterface = \"mesh0\"\n";

#[test]
fn defaults_are_the_seeds() {
    let p = parse("t.toml", BASE, &[], &[]).unwrap();
    let g = p.gateway.expect("gateway plan");
    assert!(p.peers.is_empty());
    assert_eq!(g.interface, "mesh0");
    let r = g.rate;
    assert_eq!(
        (r.q_good, r.q_fair, r.q_poor, r.q_choke),
        (3.9, 3.7, 3.6, 3.3)
    );
    assert_eq!(
        (r.r_good, r.r_fair, r.r_poor, r.r_choke),
        (0.05, 0.03, -0.10, -0.50)
    );
    assert_eq!(r.period_us, 1_000_000);
    assert_eq!(
        (r.floor_bps, r.initial_bps, r.ceiling_bps),
        (64_000, 64_000, 100_000_000)
    );
    // The search controller reads the seed's bands (issue 12 point 8).
    assert_eq!(r.mode, airpack_core::gateway::rate::Mode::Search);
    assert_eq!(
        r.search,
        airpack_core::gateway::search::SearchConfig::default()
    );
    // The search controller's network MOS is the rank rule's k-th worst
    // call (base 4: the 2nd worst of 4-15 calls, the 3rd of 16-63), the
    // seed's the worst call (issue 12 point 8, docs/gateway.md).
    assert_eq!(g.vpm.rank_base, 4);
    assert_eq!(g.vpm.percentile, 0.0);
    let seed = parse(
        "t.toml",
        &format!("{BASE}controller = \"seed\"\n"),
        &[],
        &[],
    )
    .unwrap()
    .gateway
    .unwrap();
    assert_eq!(seed.vpm.percentile, 0.0);
    assert_eq!(seed.vpm.rank_base, 0, "the seed reads the worst call");
    assert_eq!(seed.rate.mode, airpack_core::gateway::rate::Mode::Seed);
    assert_eq!(g.voice_rules.len(), 1);
    assert_eq!(g.voice_rules[0].protocol, Some(17));
    assert_eq!(g.voice_rules[0].ports, Some(16_384..=32_767));
    assert_eq!(g.tcp_rules[0].protocol, Some(6));
    assert_eq!(g.vpm.window_us, 4_000_000);
    assert_eq!(g.link_rate_bps, 1_000_000_000);
    // Off by default.
    assert!(parse("t.toml", "", &[], &[]).unwrap().gateway.is_none());
}

#[test]
fn keys_and_rules_are_read() {
    let p = parse(
        "t.toml",
        &format!(
            "{BASE}period_ms = 250\nq_good = 4.0\nr_choke = -0.25\nmin_rate_kbps = 100\n\
             initial_rate_kbps = 2000\nmos_window_ms = 1000\nmos_percentile = 0.5\n\
             [[gateway.voice]]\nprotocol = \"udp\"\ndst_ports = \"5004-5005\"\n\
             [[gateway.voice]]\nprotocol = 17\ndscp = 46\n\
             [[gateway.tcp]]\nports = 80\n"
        ),
        &[],
        &[],
    )
    .unwrap();
    let g = p.gateway.unwrap();
    assert_eq!(g.rate.period_us, 250_000);
    assert_eq!((g.rate.q_good, g.rate.r_choke), (4.0, -0.25));
    assert_eq!((g.rate.floor_bps, g.rate.initial_bps), (100_000, 2_000_000));
    assert_eq!(g.vpm.window_us, 1_000_000);
    assert_eq!(g.vpm.percentile, 0.5);
    assert_eq!(
        g.vpm.rank_base, 0,
        "a set percentile turns the rank rule off"
    );
    assert_eq!(g.voice_matches.len(), 2);
    assert_eq!(g.voice_matches[0].dst_ports, Some((5004, 5005)));
    assert_eq!(g.voice_matches[1].dscp, Some((46, 46)));
    assert_eq!(g.tcp_rules.len(), 1);
    assert_eq!(g.tcp_rules[0].protocol, Some(6), "tcp implied");
    assert_eq!(g.tcp_rules[0].ports, Some(80..=80));
}

#[test]
fn errors_name_the_key() {
    let e = err("[gateway]\nenabled = true\n");
    assert!(
        e.contains("gateway.interface") && e.contains("required"),
        "{e}"
    );
    let cases = [
        ("q_fair = 4.5\n", "gateway.q_good"),
        ("r_poor = 0.1\n", "gateway.r_good"),
        ("period_ms = 1\n", "gateway.period_ms"),
        ("min_rate_kbps = 0\n", "gateway.min_rate_kbps"),
        ("initial_rate_kbps = 1\n", "gateway.initial_rate_kbps"),
        ("max_rate_kbps = 2000000\n", "gateway.max_rate_kbps"),
        ("mos_percentile = 2\n", "gateway.mos_percentile"),
        ("mos_rank_base = 1\n", "gateway.mos_rank_base"),
        ("mos_rank_base = 2000\n", "gateway.mos_rank_base"),
        (
            "mos_rank_base = 8\nmos_percentile = 0.1\n",
            "gateway.mos_rank_base",
        ),
        ("max_flows = 0\n", "gateway.max_flows"),
        ("flow_idle_ms = 100\n", "gateway.flow_idle_ms"),
        ("call_idle_ms = 100\n", "gateway.call_idle_ms"),
        ("link_rate_mbps = 0\n", "gateway.link_rate_mbps"),
        ("controller = \"pid\"\n", "gateway.controller"),
        ("settle_ms = 0\n", "gateway.settle_ms"),
        ("probe_ms = 5\n", "gateway.probe_ms"),
        ("bad_memory_ms = 0\n", "gateway.bad_memory_ms"),
        ("fast_up = -1\n", "gateway.fast_up"),
        ("first_up = 11\n", "gateway.first_up"),
        (
            "start_per_call_kbps = 200000\n",
            "gateway.start_per_call_kbps",
        ),
        ("near = 0.95\n", "gateway.near"),
        ("bogus = 1\n", "gateway.bogus"),
    ];
    for (line, key) in cases {
        let e = err(&format!("{BASE}{line}"));
        assert!(e.contains(key), "{line}: {e}");
    }
    let e = err(&format!("{BASE}[[gateway.voice]]\nprotocol = \"tcp\"\n"));
    assert!(e.contains("t.toml:5: key `gateway.voice.protocol`"), "{e}");
    let e = err(&format!(
        "{BASE}[[gateway.voice]]\nprotocol = \"udp\"\nports = \"9-1\"\n"
    ));
    assert!(
        e.contains("gateway.voice.ports") && e.contains("empty"),
        "{e}"
    );
    let e = err(&format!("{BASE}[[gateway.tcp]]\nprotocol = \"udp\"\n"));
    assert!(e.contains("gateway.tcp.protocol"), "{e}");
    let e = err(&format!("{BASE}[[gateway.tcp]]\nmark = 1\n"));
    assert!(e.contains("mark"), "{e}");
    let e = err("[gateway]\nenabled = true\ninterface = \"airpack0\"\n");
    assert!(e.contains("TUN"), "{e}");
}

#[test]
fn tcp_improvement_keys() {
    let p = parse("t.toml", BASE, &[], &[]).unwrap();
    assert!(p.gateway.unwrap().tim.is_none(), "off by default");
    let p = parse(
        "t.toml",
        &format!(
            "{BASE}tcp_improvement = true\nq_min = 3\nq_max = 9\nrecovery_segments = 16\n\
             window_control = false\nmax_flows = 10\nflow_idle_ms = 5000\n"
        ),
        &[],
        &[],
    )
    .unwrap();
    let t = p.gateway.unwrap().tim.expect("module plan");
    assert_eq!(t.tun, "airpackgw");
    let c = t.config;
    assert_eq!(
        (c.flows.q_min, c.flows.q_max, c.flows.max_flows),
        (3, 9, 10)
    );
    assert_eq!((c.recovery.segments, c.recovery.max_flows), (16, 10));
    assert_eq!(c.flows.idle_timeout_us, 5_000_000);
    assert!(!c.window_control && c.local_recovery && c.redundant_drop && c.compensate_hop);
    for (extra, key) in [
        ("q_min = 7\nq_max = 6\n", "q_max"),
        ("q_min = 0\n", "q_max"),
        ("tcp_tun = \"fifteen-chars-x\"\n", "tcp_tun"),
        ("recovery_segments = 0\n", "recovery_segments"),
    ] {
        let e = err(&format!("{BASE}tcp_improvement = true\n{extra}"));
        assert!(e.contains(key), "{extra}: {e}");
    }
    let e = err("[gateway]\nenabled = true\ninterface = \"gwi\"\ntcp_tun = \"gw\"\n");
    assert!(e.contains("tcp_tun"), "{e}");
}

#[test]
fn controller_keys() {
    let p = parse(
        "t.toml",
        &format!(
            "{BASE}controller = \"seed\"\nsettle_ms = 3000\nprobe_ms = 1500\nfast_up = 1.0\n\
             near = 0.2\nbad_memory_ms = 60000\ninitial_rate_kbps = 1000\n\
             first_up = 0.5\nstart_per_call_kbps = 20\n"
        ),
        &[],
        &[],
    )
    .unwrap();
    let r = p.gateway.unwrap().rate;
    assert_eq!(r.mode, airpack_core::gateway::rate::Mode::Seed);
    assert_eq!(
        (
            r.search.settle_us,
            r.search.probe_us,
            r.search.bad_memory_us
        ),
        (3_000_000, 1_500_000, 60_000_000)
    );
    assert_eq!((r.search.fast_up, r.search.near), (1.0, 0.2));
    assert_eq!(
        (r.search.first_up, r.search.start_per_call_bps),
        (0.5, 20_000)
    );
    // The seed's controller as first measured.
    assert_eq!(
        r,
        airpack_core::gateway::rate::RateConfig {
            search: r.search,
            ..airpack_core::gateway::rate::RateConfig::seed()
        }
    );
}

#[test]
fn mos_rank_base_is_read_and_0_falls_back_to_the_percentile() {
    let g = |extra: &str| {
        parse("t.toml", &format!("{BASE}{extra}"), &[], &[])
            .unwrap()
            .gateway
            .unwrap()
            .vpm
    };
    assert_eq!(g("mos_rank_base = 8\n").rank_base, 8);
    let v = g("controller = \"seed\"\nmos_rank_base = 8\n");
    assert_eq!((v.rank_base, v.percentile), (8, 0.0));
    let v = g("mos_rank_base = 0\nmos_percentile = 0.25\n");
    assert_eq!((v.rank_base, v.percentile), (0, 0.25));
    let v = g("mos_rank_base = 0\n");
    assert_eq!((v.rank_base, v.percentile), (0, 0.0), "off: the worst call");
}
