//! Transport and link-mode variants of `airpack run` between two nodes:
//! IPv6 (raw IP bundles over IPv6), bundles over UDP, and hold-while-busy
//! driven by the kernel's link-busy signal (SIOCOUTQ).

mod common;
use common::*;
use std::time::Duration;

#[test]
fn ipv6_two_nodes() {
    if !can_run("ipv6_two_nodes") {
        return;
    }
    let mut net = Net::new("v6");
    let a = net.ns("a");
    let b = net.ns("b");
    net.link(&a, "va", "10.98.0.1/24", &b, "vb", "10.98.0.2/24");
    for (ns, ifn, addr) in [(&a, "va", "fd00:98::1/64"), (&b, "vb", "fd00:98::2/64")] {
        net.ip(ns, &["-6", "addr", "add", addr, "dev", ifn, "nodad"]);
        net.sysctl(ns, "net.ipv6.conf.all.forwarding", "1");
    }
    let cfg = |peer: &str| {
        format!("[aggregation]\nhold_time_us = 5000\nlink_mode = \"fixed\"\n{VOICE_CLASS}[[peer]]\naddress = \"{peer}\"\n")
    };
    let mut da = net.daemon(&a, &cfg("fd00:98::2"), &[]);
    let mut db = net.daemon(&b, &cfg("fd00:98::1"), &[]);
    let l = Load {
        src: "fd00:98::1".parse().unwrap(),
        dst: "fd00:98::2".parse().unwrap(),
        src_port: 17000,
        dst_port: 20000,
        flows: 8,
        per_flow: 250,
        payload_len: 12, // 40 + 8 + 12 = 60-byte IPv6 packets
        pps: 8000,
    };
    let rx = receive_load(
        &b,
        l.clone(),
        l.total(),
        Duration::from_secs(3),
        Duration::from_secs(30),
    );
    assert_eq!(send_load(&a, l.clone()).join().unwrap(), l.total());
    let log = rx.join().unwrap();
    let s = da.stats();
    let p = &s["peers"][0];
    assert_eq!(p["peer"], "fd00:98::2");
    assert!(p["aggregation_ratio"].as_f64().unwrap() >= 5.0, "{p}");
    let (_, alone) = assert_bundling_identity(p, &db.stats()["total"], l.total());
    assert_delivered(&log, l.flows, l.per_flow, alone);
    assert_eq!(da.stop(), 0);
    assert_eq!(db.stop(), 0);
}

#[test]
fn udp_transport() {
    if !can_run("udp_transport") {
        return;
    }
    let mut net = Net::new("udp");
    let a = net.ns("a");
    let b = net.ns("b");
    net.link(&a, "va", "10.99.0.1/24", &b, "vb", "10.99.0.2/24");
    let cfg = |peer: &str| {
        format!(
            "[daemon]\ntransport = \"udp\"\nudp_port = 4150\n[aggregation]\nhold_time_us = 5000\nlink_mode = \"fixed\"\nencoding = \"simplemux\"\n{VOICE_CLASS}[[peer]]\naddress = \"{peer}\"\n"
        )
    };
    let mut da = net.daemon(&a, &cfg("10.99.0.2"), &[]);
    let mut db = net.daemon(&b, &cfg("10.99.0.1"), &[]);
    let l = Load {
        src: "10.99.0.1".parse().unwrap(),
        dst: "10.99.0.2".parse().unwrap(),
        src_port: 17000,
        dst_port: 20000,
        flows: 8,
        per_flow: 250,
        payload_len: 32,
        pps: 8000,
    };
    let rx = receive_load(
        &b,
        l.clone(),
        l.total(),
        Duration::from_secs(3),
        Duration::from_secs(30),
    );
    assert_eq!(send_load(&a, l.clone()).join().unwrap(), l.total());
    let log = rx.join().unwrap();
    let s = da.stats();
    assert!(
        s["total"]["aggregation_ratio"].as_f64().unwrap() >= 5.0,
        "{}",
        s["total"]
    );
    let (_, alone) = assert_bundling_identity(&s["total"], &db.stats()["total"], l.total());
    assert_delivered(&log, l.flows, l.per_flow, alone);
    let peers = da.peers();
    assert_eq!(peers["peers"][0]["encoding"], "simplemux");
    assert_eq!(
        peers["peers"][0]["outer_overhead"], 28,
        "UDP over IPv4 overhead"
    );
    assert_eq!(
        db.stats()["total"]["bundles_received"],
        s["total"]["bundles"]
    );
    assert_eq!(da.stop(), 0);
    assert_eq!(db.stop(), 0);
}

#[test]
fn hold_while_busy_follows_the_link() {
    if !can_run("hold_while_busy_follows_the_link") {
        return;
    }
    let mut net = Net::new("hwb");
    let a = net.ns("a");
    let b = net.ns("b");
    net.link(&a, "va", "10.100.0.1/24", &b, "vb", "10.100.0.2/24");
    let cfg = |peer: &str| {
        format!(
            "[aggregation]\nhold_time_us = 20000\nlink_mode = \"hold-while-busy\"\n{VOICE_CLASS}[[peer]]\naddress = \"{peer}\"\n"
        )
    };
    let mut da = net.daemon(&a, &cfg("10.100.0.2"), &[]);
    let mut db = net.daemon(&b, &cfg("10.100.0.1"), &[]);

    // Idle link: one 50 packets/s flow leaves at once, nothing waits for the 20 ms hold.
    let l = Load {
        src: "10.100.0.1".parse().unwrap(),
        dst: "10.100.0.2".parse().unwrap(),
        src_port: 17000,
        dst_port: 20000,
        flows: 1,
        per_flow: 50,
        payload_len: 32,
        pps: 50,
    };
    let rx = receive_load(
        &b,
        l.clone(),
        l.total(),
        Duration::from_secs(3),
        Duration::from_secs(10),
    );
    assert_eq!(send_load(&a, l.clone()).join().unwrap(), l.total());
    rx.join().unwrap().assert_complete(1, 50);
    let s = da.stats();
    let t = &s["total"];
    assert_eq!(
        t["sent_on_timeout"], 0,
        "an idle link must not make packets wait: {t}"
    );
    let mean = t["hold_time_us"]["mean"].as_f64().unwrap();
    assert!(mean < 2000.0, "mean hold {mean} µs on an idle link: {t}");

    // A slow link (token bucket, 1 Mbit/s): the qdisc backlog makes the link
    // busy, so packets are held and bundled while it drains.
    net.exec(
        &a,
        &[
            "tc", "qdisc", "add", "dev", "va", "root", "tbf", "rate", "1mbit", "burst", "3000",
            "limit", "300000",
        ],
    );
    let before = da.stats()["total"].clone();
    let l2 = Load {
        src_port: 18000,
        dst_port: 21000,
        flows: 4,
        per_flow: 300,
        pps: 2400,
        ..l
    };
    let rx = receive_load(
        &b,
        l2.clone(),
        l2.total(),
        Duration::from_secs(3),
        Duration::from_secs(30),
    );
    assert_eq!(send_load(&a, l2.clone()).join().unwrap(), l2.total());
    let got = rx.join().unwrap();
    let after = da.stats();
    let t2 = &after["total"];
    let bundles = t2["bundles"].as_u64().unwrap() - before["bundles"].as_u64().unwrap();
    let aggregated =
        t2["aggregated_packets"].as_u64().unwrap() - before["aggregated_packets"].as_u64().unwrap();
    assert!(
        t2["daemon"]["busy_transitions"].as_u64().unwrap() > 0,
        "{}",
        t2["daemon"]
    );
    assert!(
        bundles > 0 && aggregated as f64 / bundles as f64 >= 2.0,
        "busy link: {aggregated} packets in {bundles} bundles"
    );
    println!(
        "hold-while-busy: idle mean hold {mean:.0} µs; busy link {aggregated} packets in {bundles} bundles, {} of {} delivered",
        got.total,
        l2.total()
    );
    assert_eq!(got.corrupt, 0);
    assert_eq!(da.stop(), 0);
    assert_eq!(db.stop(), 0);
}
