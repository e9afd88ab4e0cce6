//! Resident memory of `airpack run` on a small router (ignored by default):
//! one daemon in a namespace with 1000 configured peers (all on-link
//! neighbours, answered by a second namespace that owns their addresses),
//! voice-sized UDP traffic toward 600 of them so their queues are used, and
//! VmRSS / VmHWM from /proc/<pid>/status after start, after steady traffic and
//! after a burst that fills every used queue to its packet limit. Run with:
//!
//! ```sh
//! cargo test --release -p airpack --test daemon_memory -- --ignored --nocapture
//! ```
//!
//! Aim: VmHWM under 16 MiB (asserted).

mod common;
use common::*;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

const PEERS: u32 = 1000;
const USED: u32 = 600;
const SELF: &str = "10.94.0.1";

/// The i-th peer: 10.94.0.2 upwards in 10.94.0.0/22.
fn peer(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 94, 0, 2)) + i)
}

/// (VmRSS, VmHWM) of `pid` in KiB.
fn rss_kib(pid: i32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} missing in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Sends `rounds` packets of `len` bytes to each of the first `USED` peers
/// (port 20000), round robin, paced to `pps`, from inside `ns`.
fn traffic(ns: &str, rounds: u32, len: usize, pps: u32) -> u64 {
    in_ns(ns, move || {
        let s = UdpSocket::bind(format!("{SELF}:17000")).unwrap();
        let buf = vec![0x5au8; len];
        let start = Instant::now();
        let mut n = 0u64;
        let mut sent = 0u64;
        for _ in 0..rounds {
            for i in 0..USED {
                if s.send_to(&buf, SocketAddr::from((peer(i), 20000))).is_ok() {
                    sent += 1;
                }
                n += 1;
                if pps > 0 {
                    let due = Duration::from_secs_f64(n as f64 / pps as f64);
                    if let Some(w) = due.checked_sub(start.elapsed()) {
                        std::thread::sleep(w);
                    }
                }
            }
            if start.elapsed() > Duration::from_secs(60) {
                break;
            }
        }
        sent
    })
    .join()
    .unwrap()
}

#[test]
#[ignore = "benchmark: run with --ignored --nocapture (see the module doc)"]
fn bench_memory_1000_peers() {
    if !can_run("bench_memory_1000_peers") {
        return;
    }
    let mut net = Net::new("mem");
    let a = net.ns("a");
    let b = net.ns("b");
    net.link(
        &a,
        "vma",
        &format!("{SELF}/22"),
        &b,
        "vmb",
        "10.94.3.254/22",
    );
    // B owns every peer address (bundles to it are delivered to nobody); A
    // knows their MAC statically (permanent neighbours are not subject to the
    // host-wide neighbour-table limits, which 1000 entries would approach).
    const MAC: &str = "02:00:00:00:94:02";
    net.ip(&b, &["link", "set", "dev", "vmb", "address", MAC]);
    for (ns, line) in [
        (&b, "addr add {}/22 dev vmb\n"),
        (
            &a,
            "neigh replace {} lladdr 02:00:00:00:94:02 dev vma nud permanent\n",
        ),
    ] {
        let batch = net
            .dir
            .join(format!("{}.batch", ns.rsplit('-').next().unwrap()));
        let lines: String = (0..PEERS)
            .map(|i| line.replace("{}", &peer(i).to_string()))
            .collect();
        std::fs::write(&batch, lines).unwrap();
        sh(&["ip", "-n", ns, "-batch", &batch.display().to_string()]);
    }

    let mut cfg = String::from(
        "[daemon]\ninterfaces = [\"vma\"]\n[aggregation]\nhold_time_us = 20000\nlink_mode = \"fixed\"\n\
         [[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"16000-32000\"\n",
    );
    for i in 0..PEERS {
        cfg.push_str(&format!("[[peer]]\naddress = \"{}\"\n", peer(i)));
    }
    let d = net.daemon(&a, &cfg, &[]);
    let pid = d.pid();
    assert_eq!(d.peers()["peers"].as_array().unwrap().len(), PEERS as usize);
    let idle = rss_kib(pid);

    // Steady voice-like load: 172-byte packets (G.711 20 ms + RTP + UDP +
    // IP), 30 000 packets/s over 600 peers for ~4 s.
    let steady_sent = traffic(&a, 200, 172, 30_000);
    let steady = rss_kib(pid);

    // Burst: 256 packets (the default queue_limit_packets) to each used peer
    // at once, faster than the 20 ms hold releases them.
    let burst_sent = traffic(&a, 256, 172, 0);
    std::thread::sleep(Duration::from_millis(300));
    let burst = rss_kib(pid);

    let s = d.stats();
    let t = &s["total"];
    let peers_with_bundles = s["peers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["bundles"].as_u64().unwrap_or(0) > 0)
        .count();
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "memory, {PEERS} peers ({USED} used): idle RSS {:.1} MiB HWM {:.1} MiB; after steady load \
         ({steady_sent} packets) RSS {:.1} MiB HWM {:.1} MiB; after burst ({burst_sent} packets) \
         RSS {:.1} MiB HWM {:.1} MiB; packets_in {} bundles {} ratio {:.1} dropped {} \
         peers with bundles {peers_with_bundles}",
        mib(idle.0),
        mib(idle.1),
        mib(steady.0),
        mib(steady.1),
        mib(burst.0),
        mib(burst.1),
        t["packets_in"],
        t["bundles"],
        t["aggregation_ratio"].as_f64().unwrap_or(0.0),
        t["dropped_total"],
    );
    assert!(
        peers_with_bundles as u32 >= USED * 9 / 10,
        "only {peers_with_bundles} peers got bundles: {t}"
    );
    assert!(
        burst.1 < 16 * 1024,
        "VmHWM {:.1} MiB >= 16 MiB",
        mib(burst.1)
    );
}
