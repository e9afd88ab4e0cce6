//! Kernel-facing tests of `airpack::linux`: TUN, route lookups, timers and
//! signals, each in its own fresh network namespace (named `aplx<pid><tag>`,
//! deleted on drop). Steering is tested in `linux_steering.rs`, the bundle
//! and raw sockets and SIOCOUTQ in `linux_sockets.rs`; the helpers they share
//! are in `common/kernel.rs`.
//!
//! Needs root (CAP_NET_ADMIN), `ip`, `tc` and (end-to-end steering) `nft`; prints "SKIP: ..." and
//! returns otherwise. Addresses are 10.6x.0.0/24 and fd00:6x::/64, only inside
//! the namespaces these tests create; every wait is bounded.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use airpack::linux::netns::run_cmd;
use airpack::linux::{
    monotonic_micros, Events, Interest, Poller, RouteMonitor, RouteResolver, Signals, Timer, Tun,
};

mod common;
use common::kernel::*;

#[test]
fn tun_read_write_round_trip() {
    if !can_run(&["ip"]) {
        return;
    }
    let n = ns("tun");
    n.run(|| {
        let tun = Tun::open("aptun0", 1400).unwrap();
        assert_eq!(tun.name(), "aptun0");
        assert_eq!(airpack::linux::tun::txqueuelen("aptun0").unwrap(), 500);
        airpack::linux::tun::set_txqueuelen("aptun0", 4096).unwrap();
        assert_eq!(airpack::linux::tun::txqueuelen("aptun0").unwrap(), 4096);
        assert_eq!(airpack::linux::tun::link_up("aptun0").unwrap(), Some(true));
        assert_eq!(airpack::linux::tun::link_up("nosuchdev0").unwrap(), None);
        assert!(tun.ifindex() > 0);
        let link = run_cmd(&["ip", "link", "show", "aptun0"], None).unwrap();
        assert!(link.contains("mtu 1400"), "{link}");
        sh(&["ip", "addr", "add", "10.66.0.1/24", "dev", "aptun0"]);
        // Kernel -> TUN: a UDP datagram routed into the device comes out whole.
        udp_send(None, "10.66.0.2:9999".parse().unwrap(), b"hello tun");
        let pkt = tun_next(&tun, 1000, |p| is_udp_to(p, 9999)).expect("packet from TUN");
        assert_eq!(&pkt[16..20], &[10, 66, 0, 2]);
        assert!(pkt.ends_with(b"hello tun"));
        // TUN -> kernel: a packet written into the device is delivered locally.
        let rx = UdpSocket::bind("10.66.0.1:7000").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let p = udp_packet(
            "10.66.0.2".parse().unwrap(),
            "10.66.0.1".parse().unwrap(),
            5555,
            7000,
            b"into tun",
        );
        tun.write(&p).unwrap();
        let mut buf = [0u8; 64];
        let (len, from) = rx.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"into tun");
        assert_eq!(from, "10.66.0.2:5555".parse::<SocketAddr>().unwrap());
        // Garbage (not IPv4/IPv6) is refused by the kernel.
        assert!(tun.write(&[0x10, 0, 0, 0]).is_err());
        // Batch read: three datagrams, one call.
        for i in 0..3u8 {
            udp_send(None, "10.66.0.2:9998".parse().unwrap(), &[i]);
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut seen = Vec::new();
        let mut b = [0u8; 2048];
        tun.read_batch(&mut b, 16, |p| {
            if is_udp_to(p, 9998) {
                seen.push(*p.last().unwrap())
            }
        })
        .unwrap();
        assert_eq!(seen, vec![0, 1, 2]);
        // The name is held: a second open fails (EBUSY, after the bounded retry).
        let t0 = Instant::now();
        let e = Tun::open("aptun0", 1400).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBUSY), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(3));
        // Close and reopen at once, repeatedly (a daemon restart): the retry covers the teardown.
        for _ in 0..10 {
            let t = Tun::open("aprst0", 1400).unwrap();
            drop(t);
        }
        // Empty queue: WouldBlock, not a hang.
        assert_eq!(
            tun.read(&mut b).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    })
    .unwrap();
}

/// A batch of packets written through `TunBatch` (io_uring, and the plain
/// fallback) is delivered whole and in order; a bad packet in the middle fails
/// alone and is reported.
#[test]
fn tun_batch_writes_in_order_with_and_without_io_uring() {
    if !can_run(&["ip"]) {
        return;
    }
    let n = ns("batch");
    n.run(|| {
        let tun = Tun::open("apbt0", 1500).unwrap();
        sh(&["ip", "addr", "add", "10.65.0.1/24", "dev", "apbt0"]);
        set_sysctl("net.ipv4.conf.apbt0.rp_filter", "0");
        set_sysctl("net.ipv4.conf.all.rp_filter", "0");
        let rx = UdpSocket::bind("10.65.0.1:7000").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        nix::sys::socket::setsockopt(&rx, nix::sys::socket::sockopt::RcvBufForce, &(4 << 20))
            .unwrap();
        let pkts: Vec<Vec<u8>> = (0..600u16)
            .map(|i| {
                udp_packet(
                    "10.65.0.2".parse().unwrap(),
                    "10.65.0.1".parse().unwrap(),
                    5555,
                    7000,
                    &i.to_be_bytes(),
                )
            })
            .collect();
        for uring in [true, false] {
            let mut batch = airpack::linux::TunBatch::new(&tun, uring);
            if uring && !batch.uses_io_uring() {
                eprintln!("NOTE: io_uring unavailable here; only the fallback is tested");
                continue;
            }
            assert_eq!(batch.uses_io_uring(), uring);
            // More packets than the submission queue holds, and one the kernel refuses.
            let mut with_bad: Vec<&[u8]> = pkts.iter().map(|p| p.as_slice()).collect();
            let bad = [0x10u8, 0, 0, 0];
            with_bad.insert(300, &bad);
            let (mut ok, mut err) = (0, 0);
            batch.write(&tun, with_bad, |r| match r {
                Ok(()) => ok += 1,
                Err(_) => err += 1,
            });
            assert_eq!((ok, err), (600, 1), "io_uring {uring}");
            let mut buf = [0u8; 16];
            for i in 0..600u16 {
                let (len, _) = rx.recv_from(&mut buf).unwrap();
                assert_eq!(&buf[..len], &i.to_be_bytes(), "io_uring {uring}: in order");
            }
        }
    })
    .unwrap();
}

/// Packets read through `TunBatch::read` (several reads per io_uring
/// submission, and the plain fallback) come out whole and in the TUN's
/// order; an empty queue ends a batch with EAGAIN, never a hang.
#[test]
fn tun_batch_reads_in_order_with_and_without_io_uring() {
    if !can_run(&["ip"]) {
        return;
    }
    let n = ns("rbatch");
    n.run(|| {
        let tun = Tun::open("aprb0", 1500).unwrap();
        airpack::linux::tun::set_txqueuelen("aprb0", 1024).unwrap();
        sh(&["ip", "addr", "add", "10.64.0.1/24", "dev", "aprb0"]);
        for uring in [true, false] {
            let mut batch = airpack::linux::TunBatch::new(&tun, uring);
            if uring && !batch.uses_io_uring() {
                eprintln!("NOTE: io_uring unavailable here; only the fallback is tested");
                continue;
            }
            // Nothing queued (once the kernel's own IPv6 packets on the new
            // device are read): every read of a batch says EAGAIN.
            let mut bufs: Vec<Vec<u8>> = (0..32).map(|_| vec![0u8; 2048]).collect();
            let mut res = vec![0i32; 32];
            let mut tries = 0;
            while batch.read(&tun, &mut bufs, &mut res) > 0 {
                tries += 1;
                assert!(tries < 100, "the TUN never ran empty");
            }
            assert!(res.iter().all(|&r| r == -libc::EAGAIN), "{res:?}");
            for i in 0..300u16 {
                udp_send(None, "10.64.0.2:9997".parse().unwrap(), &i.to_be_bytes());
            }
            let mut seen = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(10);
            while seen.len() < 300 && Instant::now() < deadline {
                let got = batch.read(&tun, &mut bufs, &mut res);
                let mut n = 0;
                for (b, &r) in bufs.iter().zip(&res) {
                    if r < 0 {
                        assert_eq!(r, -libc::EAGAIN, "io_uring {uring}");
                        continue;
                    }
                    n += 1;
                    let p = &b[..r as usize];
                    if is_udp_to(p, 9997) {
                        seen.push(u16::from_be_bytes([p[p.len() - 2], p[p.len() - 1]]));
                    }
                }
                assert_eq!(n, got, "io_uring {uring}");
                if got == 0 {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            assert_eq!(
                seen,
                (0..300).collect::<Vec<u16>>(),
                "io_uring {uring}: in order"
            );
            assert_eq!(batch.reads_use_io_uring(), uring, "RWF_NOWAIT reads taken");
        }
    })
    .unwrap();
}

#[test]
fn full_tun_queue_is_counted_in_link_stats() {
    if !can_run(&["ip"]) {
        return;
    }
    let n = ns("tunq");
    n.run(|| {
        let tun = Tun::open("aptq0", 1500).unwrap();
        airpack::linux::tun::set_txqueuelen("aptq0", 8).unwrap();
        sh(&["ip", "addr", "add", "10.65.0.1/24", "dev", "aptq0"]);
        let mut r = RouteResolver::new(0).unwrap();
        let before = r.link_stats(tun.ifindex()).unwrap();
        assert!(before.up);
        // Nobody reads the TUN: at most 8 packets wait, the rest are dropped and counted.
        for i in 0..40u8 {
            udp_send(None, "10.65.0.2:9000".parse().unwrap(), &[i]);
        }
        let after = r.link_stats(tun.ifindex()).unwrap();
        let dropped = after.tx_dropped - before.tx_dropped;
        assert!(
            dropped >= 30,
            "expected >= 30 drops behind an 8-packet queue, got {dropped}"
        );
        let p = udp_packet(
            "10.65.0.2".parse().unwrap(),
            "10.65.0.1".parse().unwrap(),
            1,
            9,
            b"w",
        );
        tun.write(&p).unwrap();
        assert_eq!(
            r.link_stats(tun.ifindex()).unwrap().rx_packets,
            after.rx_packets + 1
        );
        assert_eq!(
            r.link_stats(999_999).unwrap_err().raw_os_error(),
            Some(libc::ENODEV)
        );
        // Link down is visible too.
        airpack::linux::tun::set_link_up("aptq0", false).unwrap();
        assert!(!r.link_stats(tun.ifindex()).unwrap().up);
    })
    .unwrap();
}

#[test]
fn route_lookup_gateway_onlink_local_mark_and_invalidation() {
    if !can_run(&["ip"]) {
        return;
    }
    let n = ns("route");
    n.run(|| {
        mkdev("d0");
        mkdev("d1");
        sh(&["ip", "addr", "add", "10.68.0.1/24", "dev", "d0"]);
        sh(&["ip", "addr", "add", "10.68.1.1/24", "dev", "d1"]);
        sh(&["ip", "addr", "add", "fd00:68::1/64", "dev", "d0", "nodad"]);
        sh(&["ip", "link", "set", "d0", "up"]);
        sh(&["ip", "link", "set", "d1", "up"]);
        sh(&["ip", "route", "add", "10.99.0.0/16", "via", "10.68.0.254"]);
        sh(&[
            "ip",
            "-6",
            "route",
            "add",
            "fd00:99::/32",
            "via",
            "fd00:68::fe",
        ]);
        let d0 = airpack::linux::tun::ifindex("d0").unwrap();
        let d1 = airpack::linux::tun::ifindex("d1").unwrap();

        let mut r = RouteResolver::new(BYPASS).unwrap();
        let nh = r.lookup("10.99.1.1".parse().unwrap()).unwrap();
        assert_eq!(nh.addr, "10.68.0.254".parse::<IpAddr>().unwrap());
        assert!(nh.gateway && !nh.local);
        assert_eq!(nh.oif, d0);
        let nh = r.lookup("10.68.0.7".parse().unwrap()).unwrap();
        assert_eq!(
            nh.addr,
            "10.68.0.7".parse::<IpAddr>().unwrap(),
            "on-link: next hop is the destination"
        );
        assert!(!nh.gateway);
        assert!(r.lookup("10.68.0.1".parse().unwrap()).unwrap().local);
        let nh = r.lookup("fd00:99::5".parse().unwrap()).unwrap();
        assert_eq!(nh.addr, "fd00:68::fe".parse::<IpAddr>().unwrap());
        let nh = r.lookup("fd00:68::9".parse().unwrap()).unwrap();
        assert_eq!(nh.addr, "fd00:68::9".parse::<IpAddr>().unwrap());
        let e = r.lookup("192.0.2.1".parse().unwrap()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENETUNREACH), "{e}");

        // The lookup carries the mark: a rule for a mark diverts marked
        // lookups only (an operator's policy routing by mark is honoured).
        sh(&[
            "ip", "route", "add", "default", "dev", "d1", "table", "4150",
        ]);
        sh(&[
            "ip", "rule", "add", "fwmark", "0x4150", "lookup", "4150", "priority", "4150",
        ]);
        let mut steered = RouteResolver::new(0x4150).unwrap();
        assert_eq!(
            steered.lookup("10.99.1.1".parse().unwrap()).unwrap().oif,
            d1
        );
        assert_eq!(
            r.lookup_uncached("10.99.1.1".parse().unwrap()).unwrap().oif,
            d0
        );

        // Route change: the monitor becomes readable, the cache still has the
        // old answer until invalidated.
        let mut mon = RouteMonitor::new().unwrap();
        let _ = mon.drain().unwrap();
        sh(&[
            "ip",
            "route",
            "replace",
            "10.99.0.0/16",
            "via",
            "10.68.1.254",
        ]);
        assert!(
            readable(mon.as_raw_fd(), 1000),
            "monitor readable after a route change"
        );
        let ch = mon.drain().unwrap();
        assert!(ch.route && ch.any(), "{ch:?}");
        assert!(r.cached() > 0);
        assert_eq!(
            r.lookup("10.99.1.1".parse().unwrap()).unwrap().addr,
            "10.68.0.254".parse::<IpAddr>().unwrap()
        );
        r.invalidate();
        assert_eq!(r.cached(), 0);
        let nh = r.lookup("10.99.1.1".parse().unwrap()).unwrap();
        assert_eq!(nh.addr, "10.68.1.254".parse::<IpAddr>().unwrap());
        assert_eq!(nh.oif, d1);
        // Link change.
        sh(&["ip", "link", "set", "d1", "down"]);
        assert!(readable(mon.as_raw_fd(), 1000));
        let ch = mon.drain().unwrap();
        assert!(ch.link, "{ch:?}");
        assert_eq!(airpack::linux::tun::link_up("d1").unwrap(), Some(false));
        // Nothing pending: drain returns at once with nothing.
        assert!(!mon.drain().unwrap().any());

        // The cache is bounded.
        let mut small = RouteResolver::with_capacity(BYPASS, 4).unwrap();
        for i in 1..=10u8 {
            small
                .lookup(IpAddr::V4(Ipv4Addr::new(10, 68, 0, i)))
                .unwrap();
            assert!(small.cached() <= 4);
        }
    })
    .unwrap();
}

#[test]
fn timer_fires_at_its_deadline_never_early() {
    // Its own thread, real-time if allowed (as the daemon may run): then
    // lateness measures the timer more than how busy the shared CPUs are.
    std::thread::spawn(timer_lateness).join().unwrap();
}

/// The mechanism, not the machine's speed: every armed deadline fires, never
/// before it, with microsecond resolution (the deadline is kept as given, not
/// rounded), and never absurdly late; disarm disarms; a past deadline fires at
/// once. The bounds on lateness are generous (a shared, loaded 2-core machine
/// can delay any wake-up by milliseconds); the distribution is printed.
fn timer_lateness() {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: changes only this thread's policy; failure is reported, not fatal.
    let rt =
        unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) } == 0;
    airpack::linux::set_timer_slack(1).unwrap();
    let mut t = Timer::new().unwrap();
    let p = Poller::new().unwrap();
    p.add(t.as_raw_fd(), 1, Interest::READ).unwrap();
    let mut ev = Events::with_capacity(1);
    let mut late = Vec::new();
    for i in 0..200u64 {
        // Deadlines off any millisecond grid: 500..1100 µs ahead, plus 1..7 µs.
        let deadline = monotonic_micros() + 500 + (i % 7) * 100 + 1 + i % 7;
        t.arm_at(deadline).unwrap();
        assert_eq!(t.deadline(), Some(deadline));
        assert_eq!(
            p.wait(&mut ev, Some(10_000)).unwrap(),
            1,
            "timer did not fire within 10 s"
        );
        let now = monotonic_micros();
        assert_eq!(t.read().unwrap(), 1);
        assert!(now >= deadline, "fired {} µs early", deadline - now);
        late.push(now - deadline);
    }
    // Disarm really disarms (nothing within 3x the armed delay); a past
    // deadline fires at once.
    t.arm_at(monotonic_micros() + 2_000).unwrap();
    t.disarm().unwrap();
    assert_eq!(t.deadline(), None);
    assert_eq!(p.wait(&mut ev, Some(6)).unwrap(), 0, "disarmed timer fired");
    t.arm_at(1).unwrap();
    assert_eq!(p.wait(&mut ev, Some(10_000)).unwrap(), 1);
    assert_eq!(t.read().unwrap(), 1);
    late.sort_unstable();
    let (min, median, p90, max) = (
        late[0],
        late[late.len() / 2],
        late[late.len() * 9 / 10],
        late[late.len() - 1],
    );
    eprintln!(
        "timerfd lateness over {} fires (SCHED_FIFO: {rt}): min {min} µs, median {median} µs, p90 {p90} µs, max {max} µs",
        late.len()
    );
    // Resolution: with a 1 ns slack, at least one of 200 fires lands within
    // 1 ms of its deadline (a timer that always adds a millisecond or more,
    // e.g. a wait in whole milliseconds rounded up, could not).
    assert!(min < 1_000, "best lateness {min} µs: the timer is coarse");
    // Generous sanity bounds: late by tens of ms on a loaded machine is
    // possible, by a second is a broken timer.
    assert!(median < 20_000, "median lateness {median} µs");
    assert!(max < 1_000_000, "max lateness {max} µs");
}

#[test]
fn signals_arrive_through_signalfd() {
    // A thread of its own: the mask change stays with it.
    std::thread::spawn(|| {
        let s = Signals::new().unwrap();
        assert_eq!(s.read().unwrap(), None);
        // SAFETY: sends SIGHUP to this thread only; it is blocked, so it stays pending for the signalfd.
        unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGHUP) };
        assert!(readable(s.as_raw_fd(), 1000));
        assert_eq!(s.read().unwrap(), Some(libc::SIGHUP));
        assert_eq!(s.read().unwrap(), None);
    })
    .join()
    .unwrap();
}

/// Rates of the primitives the data path is built from (numbers, no
/// pass/fail; ignored by default). Run with:
/// `cargo test -p airpack --test linux_io -- --ignored --nocapture bench_primitives`
#[test]
#[ignore]
fn bench_primitives() {
    if !can_run(&["ip"]) {
        return;
    }
    const SECS: f64 = 1.0;
    let n = ns("bench");
    let ns_name = n.name().to_string();
    n.run(move || {
        let tun = Tun::open("apbn0", 1500).unwrap();
        sh(&["ip", "addr", "add", "10.61.0.1/24", "dev", "apbn0"]);
        airpack::linux::tun::set_txqueuelen("apbn0", 10_000).unwrap();

        // 1. Daemon -> kernel: 60-byte UDP packets written into the TUN, delivered to a local socket.
        let rx = UdpSocket::bind("10.61.0.1:7100").unwrap();
        airpack::linux::set_buffer(rx.as_raw_fd(), 8 << 20, false).unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let drain = std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            let mut got = 0u64;
            while rx.recv(&mut buf).is_ok() {
                got += 1;
            }
            got
        });
        let pkt = udp_packet("10.61.0.2".parse().unwrap(), "10.61.0.1".parse().unwrap(), 7101, 7100, &[0u8; 32]);
        assert_eq!(pkt.len(), 60);
        let t0 = Instant::now();
        let mut written = 0u64;
        while t0.elapsed().as_secs_f64() < SECS {
            for _ in 0..256 {
                if tun.write(&pkt).is_ok() {
                    written += 1;
                }
            }
        }
        let wsecs = t0.elapsed().as_secs_f64();
        let delivered = drain.join().unwrap();
        eprintln!(
            "TUN write of 60-byte UDP packets: {:.0} packets/s ({written} written, {delivered} delivered to the socket)",
            written as f64 / wsecs
        );

        // 2. Kernel -> daemon: UDP sends routed into the TUN, read back in batches.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let sender = std::thread::spawn(move || {
            airpack::linux::netns::enter(&ns_name).unwrap();
            let s = UdpSocket::bind("10.61.0.1:0").unwrap();
            let mut sent = 0u64;
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                if s.send_to(&[0u8; 32], "10.61.0.2:7200").is_ok() {
                    sent += 1;
                }
            }
            sent
        });
        let mut buf = [0u8; 2048];
        let t0 = Instant::now();
        let mut read = 0u64;
        while t0.elapsed().as_secs_f64() < SECS {
            if readable(tun.as_raw_fd(), 100) {
                read += tun.read_batch(&mut buf, 64, |_| {}).unwrap_or(0) as u64;
            }
        }
        let rsecs = t0.elapsed().as_secs_f64();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let sent = sender.join().unwrap();
        let drops = RouteResolver::new(0).unwrap().link_stats(tun.ifindex()).unwrap().tx_dropped;
        eprintln!(
            "TUN read (kernel-routed UDP, 2 threads): {:.0} packets/s read ({sent} sent, {drops} dropped at the TUN queue)",
            read as f64 / rsecs
        );

        // 3. Timer + epoll round trip cost.
        let mut t = Timer::new().unwrap();
        let p = Poller::new().unwrap();
        p.add(t.as_raw_fd(), 1, Interest::READ).unwrap();
        let mut ev = Events::with_capacity(1);
        let t0 = Instant::now();
        let mut fires = 0u64;
        while t0.elapsed().as_secs_f64() < SECS / 4.0 {
            t.arm_at(1).unwrap();
            p.wait(&mut ev, Some(10)).unwrap();
            fires += t.read().unwrap();
        }
        eprintln!(
            "timerfd arm + epoll_wait + read: {:.2} µs per cycle",
            t0.elapsed().as_secs_f64() * 1e6 / fires as f64
        );
    })
    .unwrap();
}
