//! Link-local IPv6 next hops (what mesh routing daemons such as babeld
//! install): two nodes joined by a veth that carries only fe80:: addresses;
//! each node's service address (fd00:…/128 on lo) is routed `via fe80::X dev
//! IF`. Peers are configured as `fe80::X%IF`. Bundles flow both ways (sent with
//! sin6_scope_id, accepted from the link-local peer on its interface), every
//! packet arrives, the aggregation ratio is > 1, nothing is rejected; a peer
//! configured on the wrong interface gets no bundles and its bundles are
//! refused as from an unknown peer.

mod common;
use common::*;
use std::time::Duration;

fn config(iface: &str, peer: &str) -> String {
    format!(
        r#"
[daemon]
interfaces = ["{iface}"]
[aggregation]
hold_time_us = 5000
link_mode = "fixed"
[[class]]
class = "bundle"
protocol = "udp"
ports = "16000-32000"
[[peer]]
address = "{peer}"
"#
    )
}

/// Namespaces a and b joined by veth la <-> lb with only the link-local
/// addresses fe80::a / fe80::b (no address autoconfiguration, no DAD), service
/// addresses fd00:91a::1 (a) and fd00:91b::1 (b) on lo, routed via fe80::.
fn setup(tag: &str) -> (Net, String, String) {
    let mut net = Net::new(tag);
    let a = net.ns("a");
    let b = net.ns("b");
    for ns in [&a, &b] {
        net.sysctl(ns, "net.ipv6.conf.all.accept_dad", "0");
        net.sysctl(ns, "net.ipv6.conf.default.accept_dad", "0");
        net.sysctl(ns, "net.ipv6.conf.all.forwarding", "1");
    }
    sh(&[
        "ip", "link", "add", "la", "netns", &a, "type", "veth", "peer", "name", "lb", "netns", &b,
    ]);
    for (ns, ifn, ll, own, other, gw) in [
        (
            &a,
            "la",
            "fe80::a/64",
            "fd00:91a::1/128",
            "fd00:91b::1/128",
            "fe80::b",
        ),
        (
            &b,
            "lb",
            "fe80::b/64",
            "fd00:91b::1/128",
            "fd00:91a::1/128",
            "fe80::a",
        ),
    ] {
        net.ip(ns, &["link", "set", "dev", ifn, "addrgenmode", "none"]);
        net.ip(ns, &["-6", "addr", "add", ll, "dev", ifn, "nodad"]);
        net.ip(ns, &["link", "set", ifn, "up"]);
        net.ip(ns, &["-6", "addr", "add", own, "dev", "lo"]);
        net.ip(ns, &["-6", "route", "add", other, "via", gw, "dev", ifn]);
    }
    // Only link-local addresses on the veth: no global address to fall back on.
    let addrs = net.ip(&a, &["-6", "addr", "show", "dev", "la"]);
    assert!(
        addrs.contains("fe80::a/64") && !addrs.contains("scope global"),
        "{addrs}"
    );
    (net, a, b)
}

fn load(src: &str, dst: &str, port: u16) -> Load {
    Load {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        src_port: port,
        dst_port: port + 1000,
        flows: 10,
        per_flow: 300,
        payload_len: 32,
        pps: 10_000,
    }
}

/// Sends `l` from `from` to `to`, asserts every packet arrived intact.
fn deliver(from: &str, to: &str, l: &Load) {
    let rx = receive_load(
        to,
        l.clone(),
        l.total(),
        Duration::from_secs(3),
        Duration::from_secs(60),
    );
    assert_eq!(send_load(from, l.clone()).join().unwrap(), l.total());
    rx.join().unwrap().assert_complete(l.flows, l.per_flow);
}

#[test]
fn link_local_next_hops_both_ways() {
    if !can_run("link_local_next_hops_both_ways") {
        return;
    }
    let (net, a, b) = setup("ll");
    let mut da = net.daemon(&a, &config("la", "fe80::b%la"), &[]);
    let mut db = net.daemon(&b, &config("lb", "fe80::a%lb"), &[]);

    let ab = load("fd00:91a::1", "fd00:91b::1", 17000);
    let ba = load("fd00:91b::1", "fd00:91a::1", 18000);
    deliver(&a, &b, &ab);
    deliver(&b, &a, &ba);

    let (sa, sb) = (da.stats(), db.stats());
    for (name, s, other, l) in [("A", &sa, &sb, &ab), ("B", &sb, &sa, &ba)] {
        let t = &s["total"];
        assert_eq!(t["packets_in"].as_u64().unwrap(), l.total(), "{name}: {t}");
        let bundles = t["bundles"].as_u64().unwrap();
        assert!(bundles > 0, "{name} sent no bundles: {t}");
        let ratio = t["aggregation_ratio"].as_f64().unwrap();
        assert!(ratio > 1.0, "{name}: aggregation ratio {ratio} <= 1: {t}");
        assert_eq!(t["daemon"]["send_errors"]["other"], 0, "{name}: {t}");
        let o = &other["total"];
        assert_eq!(o["bundles_received"].as_u64().unwrap(), bundles, "{o}");
        // A lone packet may leave unbundled; everything else went through B's TUN.
        let received = o["packets_received"].as_u64().unwrap();
        assert_eq!(
            o["daemon"]["tun_written"].as_u64().unwrap(),
            received,
            "{o}"
        );
        assert_eq!(
            received + t["daemon"]["unchanged_sent"].as_u64().unwrap(),
            l.total(),
            "{name}: {t}"
        );
        assert_eq!(o["daemon"]["rx_rejected"]["unknown_peer"], 0, "{o}");
        assert_eq!(o["daemon"]["rx_rejected"]["spoofed_source"], 0, "{o}");
        println!(
            "link-local {name}: {} packets in {bundles} bundles, ratio {ratio:.1}",
            l.total()
        );
    }
    // The peer is named as configured.
    let pa = da.peers();
    assert_eq!(pa["peers"][0]["peer"], "fe80::b%la", "{pa}");
    assert_eq!(pa["peers"][0]["configured"], true, "{pa}");
    assert_eq!(da.stop(), 0);
    assert_eq!(db.stop(), 0);
}

#[test]
fn link_local_peer_on_wrong_interface_is_not_used() {
    if !can_run("link_local_peer_on_wrong_interface_is_not_used") {
        return;
    }
    let (net, a, b) = setup("llx");
    // A second interface in A, so "fe80::b%dx" names a real but wrong one.
    net.ip(
        &a,
        &["link", "add", "dx", "type", "veth", "peer", "name", "xd"],
    );
    net.ip(&a, &["link", "set", "dx", "up"]);
    net.ip(&a, &["link", "set", "dev", "xd", "up"]);
    let da = net.daemon(&a, &config("la", "fe80::b%dx"), &[]);
    let db = net.daemon(&b, &config("lb", "fe80::a%lb"), &[]);

    // A -> B: the next hop fe80::b is reached via la, not dx: not the
    // configured peer, so packets pass unchanged (and still arrive).
    let ab = load("fd00:91a::1", "fd00:91b::1", 17000);
    deliver(&a, &b, &ab);
    let ta = &da.stats()["total"];
    assert_eq!(ta["bundles"], 0, "{ta}");
    assert_eq!(
        ta["daemon"]["passthrough_not_peer"].as_u64().unwrap(),
        ab.total(),
        "{ta}"
    );
    // B -> A: B bundles to fe80::a%lb; A hears fe80::b on la, not on dx:
    // refused as from an unknown peer.
    let ba = load("fd00:91b::1", "fd00:91a::1", 18000);
    let sent = send_load(&b, ba.clone()).join().unwrap();
    assert_eq!(sent, ba.total());
    let bundles = wait_bundles(&db);
    wait_until("A refused B's bundles", Duration::from_secs(10), || {
        da.stats()["total"]["daemon"]["rx_rejected"]["unknown_peer"]
            .as_u64()
            .unwrap()
            >= bundles
    });
    let ta = &da.stats()["total"];
    assert_eq!(ta["bundles_received"], 0, "{ta}");
}

/// B's bundle count once it stopped growing (bounded).
fn wait_bundles(d: &Daemon) -> u64 {
    let mut last = u64::MAX;
    for _ in 0..100 {
        let n = d.stats()["total"]["bundles"].as_u64().unwrap();
        if n == last && n > 0 {
            return n;
        }
        last = n;
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("B's bundle count did not settle");
}
