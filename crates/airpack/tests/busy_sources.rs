//! The daemon's busy-signal sources against the kernel (issue 11 point 6):
//! the root qdisc backlog read over netlink, in a fresh network namespace
//! (`busy<pid>q`, deleted on drop) whose veth interface has a TBF qdisc of
//! 8 kbit/s, so packets sent through it back up in the qdisc for seconds;
//! and the nl80211 survey reader (the medium's utilisation on real radios)
//! on a veth in a second namespace (`busy<pid>s`): counted as not wireless,
//! idle (no Wi-Fi on the test machine).
//!
//! Needs root and `ip`/`tc`; prints "SKIP: ..." and returns otherwise.
//! Addresses 10.77.0.0/24 only inside the namespace. Every wait is bounded
//! and waits for an event (reads completed), never for a time window.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use airpack::linux::busy::{parse_qdisc_reply, qdisc_request, QdiscMonitor};
use airpack::linux::monotonic_micros;
use airpack::linux::netns::{run_cmd, NetNs};
use airpack::linux::survey::SurveyMonitor;
use proptest::prelude::*;

fn can_run() -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP: needs root");
        return false;
    }
    if run_cmd(&["tc", "-V"], None).is_err() {
        eprintln!("SKIP: needs `tc`");
        return false;
    }
    true
}

/// Waits (bounded) until the monitor has completed `n` more reads.
fn reads_after(m: &QdiscMonitor, n: u64) {
    let start = m.counts().0;
    let t = Instant::now();
    while m.counts().0 < start + n {
        m.want(monotonic_micros());
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "qdisc reader stalled"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn qdisc_backlog_of_a_backed_up_tbf() {
    if !can_run() {
        return;
    }
    let ns = NetNs::create(&format!("busy{}q", std::process::id())).unwrap();
    for cmd in [
        "ip link add veth0 type veth peer name veth1",
        "ip link set veth1 up",
        "ip link set veth0 up",
        "ip addr add 10.77.0.1/24 dev veth0",
        "ip neigh add 10.77.0.2 lladdr 02:00:00:00:00:02 dev veth0 nud permanent",
        "tc qdisc add dev veth0 root tbf rate 8kbit burst 1600 limit 200000",
    ] {
        ns.exec(&cmd.split(' ').collect::<Vec<_>>()).unwrap();
    }
    ns.run(|| {
        let m = QdiscMonitor::start(vec!["veth0".into(), "nosuch0".into()], 300).unwrap();
        reads_after(&m, 2);
        assert_eq!(m.backlog().packets, 0, "idle qdisc");
        let errors_idle = m.counts().1;
        assert!(
            errors_idle >= 2,
            "the missing interface counts in each read"
        );
        let s = UdpSocket::bind("10.77.0.1:0").unwrap();
        for _ in 0..40 {
            s.send_to(&[0u8; 1000], "10.77.0.2:9").unwrap();
        }
        reads_after(&m, 2);
        let b = m.backlog();
        // 8 kbit/s drains one 1028-byte frame a second: nearly all 40 wait.
        assert!(b.packets >= 20 && b.packets <= 40, "{b:?}");
        assert!(u64::from(b.bytes) >= u64::from(b.packets) * 1000, "{b:?}");
        let shown = run_cmd(&["tc", "-s", "qdisc", "show", "dev", "veth0"], None).unwrap();
        assert!(shown.contains("backlog"), "{shown}");
    })
    .unwrap();
}

#[test]
fn qdisc_request_layout() {
    let mut b = Vec::new();
    qdisc_request(&mut b, 7);
    assert_eq!(b.len(), 36);
    assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), 36);
    assert_eq!(u16::from_ne_bytes([b[4], b[5]]), 38); // RTM_GETQDISC
    assert_eq!(u16::from_ne_bytes([b[6], b[7]]), 0x301); // REQUEST | DUMP
    assert_eq!(u32::from_ne_bytes(b[8..12].try_into().unwrap()), 7);
    assert!(b[16..].iter().all(|&x| x == 0));
}

fn header(out: &mut Vec<u8>, len: usize, ty: u16, seq: u32) {
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(&2u16.to_ne_bytes()); // NLM_F_MULTI
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
}

/// One RTM_NEWQDISC as the kernel builds it: tcmsg, TCA_KIND, TCA_STATS2 { STATS_QUEUE }.
fn qdisc(out: &mut Vec<u8>, seq: u32, ifindex: i32, parent: u32, qlen: u32, backlog: u32) {
    let mut p = vec![0u8; 4];
    p.extend_from_slice(&ifindex.to_ne_bytes());
    p.extend_from_slice(&0x826a_0000u32.to_ne_bytes());
    p.extend_from_slice(&parent.to_ne_bytes());
    p.extend_from_slice(&0u32.to_ne_bytes());
    p.extend_from_slice(&8u16.to_ne_bytes());
    p.extend_from_slice(&1u16.to_ne_bytes());
    p.extend_from_slice(b"tbf\0");
    let mut q = Vec::new();
    q.extend_from_slice(&24u16.to_ne_bytes());
    q.extend_from_slice(&3u16.to_ne_bytes());
    for v in [qlen, backlog, 0, 0, 0] {
        q.extend_from_slice(&v.to_ne_bytes());
    }
    p.extend_from_slice(&((4 + q.len()) as u16).to_ne_bytes());
    p.extend_from_slice(&(7u16 | 0x8000).to_ne_bytes());
    p.extend_from_slice(&q);
    header(out, 16 + p.len(), 36, seq);
    out.extend_from_slice(&p);
}

#[test]
fn qdisc_reply_parsing() {
    let mut r = Vec::new();
    qdisc(&mut r, 5, 3, u32::MAX, 3, 3084);
    qdisc(&mut r, 5, 3, 0x826a_0001, 9, 9); // a child: not counted
    qdisc(&mut r, 4, 4, u32::MAX, 1, 1); // another request's: skipped
    qdisc(&mut r, 5, 7, u32::MAX, 0, 0);
    let mut out = Vec::new();
    assert!(!parse_qdisc_reply(&r, 5, &mut out).unwrap());
    assert_eq!(out.len(), 2);
    assert_eq!((out[0].0, out[0].1.packets, out[0].1.bytes), (3, 3, 3084));
    assert_eq!((out[1].0, out[1].1.packets), (7, 0));
    let mut done = Vec::new();
    header(&mut done, 20, 3, 5);
    done.extend_from_slice(&0i32.to_ne_bytes());
    assert!(parse_qdisc_reply(&done, 5, &mut out).unwrap());
    // Every truncation is an error, never a panic.
    let mut one = Vec::new();
    qdisc(&mut one, 5, 3, u32::MAX, 3, 3084);
    for n in 1..one.len() {
        let mut t = one[..n].to_vec();
        if n >= 4 {
            t[0..4].copy_from_slice(&(n as u32).to_ne_bytes());
        }
        assert!(parse_qdisc_reply(&t, 5, &mut Vec::new()).is_err(), "{n}");
    }
    // A netlink error (EPERM).
    let mut e = Vec::new();
    header(&mut e, 36, 2, 5);
    e.extend_from_slice(&(-1i32).to_ne_bytes());
    e.extend_from_slice(&[0u8; 16]);
    assert_eq!(
        parse_qdisc_reply(&e, 5, &mut out)
            .unwrap_err()
            .raw_os_error(),
        Some(1)
    );
}

proptest! {
    #[test]
    fn qdisc_reply_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200), seq in 0u32..3) {
        let _ = parse_qdisc_reply(&bytes, seq, &mut Vec::new());
    }
}

/// The nl80211 survey reader on a veth (and an interface that does not
/// exist): no Wi-Fi here, so it must count the veth as not wireless (as a
/// kernel without cfg80211 counts every interface) and read an idle medium,
/// never a window, without other errors.
#[test]
fn survey_counts_a_veth_as_not_wireless_and_reads_idle() {
    if !can_run() {
        return;
    }
    let ns = NetNs::create(&format!("busy{}s", std::process::id())).unwrap();
    for cmd in [
        "ip link add veth0 type veth peer name veth1",
        "ip link set veth1 up",
        "ip link set veth0 up",
    ] {
        ns.exec(&cmd.split(' ').collect::<Vec<_>>()).unwrap();
    }
    ns.run(|| {
        let m = SurveyMonitor::start(
            vec!["veth0".into(), "nosuch0".into()],
            Duration::from_millis(10),
        )
        .unwrap();
        let t = Instant::now();
        while m.stats().rounds < 3 {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "survey reader stalled"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let s = m.stats();
        eprintln!("survey on veth0: {s:?}");
        assert!(s.not_wireless >= 1, "{s:?}");
        assert_eq!(
            (s.windows, s.no_busy_time, s.no_channel, s.netlink_errors),
            (0, 0, 0, 0),
            "{s:?}"
        );
        assert_eq!((m.utilisation(), m.windows()), (0, 0));
    })
    .unwrap();
}
