//! RTCP of `airpack voip`: reports flow both ways on the RTP port + 1, and
//! what each side learns from its peer (loss, jitter, round-trip time)
//! agrees with what the peer measured itself.
//!
//! Owns: these checks only. The loopback test runs anywhere; the netns test
//! (deterministic loss of every 20th A -> B packet by an nftables counter)
//! needs root, `ip` and `nft`, and prints SKIP otherwise. Its namespaces are
//! `gateway<pid>a` / `gateway<pid>b`, removed on exit.

use std::fs::File;
use std::net::UdpSocket;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use airpack_lab::voip::{
    self, merge, summarize, Direction, NodeResult, RtcpOptions, RunOptions, Spec,
};

/// Bind an even RTP port and the RTCP port above it on 127.0.0.1.
fn pair() -> (UdpSocket, UdpSocket) {
    loop {
        let rtp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let p = rtp.local_addr().unwrap().port();
        if p % 2 == 1 || p == 65534 {
            continue;
        }
        if let Ok(rtcp) = UdpSocket::bind(("127.0.0.1", p + 1)) {
            return (rtp, rtcp);
        }
    }
}

fn spec_json(calls: serde_json::Value, duration_s: f64) -> Spec {
    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 500;
    serde_json::from_value(serde_json::json!({
        "codec": "g729", "interval_ms": 20, "vad": false, "seed": 5, "duration_s": duration_s,
        "start_at_unix_ms": start, "playout_ms": 60, "criterion": "mos", "grace_ms": 1000,
        "calls": calls,
    }))
    .unwrap()
}

const FAST: RtcpOptions = RtcpOptions {
    enabled: true,
    interval_ms: 200,
};

/// Checks shared by both tests; `lost_a_to_b` packets were dropped A -> B.
fn check(spec: &Spec, results: &[NodeResult], lost_a_to_b: u64) {
    for r in results {
        assert_eq!(r.rx.rejected(), 0, "RTP counters see no RTCP: {:?}", r.rx);
        let c = r.rtcp.as_ref().expect("RTCP counters present");
        assert_eq!((c.wrong_ssrc, c.send_errors), (0, 0), "{c:?}");
        assert!(c.invalid.is_empty(), "{c:?}");
        assert_eq!(c.accepted, c.datagrams, "{c:?}");
    }
    let calls = merge(spec, results);
    let c = &calls[0];
    for (dir, q, view, lost) in [
        (
            Direction::AToB,
            &c.a_to_b,
            c.a_to_b_rtcp.as_ref(),
            lost_a_to_b,
        ),
        (Direction::BToA, &c.b_to_a, c.b_to_a_rtcp.as_ref(), 0),
    ] {
        let v = view.unwrap_or_else(|| panic!("{dir:?}: no RTCP view"));
        // RTP: unchanged behaviour, the loss is what was dropped.
        assert_eq!(q.sent - q.received, lost, "{dir:?}: {q:?}");
        // The peer's last report (sent after the whole call arrived) counts
        // exactly the packets its own receiver statistics miss.
        assert_eq!(v.cumulative_lost, lost as i64, "{dir:?}: {v:?}");
        assert!(
            v.reports >= 3,
            "{dir:?}: a report every 0.1-0.25 s over 2 s: {v:?}"
        );
        if lost > 0 {
            assert!(v.fraction_lost_max_pct > 0.0, "{dir:?}: {v:?}");
        }
        // The peer's RFC 3550 jitter (RTP timestamps) is the one our own
        // receiver computed from the same packets, to one timestamp unit
        // (0.125 ms) of integer truncation.
        let own = results
            .iter()
            .flat_map(|r| &r.streams)
            .find_map(|s| s.received.as_ref().filter(|_| s.direction == dir))
            .unwrap();
        assert!(
            (v.jitter_ms - own.jitter_rtp_ms).abs() <= 0.25,
            "{dir:?}: {} vs {}",
            v.jitter_ms,
            own.jitter_rtp_ms
        );
        // Round-trip times were measured, are not negative, and are ordered.
        assert!(v.rtt_samples >= 2, "{dir:?}: {v:?}");
        let (min, mean, max) = (
            v.rtt_min_ms.unwrap(),
            v.rtt_mean_ms.unwrap(),
            v.rtt_max_ms.unwrap(),
        );
        assert!(0.0 <= min && min <= mean && mean <= max, "{dir:?}: {v:?}");
        assert!(
            max < 1000.0,
            "{dir:?}: a local RTT of a second means a wrong clock: {v:?}"
        );
    }
    // Both sides sent SRs (they send RTP), a BYE at the end, and heard the peer's.
    for r in results {
        for s in r.streams.iter().filter(|s| s.sent.is_some()) {
            let t = s.rtcp.as_ref().unwrap();
            assert!(
                t.sender_reports >= 3 && t.bye_sent && t.peer_bye,
                "{}: {t:?}",
                r.node
            );
            assert!(t.peer_sender_reports >= 3, "{}: {t:?}", r.node);
            assert!(t.peer_packets.unwrap() <= 100, "{}: {t:?}", r.node);
        }
    }
    let s = summarize(&calls);
    assert!(s.rtt_ms.is_some() && s.rtt_max_ms.is_some(), "{s:?}");
    let want = 100.0 * lost_a_to_b as f64 / 100.0 / 2.0;
    assert!((s.rtcp_loss_pct.unwrap() - want).abs() < 1e-9, "{s:?}");
    assert!(s.rtcp_jitter_ms.is_some());
}

#[test]
fn rtcp_flows_both_ways_on_loopback() {
    let (a_rtp, a_rtcp) = pair();
    let (b_rtp, b_rtcp) = pair();
    let port = |s: &UdpSocket| s.local_addr().unwrap().port();
    let spec = spec_json(
        serde_json::json!([{"id": 1, "a": {"node": "A", "addr": "127.0.0.1", "port": port(&a_rtp)},
                                     "b": {"node": "B", "addr": "127.0.0.1", "port": port(&b_rtp)}}]),
        2.0,
    );
    let opts = |bound| RunOptions {
        bound,
        rtcp: FAST,
        ..RunOptions::default()
    };
    let results = std::thread::scope(|s| {
        let a = s.spawn(|| voip::run_with(&spec, "A", opts(vec![a_rtp, a_rtcp])));
        let b = s.spawn(|| voip::run_with(&spec, "B", opts(vec![b_rtp, b_rtcp])));
        vec![a.join().unwrap().unwrap(), b.join().unwrap().unwrap()]
    });
    check(&spec, &results, 0);
}

#[test]
fn rtcp_off_adds_nothing_and_port_conflicts_are_refused() {
    let (a_rtp, _a_rtcp) = pair();
    let p = a_rtp.local_addr().unwrap().port();
    // Two calls whose RTP ports are adjacent: RTCP would collide.
    let spec = spec_json(
        serde_json::json!([
            {"id": 1, "a": {"node": "A", "addr": "127.0.0.1", "port": p}, "b": {"node": "B", "addr": "127.0.0.1", "port": 9}},
            {"id": 2, "a": {"node": "A", "addr": "127.0.0.1", "port": p + 1}, "b": {"node": "B", "addr": "127.0.0.1", "port": 11}}]),
        0.1,
    );
    let err = voip::run_with(
        &spec,
        "A",
        RunOptions {
            rtcp: FAST,
            ..RunOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("another endpoint's RTP port"),
        "{err}"
    );
    // Off: no RTCP field in the JSON.
    let r = voip::run_with(
        &spec_json(
            spec.calls[..1]
                .iter()
                .map(|c| serde_json::to_value(c).unwrap())
                .collect(),
            0.1,
        ),
        "A",
        RunOptions {
            bound: vec![a_rtp],
            ..RunOptions::default()
        },
    );
    let r = r.unwrap();
    let v = serde_json::to_value(&r).unwrap();
    assert!(
        v.get("rtcp").is_none() && v["streams"][0].get("rtcp").is_none(),
        "{v}"
    );
}

struct Netns(Vec<String>);

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

fn run(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let fd = File::open(format!("/run/netns/{name}")).expect("open netns");
            nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
        .join()
        .unwrap()
    })
}

#[test]
fn rtcp_reports_the_loss_the_peer_measured() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP rtcp_reports_the_loss_the_peer_measured: needs root (network namespaces)");
        return;
    }
    if !run("ip", &["-V"]) || !run("nft", &["--version"]) {
        eprintln!("SKIP rtcp_reports_the_loss_the_peer_measured: needs `ip` and `nft`");
        return;
    }
    let pid = std::process::id();
    let (a, b) = (format!("gateway{pid}a"), format!("gateway{pid}b"));
    let _guard = Netns(vec![a.clone(), b.clone()]);
    let (va, vb) = (format!("gateway{pid}x"), format!("gateway{pid}y"));
    assert!(run("ip", &["netns", "add", &a]) && run("ip", &["netns", "add", &b]));
    assert!(run(
        "ip",
        &["link", "add", &va, "netns", &a, "type", "veth", "peer", "name", &vb, "netns", &b]
    ));
    assert!(run(
        "ip",
        &["-n", &a, "addr", "add", "10.79.0.1/24", "dev", &va]
    ));
    assert!(run(
        "ip",
        &["-n", &b, "addr", "add", "10.79.0.2/24", "dev", &vb]
    ));
    for (n, d) in [(&a, &va), (&b, &vb)] {
        assert!(run("ip", &["-n", n, "link", "set", d, "up"]));
        assert!(run("ip", &["-n", n, "link", "set", "lo", "up"]));
    }
    // Every 20th RTP packet A -> B (counter 7, 27, ...: 5 of 100) is
    // dropped; RTCP (port 16001) and B -> A pass.
    for cmd in [
        "add table inet gw",
        "add chain inet gw out { type filter hook output priority 0; }",
        "add rule inet gw out udp dport 16000 numgen inc mod 20 eq 7 drop",
    ] {
        assert!(run("ip", &["netns", "exec", &a, "nft", cmd]), "nft {cmd}");
    }
    let spec = spec_json(
        serde_json::json!([{"id": 0, "a": {"node": "A", "addr": "10.79.0.1", "port": 16000},
                                     "b": {"node": "B", "addr": "10.79.0.2", "port": 16000}}]),
        2.0,
    );
    let opts = || RunOptions {
        rtcp: FAST,
        ..RunOptions::default()
    };
    let results = std::thread::scope(|s| {
        let ra = s.spawn(|| in_netns(&a, || voip::run_with(&spec, "A", opts())));
        let rb = s.spawn(|| in_netns(&b, || voip::run_with(&spec, "B", opts())));
        vec![ra.join().unwrap().unwrap(), rb.join().unwrap().unwrap()]
    });
    check(&spec, &results, 5);
}
