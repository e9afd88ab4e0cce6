//! A three-node chain A - B - C (issue 3, point 12):
//!
//! - hop-by-hop: every node runs airpack; A aggregates toward B, B decodes,
//!   the kernel forwards the inner packets and B re-aggregates them toward C;
//! - end-to-end: A and C tunnel to each other; B (also running airpack)
//!   only forwards the bundles, never decoding them.
//!
//! In both, the UDP flows arrive complete, byte-identical and in order.

mod common;
use common::*;
use std::time::Duration;

struct Chain {
    net: Net,
    a: String,
    b: String,
    c: String,
}

fn chain(tag: &str) -> Chain {
    let mut net = Net::new(tag);
    let a = net.ns("a");
    let b = net.ns("b");
    let c = net.ns("c");
    net.link(&a, "ab", "10.92.1.1/24", &b, "ba", "10.92.1.2/24");
    net.link(&b, "bc", "10.92.2.2/24", &c, "cb", "10.92.2.3/24");
    net.ip(&a, &["route", "add", "10.92.2.0/24", "via", "10.92.1.2"]);
    net.ip(&c, &["route", "add", "10.92.1.0/24", "via", "10.92.2.2"]);
    Chain { net, a, b, c }
}

fn load() -> Load {
    Load {
        src: "10.92.1.1".parse().unwrap(),
        dst: "10.92.2.3".parse().unwrap(),
        src_port: 17000,
        dst_port: 20000,
        flows: 16,
        per_flow: 250,
        payload_len: 32,
        pps: 8_000,
    }
}

fn peer<'a>(stats: &'a serde_json::Value, addr: &str) -> &'a serde_json::Value {
    stats["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["peer"] == addr)
        .unwrap_or_else(|| panic!("no peer {addr} in {stats}"))
}

#[test]
fn chain_hop_by_hop_reaggregates() {
    if !can_run("chain_hop_by_hop_reaggregates") {
        return;
    }
    let ch = chain("hbh");
    let cfg = |peers: &[&str]| {
        let mut s = format!(
            "[daemon]\nmode = \"hop-by-hop\"\n[aggregation]\nhold_time_us = 5000\nlink_mode = \"fixed\"\n{VOICE_CLASS}"
        );
        for p in peers {
            s.push_str(&format!("[[peer]]\naddress = \"{p}\"\n"));
        }
        s
    };
    let mut da = ch.net.daemon(&ch.a, &cfg(&["10.92.1.2"]), &[]);
    let mut db = ch.net.daemon(&ch.b, &cfg(&["10.92.1.1", "10.92.2.3"]), &[]);
    let mut dc = ch.net.daemon(&ch.c, &cfg(&["10.92.2.2"]), &[]);

    let l = load();
    let rx = receive_load(
        &ch.c,
        l.clone(),
        l.total(),
        Duration::from_secs(3),
        Duration::from_secs(60),
    );
    assert_eq!(send_load(&ch.a, l.clone()).join().unwrap(), l.total());
    let log = rx.join().unwrap();

    let (sa, sb, sc) = (da.stats(), db.stats(), dc.stats());
    // Hop 1: A -> B.
    let a_to_b = peer(&sa, "10.92.1.2");
    assert!(
        a_to_b["aggregation_ratio"].as_f64().unwrap() >= 5.0,
        "A->B {a_to_b}"
    );
    let (_, alone_ab) = assert_bundling_identity(a_to_b, peer(&sb, "10.92.1.1"), l.total());
    // Hop 2: B decoded, the kernel forwarded, B re-aggregated toward C.
    let b_to_c = peer(&sb, "10.92.2.3");
    assert_eq!(
        b_to_c["packets_in"].as_u64().unwrap(),
        l.total(),
        "B re-steered every packet: {b_to_c}"
    );
    assert!(
        b_to_c["aggregation_ratio"].as_f64().unwrap() >= 5.0,
        "B->C {b_to_c}"
    );
    let (_, alone_bc) = assert_bundling_identity(b_to_c, peer(&sc, "10.92.2.2"), l.total());
    assert_bundling_identity(b_to_c, &sc["total"], l.total());
    // Complete and byte-identical; in order unless some went alone on a hop.
    assert_delivered(&log, l.flows, l.per_flow, alone_ab + alone_bc);
    for s in [&sa, &sb, &sc] {
        assert_eq!(
            s["total"]["daemon"]["rx_rejected"]["spoofed_source"], 0,
            "{s}"
        );
        assert_eq!(s["total"]["dropped_total"], 0);
    }
    println!(
        "hop-by-hop: A->B {} bundles (ratio {:.1}), B->C {} bundles (ratio {:.1})",
        a_to_b["bundles"],
        a_to_b["aggregation_ratio"].as_f64().unwrap(),
        b_to_c["bundles"],
        b_to_c["aggregation_ratio"].as_f64().unwrap()
    );
    // TCP and ping end to end through the chain are unaffected.
    let (s, r, same) = tcp_transfer(&ch.a, &ch.c, "10.92.2.3".parse().unwrap(), 5002, 1 << 20);
    assert!(s == r && same, "TCP through the chain: sent {s}, got {r}");
    assert_eq!(ping(&ch.a, "10.92.2.3".parse().unwrap(), 3), 3);
    for d in [&mut da, &mut db, &mut dc] {
        assert_eq!(d.stop(), 0, "log:\n{}", d.log_text());
    }
}

#[test]
fn chain_end_to_end_b_only_forwards() {
    if !can_run("chain_end_to_end_b_only_forwards") {
        return;
    }
    let ch = chain("e2e");
    // No link_mode: end-to-end's default, the fixed hold (hop-by-hop's is
    // adaptive), which this test's bundling relies on.
    let cfg = |peers: &[(&str, &str)]| {
        let mut s = format!(
            "[daemon]\nmode = \"end-to-end\"\n[aggregation]\nhold_time_us = 5000\n{VOICE_CLASS}"
        );
        for (p, ips) in peers {
            s.push_str(&format!(
                "[[peer]]\naddress = \"{p}\"\nallowed_ips = [\"{ips}\"]\n"
            ));
        }
        s
    };
    let mut da = ch
        .net
        .daemon(&ch.a, &cfg(&[("10.92.2.3", "10.92.2.0/24")]), &[]);
    let mut db = ch.net.daemon(
        &ch.b,
        &cfg(&[("10.92.1.1", "10.92.1.1/32"), ("10.92.2.3", "10.92.2.3/32")]),
        &[],
    );
    let mut dc = ch
        .net
        .daemon(&ch.c, &cfg(&[("10.92.1.1", "10.92.1.0/24")]), &[]);

    let l = load();
    let rx = receive_load(
        &ch.c,
        l.clone(),
        l.total(),
        Duration::from_secs(3),
        Duration::from_secs(60),
    );
    assert_eq!(send_load(&ch.a, l.clone()).join().unwrap(), l.total());
    let log = rx.join().unwrap();

    let (sa, sb, sc) = (da.stats(), db.stats(), dc.stats());
    let a_to_c = peer(&sa, "10.92.2.3");
    assert!(
        a_to_c["aggregation_ratio"].as_f64().unwrap() >= 5.0,
        "A->C {a_to_c}"
    );
    let (_, alone) = assert_bundling_identity(a_to_c, peer(&sc, "10.92.1.1"), l.total());
    assert_bundling_identity(a_to_c, &sc["total"], l.total());
    assert_delivered(&log, l.flows, l.per_flow, alone);
    // B saw the bundles only as forwarded IP packets: it decodes nothing.
    // Its engine sees only the packets A sent alone (plain voice packets
    // forwarded toward C, which B's config names as a peer), no others.
    assert_eq!(
        sb["total"]["packets_in"].as_u64().unwrap(),
        alone,
        "B must not re-aggregate A's bundles: {}",
        sb["total"]
    );
    assert_eq!(
        sb["total"]["bundles_received"], 0,
        "B must not decode: {}",
        sb["total"]
    );
    let bd = &sb["total"]["daemon"];
    assert_eq!(
        bd["tun_read"].as_u64().unwrap(),
        bd["tun_ignored"].as_u64().unwrap() + alone,
        "{bd}"
    );
    println!(
        "end-to-end: A->C {} bundles (ratio {:.1})",
        a_to_c["bundles"],
        a_to_c["aggregation_ratio"].as_f64().unwrap()
    );
    let (s, r, same) = tcp_transfer(&ch.a, &ch.c, "10.92.2.3".parse().unwrap(), 5003, 1 << 20);
    assert!(s == r && same);
    assert_eq!(ping(&ch.a, "10.92.2.3".parse().unwrap(), 3), 3);
    for d in [&mut da, &mut db, &mut dc] {
        assert_eq!(d.stop(), 0, "log:\n{}", d.log_text());
    }
}
