//! Kernel-facing tests of `airpack::linux` steering: the tcx/eBPF programs
//! that steer matching packets into the TUN, their install, refresh and
//! clean removal, every kind of class condition, and forwarded packets, each
//! in fresh network namespaces (helpers in `common/kernel.rs`).
//!
//! Needs root (CAP_NET_ADMIN), `ip`, `tc` and (end-to-end steering) `nft`;
//! prints "SKIP: ..." and returns otherwise. Addresses are 10.6x.0.0/24 and
//! fd00:6x::/64, only inside the namespaces these tests create; every wait is
//! bounded.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

use airpack::linux::ebpf;
use airpack::linux::netns::run_cmd;
use airpack::linux::{Match, Steering, Tun};

mod common;
use common::kernel::*;

/// airpack's steering programs on `dev`'s tcx egress (calling thread's namespace).
fn our_filters(dev: &str) -> usize {
    let Ok(idx) = airpack::linux::tun::ifindex(dev) else {
        return 0;
    };
    ebpf::tcx_egress_programs(idx)
        .unwrap()
        .into_iter()
        .filter(|&id| {
            ebpf::Program::from_id(id).is_ok_and(|p| p.name().unwrap() == ebpf::PROG_NAME)
        })
        .count()
}

fn has_clsact(dev: &str) -> bool {
    run_cmd(&["tc", "qdisc", "show", "dev", dev], None)
        .unwrap()
        .contains("clsact")
}

/// Static neighbours on `dev` (the steering filter runs after neighbour
/// resolution; these tests have no real host behind their links).
fn neighbours(dev: &str, addrs: &[&str]) {
    for a in addrs {
        sh(&[
            "ip",
            "neigh",
            "replace",
            a,
            "lladdr",
            "02:00:00:00:00:02",
            "dev",
            dev,
            "nud",
            "permanent",
        ]);
    }
}

#[test]
fn steering_installs_steers_bypasses_and_removes_cleanly() {
    if !can_run(&["ip", "tc"]) {
        return;
    }
    let n = ns("steer");
    n.run(|| {
        mkdev("d0");
        mkdev("d1");
        sh(&["ip", "addr", "add", "10.67.0.1/24", "dev", "d0"]);
        sh(&["ip", "addr", "add", "fd00:67::1/64", "dev", "d0", "nodad"]);
        sh(&["ip", "addr", "add", "10.67.1.1/24", "dev", "d1"]);
        sh(&["ip", "link", "set", "d0", "up"]);
        sh(&["ip", "link", "set", "d1", "up"]);
        neighbours("d0", &["10.67.0.2", "fd00:67::2"]);
        neighbours("d1", &["10.67.1.2"]);
        // A strict reverse-path filter everywhere, with d0 explicitly off.
        set_sysctl("net.ipv4.conf.all.rp_filter", "1");
        set_sysctl("net.ipv4.conf.d0.rp_filter", "0");
        set_sysctl("net.ipv4.ip_forward", "0");
        let tun = Tun::open("aps0", 1500).unwrap();
        set_sysctl("net.ipv4.conf.aps0.rp_filter", "1");

        // Without steering, a packet written into the TUN whose source routes
        // via d0 fails the strict reverse-path check: this is why install
        // must relax rp_filter.
        let rx = UdpSocket::bind("10.67.0.1:7001").unwrap();
        rx.set_nonblocking(true).unwrap();
        let from_d0 = udp_packet(
            "10.67.0.2".parse().unwrap(),
            "10.67.0.1".parse().unwrap(),
            5000,
            7001,
            b"rp",
        );
        tun.write(&from_d0).unwrap();
        assert!(
            !readable(rx.as_raw_fd(), 200),
            "strict rp_filter should drop it"
        );

        // An older airpack version left its tc filter (pref 4150, bpf +
        // mirred) behind: install removes it and adds no qdisc of its own.
        sh(&["tc", "qdisc", "add", "dev", "d0", "clsact"]);
        sh(&[
            "tc",
            "filter",
            "add",
            "dev",
            "d0",
            "egress",
            "pref",
            "4150",
            "handle",
            "1",
            "bpf",
            "bytecode",
            "1,6 0 0 4294967295",
            "action",
            "mirred",
            "egress",
            "redirect",
            "dev",
            "aps0",
        ]);
        let spec = steer_spec("aps0", "d0");
        let st = Steering::install(&spec).unwrap();
        assert!(
            !run_cmd(&["tc", "filter", "show", "dev", "d0", "egress"], None)
                .unwrap()
                .contains("mirred"),
            "the old tc filter is gone"
        );
        sh(&["tc", "qdisc", "del", "dev", "d0", "clsact"]);
        assert!(!has_clsact("d1"), "tcx needs no qdisc");
        assert_eq!(our_filters("d0"), 1, "exactly one program");
        assert_eq!(st.steered(), ["d0"]);
        assert_eq!(sysctl("net.ipv4.conf.aps0.rp_filter"), "0");
        assert_eq!(sysctl("net.ipv4.conf.all.rp_filter"), "0");
        assert_eq!(
            sysctl("net.ipv4.conf.d0.rp_filter"),
            "1",
            "other interfaces keep their strictness"
        );
        assert_eq!(sysctl("net.ipv4.ip_forward"), "1");
        assert!(
            run_cmd(&["ip", "rule", "list"], None)
                .unwrap()
                .lines()
                .count()
                <= 3,
            "no policy routing rules"
        );

        // Now the same packet written into the TUN is accepted.
        tun.write(&from_d0).unwrap();
        assert!(
            readable(rx.as_raw_fd(), 1000),
            "packet written into TUN must be received once installed"
        );

        // Matching UDP leaving d0 is steered into the TUN (IPv4 and IPv6, by
        // source or destination port); the same leaving d1 is not.
        udp_send(None, "10.67.0.2:16000".parse().unwrap(), b"steer me");
        let p = tun_next(&tun, 1000, |p| is_udp_to(p, 16000)).expect("IPv4 UDP steered into TUN");
        assert_eq!(p[0] >> 4, 4);
        assert!(
            p.ends_with(b"steer me"),
            "the IP packet, without link-layer header"
        );
        udp_send(None, "[fd00:67::2]:20000".parse().unwrap(), b"steer me 6");
        let p = tun_next(&tun, 1000, |p| is_udp_to(p, 20000)).expect("IPv6 UDP steered into TUN");
        assert_eq!(p[0] >> 4, 6);
        udp_send(None, "10.67.1.2:16003".parse().unwrap(), b"other interface");
        // Bypass-marked, non-matching port, and an explicit bypass class: not steered.
        udp_send(Some(BYPASS), "10.67.0.2:16001".parse().unwrap(), b"bypass");
        udp_send(None, "10.67.0.2:5000".parse().unwrap(), b"other port");
        udp_send(None, "10.67.0.2:16999".parse().unwrap(), b"bypass class");
        assert!(tun_next(&tun, 300, |p| is_udp_to(p, 16001)
            || is_udp_to(p, 5000)
            || is_udp_to(p, 16999)
            || is_udp_to(p, 16003))
        .is_none());

        // Reload with different classes: port 5000 now steered, 16000 no longer.
        let mut st = st;
        st.update_matches(&[Match {
            steer: true,
            protocol: Some(17),
            dst_ports: Some((5000, 5000)),
            ..Match::default()
        }])
        .unwrap();
        udp_send(None, "10.67.0.2:16002".parse().unwrap(), b"x");
        udp_send(None, "10.67.0.2:5000".parse().unwrap(), b"y");
        let p = tun_next(&tun, 1000, |p| is_udp_to(p, 5000) || is_udp_to(p, 16002))
            .expect("steered after reload");
        assert!(is_udp_to(&p, 5000));

        // Another interface set: d1 steered, d0 no longer.
        st.set_interfaces(&["d1".to_string()]).unwrap();
        assert_eq!((our_filters("d0"), our_filters("d1")), (0, 1));
        assert!(!has_clsact("d1"), "no qdisc is ever added");
        udp_send(None, "10.67.0.2:5000".parse().unwrap(), b"d0");
        udp_send(None, "10.67.1.2:5000".parse().unwrap(), b"d1");
        let p = tun_next(&tun, 1000, |p| is_udp_to(p, 5000)).expect("steered on d1");
        assert!(p.ends_with(b"d1"));
        assert!(tun_next(&tun, 300, |p| is_udp_to(p, 5000)).is_none());

        st.remove().unwrap();
        assert_eq!(
            (our_filters("d0"), our_filters("d1")),
            (0, 0),
            "programs detached"
        );
        // Removal restores what install found.
        assert_eq!(sysctl("net.ipv4.conf.all.rp_filter"), "1");
        assert_eq!(sysctl("net.ipv4.ip_forward"), "0");
        udp_send(None, "10.67.0.2:16000".parse().unwrap(), b"after");
        assert!(
            tun_next(&tun, 200, |p| is_udp_to(p, 16000)).is_none(),
            "nothing steered after removal"
        );

        // Someone else's tc filter is left alone.
        sh(&["tc", "qdisc", "add", "dev", "d0", "clsact"]);
        sh(&[
            "tc",
            "filter",
            "add",
            "dev",
            "d0",
            "ingress",
            "pref",
            "7",
            "bpf",
            "bytecode",
            "1,6 0 0 0",
        ]);
        // A clean install then drop removes everything and restores every sysctl.
        set_sysctl("net.ipv4.conf.all.rp_filter", "1");
        set_sysctl("net.ipv4.conf.d0.rp_filter", "0");
        set_sysctl("net.ipv4.ip_forward", "0");
        set_sysctl("net.ipv6.conf.all.forwarding", "0");
        let st = Steering::install(&spec).unwrap();
        assert_eq!(sysctl("net.ipv4.conf.all.rp_filter"), "0");
        assert_eq!(sysctl("net.ipv6.conf.all.forwarding"), "1");
        assert_eq!(our_filters("d0"), 1);
        drop(st);
        assert_eq!(our_filters("d0"), 0);
        assert!(has_clsact("d0"), "someone else's qdisc stays");
        assert!(
            run_cmd(&["tc", "filter", "show", "dev", "d0", "ingress"], None)
                .unwrap()
                .contains("pref 7"),
            "someone else's filter is left alone"
        );
        assert_eq!(
            sysctl("net.ipv4.conf.all.rp_filter"),
            "1",
            "sysctls restored"
        );
        assert_eq!(sysctl("net.ipv4.conf.d0.rp_filter"), "0");
        assert_eq!(sysctl("net.ipv4.ip_forward"), "0");
        assert_eq!(sysctl("net.ipv6.conf.all.forwarding"), "0");
    })
    .unwrap();
}

/// Interfaces that do not exist at install are steered once they appear
/// (`refresh`), and again after they were deleted and created anew.
#[test]
fn steering_attaches_to_interfaces_that_appear_later() {
    if !can_run(&["ip", "tc"]) {
        return;
    }
    let n = ns("late");
    n.run(|| {
        let tun = Tun::open("apl0", 1500).unwrap();
        let mut st = Steering::install(&steer_spec("apl0", "d0")).unwrap();
        assert!(st.steered().is_empty());
        assert!(!st.refresh().unwrap(), "nothing to attach yet");
        for round in 0..2 {
            mkdev("d0");
            sh(&["ip", "addr", "add", "10.66.0.1/24", "dev", "d0"]);
            sh(&["ip", "link", "set", "d0", "up"]);
            neighbours("d0", &["10.66.0.2"]);
            assert!(st.refresh().unwrap(), "round {round}: attached");
            assert_eq!(st.steered(), ["d0"]);
            udp_send(None, "10.66.0.2:16000".parse().unwrap(), b"late");
            assert!(
                tun_next(&tun, 1000, |p| is_udp_to(p, 16000)).is_some(),
                "round {round}: steered"
            );
            sh(&["ip", "link", "del", "d0"]);
            assert!(st.refresh().unwrap(), "round {round}: forgotten");
            assert!(st.steered().is_empty());
        }
        st.remove().unwrap();
    })
    .unwrap();
}

fn set_tos(s: &UdpSocket, tos: libc::c_int) {
    // SAFETY: tos is a c_int living across the call.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_TOS,
            (&tos as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "IP_TOS: {}", io::Error::last_os_error());
}

/// Every kind of class condition the config can express is accepted by the
/// kernel, and a DSCP/length/mark class steers only what it should.
#[test]
fn steering_accepts_every_match_kind() {
    if !can_run(&["ip", "tc"]) {
        return;
    }
    let n = ns("kinds");
    n.run(|| {
        let tun = Tun::open("apk0", 1500).unwrap();
        mkdev("d0");
        sh(&["ip", "addr", "add", "10.60.0.1/24", "dev", "d0"]);
        sh(&["ip", "link", "set", "d0", "up"]);
        neighbours("d0", &["10.60.0.2"]);
        let m = Match::default;
        let mut spec = steer_spec("apk0", "d0");
        spec.matches = vec![
            Match {
                steer: false,
                mark: Some((0x10, 0xff)),
                ..m()
            },
            Match {
                steer: true,
                protocol: Some(17),
                dscp: Some((46, 46)),
                version: Some(4),
                ..m()
            },
            Match {
                steer: true,
                dscp: Some((40, 47)),
                len: Some((0, 300)),
                ..m()
            },
            Match {
                steer: true,
                protocol: Some(17),
                ports: Some((5004, 5005)),
                ..m()
            },
            Match {
                steer: true,
                protocol: Some(6),
                src_ports: Some((1, 1024)),
                dst_ports: Some((80, 80)),
                ..m()
            },
            Match {
                steer: true,
                protocol: Some(1),
                version: Some(4),
                ..m()
            },
            Match {
                steer: true,
                protocol: Some(58),
                version: Some(6),
                ..m()
            },
        ];
        let st = Steering::install(&spec).unwrap();
        assert_eq!(our_filters("d0"), 1, "the kernel accepted the program");
        // DSCP 46 (EF) steered; best effort with the same port not; a large
        // DSCP-40 packet is over the length bound.
        let s = UdpSocket::bind("10.60.0.1:0").unwrap();
        set_tos(&s, 46 << 2);
        s.send_to(b"ef", "10.60.0.2:9100").unwrap();
        assert!(
            tun_next(&tun, 1000, |p| is_udp_to(p, 9100)).is_some(),
            "EF steered"
        );
        let s = UdpSocket::bind("10.60.0.1:0").unwrap();
        s.send_to(b"be", "10.60.0.2:9101").unwrap();
        set_tos(&s, 40 << 2);
        s.send_to(&[0u8; 600], "10.60.0.2:9102").unwrap();
        s.send_to(&[0u8; 100], "10.60.0.2:9103").unwrap();
        let p = tun_next(&tun, 1000, |p| {
            is_udp_to(p, 9101) || is_udp_to(p, 9102) || is_udp_to(p, 9103)
        });
        assert!(
            p.is_some_and(|p| is_udp_to(&p, 9103)),
            "only the short DSCP-40 packet is steered"
        );
        // Either-port class: source port 5004 matches.
        let s = UdpSocket::bind("10.60.0.1:5004").unwrap();
        s.send_to(b"rtp", "10.60.0.2:9200").unwrap();
        assert!(
            tun_next(&tun, 1000, |p| is_udp_to(p, 9200)).is_some(),
            "source port class steered"
        );
        // The bypass class (mark 0x10/0xff) wins over the later port class.
        let s = UdpSocket::bind("10.60.0.1:0").unwrap();
        nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::Mark, &0x310).unwrap();
        s.send_to(b"marked", "10.60.0.2:5005").unwrap();
        assert!(
            tun_next(&tun, 300, |p| is_udp_to(p, 5005)).is_none(),
            "bypass class first"
        );
        // An ICMP echo request matches the protocol-1 class.
        // SAFETY: plain socket/sendto calls on a descriptor owned here.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP);
            assert!(fd >= 0, "{}", io::Error::last_os_error());
            let mut echo = [8u8, 0, 0, 0, 0, 1, 0, 1];
            let c = csum(&echo, 0);
            echo[2..4].copy_from_slice(&c.to_be_bytes());
            let to = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes([10, 60, 0, 2]),
                },
                sin_zero: [0; 8],
            };
            let n = libc::sendto(
                fd,
                echo.as_ptr().cast(),
                echo.len(),
                0,
                (&to as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            );
            assert_eq!(n, 8, "{}", io::Error::last_os_error());
            libc::close(fd);
        }
        assert!(
            tun_next(&tun, 1000, |p| p[0] >> 4 == 4 && p[9] == 1).is_some(),
            "ICMP steered"
        );
        st.remove().unwrap();
    })
    .unwrap();
}

/// The forwarding half of the design: a packet forwarded by b is steered into
/// b's TUN when it leaves b's radio; the same packet written back into the
/// TUN (as the daemon does after decoding a bundle) is steered again in
/// hop-by-hop mode (re-aggregation, one TTL less per pass) and forwarded
/// normally in end-to-end mode.
#[test]
fn forwarded_packets_are_steered_and_tun_writes_resteered_only_hop_by_hop() {
    if !can_run(&["ip", "tc", "nft"]) {
        return;
    }
    let (a, b) = veth_pair("fwd");
    a.exec(&["ip", "route", "add", "10.62.0.0/24", "via", "10.69.0.2"])
        .unwrap();
    let va = a
        .run(|| airpack::linux::tun::ifindex("va").unwrap())
        .unwrap();
    let cap = a.run(move || capture(va)).unwrap();
    for steer_from_tun in [true, false] {
        let tag = if steer_from_tun { "hop" } else { "e2e" };
        let bt = b
            .spawn(move || {
                // A fresh name per pass: the previous device may still be unregistering.
                let name = if steer_from_tun { "apf0" } else { "apf1" };
                let tun = Tun::open(name, 1500).unwrap();
                // b routes 10.62.0.0/24 back toward a (so a normal forward is visible on va).
                sh(&["ip", "route", "replace", "10.62.0.0/24", "via", "10.69.0.1"]);
                let mut spec = steer_spec(name, "vb");
                spec.steer_from_tun = steer_from_tun;
                let st = Steering::install(&spec).unwrap();
                (tun, st)
            })
            .unwrap();
        let (tun, st) = bt.join().unwrap().unwrap();
        a.run(move || udp_send(None, "10.62.0.5:16000".parse().unwrap(), tag.as_bytes()))
            .unwrap();
        let p = tun_next(&tun, 1000, |p| is_udp_to(p, 16000))
            .expect("forwarded packet steered into b's TUN");
        assert_eq!(p[8], 63, "forwarding decremented the TTL");
        assert!(p.ends_with(tag.as_bytes()));
        // The daemon writes the (decoded) packet into the TUN.
        tun.write(&p).unwrap();
        let again = tun_next(&tun, 300, |p| is_udp_to(p, 16000));
        let on_wire = captured(&cap, 17, 300).filter(|w| w.ends_with(tag.as_bytes()));
        if steer_from_tun {
            let again = again.expect("hop-by-hop: re-steered into the TUN");
            assert_eq!(again[8], 62);
            assert!(on_wire.is_none());
        } else {
            assert!(again.is_none(), "end-to-end: not steered again");
            let w = on_wire.expect("end-to-end: forwarded normally out of b");
            assert_eq!(w[8], 62);
        }
        b.run(move || st.remove().unwrap()).unwrap();
        drop(tun);
    }
}
