//! `airpack voip` end to end on 127.0.0.1: two nodes run in-process on two
//! threads (exactly what two `airpack voip` processes do), exchange G.729
//! calls for a few seconds, and their results are merged.
//!
//! Owns: loopback checks of the traffic tool. Must not touch: namespaces or
//! the emulated medium (the lab's own tests cover those).

use std::net::UdpSocket;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use airpack_lab::voip::{self, merge, summarize, NodeResult, RunOptions, Spec};

/// Sockets bound to the spec's endpoints, per node, kept bound and handed to
/// the nodes (no release-and-rebind race for the ports).
struct Bound {
    a: Vec<UdpSocket>,
    b: Vec<UdpSocket>,
}

fn opts(bound: Vec<UdpSocket>) -> RunOptions {
    RunOptions {
        bound,
        ..RunOptions::default()
    }
}

/// A spec with `calls` calls between nodes A and B on 127.0.0.1, on ports the
/// returned sockets hold. Starts `start_in_ms` from now; 1 s of receive grace
/// (two nodes started on a loaded machine may begin a little apart).
fn spec(calls: usize, duration_s: f64, vad: bool, start_in_ms: u64) -> (Spec, Bound) {
    let bind = || UdpSocket::bind("127.0.0.1:0").unwrap();
    let bound = Bound {
        a: (0..calls).map(|_| bind()).collect(),
        b: (0..calls).map(|_| bind()).collect(),
    };
    let port = |s: &UdpSocket| s.local_addr().unwrap().port();
    let ports: Vec<u16> = (0..calls)
        .flat_map(|i| [port(&bound.a[i]), port(&bound.b[i])])
        .collect();
    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + start_in_ms;
    let calls: Vec<_> = (0..calls)
        .map(|i| {
            serde_json::json!({
                "id": i as u32 + 10,
                "a": {"node": "A", "addr": "127.0.0.1", "port": ports[2 * i]},
                "b": {"node": "B", "addr": "127.0.0.1", "port": ports[2 * i + 1]},
            })
        })
        .collect();
    let spec = serde_json::from_value(serde_json::json!({
        "codec": "g729", "interval_ms": 20, "vad": vad, "seed": 3, "duration_s": duration_s,
        "start_at_unix_ms": start, "playout_ms": 60, "criterion": "mos", "grace_ms": 1000,
        "calls": calls,
    }))
    .unwrap();
    (spec, bound)
}

/// Run nodes A and B concurrently, as two processes would.
fn run_both(spec: &Spec, bound: Bound) -> Vec<NodeResult> {
    let Bound { a, b } = bound;
    std::thread::scope(|s| {
        let a = s.spawn(|| voip::run_with(spec, "A", opts(a)));
        let b = s.spawn(|| voip::run_with(spec, "B", opts(b)));
        vec![a.join().unwrap().unwrap(), b.join().unwrap().unwrap()]
    })
}

#[test]
fn cbr_g729_calls_all_arrive_with_high_mos() {
    let (spec, bound) = spec(3, 2.0, false, 500);
    let t = Instant::now();
    let results = run_both(&spec, bound);
    let took = t.elapsed();
    // Each node waits for the start, sends for 2 s and receives 1 s more:
    // at least 3.5 s (the mechanism); the upper bound only says it ends.
    assert!(
        took >= Duration::from_millis(3400) && took < Duration::from_secs(60),
        "{took:?}"
    );
    for r in &results {
        assert_eq!(r.rx.rejected(), 0, "{:?}", r.rx);
        assert_eq!(r.streams.len(), 6, "3 sent + 3 received per node");
        // Every datagram is timed, by the kernel when it gives a timestamp.
        assert_eq!(
            r.rx.kernel_timestamps + r.rx.user_timestamps,
            r.rx.datagrams
        );
        eprintln!("node {}: {:?}", r.node, r.rx);
    }
    let calls = merge(&spec, &results);
    assert_eq!(calls.len(), 3);
    for c in &calls {
        for q in [&c.a_to_b, &c.b_to_a] {
            // 2 s at 20 ms from a phase offset in [0, 20 ms): exactly 100.
            assert_eq!(q.sent, 100, "call {}: {q:?}", c.call);
            assert_eq!(q.received, 100, "call {}: {q:?}", c.call);
            assert_eq!(
                (q.loss_pct, q.late_pct, q.duplicates, q.reordered),
                (0.0, 0.0, 0, 0)
            );
            assert!(q.delay_ms.unwrap() < 20.0, "{q:?}");
            assert!(q.delay_max_ms.unwrap() >= q.delay_ms.unwrap());
            assert!(q.mos > 4.0, "call {}: {q:?}", c.call);
        }
        assert!(c.supported && c.notes.is_empty(), "{c:?}");
    }
    let s = summarize(&calls);
    assert_eq!((s.calls, s.supported_calls, s.all_supported), (3, 3, true));
}

#[test]
fn vad_calls_send_talk_spurts_only() {
    let (spec, bound) = spec(2, 4.0, true, 500);
    let results = run_both(&spec, bound);
    let calls = merge(&spec, &results);
    let mut total_sent = 0;
    for c in &calls {
        for q in [&c.a_to_b, &c.b_to_a] {
            assert_eq!(q.received, q.sent, "{q:?}");
            assert!(q.sent <= 200);
            total_sent += q.sent;
        }
    }
    // 4 directions x 200 grid slots; about 40 % activity expected. Bounds
    // are wide (few spurts in 4 s) but CBR would give exactly 800.
    assert!(total_sent > 40 && total_sent < 700, "sent {total_sent}");
    let spurts: u64 = results
        .iter()
        .flat_map(|r| &r.streams)
        .filter_map(|s| s.received.as_ref())
        .map(|r| r.talk_spurts)
        .sum();
    assert!(
        spurts >= 4,
        "every direction that sent has at least one spurt: {spurts}"
    );
}

#[test]
fn malformed_and_foreign_datagrams_are_counted_and_ignored() {
    let (
        spec,
        Bound {
            a: bound_a,
            b: bound_b,
        },
    ) = spec(1, 1.5, false, 500);
    let target = std::net::SocketAddr::new(spec.calls[0].b.addr, spec.calls[0].b.port);
    let results = std::thread::scope(|s| {
        let a = s.spawn(|| voip::run_with(&spec, "A", opts(bound_a)));
        let b = s.spawn(|| voip::run_with(&spec, "B", opts(bound_b)));
        // B's socket is bound already: junk sent now waits in its buffer,
        // whenever B's receive loop starts (no timing assumption).
        s.spawn(move || {
            let junk = UdpSocket::bind("127.0.0.1:0").unwrap();
            let mut good = [0u8; 32];
            good[0] = 0x80;
            good[1] = 18;
            let sends: [&[u8]; 5] = [
                &[1, 2, 3],                                  // truncated
                &[0x40; 32],                                 // version 1
                &[0x8f; 32],                                 // CSRC count past the end
                &[0x80, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], // PCMU, wrong type
                &good,                                       // right type, foreign SSRC
            ];
            for d in sends {
                junk.send_to(d, target).unwrap();
            }
        });
        vec![a.join().unwrap().unwrap(), b.join().unwrap().unwrap()]
    });
    let b = results.iter().find(|r| r.node == "B").unwrap();
    assert_eq!(b.rx.not_rtp.get("truncated"), Some(&1), "{:?}", b.rx);
    assert_eq!(b.rx.not_rtp.get("bad_version"), Some(&1), "{:?}", b.rx);
    assert_eq!(b.rx.not_rtp.get("csrc_past_end"), Some(&1), "{:?}", b.rx);
    assert_eq!(b.rx.wrong_payload_type, 1, "{:?}", b.rx);
    assert_eq!(b.rx.wrong_ssrc, 1, "{:?}", b.rx);
    assert_eq!(b.rx.rejected(), 5);
    let calls = merge(&spec, &results);
    let q = &calls[0].a_to_b;
    assert_eq!((q.sent, q.received), (75, 75), "{q:?}");
    assert!(calls[0].supported);
}

#[test]
fn other_codecs_and_intervals() {
    // (codec, interval, expected packets per direction in 1 s, payload bytes on the wire)
    let cases = [
        ("g723", 30u32, 33..=34u64, 24usize),
        ("g729", 10, 100..=100, 12),
        ("g711", 30, 33..=34, 240),
    ];
    let (specs, bounds): (Vec<Spec>, Vec<Bound>) = cases
        .iter()
        .map(|(codec, interval, _, _)| {
            let (mut s, bound) = spec(1, 1.0, false, 500);
            s.codec = serde_json::from_value(serde_json::json!(codec)).unwrap();
            s.interval_ms = *interval;
            (s, bound)
        })
        .unzip();
    let all: Vec<Vec<NodeResult>> = std::thread::scope(|sc| {
        let hs: Vec<_> = specs
            .iter()
            .zip(bounds)
            .map(|(s, b)| sc.spawn(move || run_both(s, b)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((spec, results), (codec, _, expect, _)) in specs.iter().zip(&all).zip(&cases) {
        for r in results {
            assert_eq!(r.rx.rejected(), 0, "{codec}: {:?}", r.rx);
        }
        let c = &merge(spec, results)[0];
        for q in [&c.a_to_b, &c.b_to_a] {
            assert!(expect.contains(&q.sent), "{codec}: {q:?}");
            assert_eq!(q.received, q.sent, "{codec}: {q:?}");
        }
        assert!(c.supported, "{codec}: {c:?}");
    }
    // Payload sizes: checked by the receiver (wrong_payload_size would be
    // non-zero otherwise); the profile agrees with the table.
    for (codec, interval, _, bytes) in cases {
        let c: airpack_voice::codec::Codec =
            serde_json::from_value(serde_json::json!(codec)).unwrap();
        let p = c.profile(interval).unwrap();
        assert_eq!(
            airpack_voice::rtp::probe_payload_len(p.payload_bytes()),
            bytes,
            "{codec}"
        );
    }
}

#[test]
fn unknown_node_and_late_start_are_reported() {
    let (mut spec, bound) = spec(1, 0.2, false, 0);
    let err = voip::run(&spec, "Z").unwrap_err();
    assert!(err.to_string().contains("not an endpoint"), "{err}");
    // start_at 400 ms in the past: runs at once and says how late it was.
    spec.start_at_unix_ms = Some(spec.start_at_unix_ms.unwrap() - 400);
    spec.grace_ms = 0;
    let r = voip::run_with(&spec, "A", opts(bound.a)).unwrap();
    assert!(
        r.start_late_ms >= 400.0 && r.start_late_ms < 5000.0,
        "{}",
        r.start_late_ms
    );
}

#[test]
fn tshark_decodes_the_rtp_if_installed() {
    let Ok(out) = std::process::Command::new("tshark")
        .arg("--version")
        .output()
    else {
        eprintln!(
            "SKIP tshark_decodes_the_rtp_if_installed: tshark is not installed (bonus check only)"
        );
        return;
    };
    if !out.status.success() {
        eprintln!("SKIP tshark_decodes_the_rtp_if_installed: tshark --version failed");
        return;
    }
    let (mut spec, bound) = spec(1, 1.0, false, 0);
    let port = spec.calls[0].b.port;
    let pcap = std::env::temp_dir().join(format!("airpack-voip-{}.pcap", std::process::id()));
    let mut cap = std::process::Command::new("tshark")
        .args(["-i", "lo", "-f", &format!("udp dst port {port}"), "-w"])
        .arg(&pcap)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn tshark");
    // Start the call once tshark says it is capturing (no guessed delay).
    let mut err = std::io::BufReader::new(cap.stderr.take().unwrap());
    let mut capturing = false;
    for _ in 0..100 {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut err, &mut line).unwrap_or(0) == 0 {
            break;
        }
        if line.contains("Capturing on") {
            capturing = true;
            break;
        }
    }
    if !capturing {
        let _ = cap.kill();
        let _ = cap.wait();
        eprintln!("SKIP tshark_decodes_the_rtp_if_installed: tshark cannot capture on lo");
        return;
    }
    let drain = std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    spec.start_at_unix_ms = Some(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
            + 300,
    );
    let _ = run_both(&spec, bound);
    // SIGINT: tshark writes out what it captured and exits.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(cap.id() as i32),
        nix::sys::signal::SIGINT,
    )
    .unwrap();
    let _ = cap.wait();
    let _ = drain.join();
    let out = std::process::Command::new("tshark")
        .args(["-r"])
        .arg(&pcap)
        .args([
            "-d",
            &format!("udp.port=={port},rtp"),
            "-T",
            "fields",
            "-e",
            "rtp.p_type",
            "-e",
            "rtp.version",
        ])
        .output()
        .expect("tshark -r");
    let _ = std::fs::remove_file(&pcap);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        eprintln!("SKIP tshark_decodes_the_rtp_if_installed: capture on lo produced nothing (no capture permission?)");
        return;
    }
    assert_eq!(lines.len(), 50, "{text}");
    assert!(
        lines
            .iter()
            .all(|l| l.split_whitespace().collect::<Vec<_>>() == ["18", "2"]),
        "{text}"
    );
}
