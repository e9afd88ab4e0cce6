//! Kernel-facing tests of `airpack::linux` sockets between namespaces: the
//! bundle sockets (protocol, DSCP and mark kept), the raw IP sender past the
//! steering, and SIOCOUTQ behind a slow qdisc (helpers in
//! `common/kernel.rs`).
//!
//! Needs root (CAP_NET_ADMIN), `ip` and `tc`; prints "SKIP: ..." and returns
//! otherwise. Addresses are 10.6x.0.0/24 and fd00:6x::/64, only inside the
//! namespaces these tests create; every wait is bounded.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use airpack::linux::{BundleSocket, Family, Match, RawIpSender, Steering, Tun, UdpBundleSocket};

mod common;
use common::kernel::*;

fn recv_bundle(s: &BundleSocket, ms: i32) -> (Vec<u8>, IpAddr, Vec<u8>) {
    assert!(
        readable(s.as_raw_fd(), ms),
        "no bundle within {ms} ms on the {:?} socket",
        s.family()
    );
    let mut buf = [0u8; 2048];
    let r = s.recv_from(&mut buf).unwrap();
    (
        buf[r.offset..r.offset + r.len].to_vec(),
        r.src,
        buf[..r.offset].to_vec(),
    )
}

#[test]
fn bundle_sockets_between_namespaces_keep_protocol_dscp_and_mark() {
    if !can_run(&["ip", "tc"]) {
        return;
    }
    let (a, b) = veth_pair("bun");
    let vb = b
        .run(|| airpack::linux::tun::ifindex("vb").unwrap())
        .unwrap();
    // Receivers and a capture in b, opened before a sends.
    let (rx4, rx6, cap, udp) = b
        .run(move || {
            (
                BundleSocket::open(Family::V4, 253, BYPASS).unwrap(),
                BundleSocket::open(Family::V6, 253, BYPASS).unwrap(),
                capture(vb),
                UdpBundleSocket::bind("0.0.0.0:4150".parse().unwrap(), BYPASS).unwrap(),
            )
        })
        .unwrap();
    a.run(|| {
        // Steering in a that would grab all UDP: the bypass mark keeps the daemon's own sends out.
        let _tun = Tun::open("apb0", 1500).unwrap();
        let mut spec = steer_spec("apb0", "va");
        spec.matches = vec![Match {
            steer: true,
            protocol: Some(17),
            ..Match::default()
        }];
        let _st = Steering::install(&spec).unwrap();
        let tx4 = BundleSocket::open(Family::V4, 253, BYPASS).unwrap();
        let tx6 = BundleSocket::open(Family::V6, 253, BYPASS).unwrap();
        tx4.send_to("10.69.0.2".parse().unwrap(), b"bundle-v4", 46)
            .unwrap();
        tx4.send_to("10.69.0.2".parse().unwrap(), b"bundle-v4-af", 34)
            .unwrap();
        tx6.send_to("fd00:69::2".parse().unwrap(), b"bundle-v6", 46)
            .unwrap();
        assert_eq!(
            tx4.send_to("fd00:69::2".parse().unwrap(), b"x", 0)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EAFNOSUPPORT)
        );
        let u = UdpBundleSocket::bind("0.0.0.0:0".parse().unwrap(), BYPASS).unwrap();
        assert!(u.local_addr().unwrap().port() != 0);
        u.send_to("10.69.0.2:4150".parse().unwrap(), b"bundle-udp", 46)
            .unwrap();
    })
    .unwrap();
    b.run(move || {
        let (payload, src, hdr) = recv_bundle(&rx4, 1000);
        assert_eq!(payload, b"bundle-v4");
        assert_eq!(src, "10.69.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(hdr[1] >> 2, 46, "outer DSCP");
        assert_eq!(hdr[9], 253);
        let (payload, _, hdr) = recv_bundle(&rx4, 1000);
        assert_eq!(payload, b"bundle-v4-af");
        assert_eq!(hdr[1] >> 2, 34, "DSCP changes per send");
        let (payload, src, hdr) = recv_bundle(&rx6, 1000);
        assert_eq!(payload, b"bundle-v6");
        assert_eq!(src, "fd00:69::1".parse::<IpAddr>().unwrap());
        assert!(hdr.is_empty());
        // On the wire: protocol 253 with the DSCP in the IPv6 traffic class too.
        let v6 = std::iter::from_fn(|| captured(&cap, 253, 1000))
            .take(10)
            .find(|p| p[0] >> 4 == 6)
            .expect("IPv6 bundle on the wire");
        let tclass = ((v6[0] & 0x0f) << 4) | (v6[1] >> 4);
        assert_eq!(tclass >> 2, 46);
        assert!(
            readable(udp.as_raw_fd(), 1000),
            "UDP bundle arrives despite steering of all UDP in a"
        );
        let mut buf = [0u8; 256];
        let (r, port) = udp.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[r.offset..r.offset + r.len], b"bundle-udp");
        assert_eq!(r.src, "10.69.0.1".parse::<IpAddr>().unwrap());
        assert!(port != 0);
        // Nothing else queued: WouldBlock.
        assert_eq!(
            rx4.recv_from(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    })
    .unwrap();
}

#[test]
fn raw_ip_sender_delivers_unchanged_packets_despite_steering() {
    if !can_run(&["ip", "tc"]) {
        return;
    }
    let (a, b) = veth_pair("raw");
    let vb = b
        .run(|| airpack::linux::tun::ifindex("vb").unwrap())
        .unwrap();
    let (rx4, rx6, cap) = b
        .run(move || {
            let r4 = UdpSocket::bind("10.69.0.2:17000").unwrap();
            let r6 = UdpSocket::bind("[fd00:69::2]:17000").unwrap();
            (r4, r6, capture(vb))
        })
        .unwrap();
    let p4 = udp_packet(
        "10.69.0.1".parse().unwrap(),
        "10.69.0.2".parse().unwrap(),
        17001,
        17000,
        b"raw v4 unchanged",
    );
    let p6 = udp_packet(
        "fd00:69::1".parse().unwrap(),
        "fd00:69::2".parse().unwrap(),
        17001,
        17000,
        b"raw v6 unchanged",
    );
    let (s4, s6) = (p4.clone(), p6.clone());
    a.run(move || {
        let _tun = Tun::open("apr0", 1500).unwrap();
        let _st = Steering::install(&steer_spec("apr0", "va")).unwrap(); // steers UDP 16000-32000
        let tx = RawIpSender::open(BYPASS).unwrap();
        tx.send(&s4).unwrap();
        tx.send(&s6).unwrap();
        // Unroutable destination: an error the daemon can classify, not a panic.
        let bad = udp_packet(
            "10.69.0.1".parse().unwrap(),
            "192.0.2.9".parse().unwrap(),
            1,
            17000,
            b"x",
        );
        let e = tx.send(&bad).unwrap_err();
        assert_eq!(
            airpack::linux::ErrorKind::of(&e),
            airpack::linux::ErrorKind::NetUnreach,
            "{e}"
        );
    })
    .unwrap();
    b.run(move || {
        let mut buf = [0u8; 256];
        rx4.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        rx6.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let (n, from) = rx4.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"raw v4 unchanged");
        assert_eq!(from, "10.69.0.1:17001".parse::<SocketAddr>().unwrap());
        let (n, from) = rx6.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"raw v6 unchanged");
        assert_eq!(
            from.ip(),
            IpAddr::V6("fd00:69::1".parse::<Ipv6Addr>().unwrap())
        );
        // Byte for byte on the wire (the IPv4 header checksum is recomputed
        // by the kernel; ours was already right, so all bytes match).
        let mut seen4 = false;
        let mut seen6 = false;
        while let Some(p) = captured(&cap, 17, 500) {
            seen4 |= p == p4;
            seen6 |= p == p6;
        }
        assert!(
            seen4 && seen6,
            "unchanged packets on the wire: v4 {seen4} v6 {seen6}"
        );
    })
    .unwrap();
}

#[test]
fn siocoutq_reflects_a_backlog_behind_a_slow_qdisc() {
    if !can_run(&["ip", "tc"]) {
        return;
    }
    let (a, _b) = veth_pair("outq");
    a.run(|| {
        sh(&[
            "tc", "qdisc", "add", "dev", "va", "root", "tbf", "rate", "1mbit", "burst", "1600",
            "latency", "2s",
        ]);
        let tx = BundleSocket::open(Family::V4, 253, BYPASS).unwrap();
        // Resolve the neighbour first so the first packets are not parked in ARP.
        tx.send_to("10.69.0.2".parse().unwrap(), &[0u8; 10], 0)
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let deadline = Instant::now() + Duration::from_secs(2);
        while tx.outq().unwrap() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(tx.outq().unwrap(), 0, "idle socket has an empty send queue");
        let payload = [0u8; 1000];
        for _ in 0..20 {
            tx.send_to("10.69.0.2".parse().unwrap(), &payload, 46)
                .unwrap();
        }
        let busy = tx.outq().unwrap();
        assert!(
            busy >= 10_000,
            "20 kB behind a 1 Mbit/s qdisc: SIOCOUTQ = {busy}"
        );
        // It drains: 20 kB at 1 Mbit/s takes about 160 ms.
        let t0 = Instant::now();
        while tx.outq().unwrap() > 0 && t0.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let drained = t0.elapsed();
        assert_eq!(tx.outq().unwrap(), 0);
        assert!(
            drained >= Duration::from_millis(80),
            "drained too fast for the qdisc rate: {drained:?}"
        );
        eprintln!("SIOCOUTQ after 20 x 1000 B: {busy} bytes, drained in {drained:?}");
    })
    .unwrap();
}
