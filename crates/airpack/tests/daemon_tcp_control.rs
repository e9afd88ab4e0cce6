//! TCP control packets through a holding daemon (issue 11 point 9; seed
//! 004's "non-concatenate" TCP packets): node A's daemon steers all TCP into
//! its TUN as `bundle` class (the strictest class: ACKs may wait the whole
//! hold), with a 1 s hold; in each link mode (fixed; hold-while-busy and
//! adaptive with a medium reported busy, so they hold too) A sends TCP ACKs
//! of two flows, then SYN, SYN-ACK, FIN-ACK, RST-ACK and RST, from a raw
//! socket. A capture on B's side of the link checks: every control packet
//! crossed the link as a plain TCP packet with its own flags and bytes
//! (unbundled), all of them before the bundle that carries the ACKs sent
//! ahead of them (so none waited for the hold), and A's daemon counted them
//! as bypass. The outcome depends on order, not on timing: the ACKs are held
//! for a second after the control packets were handed in.
//!
//! Needs root, `ip`, `tc`, `nft` and /dev/net/tun (else SKIP).

mod common;
use common::*;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ACK: u8 = 0x10;
const CONTROL: [(&str, u8); 5] = [
    ("SYN", 0x02),
    ("SYN-ACK", 0x12),
    ("FIN-ACK", 0x11),
    ("RST-ACK", 0x14),
    ("RST", 0x04),
];

/// A TCP header (no options) with `flags` and a 4-byte `tag` as payload.
fn segment(sport: u16, flags: u8, tag: u32) -> Vec<u8> {
    let mut p = vec![0u8; 24];
    p[0..2].copy_from_slice(&sport.to_be_bytes());
    p[2..4].copy_from_slice(&80u16.to_be_bytes());
    p[4..8].copy_from_slice(&tag.to_be_bytes());
    p[12] = 0x50;
    p[13] = flags;
    p[14..16].copy_from_slice(&1024u16.to_be_bytes());
    p[20..24].copy_from_slice(&tag.to_be_bytes());
    p
}

/// What crossed the link from A, in order: IP protocol and, for TCP, the
/// TCP header and payload.
#[derive(Debug, Clone)]
struct Seen {
    protocol: u8,
    l4: Vec<u8>,
}

/// Captures IPv4 packets from `from` on `dev` in `ns` (AF_PACKET, cooked)
/// until `stop` or `deadline`.
fn capture(
    ns: &str,
    dev: &str,
    from: Ipv4Addr,
    stop: Arc<AtomicBool>,
) -> (
    std::thread::JoinHandle<Vec<Seen>>,
    std::sync::mpsc::Receiver<()>,
) {
    let (tx, rx) = std::sync::mpsc::channel();
    let dev = dev.to_owned();
    let h = in_ns(ns, move || {
        let ifindex = airpack::linux::tun::ifindex(&dev).unwrap();
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2).
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK,
                i32::from(proto),
            )
        };
        assert!(
            fd >= 0,
            "packet socket: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: zeroed sockaddr_ll is valid; fields set below.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = proto;
        sa.sll_ifindex = ifindex as i32;
        // SAFETY: valid sockaddr_ll.
        let r = unsafe {
            libc::bind(
                fd,
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
        tx.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65_536];
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            // SAFETY: valid buffer.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n <= 0 {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            let p = &buf[..n as usize];
            if p.len() >= 20 && p[0] == 0x45 && p[12..16] == from.octets() {
                out.push(Seen {
                    protocol: p[9],
                    l4: p[20..].to_vec(),
                });
            }
        }
        // SAFETY: fd opened above.
        unsafe { libc::close(fd) };
        out
    });
    (h, rx)
}

/// One snapshot of a medium counters file (the lab's `NODE.air` format):
/// `t` µs of air time, 80 % of it busy, a MAC queue backlog of 5 packets.
fn busy_medium_at(path: &std::path::Path, t: u64) {
    let tmp = path.with_extension("tmp");
    std::fs::write(
        &tmp,
        format!(
            "airpack-air 1\nnode A\nmac 02:00:00:00:00:01\ntime_us {t}\nactive_us {t}\nbusy_us {}\ntx_us 0\nrx_us 0\nqueue_packets 5\nqueue_bytes 7500\ntx_msdus 0\nretries 0\ntx_failed 0\nqueue_drops 0\n",
            t * 4 / 5
        ),
    )
    .unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A live medium file, as the air writes it: rewritten every 5 ms with the
/// time advancing and the medium 80 % busy, so the busy signal of
/// hold-while-busy and adaptive (backlog and utilisation) stays on however
/// late the daemon reads it. A file that never advanced let adaptive's
/// utilisation estimate decay and release the held ACKs early on a loaded
/// machine. Stops with `stop`.
fn busy_medium(path: &std::path::Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    busy_medium_at(path, 20_000);
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let t0 = Instant::now();
        while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(5));
            busy_medium_at(&path, 20_000 + t0.elapsed().as_micros() as u64);
        }
    })
}

fn run_mode(mode: &str, subnet: u8) {
    let (net, a, b, ip_a, ip_b) = two(&format!("tc{}", &mode[..3]), subnet);
    let air =
        std::env::temp_dir().join(format!("airpack-tcpctl-{}-{mode}.air", std::process::id()));
    let air_stop = Arc::new(AtomicBool::new(false));
    let air_writer = busy_medium(&air, air_stop.clone());
    let cfg_a = format!(
        "[daemon]\ninterfaces = [\"va\"]\n[aggregation]\nhold_time_us = 1000000\nlink_mode = \"{mode}\"\n[medium]\nqdisc = false\nfile = \"{}\"\nfile_interval_us = 1000\ndelay_budget_us = 1000000\n{VOICE_CLASS}[[class]]\nclass = \"bundle\"\nprotocol = \"tcp\"\n[[peer]]\naddress = \"{ip_b}\"\n",
        air.display()
    );
    let cfg_b =
        format!("[daemon]\ninterfaces = [\"vb\"]\n{VOICE_CLASS}[[peer]]\naddress = \"{ip_a}\"\n");
    let mut da = net.daemon(&a, &cfg_a, &[]);
    let mut db = net.daemon(&b, &cfg_b, &[]);
    if mode != "fixed" {
        wait_until("A's link busy", Duration::from_secs(10), || {
            da.stats()["link_busy"] == true
        });
    }
    // Adaptive holds a packet only with company (another flow to the peer
    // within the last one to two hold times): two warm-up ACKs of two
    // flows first, so the measured ACKs are held however the daemon's
    // reads batch them (without it the first ACK, alone, has no company
    // and takes its batch out at once, before the control packets).
    let warm = if mode == "adaptive" { 2 } else { 0 };
    if warm > 0 {
        send_raw(
            &a,
            ip_a,
            ip_b,
            6,
            vec![segment(1000, ACK, 90), segment(1001, ACK, 91)],
        );
        wait_until("the warm-up ACKs left", Duration::from_secs(15), || {
            let t = &da.stats()["total"];
            t["aggregated_packets"].as_u64().unwrap_or(0)
                + t["unaggregated_packets"].as_u64().unwrap_or(0)
                >= 2
                && da.stats()["queued"]["packets"] == 0
        });
    }
    let bundles0 = da.stats()["total"]["bundles"].as_u64().unwrap_or(0);
    let stop = Arc::new(AtomicBool::new(false));
    let (cap, ready) = capture(&b, "vb", ip_a, stop.clone());
    ready.recv().unwrap();
    // Two ACKs of each of two flows (company for adaptive), then the
    // control packets, back to back.
    let mut pkts = Vec::new();
    for k in 0..4u32 {
        pkts.push(segment(1000 + (k % 2) as u16, ACK, k));
    }
    for (k, (_, flags)) in CONTROL.iter().enumerate() {
        pkts.push(segment(2000, *flags, 100 + k as u32));
    }
    let sent = pkts.clone();
    send_raw(&a, ip_a, ip_b, 6, pkts);
    // The held ACKs leave after the hold (1 s) in a bundle.
    wait_until("the ACKs' bundle", Duration::from_secs(15), || {
        da.stats()["total"]["bundles"].as_u64().unwrap_or(0) > bundles0
            && da.stats()["queued"]["packets"] == 0
    });
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let seen = cap.join().unwrap();
    let first_bundle = seen
        .iter()
        .position(|s| s.protocol == 253)
        .unwrap_or_else(|| panic!("{mode}: no bundle crossed the link: {seen:?}"));
    for (k, (name, flags)) in CONTROL.iter().enumerate() {
        let want = &sent[4 + k];
        let at = seen
            .iter()
            .position(|s| s.protocol == 6 && &s.l4 == want)
            .unwrap_or_else(|| {
                panic!("{mode}: {name} did not cross the link as a plain TCP packet: {seen:?}")
            });
        assert_eq!(seen[at].l4[13], *flags);
        assert!(
            at < first_bundle,
            "{mode}: {name} (frame {at}) waited behind the held bundle (frame {first_bundle}); seen {:?}",
            seen.iter().map(|s| (s.protocol, s.l4.len())).collect::<Vec<_>>()
        );
    }
    // The ACKs were held: at most the first left alone (adaptive: no
    // company yet), the rest in the bundle.
    let plain_acks = seen
        .iter()
        .filter(|s| s.protocol == 6 && s.l4.len() >= 14 && s.l4[13] == ACK)
        .count();
    assert!(plain_acks <= 1, "{mode}: {plain_acks} ACKs were not held");
    let t = da.stats()["total"].clone();
    assert_eq!(t["bypass_packets"], CONTROL.len() as u64, "{mode}: {t}");
    assert_eq!(
        t["aggregated_packets"].as_u64().unwrap() + t["unaggregated_packets"].as_u64().unwrap(),
        4 + warm,
        "{mode}: {t}"
    );
    assert!(
        t["aggregated_packets"].as_u64().unwrap() >= 3,
        "{mode}: {t}"
    );
    println!(
        "{mode}: 5 control packets crossed before the bundle (frame {first_bundle}) holding {} ACKs",
        t["aggregated_packets"]
    );
    assert_eq!(da.stop(), 0);
    assert_eq!(db.stop(), 0);
    air_stop.store(true, Ordering::Relaxed);
    air_writer.join().unwrap();
    let _ = std::fs::remove_file(&air);
}

#[test]
fn tcp_control_packets_are_never_held() {
    if !can_run("tcp_control_packets_are_never_held") {
        return;
    }
    for (k, mode) in ["fixed", "hold-while-busy", "adaptive"].iter().enumerate() {
        run_mode(mode, 136 + k as u8);
    }
}
