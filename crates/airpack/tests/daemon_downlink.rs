//! Downlink multiplexing (issue 14) end to end in network namespaces: a
//! wired node W, an AP running `[ap]`, and three stations running
//! `[station]` on one Ethernet segment (a bridge in a hub namespace, so the
//! AP's multicast frames reach all of them).
//!
//! - the stations register (authenticated) and the AP reports 3 stations;
//! - W sends UDP to each station's registered port through the AP: every
//!   station receives exactly its own packets, and the packets its stack
//!   receives (captured on its TUN) are byte-identical to what W sent
//!   (captured on W's link) with the TTL a router decrements;
//! - each station ignores the others' packets (counted);
//! - a registration with the wrong key is refused and counted, a replayed
//!   one too; a frame
//!   from a source other than the AP is dropped and counted;
//! - a station that stops renewing (killed) loses its lease, and its
//!   packets are then forwarded unchanged; a station that
//!   stops cleanly unregisters;
//! - a reload (SIGHUP) of the AP keeps the role and its steering;
//! - SIGTERM on the AP while W sends: every packet still arrives;
//! - one daemon runs both roles on a node: a station bundles its uplink to
//!   the AP beside `[station]`, the AP splits the bundles beside `[ap]`.
//!
//! The AP keeps new stations in the frame from their first packet
//! (`loss_start_unicast = false`): these tests check the frame path byte
//! for byte and count every packet exactly, which the default start on
//! unicast (and its trial's duplicates) would make depend on when the
//! first packet comes; `daemon_downlink_loss` covers the default start.
//!
//! No timing assertions: every wait is for a condition, bounded.

mod common;
use airpack_core::auth::Key;
use airpack_core::downlink::register::{self, Body, Message, Ports};
use common::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KEY: &str = "000102030405060708090a0b0c0d0e0f";
const WIRED: Ipv4Addr = Ipv4Addr::new(10, 171, 0, 2);
const AP_CELL: Ipv4Addr = Ipv4Addr::new(10, 172, 0, 1);
const WAIT: Duration = Duration::from_secs(30);
/// The AP's Prometheus listener (inside its namespace).
const METRICS: u16 = 9464;

fn station_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 172, 0, 11 + i as u8)
}

fn port(i: usize) -> u16 {
    20_000 + i as u16
}

/// Captures the IP packets crossing `dev` in `ns` (AF_PACKET, cooked)
/// until `stop`; keeps UDP packets to 10.172.0.0/24, fd72::/64 and the
/// group 225.0.0.10.
fn capture(
    ns: &str,
    dev: &str,
    stop: Arc<AtomicBool>,
) -> (
    std::thread::JoinHandle<Vec<Vec<u8>>>,
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
        assert_eq!(
            r,
            0,
            "bind packet socket: {}",
            std::io::Error::last_os_error()
        );
        tx.send(()).unwrap();
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65_536];
        let mut idle_after_stop = 0;
        while idle_after_stop < 20 && out.len() < 100_000 {
            // SAFETY: valid buffer.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n <= 0 {
                if stop.load(Ordering::Relaxed) {
                    idle_after_stop += 1;
                }
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            let p = &buf[..n as usize];
            let v4 = p.len() >= 28 && p[0] >> 4 == 4 && p[9] == 17 && p[16..19] == [10, 172, 0];
            // IPv6: UDP to fd72::/64 (the cell).
            let v6 = p.len() >= 48 && p[0] >> 4 == 6 && p[6] == 17 && p[24..26] == [0xfd, 0x72];
            // The AP's frames to the seed's group 225.0.0.10.
            let frame =
                p.len() >= 28 && p[0] >> 4 == 4 && p[9] == 17 && p[16..20] == [225, 0, 0, 10];
            if v4 || v6 || frame {
                out.push(p.to_vec());
            }
        }
        // SAFETY: fd opened above.
        unsafe { libc::close(fd) };
        out
    });
    (h, rx)
}

/// What a router makes of the IPv6 packet `p`: hop limit minus one (the UDP
/// checksum completed as the wire carries it).
fn forwarded6(p: &[u8]) -> Vec<u8> {
    let mut q = p.to_vec();
    let udp_len = q.len() - 40;
    q[46] = 0;
    q[47] = 0;
    let mut pseudo = Vec::with_capacity(40 + udp_len);
    pseudo.extend_from_slice(&q[8..40]);
    pseudo.extend_from_slice(&(udp_len as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 17]);
    pseudo.extend_from_slice(&q[40..]);
    let ck = match checksum(&pseudo) {
        0 => 0xffff,
        c => c,
    };
    q[46..48].copy_from_slice(&ck.to_be_bytes());
    q[7] -= 1;
    q
}

/// What a router makes of `p`: TTL minus one, header checksum updated.
fn forwarded(p: &[u8]) -> Vec<u8> {
    let mut q = p.to_vec();
    complete_udp_checksum(&mut q);
    q[8] -= 1;
    q[10] = 0;
    q[11] = 0;
    let ihl = usize::from(q[0] & 0xf) * 4;
    let ck = checksum(&q[..ihl]);
    q[10..12].copy_from_slice(&ck.to_be_bytes());
    q
}

/// `GET /metrics` from the listener on `port` inside `ns`.
fn scrape(ns: &str, port: u16) -> String {
    let resp = metrics_response(ns, port);
    assert!(resp.starts_with("HTTP/1.0 200 OK"), "{resp}");
    resp.split_once("\r\n\r\n").unwrap().1.to_owned()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// W's capture sees its packets before checksum offload fills in the UDP
/// checksum (veths offload it): complete it as the wire carries it.
fn complete_udp_checksum(p: &mut [u8]) {
    let ihl = usize::from(p[0] & 0xf) * 4;
    let udp_len = p.len() - ihl;
    p[ihl + 6] = 0;
    p[ihl + 7] = 0;
    let mut pseudo = Vec::with_capacity(12 + udp_len);
    pseudo.extend_from_slice(&p[12..20]);
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(udp_len as u16).to_be_bytes());
    pseudo.extend_from_slice(&p[ihl..]);
    let ck = match checksum(&pseudo) {
        0 => 0xffff,
        c => c,
    };
    p[ihl + 6..ihl + 8].copy_from_slice(&ck.to_be_bytes());
}

fn dst_port(p: &[u8]) -> u16 {
    let ihl = usize::from(p[0] & 0xf) * 4;
    u16::from_be_bytes([p[ihl + 2], p[ihl + 3]])
}

/// A receiver on `ns` port `port`: the payloads it got.
/// Payloads received so far.
type Got = Arc<Mutex<Vec<Vec<u8>>>>;

fn receiver(ns: &str, port: u16) -> (Got, Arc<AtomicBool>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (g, s) = (got.clone(), stop.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    in_ns(ns, move || {
        let sock = UdpSocket::bind(("0.0.0.0", port)).unwrap();
        // A burst of frames hands the stack several packets at once: room
        // for all of them, so only the daemons can lose packets here.
        airpack::linux::set_buffer(sock.as_raw_fd(), 8 << 20, false).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        tx.send(()).unwrap();
        let mut buf = [0u8; 2048];
        while !s.load(Ordering::Relaxed) {
            if let Ok(n) = sock.recv(&mut buf) {
                g.lock().unwrap().push(buf[..n].to_vec());
            }
        }
    });
    rx.recv().unwrap();
    (got, stop)
}

/// `n` datagrams from W to station `i`, payload "station i, seq k".
fn send(ns: &str, i: usize, from: u32, n: u32) {
    let dst = SocketAddr::new(IpAddr::V4(station_ip(i)), port(i));
    in_ns(ns, move || {
        let sock = UdpSocket::bind(("0.0.0.0", 0)).unwrap();
        for k in from..from + n {
            let mut body = vec![0u8; 172];
            body[0] = 0x80; // RTP version 2
            body[1] = 0; // PCMU
            body[2..4].copy_from_slice(&(k as u16).to_be_bytes());
            body[4..8].copy_from_slice(&(k * 160).to_be_bytes());
            body[8..12].copy_from_slice(&(0x5000 + i as u32).to_be_bytes());
            body[12] = i as u8;
            body[13..17].copy_from_slice(&k.to_be_bytes());
            sock.send_to(&body, dst).unwrap();
        }
    })
    .join()
    .unwrap();
}

fn ap_config() -> String {
    format!(
        "[daemon]\nprometheus = \"127.0.0.1:{METRICS}\"\n\
         [ap]\nenabled = true\ninterfaces = [\"cell\"]\nkey = \"{KEY}\"\nmax_lease_secs = 3\n\
         idle_release = false\ninterval_ms = 1000\nloss_start_unicast = false\n"
    )
}

fn station_config(i: usize) -> String {
    format!(
        "[station]\nenabled = true\ninterface = \"wl\"\nap = \"{AP_CELL}\"\nkey = \"{KEY}\"\nports = {}\nlease_secs = 3\nrenew_secs = 1\n",
        port(i)
    )
}

/// The cell: W (wired, 10.171.0.0/24 to the AP), the AP, and `n`
/// stations on a bridge (the "air") with the AP's cell interface; the
/// stations route through the AP. Returns (W, AP, stations).
fn cell(net: &mut Net, n: usize) -> (String, String, Vec<String>) {
    let w = net.ns("w");
    let ap = net.ns("ap");
    let hub = net.ns("hub");
    net.link(&w, "w0", &format!("{WIRED}/24"), &ap, "a0", "10.171.0.1/24");
    net.ip(&w, &["route", "add", "10.172.0.0/24", "via", "10.171.0.1"]);
    net.bridge(&hub);
    net.attach(&hub, &ap, "cell", "pap", &format!("{AP_CELL}/24"));
    let mut st = Vec::new();
    for i in 0..n {
        let ns = net.ns(&format!("s{i}"));
        let addr = format!("{}/24", station_ip(i));
        net.attach(&hub, &ns, "wl", &format!("ps{i}"), &addr);
        net.ip(
            &ns,
            &["route", "add", "default", "via", &AP_CELL.to_string()],
        );
        st.push(ns);
    }
    (w, ap, st)
}

#[test]
fn ap_and_three_stations() {
    if !can_run("daemon_downlink") {
        return;
    }
    let mut net = Net::new("dl");
    let (w, ap, st) = cell(&mut net, 3);

    let mut apd = net.daemon(&ap, &ap_config(), &[]);
    let mut sd: Vec<_> = (0..3)
        .map(|i| net.daemon(&st[i], &station_config(i), &[]))
        .collect();
    wait_until("3 registered stations", WAIT, || {
        apd.stats().pointer("/ap/stations").and_then(|v| v.as_u64()) == Some(3)
            && sd.iter().all(|d| d.stats()["station"]["streams"] == 1)
    });

    // A reload (SIGHUP) keeps the AP role and its steering.
    let reloads = apd.stat("/total/daemon/reloads");
    apd.signal(libc::SIGHUP);
    wait_until("AP reloaded", WAIT, || {
        apd.stat("/total/daemon/reloads") > reloads
    });
    assert_eq!(apd.stats()["ap"]["stations"], 3);

    // Traffic to each station, captured on W's link and each station's TUN.
    let stop = Arc::new(AtomicBool::new(false));
    let (wcap, ready) = capture(&w, "w0", stop.clone());
    ready.recv().unwrap();
    let mut caps = Vec::new();
    for ns in &st {
        let (h, ready) = capture(ns, "airpack0", stop.clone());
        ready.recv().unwrap();
        caps.push(h);
    }
    // The frames as station 0's interface receives them.
    let (fcap, ready) = capture(&st[0], "wl", stop.clone());
    ready.recv().unwrap();
    let rx: Vec<_> = (0..3).map(|i| receiver(&st[i], port(i))).collect();
    const N: u32 = 40;
    for i in 0..3 {
        send(&w, i, 0, N);
    }
    wait_until("every station's packets", WAIT, || {
        rx.iter()
            .all(|(g, _)| g.lock().unwrap().len() >= N as usize)
    });
    stop.store(true, Ordering::Relaxed);
    let sent = wcap.join().unwrap();
    assert_eq!(sent.len(), 3 * N as usize, "W's capture");
    // Every frame carries DSCP EF (ap.frame_dscp's default, TOS 0xb8), which
    // a WMM AP's mac80211 queues on AC_VO; W's packets were unmarked.
    let frames: Vec<_> = fcap
        .join()
        .unwrap()
        .into_iter()
        .filter(|p| p[16..20] == [225, 0, 0, 10])
        .collect();
    assert!(!frames.is_empty(), "no frame captured on s0's wl");
    for f in &frames {
        assert_eq!(f[1], 0xb8, "frame TOS: {}", hex(&f[..28]));
    }
    assert!(sent.iter().all(|p| p[1] == 0), "W's packets are unmarked");
    for (i, cap) in caps.into_iter().enumerate() {
        let got = cap.join().unwrap();
        let want: Vec<Vec<u8>> = sent
            .iter()
            .filter(|p| p[16..20] == station_ip(i).octets())
            .map(|p| forwarded(p))
            .collect();
        assert_eq!(want.len(), N as usize);
        assert!(
            got.iter().all(|p| dst_port(p) == port(i)),
            "station {i} got another's packet"
        );
        assert_eq!(got.len(), want.len(), "station {i}: packets on its TUN");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g == w,
                "station {i} packet {k}: rebuilt {} != sent {}",
                hex(g),
                hex(w)
            );
        }
        let payloads = rx[i].0.lock().unwrap().clone();
        assert_eq!(payloads.len(), N as usize, "station {i}: duplicates");
        for (k, p) in payloads.iter().enumerate() {
            assert_eq!(p[12] as usize, i);
            assert_eq!(u32::from_be_bytes(p[13..17].try_into().unwrap()), k as u32);
        }
        let s = sd[i].stats();
        assert_eq!(s["station"]["packets"], N, "{s}");
        assert_eq!(s["station"]["packets_written"], N, "{s}");
        assert_eq!(s["station"]["packets_for_others"], 2 * N, "{s}");
        assert_eq!(s["station"]["lost_frames"], 0, "{s}");
        // The station's frames and packets are in its accounting: every
        // frame read was accepted or was a further copy of one
        // (`ap.frame_copies`), every extracted packet written.
        let acc = &s["accounting"];
        assert_eq!(acc["balanced"], true, "{s}");
        let frames = s["station"]["frames"].as_u64().unwrap();
        let copies = s["station"]["frame_copies"].as_u64().unwrap();
        assert!(frames >= 1, "{s}");
        assert_eq!(acc["receive_datagrams"]["in"], frames + copies, "{s}");
        assert!(
            s["station"]["drops"]["frames"].get("stale").is_none(),
            "{s}"
        );
        assert_eq!(acc["receive"]["in"], N, "{s}");
        assert_eq!(acc["receive"]["out"], N, "{s}");
        let p = sd[i].peers();
        assert_eq!(p["station"]["registered"], true, "{p}");
        assert_eq!(p["station"]["streams"][0]["port"], port(i), "{p}");
    }
    let a = apd.stats();
    assert_eq!(a["ap"]["packets"], 3 * N, "{a}");
    assert_eq!(a["ap"]["packets_in"], 3 * N, "{a}");
    assert_eq!(a["ap"]["packets_pending"], 0, "{a}");
    assert_eq!(a["ap"]["drops"]["queue_full"], 0, "{a}");
    // The AP's packets are in the send-side identity: read from the TUN =
    // multiplexed (out) + dropped + queued.
    assert_eq!(a["accounting"]["send"]["balanced"], true, "{a}");
    assert_eq!(a["accounting"]["send"]["out"], 3 * N, "{a}");
    let by_reason: u64 = a["ap"]["frames_by_reason"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(Some(by_reason), a["ap"]["frames"].as_u64(), "{a}");
    // `airpack peers` on the AP lists the three stations and their ports.
    let p = apd.peers();
    let stations = p["stations"].as_array().expect("stations list");
    assert_eq!(stations.len(), 3, "{p}");
    for i in 0..3 {
        let s = stations
            .iter()
            .find(|s| s["station"] == station_ip(i).to_string())
            .unwrap_or_else(|| panic!("station {i} missing: {p}"));
        assert_eq!(s["streams"], 1, "{p}");
        assert_eq!(s["runs"][0]["ports"], port(i).to_string(), "{p}");
    }
    let human = apd.cli(&["peers"]);
    assert!(human.contains(&station_ip(1).to_string()), "{human}");
    let human = apd.cli(&["stats"]);
    assert!(
        human.contains("ap:") && human.contains("stations=3"),
        "{human}"
    );
    // The same counters in /metrics, every family documented.
    let text = scrape(&ap, METRICS);
    assert!(!text.contains("undocumented"), "{text}");
    for line in [
        "airpack_ap_stations 3\n".to_owned(),
        format!("airpack_ap_packets_total {}\n", 3 * N),
        format!("airpack_ap_packets_in_total {}\n", 3 * N),
        "airpack_ap_drops_total{reason=\"queue_full\"} 0\n".to_owned(),
        "airpack_ap_registrations_rejected_total{reason=\"bad_tag\"} 0\n".to_owned(),
        "airpack_accounting_send_balanced 1\n".to_owned(),
    ] {
        assert!(text.contains(&line), "metrics lack {line:?}:\n{text}");
    }
    // Frames carry several packets (they close when full: 1440 bytes).
    let frames = a["ap"]["frames"].as_u64().unwrap();
    assert!(frames >= 1 && frames < u64::from(3 * N), "{a}");
    assert!(a["ap"]["bytes_saved"].as_i64().unwrap() > 0, "{a}");

    // A registration with the wrong key: refused, counted, never answered.
    let wrong = Key::from_hex("ffffffffffffffffffffffffffffffff").unwrap();
    let m = Message {
        key_id: 1,
        seq: 1,
        body: Body::Register {
            addr: IpAddr::V4(station_ip(0)),
            ports: Ports::Single(30_000),
            lease_secs: 3,
        },
    };
    let mut out = [0u8; register::MAX_MESSAGE];
    let n = register::encode(&m, &wrong, &mut out).unwrap();
    let msg = out[..n].to_vec();
    in_ns(&st[0], move || {
        let s = UdpSocket::bind(("0.0.0.0", 0)).unwrap();
        s.send_to(&msg, (AP_CELL, 8889)).unwrap();
    })
    .join()
    .unwrap();
    wait_until("forged registration counted", WAIT, || {
        apd.stats()["ap"]["registrations"]["rejected"]["bad_tag"] == 1
    });
    assert_eq!(apd.stats()["ap"]["streams"], 3);

    // A valid registration (from W, with the cell's key) sent twice: the
    // copy is a replay, refused and counted; then W unregisters.
    let key = Key::from_hex(KEY).unwrap();
    let msg = |seq: u64, body: Body| {
        let mut out = [0u8; register::MAX_MESSAGE];
        let n = register::encode(
            &Message {
                key_id: 1,
                seq,
                body,
            },
            &key,
            &mut out,
        )
        .unwrap();
        out[..n].to_vec()
    };
    let reg = msg(
        5,
        Body::Register {
            addr: IpAddr::V4(WIRED),
            ports: Ports::Single(30_000),
            lease_secs: 3,
        },
    );
    let unreg = msg(
        6,
        Body::Unregister {
            addr: IpAddr::V4(WIRED),
        },
    );
    let answers = in_ns(&w, move || {
        let s = UdpSocket::bind(("0.0.0.0", 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut kinds = Vec::new();
        let mut buf = [0u8; 512];
        for m in [&reg, &reg, &unreg] {
            s.send_to(m, (AP_CELL, 8889)).unwrap();
            if std::ptr::eq(m, &unreg) || kinds.is_empty() {
                s.recv(&mut buf).unwrap();
                kinds.push(buf[1]);
            }
        }
        kinds
    })
    .join()
    .unwrap();
    // Register ok (0x81), then unregister ok (0x83); the replay got nothing.
    assert_eq!(answers, [0x81, 0x83]);
    let a = apd.stats();
    assert_eq!(a["ap"]["registrations"]["rejected"]["replay"], 1, "{a}");
    assert_eq!(a["ap"]["registrations"]["unregistered"], 1, "{a}");
    assert_eq!(a["ap"]["stations"], 3, "{a}");

    // A frame from a station instead of the AP: dropped and counted by the others.
    in_ns(&st[1], || {
        let s = UdpSocket::bind(("0.0.0.0", 0)).unwrap();
        s.send_to(&[1, 0, 0, 0, 0, 0], ("225.0.0.10", 8888))
            .unwrap();
    })
    .join()
    .unwrap();
    wait_until("foreign frame counted", WAIT, || {
        sd[0].stats()["station"]["drops"]["frames"]["not_from_ap"] == 1
            && sd[2].stats()["station"]["drops"]["frames"]["not_from_ap"] == 1
    });

    // Station 2 dies without unregistering: its lease ends.
    sd[2].signal(libc::SIGKILL);
    wait_until("lease of the dead station expired", WAIT, || {
        let a = apd.stats();
        // Its stream leaves the mux too: it costs no airtime any more.
        a["ap"]["stations"] == 2 && a["ap"]["streams"] == 2 && a["ap"]["lease_expiries"] == 1
    });
    // Packets to the unregistered port are steered too (media_ports) but
    // passed back by the mux and forwarded unchanged: all arrive.
    rx[2].0.lock().unwrap().clear();
    let passed = apd.stats()["ap"]["packets_passed"].as_u64().unwrap();
    send(&w, 2, 500, 10);
    wait_until("unregistered port's packets", WAIT, || {
        rx[2].0.lock().unwrap().len() >= 10
    });
    assert_eq!(rx[2].0.lock().unwrap().len(), 10);
    assert_eq!(
        apd.stats()["ap"]["packets_passed"].as_u64().unwrap(),
        passed + 10
    );

    // Station 1 stops cleanly: it unregisters.
    assert_eq!(sd[1].stop(), 0);
    wait_until("station 1 unregistered", WAIT, || {
        let a = apd.stats();
        a["ap"]["stations"] == 1 && a["ap"]["registrations"]["unregistered"] == 2
    });

    // SIGTERM on the AP while W sends to station 0: nothing is lost.
    rx[0].0.lock().unwrap().clear();
    const M: u32 = 400;
    let w2 = w.clone();
    let sender = std::thread::spawn(move || send(&w2, 0, 1000, M));
    wait_until("first packets of the burst", WAIT, || {
        !rx[0].0.lock().unwrap().is_empty()
    });
    assert_eq!(apd.stop(), 0, "AP exit; log:\n{}", apd.log_text());
    let log = apd.log_text();
    assert!(
        log.contains("accounting at stop balanced=true"),
        "AP accounting at stop; log:\n{log}"
    );
    sender.join().unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while rx[0].0.lock().unwrap().len() < M as usize {
        assert!(
            std::time::Instant::now() < deadline,
            "burst: {} of {M} arrived; station 0: {}\nAP log:\n{}",
            rx[0].0.lock().unwrap().len(),
            sd[0].stats()["station"],
            apd.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut seqs: Vec<u32> = rx[0]
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|p| u32::from_be_bytes(p[13..17].try_into().unwrap()))
        .collect();
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (1000..1000 + M).collect::<Vec<_>>(),
        "lost or duplicated"
    );
    for (_, s) in &rx {
        s.store(true, Ordering::Relaxed);
    }
    assert_eq!(sd[0].stop(), 0);
}

/// The same over IPv6, in the compact format: W (fd71::2) sends to two
/// stations (fd72::11, fd72::12) through the AP (group ff05::10); each
/// station's stack receives byte-identical packets (hop limit minus one),
/// only its own, and the counters and accounting agree. Then reloads
/// (SIGHUP) of the roles: a change that cannot be opened is refused and the
/// running role kept; a new key rebuilds the AP role and the station that
/// got the key registers again while the one with the old key is refused;
/// removing `[station]` / `[ap]` stops the role, adding `[ap]` starts it.
#[test]
fn ipv6_ap_and_two_stations() {
    if !can_run("daemon_downlink ipv6") {
        return;
    }
    let mut net = Net::new("dl6");
    let w = net.ns("w");
    let ap = net.ns("ap");
    let hub = net.ns("hub");
    net.sysctl(&ap, "net.ipv6.conf.all.forwarding", "1");
    net.link(&w, "w0", "10.173.0.2/24", &ap, "a0", "10.173.0.1/24");
    net.ip(&w, &["addr", "add", "fd71::2/64", "dev", "w0", "nodad"]);
    net.ip(&ap, &["addr", "add", "fd71::1/64", "dev", "a0", "nodad"]);
    net.ip(&w, &["-6", "route", "add", "fd72::/64", "via", "fd71::1"]);
    net.bridge(&hub);
    net.attach(&hub, &ap, "cell", "pap", "10.174.0.1/24");
    net.ip(&ap, &["addr", "add", "fd72::1/64", "dev", "cell", "nodad"]);
    let ip6 = |i: usize| format!("fd72::{}", 11 + i);
    let mut st = Vec::new();
    for i in 0..2 {
        let ns = net.ns(&format!("s{i}"));
        net.attach(
            &hub,
            &ns,
            "wl",
            &format!("ps{i}"),
            &format!("10.174.0.{}/24", 11 + i),
        );
        net.ip(
            &ns,
            &[
                "addr",
                "add",
                &format!("{}/64", ip6(i)),
                "dev",
                "wl",
                "nodad",
            ],
        );
        net.ip(&ns, &["-6", "route", "add", "default", "via", "fd72::1"]);
        st.push(ns);
    }
    let apd = net.daemon(
        &ap,
        &format!(
            "[ap]\nenabled = true\ninterfaces = [\"cell\"]\ngroup = \"ff05::10\"\nkey = \"{KEY}\"\n\
             idle_release = false\ninterval_ms = 1000\nredundancy = true\nloss_start_unicast = false\n"
        ),
        &[],
    );
    let sd: Vec<_> = (0..2)
        .map(|i| {
            net.daemon(
                &st[i],
                &format!(
                    "[station]\nenabled = true\ninterface = \"wl\"\nap = \"fd72::1\"\ngroup = \"ff05::10\"\n\
                     key = \"{KEY}\"\nports = {}\nlease_secs = 10\nrenew_secs = 2\n",
                    port(i)
                ),
                &[],
            )
        })
        .collect();
    wait_until("2 registered IPv6 stations", WAIT, || {
        apd.stats().pointer("/ap/stations").and_then(|v| v.as_u64()) == Some(2)
            && sd.iter().all(|d| d.stats()["station"]["streams"] == 1)
    });
    let p = apd.peers();
    assert!(
        p["stations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["station"] == ip6(1)),
        "{p}"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let (wcap, ready) = capture(&w, "w0", stop.clone());
    ready.recv().unwrap();
    let mut caps = Vec::new();
    for ns in &st {
        let (h, ready) = capture(ns, "airpack0", stop.clone());
        ready.recv().unwrap();
        caps.push(h);
    }
    // Receivers on [::]:port.
    let rx: Vec<(Got, Arc<AtomicBool>)> = (0..2)
        .map(|i| {
            let got: Got = Arc::new(Mutex::new(Vec::new()));
            let stop = Arc::new(AtomicBool::new(false));
            let (g, s) = (got.clone(), stop.clone());
            let (tx, rdy) = std::sync::mpsc::channel();
            let p = port(i);
            in_ns(&st[i], move || {
                let sock = UdpSocket::bind(("::", p)).unwrap();
                airpack::linux::set_buffer(sock.as_raw_fd(), 8 << 20, false).unwrap();
                sock.set_read_timeout(Some(Duration::from_millis(50)))
                    .unwrap();
                tx.send(()).unwrap();
                let mut buf = [0u8; 2048];
                while !s.load(Ordering::Relaxed) {
                    if let Ok(n) = sock.recv(&mut buf) {
                        g.lock().unwrap().push(buf[..n].to_vec());
                    }
                }
            });
            rdy.recv().unwrap();
            (got, stop)
        })
        .collect();
    const N: u32 = 30;
    for i in 0..2 {
        let dst: SocketAddr = format!("[{}]:{}", ip6(i), port(i)).parse().unwrap();
        in_ns(&w, move || {
            let sock = UdpSocket::bind(("::", 0)).unwrap();
            for k in 0..N {
                // RTP (version 2, PT 18 = G.729), 20 voice bytes: compressible.
                let mut body = vec![0u8; 32];
                body[0] = 0x80;
                body[1] = 18;
                body[2..4].copy_from_slice(&(k as u16).to_be_bytes());
                body[4..8].copy_from_slice(&(k * 160).to_be_bytes());
                body[8..12].copy_from_slice(&(0x6000 + i as u32).to_be_bytes());
                body[12] = i as u8;
                body[13..17].copy_from_slice(&k.to_be_bytes());
                sock.send_to(&body, dst).unwrap();
            }
        })
        .join()
        .unwrap();
    }
    wait_until("every IPv6 station's packets", WAIT, || {
        rx.iter()
            .all(|(g, _)| g.lock().unwrap().len() >= N as usize)
    });
    stop.store(true, Ordering::Relaxed);
    let sent: Vec<Vec<u8>> = wcap
        .join()
        .unwrap()
        .into_iter()
        .filter(|p| p[0] >> 4 == 6)
        .collect();
    assert_eq!(sent.len(), 2 * N as usize, "W's capture");
    for (i, cap) in caps.into_iter().enumerate() {
        let dst: std::net::Ipv6Addr = ip6(i).parse().unwrap();
        let got: Vec<Vec<u8>> = cap
            .join()
            .unwrap()
            .into_iter()
            .filter(|p| p[0] >> 4 == 6)
            .collect();
        let want: Vec<Vec<u8>> = sent
            .iter()
            .filter(|p| p[24..40] == dst.octets())
            .map(|p| forwarded6(p))
            .collect();
        assert_eq!(want.len(), N as usize);
        assert_eq!(got.len(), want.len(), "station {i}: packets on its TUN");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g == w,
                "station {i} packet {k}: rebuilt {} != sent {}",
                hex(g),
                hex(w)
            );
        }
        let payloads = rx[i].0.lock().unwrap().clone();
        assert_eq!(payloads.len(), N as usize, "station {i}: duplicates");
        let s = sd[i].stats();
        assert_eq!(s["station"]["packets"], N, "{s}");
        assert_eq!(s["station"]["packets_for_others"], N, "{s}");
        assert_eq!(s["accounting"]["balanced"], true, "{s}");
        assert_eq!(s["accounting"]["receive"]["out"], N, "{s}");
    }
    let a = apd.stats();
    assert_eq!(a["ap"]["packets"], 2 * N, "{a}");
    // Redundancy: nothing is lost here, so every repeated packet is a
    // duplicate at its station (and none was delivered twice, above).
    let dups: u64 = sd
        .iter()
        .map(|d| d.stats()["station"]["duplicates"].as_u64().unwrap())
        .sum();
    assert_eq!(Some(dups), a["ap"]["packets_repeated"].as_u64(), "{a}");
    assert_eq!(a["accounting"]["send"]["balanced"], true, "{a}");
    // Compact frames compress the RTP header: the frames are smaller than
    // the packets they carry.
    assert!(a["ap"]["bytes_saved"].as_i64().unwrap() > 0, "{a}");
    for (_, s) in &rx {
        s.store(true, Ordering::Relaxed);
    }

    // Reload (SIGHUP) of the roles' configuration.
    let ap_cfg = std::fs::read_to_string(&apd.config).unwrap();
    let reload = |d: &common::Daemon, text: &str| {
        let before = d.stat("/total/daemon/reloads") + d.stat("/total/daemon/reload_errors");
        std::fs::write(&d.config, text).unwrap();
        d.signal(libc::SIGHUP);
        wait_until("reload handled", WAIT, || {
            d.stat("/total/daemon/reloads") + d.stat("/total/daemon/reload_errors") > before
        });
    };
    // 1. A change the AP cannot open (no such interface): refused, logged,
    //    the running role and its leases kept.
    reload(&apd, &ap_cfg.replace("[\"cell\"]", "[\"nosuch0\"]"));
    assert_eq!(apd.stat("/total/daemon/reload_errors"), 1.0);
    assert!(
        apd.log_text()
            .contains("[ap] change refused, the running AP role is kept"),
        "{}",
        apd.log_text()
    );
    assert_eq!(apd.stats()["ap"]["stations"], 2);
    // 2. A new key at the AP and at station 0: the AP role is rebuilt
    //    (leases start anew), station 0 registers again with the new key;
    //    station 1 keeps the old key: its requests are refused (bad tag).
    const KEY2: &str = "f0e0d0c0b0a090807060504030201000";
    reload(&apd, &ap_cfg.replace(KEY, KEY2));
    let log = apd.log_text();
    assert!(
        log.contains("ap.key changed") && !log.contains(KEY2),
        "{log}"
    );
    let st0 = std::fs::read_to_string(&sd[0].config).unwrap();
    reload(&sd[0], &st0.replace(KEY, KEY2));
    wait_until("station 0 registered with the new key", WAIT, || {
        let a = apd.stats();
        a["ap"]["stations"] == 1
            && a["ap"]["registrations"]["rejected"]["bad_tag"].as_u64() > Some(0)
            && sd[0].stats()["station"]["registered"] == true
    });
    let p = apd.peers();
    assert_eq!(p["stations"][0]["station"], ip6(0), "{p}");
    // 3. [station] removed at station 1: the role stops.
    reload(&sd[1], "");
    assert!(sd[1].stats().get("station").is_none());
    // 4. [ap] removed: the role stops, its steering goes; added back: runs.
    reload(&apd, "");
    assert!(apd.stats().get("ap").is_none());
    //    Back with the airtime rule: 11 Mbit/s unicast, 1 Mbit/s multicast.
    let with_rates = format!(
        "{}unicast_rate = 11\nmulticast_rate = 1\n",
        ap_cfg.replace(KEY, KEY2)
    );
    reload(&apd, &with_rates);
    wait_until("AP back, station 0 registered again", WAIT, || {
        apd.stats().pointer("/ap/stations").and_then(|v| v.as_u64()) == Some(1)
    });
    assert_eq!(apd.stat("/total/daemon/reload_errors"), 1.0);
    assert_eq!(apd.stats()["ap"]["airtime"]["rule"], true);

    // The airtime rule: one packet alone in a frame at 1 Mbit/s costs more
    // airtime than its unicast exchange at 11: it leaves unchanged (and
    // arrives through the station's normal stack).
    let got = Arc::new(Mutex::new(0usize));
    let g = got.clone();
    let p0 = port(0);
    let (tx, rdy) = std::sync::mpsc::channel();
    let recv = in_ns(&st[0], move || {
        let sock = UdpSocket::bind(("::", p0)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        tx.send(()).unwrap();
        let mut buf = [0u8; 2048];
        if sock.recv(&mut buf).is_ok() {
            *g.lock().unwrap() += 1;
        }
    });
    rdy.recv().unwrap();
    let dst: SocketAddr = format!("[{}]:{}", ip6(0), p0).parse().unwrap();
    in_ns(&w, move || {
        let sock = UdpSocket::bind(("::", 0)).unwrap();
        let mut body = vec![0u8; 32];
        body[0] = 0x80;
        body[1] = 18;
        sock.send_to(&body, dst).unwrap();
    })
    .join()
    .unwrap();
    recv.join().unwrap();
    assert_eq!(*got.lock().unwrap(), 1, "the fallback packet arrived");
    let a = apd.stats();
    assert_eq!(a["ap"]["unicast"]["airtime"], 1, "{a}");
    assert_eq!(a["ap"]["airtime"]["frames_not_sent"], 1, "{a}");
    assert_eq!(a["ap"]["frames"], 0, "{a}");
    assert_eq!(a["accounting"]["send"]["balanced"], true, "{a}");
    assert_eq!(sd[0].stats()["station"]["lost_frames"], 0);
}

/// The AP's daemon (with `ap_extra` added to its `[ap]`) and station 0's
/// in `s0` (with `station_extra` after its `[station]`), once the station
/// is registered.
fn ap_and_registered_station(
    net: &Net,
    ap: &str,
    s0: &str,
    ap_extra: &str,
    station_extra: &str,
) -> (Daemon, Daemon) {
    let apd = net.daemon(ap, &format!("{}{ap_extra}", ap_config()), &[]);
    let sd = net.daemon(s0, &format!("{}{station_extra}", station_config(0)), &[]);
    wait_until("the station registered", WAIT, || {
        apd.stats().pointer("/ap/stations").and_then(|v| v.as_u64()) == Some(1)
            && sd.stats()["station"]["streams"] == 1
    });
    (apd, sd)
}

/// `ap.frame_copies = 2`: every frame leaves the AP twice with the same
/// sequence number; the station rebuilds each packet once (its receiver
/// gets every datagram exactly once) and counts each second copy in
/// `frame_copies`, not as a drop; the AP counts the copies apart from its frames and its
/// packets once.
#[test]
fn frame_copies_reach_the_station_once() {
    if !can_run("daemon_downlink") {
        return;
    }
    let mut net = Net::new("dc");
    let (w, ap, st) = cell(&mut net, 1);
    let s0 = &st[0];
    let (apd, sd) = ap_and_registered_station(&net, &ap, s0, "frame_copies = 2\n", "");
    let (rx, stop) = receiver(s0, port(0));
    const N: u32 = 30;
    send(&w, 0, 0, N);
    wait_until("every packet and every copy", WAIT, || {
        let frames = apd.stat("/ap/frames");
        rx.lock().unwrap().len() >= N as usize
            && frames > 0.0
            && apd.stat("/ap/frame_copies") == frames
            && sd.stat("/station/frame_copies") == frames
    });
    // a late duplicate would show here
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let got = rx.lock().unwrap().clone();
    assert_eq!(got.len(), N as usize, "each datagram once");
    let mut seqs: Vec<u32> = got
        .iter()
        .map(|b| u32::from_be_bytes([b[13], b[14], b[15], b[16]]))
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..N).collect::<Vec<_>>());
    let st = sd.stats();
    assert_eq!(st["station"]["packets"], N, "{st}");
    assert_eq!(st["station"]["lost_frames"], 0, "{st}");
    assert_eq!(apd.stat("/ap/packets"), f64::from(N));
    assert_eq!(
        apd.stat("/ap/frame_datagrams_sent"),
        2.0 * apd.stat("/ap/frames")
    );
}

/// `ap.frame_guard = true` (with `frame_copies = 2`): on the air each frame
/// is preceded by exactly one guard, an empty UDP datagram from the AP to the
/// group at port 9, and its copy by none; the station takes no guard (it
/// rebuilds every packet once and counts no frame drop) and the AP counts one
/// guard per frame.
#[test]
fn frame_guard_precedes_each_frame() {
    if !can_run("daemon_downlink") {
        return;
    }
    let mut net = Net::new("dg");
    let (w, ap, st) = cell(&mut net, 1);
    let s0 = &st[0];
    let (apd, sd) =
        ap_and_registered_station(&net, &ap, s0, "frame_copies = 2\nframe_guard = true\n", "");
    let stop = Arc::new(AtomicBool::new(false));
    let (cap, ready) = capture(s0, "wl", stop.clone());
    ready.recv().unwrap();
    let (rx, rstop) = receiver(s0, port(0));
    const N: u32 = 30;
    send(&w, 0, 0, N);
    wait_until("every packet and every copy", WAIT, || {
        let frames = apd.stat("/ap/frames");
        rx.lock().unwrap().len() >= N as usize
            && frames > 0.0
            && sd.stat("/station/frame_copies") == frames
    });
    std::thread::sleep(Duration::from_millis(300));
    rstop.store(true, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let seen = cap.join().unwrap();
    // What went to the group, in order: 'g' a guard, 'f' a frame datagram.
    let kinds: String = seen
        .iter()
        .filter(|p| p[0] >> 4 == 4 && p[16..20] == [225, 0, 0, 10])
        .map(|p| {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            let dport = u16::from_be_bytes([p[ihl + 2], p[ihl + 3]]);
            let udp_len = u16::from_be_bytes([p[ihl + 4], p[ihl + 5]]);
            match (dport, udp_len) {
                (9, 8) => 'g',
                (9, _) => 'x',
                _ => 'f',
            }
        })
        .collect();
    let frames = apd.stat("/ap/frames") as usize;
    assert!(frames > 0);
    assert_eq!(
        kinds,
        "gff".repeat(frames),
        "guard, frame, copy for each frame"
    );
    assert_eq!(apd.stat("/ap/guards_sent"), frames as f64);
    assert_eq!(apd.stat("/ap/guard_send_errors"), 0.0);
    assert_eq!(rx.lock().unwrap().len(), N as usize, "each datagram once");
    let s = sd.stats();
    assert_eq!(s["station"]["packets"], N, "{s}");
    assert_eq!(s["station"]["lost_frames"], 0, "{s}");
    let drops = &s["station"]["drops"]["frames"];
    assert!(
        drops.as_object().unwrap().values().all(|v| v == 0),
        "the station took a guard: {s}"
    );
    assert!(scrape(&ap, METRICS).contains("airpack_ap_guards_sent_total"));
}

/// One daemon per node runs both roles (issue 14 point 1): station 0 has
/// `[station]` and `[aggregation]` (its uplink bundled to the AP, at most two
/// packets, held one interval, as the lab's `downlink-mux-agg`), the AP has
/// `[ap]` and the station as a `[[peer]]`. Downlink: W's packets reach the
/// station through the frame as before. Uplink: the station's packets from
/// two ports reach W once each, every bundle of the station split at the AP
/// (the AP's bundles received and packets taken from them are the station's
/// bundles and bundled packets), nothing dropped.
#[test]
fn station_bundles_its_uplink_beside_the_mux() {
    if !can_run("daemon_downlink") {
        return;
    }
    let mut net = Net::new("da");
    let (w, ap, st) = cell(&mut net, 1);
    let s0 = &st[0];
    let peer = format!("\n[[peer]]\naddress = \"{}\"\n", station_ip(0));
    let agg = format!(
        "\n[aggregation]\nencoding = \"native\"\nhold_time_us = 20000\nlink_mode = \"fixed\"\nmax_packets = 2\n\n\
         [[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"20000-20002\"\n\n\
         [[peer]]\naddress = \"{AP_CELL}\"\n"
    );
    let (apd, sd) = ap_and_registered_station(&net, &ap, s0, &peer, &agg);
    // downlink through the frame
    const N: u32 = 20;
    let (rx, stop) = receiver(s0, port(0));
    send(&w, 0, 0, N);
    wait_until("the downlink", WAIT, || {
        rx.lock().unwrap().len() >= N as usize
    });
    stop.store(true, Ordering::Relaxed);
    // uplink: one packet from each of two ports per 20 ms, to W
    let (up, up_stop) = receiver(&w, 30_000);
    in_ns(s0, move || {
        let socks: Vec<UdpSocket> = [20_001u16, 20_002]
            .iter()
            .map(|&p| UdpSocket::bind((Ipv4Addr::UNSPECIFIED, p)).unwrap())
            .collect();
        for k in 0..N {
            for (i, s) in socks.iter().enumerate() {
                let mut body = vec![0u8; 40];
                body[0] = i as u8;
                body[1..5].copy_from_slice(&k.to_be_bytes());
                s.send_to(&body, (WIRED, 30_000)).unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .join()
    .unwrap();
    wait_until("the uplink", WAIT, || {
        up.lock().unwrap().len() >= 2 * N as usize
    });
    std::thread::sleep(Duration::from_millis(300));
    up_stop.store(true, Ordering::Relaxed);
    let mut got: Vec<Vec<u8>> = up.lock().unwrap().clone();
    got.sort();
    got.dedup();
    assert_eq!(got.len(), 2 * N as usize, "every uplink packet once");
    assert_eq!(up.lock().unwrap().len(), 2 * N as usize, "no duplicate");
    let (s, a) = (sd.stats(), apd.stats());
    let bundles = s["total"]["bundles"].as_u64().unwrap();
    assert!(bundles > 0, "the station bundled nothing: {s}");
    assert_eq!(s["total"]["aggregated_packets"], 2 * bundles, "{s}");
    assert_eq!(a["total"]["bundles_received"], bundles, "{a}");
    assert_eq!(a["total"]["packets_received"], 2 * bundles, "{a}");
    for d in [&s, &a] {
        assert_eq!(d["total"]["dropped_total"], 0, "{d}");
    }
    assert_eq!(s["station"]["packets"], N, "{s}");
    assert_eq!(a["ap"]["packets"], N, "{a}");
}
