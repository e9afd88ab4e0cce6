//! Daemon benchmarks (issue 3, point 13), ignored by default. Run with:
//!
//! ```sh
//! cargo test --release -p airpack --test daemon_bench -- --ignored --nocapture --test-threads=1
//! ```
//!
//! - `bench_throughput`: 60-byte UDP packets from namespace A through both
//!   daemons to namespace B as fast as the machine allows (closed loop: the
//!   sender keeps at most a window of packets in flight), aggregated packets/s
//!   received end to end, and CPU time per packet of each daemon.
//! - `bench_delay`: one 50 packets/s flow; one-way delay without airpack, with
//!   a fixed 5 ms hold time, and with hold-while-busy; the added delay's median
//!   and p99. Both clocks are the same CLOCK_MONOTONIC (one machine).

mod common;
use common::*;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const A: &str = "10.101.0.1";
const B: &str = "10.101.0.2";

fn setup(tag: &str) -> (Net, String, String) {
    let mut net = Net::new(tag);
    let a = net.ns("a");
    let b = net.ns("b");
    net.link(&a, "va", &format!("{A}/24"), &b, "vb", &format!("{B}/24"));
    (net, a, b)
}

fn cfg(peer: &str, hold: u64, link_mode: &str) -> String {
    format!(
        "[aggregation]\nhold_time_us = {hold}\nlink_mode = \"{link_mode}\"\nqueue_limit_packets = 4096\nqueue_limit_bytes = 262144\n{VOICE_CLASS}[[peer]]\naddress = \"{peer}\"\n"
    )
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: i32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields after the command: state is index 0, utime is field 14 overall = index 11 here.
    let ut: f64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0.0);
    let st: f64 = f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ut + st) / hz
}

fn rcvbuf(fd: i32, bytes: i32) {
    // SAFETY: valid int option.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&bytes as *const i32).cast(),
            4,
        );
    }
}

struct Throughput {
    received: u64,
    sent: u64,
    secs: f64,
    /// CPU seconds of the generator and the receiver thread.
    gen_cpu: f64,
    rx_cpu: f64,
    /// Fraction of the machine's CPU time idle during the blast.
    idle: f64,
}

/// CPU time of the calling thread, in seconds.
fn thread_cpu() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid clock id and out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// (idle, total) jiffies of the whole machine, from /proc/stat.
fn machine_jiffies() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = s
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (idle, v.iter().take(8).sum())
}

/// Closed-loop blast of 60-byte packets (16 flows) for `secs` from A to
/// `dst` (an address of namespace `b`); returns counts.
fn blast_to(a: &str, b: &str, dst: &'static str, secs: f64, window: u64) -> Throughput {
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let (r2, s2) = (received.clone(), stop.clone());
    let receiver = in_ns(b, move || {
        let s = UdpSocket::bind(format!("{dst}:20000")).unwrap();
        rcvbuf(s.as_raw_fd(), 64 << 20);
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        tx.send(()).unwrap();
        const N: usize = 64;
        let mut bufs = vec![[0u8; 64]; N];
        let mut iov: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: 64,
            })
            .collect();
        // SAFETY: zeroed mmsghdr is valid; pointers set below stay valid during the calls.
        let mut msgs: Vec<libc::mmsghdr> = (0..N).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
        }
        let cpu0 = thread_cpu();
        while !s2.load(Ordering::Relaxed) {
            // SAFETY: msgs/iovecs point into live buffers.
            let n = unsafe {
                libc::recvmmsg(
                    s.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    N as u32,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if n > 0 {
                r2.fetch_add(n as u64, Ordering::Relaxed);
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        thread_cpu() - cpu0
    });
    rx.recv().unwrap();
    let r3 = received.clone();
    let sender = in_ns(a, move || {
        let socks: Vec<UdpSocket> = (0..16)
            .map(|i| {
                let s = UdpSocket::bind(format!("{A}:{}", 17000 + i)).unwrap();
                s.connect(SocketAddr::new(dst.parse().unwrap(), 20000))
                    .unwrap();
                s
            })
            .collect();
        // UDP GSO: one send of 64 x 32 bytes leaves as 64 separate 60-byte
        // IP packets (segmented before the TUN / veth), so the generator
        // costs little CPU next to the daemons being measured.
        const SEGS: usize = 64;
        let buf = [0x5au8; 32 * SEGS];
        for s in &socks {
            let seg: libc::c_int = 32;
            // SAFETY: valid int option on our socket.
            let r = unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_UDP,
                    libc::UDP_SEGMENT,
                    (&seg as *const libc::c_int).cast(),
                    4,
                )
            };
            assert_eq!(r, 0, "UDP_SEGMENT: {}", std::io::Error::last_os_error());
        }
        let start = Instant::now();
        let cpu0 = thread_cpu();
        let mut sent = 0u64;
        let mut i = 0;
        while start.elapsed().as_secs_f64() < secs {
            if sent.saturating_sub(r3.load(Ordering::Relaxed)) > window {
                std::thread::sleep(Duration::from_micros(100));
                continue;
            }
            let s = &socks[i % socks.len()];
            i += 1;
            if s.send(&buf).is_ok() {
                sent += SEGS as u64;
            }
        }
        (sent, thread_cpu() - cpu0)
    });
    let t0 = Instant::now();
    let j0 = machine_jiffies();
    let (sent, gen_cpu) = sender.join().unwrap();
    let j1 = machine_jiffies();
    let secs_sent = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let rx_cpu = receiver.join().unwrap();
    Throughput {
        received: received.load(Ordering::Relaxed),
        sent,
        secs: secs_sent,
        gen_cpu,
        rx_cpu,
        idle: (j1.0 - j0.0) as f64 / (j1.1 - j0.1).max(1) as f64,
    }
}

/// [`blast_to`] B's veth address.
fn blast(a: &str, b: &str, secs: f64, window: u64) -> Throughput {
    blast_to(a, b, B, secs, window)
}

#[test]
#[ignore]
fn bench_throughput() {
    if !can_run("bench_throughput") {
        return;
    }
    let secs = 5.0;
    // Packets in flight (closed loop); AIRPACK_BENCH_WINDOW overrides.
    let window: u64 = std::env::var("AIRPACK_BENCH_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    {
        let (_net, a, b) = setup("tpk");
        let t = blast(&a, &b, secs, window);
        println!(
            "BENCH baseline (no airpack): {:.0} packets/s received ({} sent, {} received in {:.1} s; generator {:.2} s CPU, receiver {:.2} s, machine idle {:.0} %)",
            t.received as f64 / t.secs,
            t.sent,
            t.received,
            t.secs,
            t.gen_cpu,
            t.rx_cpu,
            100.0 * t.idle
        );
    }
    let (net, a, b) = setup("tpd");
    let extra = std::env::var("AIRPACK_BENCH_ARGS").unwrap_or_default();
    let mut args = vec!["--log", "warn"];
    args.extend(extra.split_whitespace());
    let da = net.daemon(&a, &cfg(B, 5000, "fixed"), &args);
    let db = net.daemon(&b, &cfg(A, 5000, "fixed"), &args);
    let (ca, cb) = (cpu_seconds(da.pid()), cpu_seconds(db.pid()));
    let t = blast(&a, &b, secs, window);
    let (ca, cb) = (cpu_seconds(da.pid()) - ca, cpu_seconds(db.pid()) - cb);
    let sa = da.stats();
    let sb = db.stats();
    let rate = t.received as f64 / t.secs;
    println!(
        "BENCH airpack: {rate:.0} packets/s received end to end ({} sent, {} received in {:.1} s, loss {:.3}%)",
        t.sent,
        t.received,
        t.secs,
        100.0 * (t.sent - t.received.min(t.sent)) as f64 / t.sent.max(1) as f64
    );
    println!(
        "BENCH airpack: A aggregation ratio {:.1}, {} bundles; A dropped {}, A TUN queue drops {}, B tun write errors {}",
        sa["total"]["aggregation_ratio"].as_f64().unwrap(),
        sa["total"]["bundles"],
        sa["total"]["dropped"],
        sa["tun"]["queue_drops"],
        sb["total"]["daemon"]["tun_write_errors"]
    );
    println!(
        "BENCH airpack: CPU per packet: sender daemon {:.2} µs, receiver daemon {:.2} µs ({:.2} s and {:.2} s CPU)",
        ca * 1e6 / t.received.max(1) as f64,
        cb * 1e6 / t.received.max(1) as f64,
        ca,
        cb
    );
    println!(
        "BENCH airpack: CPU of the generator {:.2} s, of the receiver {:.2} s; machine idle {:.0} % during the run",
        t.gen_cpu,
        t.rx_cpu,
        100.0 * t.idle
    );
}

/// One 50 packets/s flow for `n` packets; returns one-way delays in µs.
fn delays(a: &str, b: &str, n: u32) -> Vec<f64> {
    let (tx, rx) = std::sync::mpsc::channel();
    let receiver = in_ns(b, move || {
        let s = UdpSocket::bind(format!("{B}:20000")).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        tx.send(()).unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        while out.len() < n as usize {
            match s.recv(&mut buf) {
                Ok(k) if k >= 8 => {
                    let now = airpack::linux::monotonic_micros() as f64;
                    let sent = u64::from_be_bytes(buf[..8].try_into().unwrap()) as f64;
                    out.push(now - sent);
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        out
    });
    rx.recv().unwrap();
    in_ns(a, move || {
        let s = UdpSocket::bind(format!("{A}:17000")).unwrap();
        s.connect(format!("{B}:20000")).unwrap();
        let start = Instant::now();
        for i in 0..n {
            let due = Duration::from_micros(20_000 * i as u64);
            if let Some(w) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(w);
            }
            let mut buf = [0u8; 32];
            buf[..8].copy_from_slice(&airpack::linux::monotonic_micros().to_be_bytes());
            s.send(&buf).unwrap();
        }
    })
    .join()
    .unwrap();
    receiver.join().unwrap()
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

#[test]
#[ignore]
fn bench_delay() {
    if !can_run("bench_delay") {
        return;
    }
    let n = 500; // 10 s at 50 packets/s
    let (net, a, b) = setup("dly");
    let mut base = delays(&a, &b, n);
    assert_eq!(base.len(), n as usize);
    let (b50, b99) = (pct(&mut base, 0.5), pct(&mut base, 0.99));
    println!("BENCH delay baseline (no airpack): median {b50:.1} µs, p99 {b99:.1} µs");
    let normal: &[&str] = &["--log", "warn"];
    let rt: &[&str] = &["--log", "warn", "--set", "daemon.sched_priority=50"];
    let rt_lat: &[&str] = &[
        "--log",
        "warn",
        "--set",
        "daemon.sched_priority=50",
        "--set",
        "daemon.cpu_latency_us=0",
    ];
    for (mode, hold, args, sched) in [
        ("fixed", 5000u64, normal, "normal scheduling"),
        ("hold-while-busy", 5000, normal, "normal scheduling"),
        ("fixed", 5000, rt, "SCHED_FIFO 50"),
        ("hold-while-busy", 5000, rt, "SCHED_FIFO 50"),
        ("fixed", 5000, rt_lat, "SCHED_FIFO 50 + cpu_latency_us 0"),
        (
            "hold-while-busy",
            5000,
            rt_lat,
            "SCHED_FIFO 50 + cpu_latency_us 0",
        ),
    ] {
        let mut da = net.daemon(&a, &cfg(B, hold, mode), args);
        let mut db = net.daemon(&b, &cfg(A, hold, mode), args);
        let mut d = delays(&a, &b, n);
        assert_eq!(d.len(), n as usize, "{mode}: lost packets");
        let (m50, m99) = (pct(&mut d, 0.5), pct(&mut d, 0.99));
        print!(
            "BENCH delay {mode} hold {hold} µs, {sched}: median {m50:.1} µs, p99 {m99:.1} µs; added median {:.1} µs, added p99 {:.1} µs",
            m50 - b50,
            m99 - b50
        );
        if mode == "fixed" {
            print!(
                "; end-to-end p99 overshoot of the hold time {:.1} µs",
                m99 - b50 - hold as f64
            );
        }
        let late = &da.stats()["total"]["daemon"]["timer_late_us"];
        println!(
            "; sender timer late: mean {:.1} µs, p50 <= {} µs, p99 <= {} µs ({} wakeups)",
            late["mean"].as_f64().unwrap_or(0.0),
            late["p50"],
            late["p99"],
            late["total"]
        );
        assert_eq!(da.stop(), 0);
        assert_eq!(db.stop(), 0);
    }
}

/// An address on B's loopback that every variant of `bench_vs_simplemux`
/// sends to, reached through the veth (kernel only, airpack) or through
/// Simplemux's TUN (a route to B's veth address through that TUN would also
/// catch Simplemux's own tunnel packets).
const B_INNER: &str = "10.103.0.2";

/// One measured variant of `bench_vs_simplemux`.
struct Run {
    pps: f64,
    /// CPU per packet received of the sending and the receiving process (µs; 0 without).
    cpu_tx: f64,
    cpu_rx: f64,
    loss: f64,
}

/// A child process killed (and reaped) on drop.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn inner_setup(tag: &str) -> (Net, String, String) {
    let (net, a, b) = setup(tag);
    net.ip(&b, &["addr", "add", &format!("{B_INNER}/32"), "dev", "lo"]);
    (net, a, b)
}

fn measure(a: &str, b: &str, pids: Option<(i32, i32)>, secs: f64, window: u64) -> Run {
    let c0 = pids.map(|(x, y)| (cpu_seconds(x), cpu_seconds(y)));
    let t = blast_to(a, b, B_INNER, secs, window);
    let per = |c: f64| c * 1e6 / t.received.max(1) as f64;
    let (cpu_tx, cpu_rx) = match (pids, c0) {
        (Some((x, y)), Some((cx, cy))) => (per(cpu_seconds(x) - cx), per(cpu_seconds(y) - cy)),
        _ => (0.0, 0.0),
    };
    assert!(t.received > 0, "nothing arrived: the setup is broken");
    Run {
        pps: t.received as f64 / t.secs,
        cpu_tx,
        cpu_rx,
        loss: 100.0 * (t.sent - t.received.min(t.sent)) as f64 / t.sent.max(1) as f64,
    }
}

fn run_kernel(secs: f64, window: u64) -> Run {
    let (net, a, b) = inner_setup("vsk");
    net.ip(&a, &["route", "add", &format!("{B_INNER}/32"), "via", B]);
    measure(&a, &b, None, secs, window)
}

fn run_airpack(secs: f64, window: u64) -> Run {
    let (net, a, b) = inner_setup("vsa");
    net.ip(&a, &["route", "add", &format!("{B_INNER}/32"), "via", B]);
    let da = net.daemon(&a, &cfg(B, 5000, "fixed"), &["--log", "warn"]);
    let db = net.daemon(&b, &cfg(A, 5000, "fixed"), &["--log", "warn"]);
    measure(&a, &b, Some((da.pid(), db.pid())), secs, window)
}

/// Simplemux, normal flavour, network mode (IP protocol 253), bundles sent
/// when they exceed 1400 bytes or 5 ms after the last one (airpack: 1400 /
/// 1500 bytes, 5 ms hold).
fn run_simplemux(bin: &str, secs: f64, window: u64) -> Run {
    let (net, a, b) = inner_setup("vss");
    let start = |ns: &str, dev: &str, peer: &str| {
        let log = std::fs::File::create(net.dir.join(format!("smx-{dev}.log"))).unwrap();
        let child = std::process::Command::new("ip")
            .args([
                "netns", "exec", ns, bin, "-i", "smx0", "-e", dev, "-c", peer,
            ])
            .args(["-M", "network", "-T", "tun", "-B", "1400", "-t", "5000"])
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start simplemux");
        let c = Child(child);
        wait_until("simplemux's TUN", Duration::from_secs(10), || {
            std::process::Command::new("ip")
                .args(["-n", ns, "link", "show", "smx0"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        net.ip(ns, &["link", "set", "smx0", "up"]);
        c
    };
    let sa = start(&a, "va", B);
    let sb = start(&b, "vb", A);
    net.ip(
        &a,
        &["route", "add", &format!("{B_INNER}/32"), "dev", "smx0"],
    );
    let pids = (sa.0.id() as i32, sb.0.id() as i32);
    measure(&a, &b, Some(pids), secs, window)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|x, y| x.total_cmp(y));
    v[v.len() / 2]
}

/// airpack against Simplemux (issue 13 point 3): the kernel alone, airpack
/// and Simplemux alternated, each `AIRPACK_BENCH_RUNS` times (default 5),
/// same namespaces, generator and receiver; medians. `SIMPLEMUX_BIN` is a
/// Simplemux binary built from its public source without debug, logs,
/// assertions and ROHC (`crates/airpack/benches/simplemux.sh` builds it and
/// runs this).
#[test]
#[ignore]
fn bench_vs_simplemux() {
    if !can_run("bench_vs_simplemux") {
        return;
    }
    let Ok(bin) = std::env::var("SIMPLEMUX_BIN") else {
        println!("SKIP bench_vs_simplemux: SIMPLEMUX_BIN is not set (crates/airpack/benches/simplemux.sh)");
        return;
    };
    let runs: usize = std::env::var("AIRPACK_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let (secs, window) = (5.0, 4096);
    let mut all: [Vec<Run>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let names = ["kernel only", "airpack", "simplemux"];
    for round in 0..runs {
        // Rotate the order so no variant always follows the same one.
        for k in 0..3 {
            let v = (round + k) % 3;
            let r = match v {
                0 => run_kernel(secs, window),
                1 => run_airpack(secs, window),
                _ => run_simplemux(&bin, secs, window),
            };
            println!(
                "BENCH vs-simplemux round {round}: {:<11} {:>9.0} packets/s, CPU per packet sending {:.2} µs + receiving {:.2} µs = {:.2} µs, loss {:.3} %",
                names[v],
                r.pps,
                r.cpu_tx,
                r.cpu_rx,
                r.cpu_tx + r.cpu_rx,
                r.loss
            );
            all[v].push(r);
        }
    }
    let med = |v: usize, f: fn(&Run) -> f64| median(all[v].iter().map(f).collect());
    for (v, name) in names.iter().enumerate() {
        println!(
            "BENCH vs-simplemux median of {runs}: {name:<11} {:>9.0} packets/s, CPU per packet {:.2} + {:.2} = {:.2} µs, loss {:.3} %",
            med(v, |r| r.pps),
            med(v, |r| r.cpu_tx),
            med(v, |r| r.cpu_rx),
            med(v, |r| r.cpu_tx + r.cpu_rx),
            med(v, |r| r.loss)
        );
    }
    println!(
        "BENCH vs-simplemux: airpack/Simplemux packets/s {:.2}x (target >= 2), CPU per packet {:.2}x (target <= 0.5); airpack both ends {:.2} µs (target <= 1.75)",
        med(1, |r| r.pps) / med(2, |r| r.pps),
        med(1, |r| r.cpu_tx + r.cpu_rx) / med(2, |r| r.cpu_tx + r.cpu_rx),
        med(1, |r| r.cpu_tx + r.cpu_rx)
    );
}
