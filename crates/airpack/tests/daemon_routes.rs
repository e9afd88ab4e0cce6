//! Next hops under source-specific routes and route flaps (issue 9, points 5
//! and 6), against the real kernel in network namespaces.
//!
//! - `source_specific_routes_pick_the_kernels_next_hop`: an IPv6
//!   source-specific route (`ip route add DST from SRC via NH2` beside
//!   a less specific plain route via NH1) and IPv4 policy rules (`ip rule add from SRC table T`, for
//!   a local source and for a forwarded one) steer each source's packets to
//!   the peer the kernel itself routes them through.
//! - `route_flaps_do_not_delay_voice`: 50 route changes per second under
//!   voice load; no lookup or route change holds the loop for more than
//!   1 ms, 99 % of packets leave within hold time + 1 ms, and every older
//!   packet is explained by a stall of the machine itself that realtime
//!   probe threads measured during its lifetime (see the test's comment).

mod common;
use common::*;
use serde_json::Value;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Packets per peer as A's daemon counted them (`peers[].packets_in`).
fn per_peer(stats: &Value) -> Vec<(String, u64)> {
    stats["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["peer"].as_str().unwrap().to_string(),
                p["packets_in"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn peer_count(stats: &Value, peer: &str) -> u64 {
    per_peer(stats)
        .into_iter()
        .find(|(p, _)| p == peer)
        .map_or(0, |(_, n)| n)
}

/// Sends `n` UDP datagrams from `src` (port 17000) to `dst`:20000 inside `ns`.
fn send_from(ns: &str, src: IpAddr, dst: IpAddr, n: usize) {
    in_ns(ns, move || {
        let s = UdpSocket::bind(SocketAddr::new(src, 17000)).expect("bind");
        for i in 0..n {
            s.send_to(&[i as u8; 32], SocketAddr::new(dst, 20000))
                .expect("send");
            std::thread::sleep(Duration::from_millis(2));
        }
    })
    .join()
    .unwrap();
}

/// The gateway `ip route get` names for `dst` from `src` in `ns` (extra
/// args such as `iif lo` appended).
fn kernel_via(net: &Net, ns: &str, dst: &str, src: &str, extra: &[&str]) -> String {
    let mut args = vec!["route", "get", dst, "from", src];
    args.extend_from_slice(extra);
    let out = net.ip(ns, &args);
    let mut words = out.split_whitespace();
    while let Some(w) = words.next() {
        if w == "via" {
            return words.next().unwrap_or("").to_string();
        }
    }
    panic!("no gateway in `ip route get {dst} from {src}`: {out}");
}

#[test]
fn source_specific_routes_pick_the_kernels_next_hop() {
    if !can_run("source_specific_routes_pick_the_kernels_next_hop") {
        return;
    }
    let mut net = Net::new("srcrt");
    let a = net.ns("a");
    let l = net.ns("l");
    let s = net.ns("s");
    // A -- L: both next hops live in L (two addresses on one link).
    net.link(&a, "va", "10.94.0.1/24", &l, "vl", "10.94.0.2/24");
    net.ip(&l, &["addr", "add", "10.94.0.3/24", "dev", "vl"]);
    for (ns, dev, addr) in [
        (&a, "va", "fd00:94::1/64"),
        (&l, "vl", "fd00:94::2/64"),
        (&l, "vl", "fd00:94::3/64"),
    ] {
        net.ip(ns, &["-6", "addr", "add", addr, "dev", dev, "nodad"]);
    }
    // S -- A: S's traffic is forwarded by A (its source is not A's).
    net.link(&s, "vs", "10.95.0.2/24", &a, "vsa", "10.95.0.1/24");
    net.ip(&s, &["route", "add", "default", "via", "10.95.0.1"]);
    // A's own sources, two per family.
    for addr in ["10.97.0.1/32", "10.98.0.1/32"] {
        net.ip(&a, &["addr", "add", addr, "dev", "lo"]);
    }
    for addr in ["fd07::1/128", "fd08::1/128"] {
        net.ip(&a, &["-6", "addr", "add", addr, "dev", "lo", "nodad"]);
    }
    // Plain routes via NH1, source-specific ones via NH2. (The plain IPv6
    // route is less specific: once fd09::/64 has a source-specific route,
    // the kernel finds no route at fd09::/64 for other sources, even beside
    // a plain fd09::/64 route, and backtracks to shorter prefixes.)
    net.ip(
        &a,
        &["-6", "route", "add", "fd09::/48", "via", "fd00:94::2"],
    );
    net.ip(
        &a,
        &[
            "-6",
            "route",
            "add",
            "fd09::/64",
            "from",
            "fd07::/64",
            "via",
            "fd00:94::3",
        ],
    );
    net.ip(&a, &["route", "add", "10.99.0.0/24", "via", "10.94.0.2"]);
    net.ip(
        &a,
        &[
            "route",
            "add",
            "10.99.0.0/24",
            "via",
            "10.94.0.3",
            "table",
            "100",
        ],
    );
    for from in ["10.97.0.0/24", "10.95.0.0/24"] {
        net.ip(
            &a,
            &[
                "rule", "add", "from", from, "table", "100", "priority", "100",
            ],
        );
    }
    // The kernel's own choices.
    assert_eq!(
        kernel_via(&net, &a, "fd09::5", "fd07::1", &[]),
        "fd00:94::3"
    );
    assert_eq!(
        kernel_via(&net, &a, "fd09::5", "fd08::1", &[]),
        "fd00:94::2"
    );
    assert_eq!(
        kernel_via(&net, &a, "10.99.0.5", "10.97.0.1", &[]),
        "10.94.0.3"
    );
    assert_eq!(
        kernel_via(&net, &a, "10.99.0.5", "10.98.0.1", &[]),
        "10.94.0.2"
    );
    assert_eq!(
        kernel_via(&net, &a, "10.99.0.5", "10.95.0.2", &["iif", "vsa"]),
        "10.94.0.3"
    );

    let config = format!(
        "[daemon]\ninterfaces = [\"va\"]\n[aggregation]\nhold_time_us = 2000\nlink_mode = \"fixed\"\n{VOICE_CLASS}\
         [[peer]]\naddress = \"10.94.0.2\"\n[[peer]]\naddress = \"10.94.0.3\"\n\
         [[peer]]\naddress = \"fd00:94::2\"\n[[peer]]\naddress = \"fd00:94::3\"\n"
    );
    let d = net.daemon(&a, &config, &[]);
    let cases: [(&str, &str, &str, &str); 5] = [
        // (namespace, source, destination, expected peer)
        (&a, "fd07::1", "fd09::5", "fd00:94::3"),
        (&a, "fd08::1", "fd09::5", "fd00:94::2"),
        (&a, "10.97.0.1", "10.99.0.5", "10.94.0.3"),
        (&a, "10.98.0.1", "10.99.0.5", "10.94.0.2"),
        (&s, "10.95.0.2", "10.99.0.5", "10.94.0.3"),
    ];
    let n = 20u64;
    for (ns, src, dst, peer) in cases {
        let before = d.stats();
        send_from(ns, src.parse().unwrap(), dst.parse().unwrap(), n as usize);
        wait_until(
            &format!("{n} packets from {src} counted"),
            Duration::from_secs(10),
            || {
                let st = d.stats();
                per_peer(&st).iter().map(|p| p.1).sum::<u64>()
                    >= per_peer(&before).iter().map(|p| p.1).sum::<u64>() + n
            },
        );
        let after = d.stats();
        for (p, got) in per_peer(&after) {
            let delta = got - peer_count(&before, &p);
            let want = if p == peer { n } else { 0 };
            assert_eq!(
                delta, want,
                "packets from {src} to {dst}: peer {p} got {delta}, expected all {n} at {peer}; routes: {}",
                after["routes"]
            );
        }
    }
    let st = d.stats();
    let routes = &st["routes"];
    assert!(
        routes["input_fallbacks"].as_u64().unwrap() >= 1,
        "the forwarded IPv4 source was looked up as input: {routes}"
    );
    assert_eq!(routes["park"]["unchanged"]["lookup_expired"], 0, "{routes}");
    println!("routes: {routes}");
}

/// Voice-like load through two daemons while routes flap 50 times per second.
///
/// Setup: A (sender, daemon) -- B (daemon, receiver on 10.93.0.1). 20 flows
/// x 50 packets/s of 60-byte UDP payloads for 6 s; meanwhile one `ip -batch`
/// process in A replaces the route to the destination (same next hop, so
/// each change evicts the flows' cached next hop), replaces an unrelated
/// route (evicts nothing), and adds and deletes a policy rule (flushes the
/// cache), in turn, 50 changes per second.
///
/// Measured: each packet's age when its bundle leaves A's radio (a packet
/// socket on `va`: the kernel stamps the outgoing frame in the daemon's own
/// send, SO_TIMESTAMPNS, CLOCK_REALTIME) minus the sender's CLOCK_REALTIME
/// just before send(2), carried in the payload. This covers A's kernel path
/// into the TUN, the lookup (and park), the hold and the send. Asserted:
/// p99 <= hold time + 1 ms, every packet older than that explained by a
/// measured stall of the machine ([`stall_probe`]), every packet reaches B in order, lookups really
/// happened during the flap (cache evictions and flushes, new requests) and
/// none expired.
///
/// Determinism on a loaded 2-core machine: both daemons and the sender run
/// under SCHED_FIFO (`daemon.sched_priority`; the sender thread sets its
/// own), so CPU hogs at normal priority cannot delay them; the timestamp is
/// taken by the kernel in A's daemon's send, so neither the capturing thread
/// nor softirq processing on B (which the kernel may defer to ksoftirqd, a
/// normal-priority thread) counts. What remains is the mechanism under
/// test: a daemon that blocked on netlink (or on a child process) during a
/// route change would hold packets past the bound whatever its priority.
/// Marks the test's payloads: MAGIC, flow (u16), seq (u32), sender's
/// CLOCK_REALTIME in ns (i64), all big-endian.
const MAGIC: [u8; 4] = *b"APts";
const FLOWS: u16 = 20;
const PER_FLOW: u32 = 300;

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// (flow, seq, sent) from a payload starting with MAGIC.
fn stamp(p: &[u8]) -> Option<(u16, u32, i64)> {
    if p.len() < 18 || p[..4] != MAGIC {
        return None;
    }
    let flow = u16::from_be_bytes([p[4], p[5]]);
    let seq = u32::from_be_bytes(p[6..10].try_into().ok()?);
    let sent = i64::from_be_bytes(p[10..18].try_into().ok()?);
    (flow < FLOWS && seq < PER_FLOW).then_some((flow, seq, sent))
}

/// An AF_PACKET socket on `ifindex` with kernel timestamps (SO_TIMESTAMPNS).
fn capture_socket(ifindex: u32) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2); checked below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, libc::c_int::from(proto)) };
    assert!(fd >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
    // SAFETY: fd is fresh and owned here.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain data.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = proto;
    sa.sll_ifindex = ifindex as i32;
    let on: libc::c_int = 1;
    let big: libc::c_int = 16 << 20;
    // SAFETY: valid option values and address of the given sizes.
    unsafe {
        assert_eq!(
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            ),
            0
        );
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            4,
        );
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&big as *const libc::c_int).cast(),
            4,
        );
        let tv = libc::timeval {
            tv_sec: 3,
            tv_usec: 0,
        };
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        );
    }
    fd
}

/// One outgoing frame and its kernel timestamp (ns, CLOCK_REALTIME); `None`
/// after 3 s without a frame.
fn recv_stamped(fd: &std::os::fd::OwnedFd, frame: &mut [u8]) -> Option<(usize, i64)> {
    loop {
        let mut iov = libc::iovec {
            iov_base: frame.as_mut_ptr().cast(),
            iov_len: frame.len(),
        };
        let mut cbuf = [0u64; 16];
        // SAFETY: plain data; the pointers below outlive the call.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut from as *mut libc::sockaddr_ll).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        // SAFETY: msg describes valid buffers.
        let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, 0) };
        if n < 0 {
            return None;
        }
        if from.sll_pkttype != libc::PACKET_OUTGOING {
            continue;
        }
        // SAFETY: walking the control messages the kernel wrote into cbuf.
        let ts = unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            let mut ts = None;
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let t = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                    ts = Some(t.tv_sec * 1_000_000_000 + t.tv_nsec);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
            ts
        };
        return Some(((n as usize).min(frame.len()), ts.expect("SCM_TIMESTAMPNS")));
    }
}

/// Wake-up period of the stall probes (µs).
const PROBE_PERIOD_US: i64 = 250;

/// A realtime stall probe, as `cyclictest` does it: a SCHED_FIFO thread at the
/// daemons' priority, pinned to `cpu`, sleeping to absolute CLOCK_REALTIME
/// deadlines every [`PROBE_PERIOD_US`] until `stop`. Returns the intervals
/// (deadline, woke), ns, in which it was due but could not run, when it woke
/// more than 50 µs late: time in which this CPU ran no realtime thread (a
/// non-preemptible kernel section of another process on this PREEMPT_NONE
/// kernel, or the hypervisor holding the virtual CPU). A daemon that blocks
/// (on netlink, on a child) leaves the CPUs free, so the probes see nothing.
fn stall_probe(
    cpu: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Option<Vec<(i64, i64)>>> {
    std::thread::spawn(move || {
        // SAFETY: cpu_set_t is plain data; the calls affect this thread only.
        let pinned = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        };
        let p = libc::sched_param { sched_priority: 50 };
        // SAFETY: sets the calling thread's own policy.
        let fifo = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } == 0;
        if !(pinned && fifo) {
            return None;
        }
        let now = || {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: ts is a valid timespec.
            unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
            ts.tv_sec * 1_000_000_000 + ts.tv_nsec
        };
        let mut stalls = Vec::new();
        let mut due = now();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) && stalls.len() < 100_000 {
            due += PROBE_PERIOD_US * 1000;
            let ts = libc::timespec {
                tv_sec: due / 1_000_000_000,
                tv_nsec: due % 1_000_000_000,
            };
            // SAFETY: absolute sleep on a valid timespec; EINTR just wakes early.
            unsafe {
                libc::clock_nanosleep(
                    libc::CLOCK_REALTIME,
                    libc::TIMER_ABSTIME,
                    &ts,
                    std::ptr::null_mut(),
                )
            };
            let woke = now();
            if woke - due > 50_000 {
                stalls.push((due, woke));
                due = woke;
            }
        }
        Some(stalls)
    })
}

/// `intervals` sorted and merged where they overlap (disjoint, ascending).
fn merged(mut intervals: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    intervals.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::new();
    for (a, b) in intervals {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Nanoseconds of `stalls` (disjoint) inside [from, to].
fn stalled_within(stalls: &[(i64, i64)], from: i64, to: i64) -> i64 {
    stalls
        .iter()
        .map(|&(a, b)| (b.min(to) - a.max(from)).max(0))
        .sum()
}

#[test]
fn route_flaps_do_not_delay_voice() {
    if !can_run("route_flaps_do_not_delay_voice") {
        return;
    }
    const HOLD_US: i64 = 5000;
    let mut net = Net::new("flap");
    let a = net.ns("a");
    let b = net.ns("b");
    net.link(&a, "va", "10.92.0.1/24", &b, "vb", "10.92.0.2/24");
    net.ip(&b, &["addr", "add", "10.93.0.1/32", "dev", "lo"]);
    net.ip(&a, &["route", "add", "10.93.0.0/24", "via", "10.92.0.2"]);
    let config = |iface: &str, peer: &str| {
        format!(
            "[daemon]\ninterfaces = [\"{iface}\"]\nsched_priority = 50\n\
             [aggregation]\nhold_time_us = {HOLD_US}\nlink_mode = \"fixed\"\n{VOICE_CLASS}[[peer]]\naddress = \"{peer}\"\n"
        )
    };
    let da = net.daemon(&a, &config("va", "10.92.0.2"), &[]);
    let db = net.daemon(&b, &config("vb", "10.92.0.1"), &[]);
    for d in [&da, &db] {
        if !d.log_text().contains("SCHED_FIFO") {
            println!(
                "note: daemon in {} without SCHED_FIFO: {}",
                d.ns,
                d.log_text()
            );
        }
    }

    // Receiver in B: every packet, in order.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let rx = in_ns(&b, move || {
        let s = UdpSocket::bind("10.93.0.1:20000").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        ready_tx.send(()).unwrap();
        let mut seqs: Vec<Vec<u32>> = vec![Vec::new(); FLOWS as usize];
        let mut buf = [0u8; 256];
        let total = FLOWS as usize * PER_FLOW as usize;
        let mut n = 0;
        while n < total {
            let Ok(len) = s.recv(&mut buf) else { break };
            if let Some((flow, seq, _)) = stamp(&buf[..len]) {
                seqs[usize::from(flow)].push(seq);
            }
            n += 1;
        }
        seqs
    });
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    // Capture on A's radio: the kernel stamps each outgoing frame as the
    // daemon's send passes the device (dev_queue_xmit_nit, in the daemon's
    // own system call), CLOCK_REALTIME.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let cap = in_ns(&a, move || {
        let va = airpack::linux::tun::ifindex("va").unwrap();
        let fd = capture_socket(va);
        ready_tx.send(()).unwrap();
        let mut ages_us: Vec<i64> = Vec::new();
        let mut late = Vec::new();
        let mut frame = [0u8; 4096];
        let total = FLOWS as usize * PER_FLOW as usize;
        let start = Instant::now();
        while ages_us.len() < total && start.elapsed() < Duration::from_secs(60) {
            let Some((len, ts)) = recv_stamped(&fd, &mut frame) else {
                break;
            };
            // Every stamped payload in the frame (a bundle carries several).
            let mut at = 0;
            while let Some(i) = find(&frame[at..len], &MAGIC) {
                let p = at + i;
                if let Some((flow, seq, sent)) = stamp(&frame[p..len]) {
                    let age = (ts - sent) / 1000;
                    if age > HOLD_US + 1000 && late.len() < total {
                        late.push((flow, seq, sent, ts));
                    }
                    ages_us.push(age);
                }
                at = p + MAGIC.len();
            }
        }
        (ages_us, late)
    });
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    // Neighbours resolved before the measurement (the first packet would
    // otherwise wait for ARP).
    assert_eq!(ping(&a, "10.93.0.1".parse().unwrap(), 2), 2);

    // Route flapper: one long-lived `ip -batch -` fed a line every 20 ms.
    let a_ns = a.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let flapper = std::thread::spawn(move || {
        use std::io::Write;
        let mut child = std::process::Command::new("ip")
            .args(["-n", &a_ns, "-force", "-batch", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        // Replacing a route by an identical one notifies nothing: alternate
        // the protocol (same next hop) so each line is a real change.
        let lines = [
            "route replace 10.93.0.0/24 via 10.92.0.2 proto static",
            "route replace 198.51.100.0/24 via 10.92.0.2 proto static",
            "rule add from 10.99.0.0/24 table 200 priority 200",
            "route replace 10.93.0.0/24 via 10.92.0.2 proto boot",
            "route replace 198.51.100.0/24 via 10.92.0.2 proto boot",
            "rule del from 10.99.0.0/24 table 200 priority 200",
        ];
        let start = Instant::now();
        let mut n = 0u32;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) && n < 2000 {
            writeln!(stdin, "{}", lines[n as usize % lines.len()]).unwrap();
            stdin.flush().unwrap();
            n += 1;
            let due = Duration::from_millis(20 * u64::from(n));
            if let Some(d) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(d);
            }
        }
        drop(stdin);
        let _ = child.wait();
        (n, start.elapsed())
    });
    std::thread::sleep(Duration::from_millis(200));
    let before = da.stats();
    // One stall probe per CPU for the duration of the voice load.
    let probe_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cpus = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let probes: Vec<_> = (0..cpus)
        .map(|c| stall_probe(c, probe_stop.clone()))
        .collect();

    // Sender in A, SCHED_FIFO, one packet per millisecond round robin.
    let sender = in_ns(&a, move || {
        let p = libc::sched_param { sched_priority: 40 };
        // SAFETY: sets the calling thread's own policy.
        let fifo = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } == 0;
        let socks: Vec<UdpSocket> = (0..FLOWS)
            .map(|i| {
                let s = UdpSocket::bind(("10.92.0.1", 17000 + i)).unwrap();
                s.connect("10.93.0.1:20000").unwrap();
                s
            })
            .collect();
        let mut buf = [0u8; 60];
        let start = Instant::now();
        let mut k = 0u64;
        for seq in 0..PER_FLOW {
            for (i, s) in socks.iter().enumerate() {
                buf[..4].copy_from_slice(&MAGIC);
                buf[4..6].copy_from_slice(&(i as u16).to_be_bytes());
                buf[6..10].copy_from_slice(&seq.to_be_bytes());
                let mut ts: libc::timespec = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                // SAFETY: ts is a valid timespec.
                unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
                let now = ts.tv_sec * 1_000_000_000 + ts.tv_nsec;
                buf[10..18].copy_from_slice(&now.to_be_bytes());
                s.send(&buf).unwrap();
                k += 1;
                let due = Duration::from_micros(1000 * k);
                if let Some(d) = due.checked_sub(start.elapsed()) {
                    std::thread::sleep(d);
                }
            }
        }
        fifo
    });
    let fifo = sender.join().unwrap();
    let seqs = rx.join().unwrap();
    let (ages, late) = cap.join().unwrap();
    probe_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let stalls: Option<Vec<Vec<(i64, i64)>>> =
        probes.into_iter().map(|p| p.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (changes, flap_time) = flapper.join().unwrap();
    let after = da.stats();

    let routes = &after["routes"];
    let delta = |p: &str| {
        after["routes"].pointer(p).and_then(Value::as_u64).unwrap()
            - before["routes"].pointer(p).and_then(Value::as_u64).unwrap()
    };
    let mut sorted = ages.clone();
    sorted.sort_unstable();
    let pct = |q: f64| {
        sorted
            .get(((sorted.len() as f64 - 1.0) * q) as usize)
            .copied()
    };
    let rate = f64::from(changes) / flap_time.as_secs_f64();
    println!(
        "flap: {changes} changes at {rate:.1}/s; sender SCHED_FIFO {fifo}; {} packets; age µs p50 {:?} p99 {:?} max {:?}; park max wait {} µs; route lookups {} (evicted {}, flushes {}, parked {})",
        ages.len(),
        pct(0.5),
        pct(0.99),
        sorted.last(),
        routes["park"]["max_wait_us"],
        delta("/requests"),
        delta("/evicted"),
        delta("/flushes"),
        delta("/park/parked"),
    );
    println!(
        "A hold_time_us {}\nA timer_late_us {}\nB timer_late_us {}",
        after["total"]["hold_time_us"]["buckets"],
        after["total"]["daemon"]["timer_late_us"],
        db.stats()["total"]["daemon"]["timer_late_us"]
    );
    for (f, s) in seqs.iter().enumerate() {
        assert!(
            s.iter().copied().eq(0..PER_FLOW),
            "flow {f}: {} of {PER_FLOW} packets, in order: {}",
            s.len(),
            s.windows(2).all(|w| w[0] < w[1])
        );
    }
    assert!(rate >= 40.0, "the flapper managed only {rate:.1} changes/s");
    assert!(
        delta("/evicted") + delta("/flushes") > 100 && delta("/requests") > 100,
        "the flap did not make the daemon look up again: {routes}"
    );
    assert_eq!(delta("/timeouts"), 0, "{routes}");
    assert_eq!(delta("/park/unchanged/lookup_expired"), 0, "{routes}");
    // The latency bound: packets leave within their hold time + 1 ms
    // although the routes change 50 times a second. On this VM's kernel
    // (PREEMPT_NONE) a machine now and then cannot run even a SCHED_FIFO
    // thread for milliseconds (a CPU hog's non-preemptible kernel section,
    // or the hypervisor holding the virtual CPU; CI's machine did so for
    // more than 1 % of the packets with nothing else running), with or
    // without route changes; the stall probes measure exactly that time on
    // every CPU. So a packet's own age is what is left after the machine's
    // measured stalls inside its lifetime: its 99th percentile must be
    // within hold + 1 ms without any allowance, and every packet's within
    // one probe period of it. A daemon that blocked (on netlink, on a child)
    // would leave the CPUs free and the probes on time, and fail here.
    let max = *sorted.last().unwrap();
    let Some(stalls) = stalls else {
        panic!("the stall probes could not run at SCHED_FIFO 50 pinned to each CPU");
    };
    let all_stalls = merged(stalls.iter().flatten().copied().collect());
    // Time within [sent, ts] in which at least one CPU was stalled: the
    // packet's sender, the daemon and the kernel's softirqs run on either.
    let stalled_ns = |sent: i64, ts: i64| stalled_within(&all_stalls, sent, ts);
    // Packets within the bound keep their age; the late ones lose their stalls.
    let mut own: Vec<i64> = sorted
        .iter()
        .copied()
        .filter(|&a| a <= HOLD_US + 1000)
        .chain(
            late.iter()
                .map(|&(_, _, sent, ts)| (ts - sent - stalled_ns(sent, ts)) / 1000),
        )
        .collect();
    own.sort_unstable();
    assert_eq!(own.len(), sorted.len());
    let own_p99 = own[((own.len() as f64 - 1.0) * 0.99) as usize];
    println!(
        "age p99 {} µs, without the machine's stalls {own_p99} µs",
        pct(0.99).unwrap()
    );
    assert!(
        own_p99 <= HOLD_US + 1000,
        "p99 without the machine's stalls {own_p99} µs > hold {HOLD_US} µs + 1 ms (max {max} µs); routes: {routes}"
    );
    let total_stall_us: i64 = stalls.iter().flatten().map(|(a, b)| (b - a) / 1000).sum();
    let worst_stall_us = stalls
        .iter()
        .flatten()
        .map(|(a, b)| (b - a) / 1000)
        .max()
        .unwrap_or(0);
    // The mechanism: a lookup (its send, in which the kernel answers) and a
    // route change's handling never hold the loop for long, and no packet
    // waited for a lookup longer than a millisecond. These are maxima over
    // the run, so a longer one is accepted only when the stall probes saw
    // the machine itself stall at least that much longer (the daemon runs
    // at the probes' SCHED_FIFO priority): a daemon that blocked would leave
    // the probes on time and fail here.
    for p in [
        "routes/max_send_us",
        "loop/max_route_change_us",
        "routes/park/max_wait_us",
    ] {
        let v = after
            .pointer(&format!("/{p}"))
            .and_then(Value::as_u64)
            .unwrap() as i64;
        assert!(
            v <= 1000 + worst_stall_us + PROBE_PERIOD_US,
            "{p} = {v} µs: the loop waited (worst stall of the machine {worst_stall_us} µs); {routes}"
        );
        if v > 1000 {
            println!("{p} = {v} µs, explained by a {worst_stall_us} µs stall of the machine");
        }
    }
    let mut unexplained = Vec::new();
    for &(flow, seq, sent, ts) in &late {
        let excess_ns = (ts - sent) - (HOLD_US + 1000) * 1000;
        let stalled = stalled_ns(sent, ts);
        if stalled + PROBE_PERIOD_US * 1000 < excess_ns {
            unexplained.push((flow, seq, (ts - sent) / 1000, stalled / 1000));
        }
    }
    println!(
        "{} of {} packets older than hold + 1 ms (max {max} µs), each explained by a measured \
         stall of the machine unless listed: {unexplained:?}; probes on {cpus} CPUs saw \
         {total_stall_us} µs of stalls (worst {worst_stall_us} µs)",
        late.len(),
        sorted.len(),
    );
    assert!(
        unexplained.is_empty(),
        "packets older than hold + 1 ms without a stall of the machine to explain them \
         ((flow, seq, age µs, stalled µs)): {unexplained:?}; routes: {routes}"
    );
    assert_eq!(db.stats()["total"]["decode_errors_total"], 0);
}
