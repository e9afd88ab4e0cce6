//! Two nodes, one hop, both running `airpack run` (issue 3, point 12):
//! small UDP flows arrive complete, byte-identical and in order; bundles are
//! counted with an aggregation ratio of at least 5; TCP and ping through the
//! same nodes (also steered, as opportunistic traffic) are unaffected; stats,
//! peers and /metrics answer; SIGTERM leaves no kernel state behind.

mod common;
use common::*;
use std::time::Duration;

fn config(iface: &str, peer: &str) -> String {
    format!(
        r#"
[daemon]
interfaces = ["{iface}"]
prometheus = "127.0.0.1:9477"
[aggregation]
hold_time_us = 5000
link_mode = "fixed"
[[class]]
class = "bundle"
protocol = "udp"
ports = "16000-32000"
[[class]]
class = "opportunistic"
protocol = "tcp"
[[class]]
class = "opportunistic"
protocol = "icmp"
[[peer]]
address = "{peer}"
"#
    )
}

#[test]
fn two_nodes_one_hop() {
    if !can_run("two_nodes_one_hop") {
        return;
    }
    let mut net = Net::new("two");
    let a = net.ns("a");
    let b = net.ns("b");
    net.link(&a, "va", "10.91.0.1/24", &b, "vb", "10.91.0.2/24");
    let mut da = net.daemon(&a, &config("va", "10.91.0.2"), &[]);
    let mut db = net.daemon(&b, &config("vb", "10.91.0.1"), &[]);

    // Kernel state is in place.
    let progs = steering_programs(&net, &a, "va");
    assert_eq!(progs.len(), 1, "one steering filter on va's egress");
    assert!(
        program_steers(&progs[0], 17, 17000, 20000),
        "the voice class"
    );
    assert!(!program_steers(&progs[0], 17, 53, 53), "other UDP");

    // 20 flows x 250 packets of 60 bytes (20 IP + 8 UDP + 32), ~10 000 packets/s.
    let load = Load {
        src: "10.91.0.1".parse().unwrap(),
        dst: "10.91.0.2".parse().unwrap(),
        src_port: 17000,
        dst_port: 20000,
        flows: 20,
        per_flow: 250,
        payload_len: 32,
        pps: 10_000,
    };
    let rx = receive_load(
        &b,
        load.clone(),
        load.total(),
        Duration::from_secs(3),
        Duration::from_secs(60),
    );
    let sent = send_load(&a, load.clone()).join().unwrap();
    assert_eq!(sent, load.total());
    let log = rx.join().unwrap();

    let sa = da.stats();
    let sb = db.stats();
    let t = &sa["total"];
    assert_eq!(t["packets_in"].as_u64().unwrap(), load.total(), "A: {t}");
    assert!(t["bundles"].as_u64().unwrap() > 0, "A sent no bundles: {t}");
    let ratio = t["aggregation_ratio"].as_f64().unwrap();
    assert!(ratio >= 5.0, "aggregation ratio {ratio} < 5: {t}");
    assert_eq!(t["dropped_total"], 0, "{t}");
    // Every packet travelled in a bundle B split, or alone (a queue holding
    // one packet at its deadline sends it unchanged).
    let (bundled, alone) = assert_bundling_identity(t, &sb["total"], load.total());
    // Complete and byte-identical; in order unless some went alone.
    assert_delivered(&log, load.flows, load.per_flow, alone);
    assert_eq!(
        sb["total"]["daemon"]["tun_written"].as_u64().unwrap(),
        bundled,
        "B wrote every packet it split into its TUN"
    );
    assert_eq!(sb["total"]["decode_errors_total"], 0);
    // The kernel's view of the TUNs agrees: every packet A's daemon read came
    // through its TUN queue without a drop, every packet B's wrote went in.
    assert_eq!(sa["steered_interfaces"], serde_json::json!(["va"]));
    assert_eq!(sa["tun"]["queue_drops"], 0, "{}", sa["tun"]);
    assert!(sa["tun"]["read_by_daemon"].as_u64().unwrap() >= load.total());
    assert!(sb["tun"]["written_by_daemon"].as_u64().unwrap() >= bundled);
    assert_eq!(sb["total"]["daemon"]["rx_rejected"]["unknown_peer"], 0);
    assert_eq!(sb["total"]["daemon"]["rx_rejected"]["spoofed_source"], 0);
    println!(
        "two nodes: {} packets, {bundled} in {} bundles, {alone} alone, ratio {ratio:.1}",
        load.total(),
        t["bundles"]
    );

    // TCP (steered as opportunistic) and ping through the same nodes.
    let (s, r, same) = tcp_transfer(&a, &b, "10.91.0.2".parse().unwrap(), 5001, 2 << 20);
    assert_eq!((s, r), (2 << 20, 2 << 20));
    assert!(same, "TCP data corrupted");
    assert_eq!(ping(&a, "10.91.0.2".parse().unwrap(), 5), 5, "ping lost");
    let after = da.stats();
    assert!(
        after["total"]["packets_in"].as_u64().unwrap() > load.total(),
        "TCP/ICMP were steered through the daemon"
    );

    // CLI tables and JSON.
    let table = da.cli(&["stats"]);
    assert!(
        table.contains("aggregation_ratio") && table.contains("10.91.0.2"),
        "{table}"
    );
    let peers = da.cli(&["peers", "--json"]);
    let pv: serde_json::Value = serde_json::from_str(&peers).unwrap();
    assert_eq!(pv["peers"][0]["peer"], "10.91.0.2");
    assert_eq!(pv["peers"][0]["configured"], true);
    assert_eq!(pv["peers"][0]["accepts_bundles"], true);
    assert_eq!(pv["peers"][0]["link"], "static");
    assert_eq!(pv["peers"][0]["spoofed_source"], 0);
    let human = da.cli(&["peers"]);
    assert!(human.contains("10.91.0.2"), "{human}");

    // Prometheus endpoint inside A's namespace.
    let metrics = in_ns(&a, || {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect("127.0.0.1:9477").unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        s
    })
    .join()
    .unwrap();
    assert!(metrics.starts_with("HTTP/1.0 200 OK"), "{metrics}");
    assert!(metrics.contains("\nairpack_bundles_total "), "{metrics}");
    assert!(
        metrics.contains("airpack_peer_packets_in_total{peer=\"10.91.0.2\"}"),
        "{metrics}"
    );

    // Clean stop: exit 0, nothing left in the kernel.
    assert_eq!(da.stop(), 0, "log:\n{}", da.log_text());
    assert_eq!(db.stop(), 0, "log:\n{}", db.log_text());
    assert!(
        steering_gone(&net, &a) && steering_gone(&net, &b),
        "steering left behind"
    );
    assert!(!da.socket.exists(), "control socket left behind");
}

#[test]
fn config_error_exits_nonzero_naming_key_and_line() {
    // No root needed: the config is checked before anything is opened.
    let dir = std::env::temp_dir().join(format!("apdt-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.toml");
    std::fs::write(
        &f,
        "[daemon]\nmode = \"hop-by-hop\"\n\n[aggregation]\nhold_tme_us = 5000\n",
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["run", "--config"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml:5") && err.contains("hold_tme_us"),
        "{err}"
    );
    // --check prints the effective config, flags included.
    std::fs::write(&f, "[aggregation]\nhold_time_us = 5000\n").unwrap();
    let out = std::process::Command::new(BIN)
        .args([
            "run",
            "--check",
            "--hold-time-us",
            "1234",
            "--set",
            "daemon.tun=ap9",
            "--config",
        ])
        .arg(&f)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("hold_time_us = 1234") && text.contains("tun = \"ap9\""),
        "{text}"
    );
    // No link_mode in the file: the effective one, hop-by-hop's default.
    assert!(text.contains("link_mode = \"adaptive\""), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
