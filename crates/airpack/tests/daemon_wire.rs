//! The outer header and partial damage with real daemons in namespaces
//! (issue 9, points 7 and 10):
//! * bundles leave with DF clear and the outer ECN of RFC 6040 applied to a
//!   bundle as a whole (ECT(0) when every inner packet is ECN-capable, else
//!   Not-ECT), read from captured bundles;
//! * a bundle arriving with an outer CE passes CE on to its ECT inner
//!   packets (seen by the final receiver) and drops, counted, a Not-ECT one;
//! * a Simplemux bundle that labels an IPv6 packet with protocol 4 (as the
//!   published Simplemux does) and carries one damaged IPv4 packet delivers
//!   every other packet, the damaged one counted by reason;
//! * with the UDP transport, an inner UDP packet to the bundle port is refused
//!   as nested instead of coming back as a fresh bundle.

mod common;
use airpack_core::wire::ip;
use airpack_core::{BundleWriter, Encoding};
use common::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

const PORT: u16 = 20000;

fn cfg(iface: &str, extra_daemon: &str, peer: &str, peer_extra: &str) -> String {
    format!(
        "[daemon]\ninterfaces = [\"{iface}\"]\n{extra_daemon}\n[aggregation]\nhold_time_us = 20000\nlink_mode = \"fixed\"\n{VOICE_CLASS}[[peer]]\naddress = \"{peer}\"\n{peer_extra}\n"
    )
}

fn bundle(enc: Encoding, packets: &[Vec<u8>]) -> Vec<u8> {
    let mut buf = vec![0u8; 4000];
    let mut w = BundleWriter::new(enc, &mut buf).unwrap();
    for p in packets {
        w.push(p).unwrap();
    }
    let n = w.finish();
    buf.truncate(n);
    buf
}

fn with_ecn(mut p: Vec<u8>, e: u8) -> Vec<u8> {
    ip::set_ecn(&mut p, e);
    p
}

fn setsockopt(fd: i32, level: i32, name: i32, v: i32) {
    // SAFETY: an int option, its size passed.
    let r = unsafe { libc::setsockopt(fd, level, name, (&v as *const i32).cast(), 4) };
    assert_eq!(r, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

/// In `ns`: a UDP socket on `PORT` (IPv4, or IPv6-only) that records, for
/// `wait`, the first 4 payload bytes (a tag) and the TOS / traffic class of
/// every datagram.
fn udp_receiver(ns: &str, v6: bool, wait: Duration) -> std::thread::JoinHandle<Vec<(u32, u8)>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = in_ns(ns, move || {
        let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(family, libc::SOCK_DGRAM, 0) };
        assert!(fd >= 0);
        setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1);
        // SAFETY: sockaddr structures are plain data, zero-initialised then set.
        let r = unsafe {
            if v6 {
                setsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1);
                setsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1);
                let mut sa: libc::sockaddr_in6 = std::mem::zeroed();
                sa.sin6_family = libc::AF_INET6 as u16;
                sa.sin6_port = PORT.to_be();
                libc::bind(fd, (&sa as *const libc::sockaddr_in6).cast(), 28)
            } else {
                setsockopt(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1);
                let mut sa: libc::sockaddr_in = std::mem::zeroed();
                sa.sin_family = libc::AF_INET as u16;
                sa.sin_port = PORT.to_be();
                libc::bind(fd, (&sa as *const libc::sockaddr_in).cast(), 16)
            }
        };
        assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 50_000,
        };
        // SAFETY: a timeval option.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        tx.send(()).unwrap();
        let mut got = Vec::new();
        let end = Instant::now() + wait;
        while Instant::now() < end {
            let mut buf = [0u8; 2048];
            let mut cbuf = [0u64; 8];
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            // SAFETY: msghdr pointing at live buffers.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = 64;
            // SAFETY: as above.
            let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
            if n < 4 {
                continue;
            }
            let mut tos = 0xffu8;
            // SAFETY: walking the control messages the kernel wrote.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&msg);
                while !c.is_null() {
                    let d = libc::CMSG_DATA(c);
                    if (*c).cmsg_type == libc::IP_TOS && (*c).cmsg_level == libc::IPPROTO_IP {
                        tos = *d;
                    }
                    if (*c).cmsg_type == libc::IPV6_TCLASS && (*c).cmsg_level == libc::IPPROTO_IPV6
                    {
                        tos = std::ptr::read_unaligned(d.cast::<i32>()) as u8;
                    }
                    c = libc::CMSG_NXTHDR(&msg, c);
                }
            }
            got.push((u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]), tos));
        }
        // SAFETY: fd opened above.
        unsafe { libc::close(fd) };
        got
    });
    rx.recv().unwrap();
    h
}

/// In `ns`: captures, for `wait`, the IPv4 header of every protocol-253
/// packet arriving (a raw socket gets a copy next to the daemon's).
fn capture_253(ns: &str, wait: Duration) -> std::thread::JoinHandle<Vec<[u8; 20]>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = in_ns(ns, move || {
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, 253) };
        assert!(fd >= 0);
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 50_000,
        };
        // SAFETY: a timeval option.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        tx.send(()).unwrap();
        let mut got = Vec::new();
        let end = Instant::now() + wait;
        while Instant::now() < end {
            let mut buf = [0u8; 65536];
            // SAFETY: writable buffer.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n >= 20 {
                got.push(buf[..20].try_into().unwrap());
            }
        }
        // SAFETY: fd opened above.
        unsafe { libc::close(fd) };
        got
    });
    rx.recv().unwrap();
    h
}

/// From `ns`: UDP datagrams from `src` to `dst:PORT` with TOS `tos`, each
/// tagged (first 4 bytes) with its number from `tags`.
fn send_udp(ns: &str, src: Ipv4Addr, dst: Ipv4Addr, tos: u8, tags: std::ops::Range<u32>) {
    in_ns(ns, move || {
        let s = std::net::UdpSocket::bind((src, 17000)).unwrap();
        use std::os::fd::AsRawFd;
        setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_TOS,
            i32::from(tos),
        );
        for t in tags {
            let mut p = [0u8; 32];
            p[..4].copy_from_slice(&t.to_be_bytes());
            s.send_to(&p, (dst, PORT)).unwrap();
        }
    })
    .join()
    .unwrap();
}

/// From `ns`: raw protocol-253 payloads from `src` to `dst` with outer TOS `tos`.
fn send_253(ns: &str, src: Ipv4Addr, dst: Ipv4Addr, tos: u8, payloads: Vec<Vec<u8>>) {
    send_raw_tos(ns, src, dst, 253, tos, payloads)
}

/// A UDP/IPv4 packet to `PORT` whose payload starts with `tag`.
fn inner4(src: Ipv4Addr, dst: Ipv4Addr, tag: u32) -> Vec<u8> {
    let mut body = [0u8; 32];
    body[..4].copy_from_slice(&tag.to_be_bytes());
    udp4_packet(src, dst, 17000, PORT, &body)
}

/// A UDP/IPv6 packet to `PORT` whose payload starts with `tag` (UDP checksum filled).
fn inner6(src: Ipv6Addr, dst: Ipv6Addr, tag: u32) -> Vec<u8> {
    let mut body = [0u8; 32];
    body[..4].copy_from_slice(&tag.to_be_bytes());
    let ulen = 8 + body.len();
    let mut p = vec![0u8; 40 + ulen];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&(ulen as u16).to_be_bytes());
    p[6] = 17;
    p[7] = 64;
    p[8..24].copy_from_slice(&src.octets());
    p[24..40].copy_from_slice(&dst.octets());
    p[40..42].copy_from_slice(&17000u16.to_be_bytes());
    p[42..44].copy_from_slice(&PORT.to_be_bytes());
    p[44..46].copy_from_slice(&(ulen as u16).to_be_bytes());
    p[48..].copy_from_slice(&body);
    // Checksum over the pseudo-header and the UDP datagram.
    let mut ph = Vec::new();
    ph.extend_from_slice(&p[8..40]);
    ph.extend_from_slice(&(ulen as u32).to_be_bytes());
    ph.extend_from_slice(&[0, 0, 0, 17]);
    ph.extend_from_slice(&p[40..]);
    let c = match checksum(&ph) {
        0 => 0xffff,
        c => c,
    };
    p[46..48].copy_from_slice(&c.to_be_bytes());
    p
}

#[test]
fn bundles_carry_rfc6040_ecn_with_df_clear() {
    if !can_run("bundles_carry_rfc6040_ecn_with_df_clear") {
        return;
    }
    let (net, a, b, ip_a, ip_b) = two("wecn", 94);
    let _da = net.daemon(&a, &cfg("va", "", &ip_b.to_string(), ""), &[]);
    let db = net.daemon(&b, &cfg("vb", "", &ip_a.to_string(), ""), &[]);

    // Phase 1: EF voice, ECT(0); phase 2: EF voice, Not-ECT. Each phase
    // sends 10 packets at once, so they leave in bundles.
    let cap = capture_253(&b, Duration::from_secs(3));
    let rcv = udp_receiver(&b, false, Duration::from_secs(3));
    send_udp(&a, ip_a, ip_b, 0xb8 | ip::ecn::ECT0, 0..10);
    std::thread::sleep(Duration::from_millis(500));
    send_udp(&a, ip_a, ip_b, 0xb8, 100..110);
    let headers = cap.join().unwrap();
    let got = rcv.join().unwrap();

    assert!(headers.len() >= 2, "bundles captured: {}", headers.len());
    for h in &headers {
        assert_eq!(h[6] & 0x40, 0, "DF clear: {h:02x?}");
        assert_eq!(h[1] >> 2, 46, "outer DSCP EF: {h:02x?}");
    }
    let ecns: Vec<u8> = headers.iter().map(|h| h[1] & 3).collect();
    assert!(ecns.contains(&ip::ecn::ECT0), "{ecns:?}");
    assert!(ecns.contains(&ip::ecn::NOT_ECT), "{ecns:?}");
    // Every packet arrived, with its own ECN field (outer ECT(0)/Not-ECT change nothing).
    let mut tags: Vec<u32> = got.iter().map(|g| g.0).collect();
    tags.sort();
    assert_eq!(tags, (0..10).chain(100..110).collect::<Vec<_>>());
    for (tag, tos) in &got {
        let want = if *tag < 100 {
            0xb8 | ip::ecn::ECT0
        } else {
            0xb8
        };
        assert_eq!(*tos, want, "tag {tag}");
    }
    // In phase 1 every bundle is ECT(0); the first bundle of phase 1 comes first.
    assert_eq!(ecns[0], ip::ecn::ECT0, "{ecns:?}");
    assert_eq!(*ecns.last().unwrap(), ip::ecn::NOT_ECT, "{ecns:?}");

    // A bundle marked CE on the way: its ECT(0) packets arrive CE, its
    // Not-ECT packet is dropped and counted.
    let rcv = udp_receiver(&b, false, Duration::from_secs(2));
    let pkts = vec![
        with_ecn(inner4(ip_a, ip_b, 200), ip::ecn::ECT0),
        inner4(ip_a, ip_b, 201),
        with_ecn(inner4(ip_a, ip_b, 202), ip::ecn::ECT1),
    ];
    send_253(
        &a,
        ip_a,
        ip_b,
        ip::ecn::CE,
        vec![bundle(Encoding::Native, &pkts)],
    );
    let got = rcv.join().unwrap();
    assert_eq!(got, vec![(200, ip::ecn::CE), (202, ip::ecn::CE)]);
    let s = db.stats();
    let t = &s["total"];
    assert_eq!(t["inner_errors"]["ce_on_not_ect"], 1, "{t}");
    assert_eq!(t["inner_errors_total"], 1, "{t}");
    assert_eq!(t["decode_errors_total"], 0, "{t}");
}

#[test]
fn simplemux_ipv6_labelled_4_and_a_damaged_packet_cost_only_the_damaged_one() {
    if !can_run("simplemux_ipv6_labelled_4_and_a_damaged_packet_cost_only_the_damaged_one") {
        return;
    }
    let (net, a, b, ip_a, ip_b) = two("wsmx", 95);
    let (v6a, v6b): (Ipv6Addr, Ipv6Addr) = ("fd95::1".parse().unwrap(), "fd95::2".parse().unwrap());
    net.ip(&a, &["addr", "add", "fd95::1/64", "dev", "va", "nodad"]);
    net.ip(&b, &["addr", "add", "fd95::2/64", "dev", "vb", "nodad"]);
    let db = net.daemon(
        &b,
        &cfg(
            "vb",
            "source_check = \"off\"",
            &ip_a.to_string(),
            "encoding = \"simplemux\"",
        ),
        &[],
    );
    let r4 = udp_receiver(&b, false, Duration::from_secs(3));
    let r6 = udp_receiver(&b, true, Duration::from_secs(3));
    // 10 bundles of 20 IPv4 packets and one IPv6 packet, every separator
    // labelled 4 (Simplemux's own labelling); in every other bundle one IPv4
    // packet has a broken header checksum.
    let mut bundles = Vec::new();
    let mut want4 = Vec::new();
    let mut want6 = Vec::new();
    for k in 0..10u32 {
        let mut body = Vec::new();
        for i in 0..21u32 {
            let tag = k * 100 + i;
            let mut p = if i == 11 {
                want6.push(tag);
                inner6(v6a, v6b, tag)
            } else {
                inner4(ip_a, ip_b, tag)
            };
            if i == 5 && k % 2 == 1 {
                p[8] ^= 0xff; // TTL changed, checksum not
            } else if i != 11 {
                want4.push(tag);
            }
            assert!(p.len() < if i == 0 { 64 } else { 128 });
            body.push(p.len() as u8);
            body.push(4);
            body.extend_from_slice(&p);
        }
        bundles.push(body);
    }
    send_253(&a, ip_a, ip_b, 0, bundles);
    let mut got4: Vec<u32> = r4.join().unwrap().iter().map(|g| g.0).collect();
    let mut got6: Vec<u32> = r6.join().unwrap().iter().map(|g| g.0).collect();
    got4.sort();
    got6.sort();
    want4.sort();
    assert_eq!(got4.len(), 195);
    assert_eq!(got4, want4);
    assert_eq!(got6, want6);
    let s = db.stats();
    let t = &s["total"];
    assert_eq!(t["bundles_received"], 10, "{t}");
    assert_eq!(t["packets_received"], 205, "{t}");
    assert_eq!(t["inner_errors"]["bad_ipv4_checksum"], 5, "{t}");
    assert_eq!(t["inner_errors_total"], 5, "{t}");
    assert_eq!(t["decode_errors_total"], 0, "{t}");
    // The refused packets are in the receive accounting too: 210 framed =
    // 205 written into the TUN + 5 dropped for their checksum.
    let r = &s["accounting"]["receive"];
    assert_eq!(r["in"], 210, "{r}");
    assert_eq!(r["dropped"]["inner_bad_ipv4_checksum"], 5, "{r}");
    assert_eq!(r["balanced"], true, "{r}");
}

#[test]
fn udp_transport_refuses_a_bundle_nested_in_a_bundle() {
    if !can_run("udp_transport_refuses_a_bundle_nested_in_a_bundle") {
        return;
    }
    let (net, a, b, ip_a, ip_b) = two("wnest", 96);
    let udp = "transport = \"udp\"\nudp_port = 4150";
    let db = net.daemon(&b, &cfg("vb", udp, &ip_a.to_string(), ""), &[]);
    let rcv = udp_receiver(&b, false, Duration::from_secs(2));
    // The innermost bundle, then a bundle carrying it as a UDP packet from
    // the peer to the bundle port, next to an ordinary packet.
    let innermost = bundle(Encoding::Native, &[inner4(ip_a, ip_b, 300)]);
    let nested = udp4_packet(ip_a, ip_b, 4150, 4150, &innermost);
    let outer = bundle(Encoding::Native, &[nested, inner4(ip_a, ip_b, 301)]);
    in_ns(&a, move || {
        let s = std::net::UdpSocket::bind((ip_a, 4150)).unwrap();
        s.send_to(&outer, (ip_b, 4150)).unwrap();
    })
    .join()
    .unwrap();
    let got = rcv.join().unwrap();
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [301]);
    let s = db.stats();
    let t = &s["total"];
    assert_eq!(
        t["bundles_received"], 1,
        "one bundle, not a nested second: {t}"
    );
    assert_eq!(t["inner_errors"]["nested"], 1, "{t}");
    assert_eq!(t["packets_received"], 1, "{t}");
}

/// Issue 11, point 3: with a mesh key (`discovery.key`) a daemon takes only
/// bundles whose authentication trailer matches and whose sequence number is
/// new for its node: a stranger's bundle (no key, another key, or a changed
/// byte) and a recorded bundle sent again are dropped and counted, and two
/// keyed daemons bundle to each other as before.
#[test]
fn with_a_mesh_key_only_sealed_fresh_bundles_are_taken() {
    use airpack_core::auth::Key;
    use airpack_core::wire::sealed;
    if !can_run("with_a_mesh_key_only_sealed_fresh_bundles_are_taken") {
        return;
    }
    const KEY: &str = "000102030405060708090a0b0c0d0e0f";
    let keyed = |iface: &str, peer: Ipv4Addr| {
        cfg(iface, "", &peer.to_string(), "") + &format!("[discovery]\nkey = \"{KEY}\"\n")
    };
    let (net, a, b, ip_a, ip_b) = two("wkey", 96);
    let db = net.daemon(&b, &keyed("vb", ip_a), &[]);
    let key = Key::from_hex(KEY).unwrap();
    let sealed_bundle = |k: &Key, seq: u64, tags: std::ops::Range<u32>| {
        let pkts: Vec<Vec<u8>> = tags.map(|t| inner4(ip_a, ip_b, t)).collect();
        let mut buf = bundle(Encoding::Native, &pkts);
        let n = buf.len();
        buf.resize(n + sealed::TRAILER_LEN, 0);
        assert_eq!(sealed::seal(k, 7, seq, &mut buf, n), Some(buf.len()));
        buf
    };
    let good: Vec<Vec<u8>> = (0..4u32)
        .map(|k| sealed_bundle(&key, u64::from(k) + 1, k * 10..k * 10 + 5))
        .collect();
    let mut changed = sealed_bundle(&key, 5, 100..105);
    changed[30] ^= 1;
    let plain = bundle(
        Encoding::Native,
        &(200..205)
            .map(|t| inner4(ip_a, ip_b, t))
            .collect::<Vec<_>>(),
    );
    let other_key = sealed_bundle(&Key::from_bytes([9; 16]), 6, 300..305);
    let mut sends = good.clone();
    sends.extend([good[1].clone(), changed, plain, other_key]);
    let rcv = udp_receiver(&b, false, Duration::from_secs(3));
    send_253(&a, ip_a, ip_b, 0, sends);
    let mut tags: Vec<u32> = rcv.join().unwrap().iter().map(|g| g.0).collect();
    tags.sort();
    let want: Vec<u32> = (0..4).flat_map(|k| k * 10..k * 10 + 5).collect();
    assert_eq!(tags, want);
    let s = db.stats();
    let t = &s["total"];
    assert_eq!(t["bundles_received"], 4, "{t}");
    assert_eq!(t["daemon"]["rx_rejected"]["auth_failed"], 3, "{t}");
    assert_eq!(t["daemon"]["rx_rejected"]["replayed"], 1, "{t}");
    assert_eq!(s["accounting"]["receive"]["balanced"], true, "{s}");

    // Two keyed daemons: A's bundles are sealed and B takes every packet.
    let da = net.daemon(&a, &keyed("va", ip_b), &[]);
    let rcv = udp_receiver(&b, false, Duration::from_secs(3));
    send_udp(&a, ip_a, ip_b, 0xb8, 1000..1020);
    let mut tags: Vec<u32> = rcv.join().unwrap().iter().map(|g| g.0).collect();
    tags.sort();
    assert_eq!(tags, (1000..1020).collect::<Vec<_>>());
    let sa = da.stats();
    let bundles_sent = sa["total"]["daemon"]["bundles_sent"].as_u64().unwrap();
    assert!(bundles_sent >= 1, "{sa}");
    let t = &db.stats()["total"];
    assert_eq!(
        t["bundles_received"].as_u64().unwrap(),
        4 + bundles_sent,
        "{t}"
    );
    assert_eq!(t["daemon"]["rx_rejected"]["auth_failed"], 3, "{t}");
    assert_eq!(t["daemon"]["rx_rejected"]["replayed"], 1, "{t}");

    // A new key needs a restart: the reload is refused, the old key stays.
    let other = keyed("vb", ip_a).replace(KEY, "ffeeddccbbaa99887766554433221100");
    std::fs::write(&db.config, other).unwrap();
    db.signal(libc::SIGHUP);
    wait_until("reload refused", Duration::from_secs(3), || {
        db.stat("/total/daemon/reload_errors") >= 1.0
    });
    let rcv = udp_receiver(&b, false, Duration::from_secs(3));
    send_udp(&a, ip_a, ip_b, 0xb8, 2000..2010);
    let got = rcv.join().unwrap();
    assert_eq!(got.len(), 10, "{got:?}");
    let t = &db.stats()["total"];
    assert_eq!(t["daemon"]["rx_rejected"]["auth_failed"], 3, "{t}");
}
