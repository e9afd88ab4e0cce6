//! The gateway's TCP Improvement Module with a sender WITHOUT SACK
//! (`net.ipv4.tcp_sack = 0` in the server's namespace), window control on,
//! and one data segment dropped in the mesh per download (issue 12 point 4,
//! point 5's "never a stalled connection"). Real kernel TCP through
//! `srv` — `gw` (daemon) — `mob`, IPv4 and IPv6.
//!
//! A sender without SACK has neither RACK nor tail loss probes: it repairs a
//! loss by fast retransmit on its third duplicate ACK, and Linux counts an
//! ACK as a duplicate only if it repeats the window (`FLAG_WIN_UPDATE`
//! otherwise), or by its retransmission timeout, which doubles on every
//! failed attempt. What is checked: every download byte-exact, its drop
//! counted, the module's accounting identity, and the largest pause between
//! two reads of the client that return data below [`GAP_BOUND`]. Printed
//! per download (not asserted, see [`GAP_BOUND`]): the pause and where it
//! ended, the gateway's local retransmissions, the sender's timeouts
//! (`TcpExt: TCPTimeouts` of the server's namespace).
//!
//! Before the fix, 3 to 5 of 16 downloads waited one RTO (205-215 ms, no
//! local retransmission): with the flow's queue above q_max the window was
//! q_min = 2 segments, so one or two segments followed a lost one and
//! neither the gateway nor the sender saw a third duplicate ACK. The core
//! tests (`gateway::tim::nosack_tests`) show the same deterministically.
//!
//! `AIRPACK_TIM_NOSACK_ROUNDS` (default 2) sets how many rounds of one IPv4
//! and one IPv6 download a run makes (each with its own drop).

mod common;

use common::*;
use serde_json::Value;
use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const SRV: &str = "10.77.1.2";
const SRV6: &str = "fd77:1::2";
/// Bytes per download; one segment is dropped after [`DROP_AFTER`] of them.
const BYTES: u64 = 1_500_000;
const DROP_AFTER: u64 = 300_000;
/// The largest pause allowed between two reads that return data: the
/// stalls this test was written for lasted 3 s and more. A loss repaired by
/// the gateway costs a few ms here (the largest pause in 80 downloads after
/// the fix with the machine at load 5: 61 ms), a timeout of the sender
/// 200 ms. Not tighter, because every packet of the flow crosses the
/// daemon, which the test harness runs at nice 19 like everything else:
/// at load 8 the whole path froze for up to 0.98 s in 4 of 10 runs (a
/// server-side capture: no ACK for 936 ms, then the queued ACKs at once;
/// two spurious timeouts of the sender), far from the drop; a tighter
/// bound would test the scheduler, not the module.
const GAP_BOUND: Duration = Duration::from_secs(2);

/// `TcpExt: TCPTimeouts` of namespace `ns` (retransmission timeouts of its sockets).
fn rto_count(net: &Net, ns: &str) -> u64 {
    let text = net.exec(ns, &["cat", "/proc/net/netstat"]);
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
    let i = names
        .split_whitespace()
        .position(|n| n == "TCPTimeouts")
        .expect("TCPTimeouts");
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

fn topology(tag: &str) -> (Net, String, String, String) {
    let (net, srv, gwn, mob) = gateway_net(tag);
    for (ns, dev, a) in [
        (&srv, "s0", "fd77:1::2/64"),
        (&gwn, "wired0", "fd77:1::1/64"),
        (&gwn, "mesh0", "fd77:2::1/64"),
        (&mob, "m0", "fd77:2::2/64"),
    ] {
        net.ip(ns, &["-6", "addr", "add", a, "dev", dev, "nodad"]);
    }
    net.ip(&srv, &["-6", "route", "add", "default", "via", "fd77:1::1"]);
    net.ip(&mob, &["-6", "route", "add", "default", "via", "fd77:2::1"]);
    for ns in [&srv, &mob] {
        for (k, v) in [
            ("net.ipv4.tcp_window_scaling", "1"),
            ("net.ipv4.tcp_timestamps", "1"),
            ("net.ipv4.tcp_ecn", "1"),
        ] {
            net.sysctl(ns, k, v);
        }
    }
    // The sender offers no SACK (the sysctl covers IPv6 too): none is used.
    net.sysctl(&srv, "net.ipv4.tcp_sack", "0");
    net.sysctl(&mob, "net.ipv4.tcp_sack", "1");
    (net, srv, gwn, mob)
}

fn u(v: &Value, p: &str) -> u64 {
    v.pointer(p)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{p} in {v}"))
}

/// A download from `srv` to `mob` at `addr:port`; returns (sent, received,
/// wrong bytes, the largest pause between two reads returning data and the
/// byte offset where it ended).
fn download(srv: &str, mob: &str, addr: IpAddr, port: u16) -> (u64, u64, u64, Duration, u64) {
    let (tx, rx) = std::sync::mpsc::channel();
    let server = in_ns(srv, move || {
        let l = TcpListener::bind(SocketAddr::new(addr, port)).unwrap();
        tx.send(()).unwrap();
        let (mut c, _) = l.accept().unwrap();
        write_pattern(&mut c, BYTES)
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let client = in_ns(mob, move || {
        let mut c =
            TcpStream::connect_timeout(&SocketAddr::new(addr, port), Duration::from_secs(10))
                .unwrap();
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut buf = vec![0u8; 16_384];
        let (mut got, mut bad, mut gap, mut at) = (0u64, 0u64, Duration::ZERO, 0u64);
        let mut last: Option<Instant> = None;
        loop {
            let n = c.read(&mut buf).expect("client read (stalled connection?)");
            if n == 0 {
                break;
            }
            let now = Instant::now();
            if let Some(l) = last {
                if now - l > gap {
                    (gap, at) = (now - l, got);
                }
            }
            last = Some(now);
            for (k, b) in buf[..n].iter().enumerate() {
                if *b != pattern(got + k as u64) {
                    bad += 1;
                }
            }
            got += n as u64;
        }
        (got, bad, gap, at)
    });
    let (got, bad, gap, at) = client.join().expect("client");
    let sent = server.join().expect("server");
    (sent, got, bad, gap, at)
}

/// nft rules in `mob` dropping one data segment of each port's download
/// after [`DROP_AFTER`] bytes (a counter per rule).
fn drop_rules(ports: &[(u16, bool)]) -> String {
    let mut r =
        String::from("table inet tdrop {\n chain pre {\n  type filter hook prerouting priority -300; policy accept;\n");
    for &(port, v4) in ports {
        let m = if v4 {
            format!("ip saddr {SRV}")
        } else {
            format!("ip6 saddr {SRV6}")
        };
        r += &format!(
            "  {m} tcp sport {port} meta length > 1000 quota until {DROP_AFTER} bytes accept\n  \
             {m} tcp sport {port} meta length > 1000 quota until 1600 bytes counter drop\n"
        );
    }
    r + " }\n}\n"
}

#[test]
fn tim_without_sack_never_stalls_after_a_drop_in_the_mesh() {
    if !can_run("tim_without_sack_never_stalls_after_a_drop_in_the_mesh") {
        return;
    }
    let rounds: u16 = std::env::var("AIRPACK_TIM_NOSACK_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let (net, srv, gwn, mob) = topology("timns");
    let ports: Vec<(u16, bool)> = (0..rounds)
        .flat_map(|k| [(5301 + 2 * k, true), (5302 + 2 * k, false)])
        .collect();
    let f = std::env::temp_dir().join(format!("airpack-timns-{}.nft", std::process::id()));
    std::fs::write(&f, drop_rules(&ports)).unwrap();
    net.exec(&mob, &["nft", "-f", f.to_str().unwrap()]);
    let _ = std::fs::remove_file(&f);
    let config = "[daemon]\ntun = \"aptim0\"\n[gateway]\nenabled = true\ninterface = \"mesh0\"\n\
         period_ms = 200\ninitial_rate_kbps = 20000\nmin_rate_kbps = 20000\nmax_rate_kbps = 20000\n\
         flow_idle_ms = 10000\ntcp_improvement = true\ntcp_tun = \"aptim\"\nwindow_control = true\n";
    let d = net.daemon(&gwn, config, &[]);
    let mut gaps = Vec::new();
    let rto0 = rto_count(&net, &srv);
    for &(port, v4) in &ports {
        let addr: IpAddr = if v4 { SRV } else { SRV6 }.parse().unwrap();
        let (sent, got, bad, gap, at) = download(&srv, &mob, addr, port);
        let t = d.stats()["gateway"]["tcp_improvement"].clone();
        println!(
            "port {port} ({}): {got} of {sent} bytes, {bad} wrong, largest gap {} ms at byte {at}; \
             local retransmissions {}, windows rewritten {}, sender RTOs so far {}, TUN queue drops {}",
            if v4 { "IPv4" } else { "IPv6" },
            gap.as_millis(),
            u(&t, "/generated/local_retransmission"),
            u(&t, "/rewritten/window"),
            rto_count(&net, &srv) - rto0,
            u(&t, "/tun_queue_drops"),
        );
        assert_eq!(
            (sent, got, bad),
            (BYTES, BYTES, 0),
            "port {port}: byte-exact"
        );
        gaps.push((port, gap));
    }
    let counters = net.exec(&mob, &["nft", "list", "table", "inet", "tdrop"]);
    assert_eq!(
        counters.matches("counter packets 1 ").count(),
        ports.len(),
        "one segment dropped per download: {counters}"
    );
    let t = d.stats()["gateway"]["tcp_improvement"].clone();
    assert!(u(&t, "/rewritten/window") > 100, "window control on: {t}");
    assert_eq!(u(&t, "/rewritten/window_zero"), 0, "{t}");
    let read = u(&t, "/read/into_mesh") + u(&t, "/read/from_mesh");
    let out = u(&t, "/written/into_mesh")
        + u(&t, "/written/from_mesh")
        + u(&t, "/dropped/redundant_retransmission")
        + u(&t, "/dropped/write_failed");
    assert_eq!(read, out, "accounting identity: {t}");
    let worst = gaps.iter().max_by_key(|g| g.1).unwrap();
    assert!(
        worst.1 <= GAP_BOUND,
        "a stalled connection: port {} paused {} ms (bound {} ms); all: {gaps:?}",
        worst.0,
        worst.1.as_millis(),
        GAP_BOUND.as_millis()
    );
}
