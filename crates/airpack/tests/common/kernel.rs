//! Helpers of the kernel-facing tests of `airpack::linux` (`linux_io.rs`,
//! `linux_steering.rs`, `linux_sockets.rs`): the SKIP check, fresh
//! namespaces (`aplx<pid><tag>`, deleted on drop), links, sysctls, hand-built
//! UDP packets, AF_PACKET captures, a veth-joined namespace pair and the
//! steering spec the tests install.
//!
//! Must not touch: anything outside the namespaces the tests create (the
//! sysctls written are those of the test's own namespace); every wait is
//! bounded. Not for the daemon tests (their harness is `common/mod.rs`).

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use airpack::linux::netns::{run_cmd, NetNs};
use airpack::linux::{Events, Interest, Match, Poller, SteerSpec, Tun};

pub const BYPASS: u32 = 0x4151;

pub fn can_run(tools: &[&str]) -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP: needs root");
        return false;
    }
    for t in tools {
        if run_cmd(&[t, "--version"], None).is_err() && run_cmd(&[t, "-V"], None).is_err() {
            eprintln!("SKIP: needs `{t}` (apt-get install iproute2 nftables)");
            return false;
        }
    }
    true
}

pub fn ns(tag: &str) -> NetNs {
    NetNs::create(&format!("aplx{}{}", std::process::id(), tag)).expect("create namespace")
}

pub fn sh(argv: &[&str]) {
    run_cmd(argv, None).unwrap_or_else(|e| panic!("{e}"));
}

/// A link with carrier in the current namespace (the kernel here has no `dummy`
/// driver): one end of a veth pair whose peer `<name>p` is up too.
pub fn mkdev(name: &str) {
    let peer = format!("{name}p");
    sh(&[
        "ip", "link", "add", name, "type", "veth", "peer", "name", &peer,
    ]);
    sh(&["ip", "link", "set", &peer, "up"]);
}

pub fn sysctl(key: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/{}", key.replace('.', "/")))
        .unwrap()
        .trim()
        .to_string()
}

pub fn set_sysctl(key: &str, v: &str) {
    std::fs::write(format!("/proc/sys/{}", key.replace('.', "/")), v).unwrap();
}

/// Waits up to `ms` for `fd` to become readable.
pub fn readable(fd: RawFd, ms: i32) -> bool {
    let p = Poller::new().unwrap();
    p.add(fd, 1, Interest::READ).unwrap();
    let mut ev = Events::with_capacity(1);
    p.wait(&mut ev, Some(ms)).unwrap() > 0
}

/// Reads the next packet from the TUN within `ms`, skipping IPv6 noise
/// (router solicitations, MLD) that the kernel may send on a fresh link.
pub fn tun_next(tun: &Tun, ms: i32, want: impl Fn(&[u8]) -> bool) -> Option<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_millis(ms as u64);
    let mut buf = [0u8; 2048];
    loop {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .as_millis() as i32;
        if left <= 0 || !readable(tun.as_raw_fd(), left) {
            return None;
        }
        match tun.read(&mut buf) {
            Ok(n) if want(&buf[..n]) => return Some(buf[..n].to_vec()),
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => panic!("tun read: {e}"),
        }
    }
}

pub fn is_udp_to(pkt: &[u8], dport: u16) -> bool {
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 28 => {
            let ihl = usize::from(pkt[0] & 15) * 4;
            pkt[9] == 17
                && pkt.len() >= ihl + 8
                && u16::from_be_bytes([pkt[ihl + 2], pkt[ihl + 3]]) == dport
        }
        Some(6) if pkt.len() >= 48 => {
            pkt[6] == 17 && u16::from_be_bytes([pkt[42], pkt[43]]) == dport
        }
        _ => false,
    }
}

pub fn csum(data: &[u8], mut sum: u32) -> u16 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A complete IPv4 (header checksum set, UDP checksum 0) or IPv6 (UDP checksum set) UDP packet.
pub fn udp_packet(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let ulen = (8 + payload.len()) as u16;
    let mut udp = Vec::new();
    udp.extend_from_slice(&sport.to_be_bytes());
    udp.extend_from_slice(&dport.to_be_bytes());
    udp.extend_from_slice(&ulen.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut h = vec![0x45, 0xb8, 0, 0, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0];
            h[2..4].copy_from_slice(&(20 + ulen).to_be_bytes());
            h.extend_from_slice(&s.octets());
            h.extend_from_slice(&d.octets());
            let c = csum(&h, 0);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            h.extend_from_slice(&udp);
            h
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let mut pseudo = Vec::new();
            pseudo.extend_from_slice(&s.octets());
            pseudo.extend_from_slice(&d.octets());
            pseudo.extend_from_slice(&u32::from(ulen).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, 17]);
            pseudo.extend_from_slice(&udp);
            let c = csum(&pseudo, 0);
            udp[6..8].copy_from_slice(&c.to_be_bytes());
            let mut h = vec![0x6b, 0x80, 0, 0];
            h.extend_from_slice(&ulen.to_be_bytes());
            h.extend_from_slice(&[17, 64]);
            h.extend_from_slice(&s.octets());
            h.extend_from_slice(&d.octets());
            h.extend_from_slice(&udp);
            h
        }
        _ => panic!("mixed families"),
    }
}

pub fn udp_send(from_mark: Option<u32>, to: SocketAddr, payload: &[u8]) {
    let bind: SocketAddr = if to.is_ipv4() {
        "0.0.0.0:0".parse().unwrap()
    } else {
        "[::]:0".parse().unwrap()
    };
    let s = UdpSocket::bind(bind).unwrap();
    if let Some(m) = from_mark {
        nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::Mark, &m).unwrap();
    }
    s.send_to(payload, to).unwrap();
}

/// An AF_PACKET socket on `ifindex` that sees whole IP packets (cooked, no link header).
/// [`captured`] reports only packets arriving on the link.
pub fn capture(ifindex: u32) -> OwnedFd {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2) call, checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK,
            proto.into(),
        )
    };
    assert!(fd >= 0, "AF_PACKET: {}", io::Error::last_os_error());
    // SAFETY: fd is fresh and owned from here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain old data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: sll is a valid sockaddr_ll.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(r, 0, "bind AF_PACKET: {}", io::Error::last_os_error());
    fd
}

/// Next captured packet with IP protocol / next header `proto` within `ms`.
pub fn captured(fd: &OwnedFd, proto: u8, ms: i32) -> Option<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_millis(ms as u64);
    let mut buf = [0u8; 2048];
    loop {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .as_millis() as i32;
        if left <= 0 || !readable(fd.as_raw_fd(), left) {
            return None;
        }
        // SAFETY: sockaddr_ll is plain old data.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: buf and sll are writable for their lengths.
        let n = unsafe {
            libc::recvfrom(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                (&mut sll as *mut libc::sockaddr_ll).cast(),
                &mut len,
            )
        };
        // Only what arrives on the link, not what this side sends.
        if n <= 0 || sll.sll_pkttype == libc::PACKET_OUTGOING {
            continue;
        }
        let p = &buf[..n as usize];
        let hit = match p[0] >> 4 {
            4 => p.len() >= 20 && p[9] == proto,
            6 => p.len() >= 40 && p[6] == proto,
            _ => false,
        };
        if hit {
            return Some(p.to_vec());
        }
    }
}

/// Two namespaces joined by a veth: a = 10.69.0.1 / fd00:69::1, b = .2 / ::2.
pub fn veth_pair(tag: &str) -> (NetNs, NetNs) {
    let a = ns(&format!("{tag}a"));
    let b = ns(&format!("{tag}b"));
    sh(&[
        "ip",
        "-n",
        a.name(),
        "link",
        "add",
        "va",
        "type",
        "veth",
        "peer",
        "name",
        "vb",
        "netns",
        b.name(),
    ]);
    for (n, dev, v4, v6) in [
        (&a, "va", "10.69.0.1/24", "fd00:69::1/64"),
        (&b, "vb", "10.69.0.2/24", "fd00:69::2/64"),
    ] {
        sh(&["ip", "-n", n.name(), "addr", "add", v4, "dev", dev]);
        sh(&["ip", "-n", n.name(), "addr", "add", v6, "dev", dev, "nodad"]);
        sh(&["ip", "-n", n.name(), "link", "set", dev, "up"]);
    }
    // Static neighbours: the tests are about sockets, not ARP/ND timing
    // (a lost first neighbour solicitation is retried only after 1 s).
    let mac = |n: &NetNs, dev: &str| {
        let out = run_cmd(
            &["ip", "-n", n.name(), "-br", "link", "show", "dev", dev],
            None,
        )
        .unwrap();
        out.split_whitespace()
            .nth(2)
            .expect("MAC in `ip -br link`")
            .to_string()
    };
    let (mac_a, mac_b) = (mac(&a, "va"), mac(&b, "vb"));
    for (n, dev, peer_mac, v4, v6) in [
        (&a, "va", &mac_b, "10.69.0.2", "fd00:69::2"),
        (&b, "vb", &mac_a, "10.69.0.1", "fd00:69::1"),
    ] {
        for ip in [v4, v6] {
            sh(&[
                "ip",
                "-n",
                n.name(),
                "neigh",
                "replace",
                ip,
                "lladdr",
                peer_mac,
                "dev",
                dev,
                "nud",
                "permanent",
            ]);
        }
    }
    (a, b)
}

pub fn steer_spec(tun: &str, iface: &str) -> SteerSpec {
    SteerSpec {
        tun: tun.into(),
        bypass_mark: BYPASS,
        priority: 4150,
        matches: vec![
            Match {
                steer: false,
                protocol: Some(17),
                dst_ports: Some((16999, 16999)),
                ..Match::default()
            },
            Match {
                steer: true,
                protocol: Some(17),
                ports: Some((16000, 32000)),
                ..Match::default()
            },
        ],
        steer_from_tun: true,
        interfaces: vec![iface.into()],
        state: None,
    }
}
