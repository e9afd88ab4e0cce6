//! Network-namespace harness for the daemon's integration tests.
//!
//! Owns: creating and deleting namespaces (unique prefix per test and process),
//! veth links, running the real `airpack` binary inside a namespace with a
//! generated config, and bounded traffic generators / receivers that run on
//! threads which entered a namespace with setns().
//!
//! Must not touch: anything outside the namespaces it created. Every loop is
//! bounded in count and time; every address used lives only inside them.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The downlink tests' cell: a bridge as the shared medium.
pub mod cell;
/// Helpers of the kernel-facing `airpack::linux` tests (`linux_*.rs`).
pub mod kernel;

/// Path of the binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_airpack");

/// True when the test can run; otherwise prints a clear SKIP line.
pub fn can_run(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIP: {test}: needs root (network namespaces, TUN, tc, nftables)");
        eprintln!("SKIP: {test}: needs root (network namespaces, TUN, tc, nftables)");
        return false;
    }
    for tool in ["ip", "tc", "nft"] {
        let ok = Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !ok {
            println!("SKIP: {test}: needs `{tool}` (run scripts/setup.sh)");
            eprintln!("SKIP: {test}: needs `{tool}` (run scripts/setup.sh)");
            return false;
        }
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        println!("SKIP: {test}: needs /dev/net/tun");
        return false;
    }
    true
}

static SERIAL: AtomicU32 = AtomicU32::new(0);

/// Runs a command, panicking with its stderr on failure.
pub fn sh(argv: &[&str]) -> String {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    if !out.status.success() {
        panic!("{argv:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A set of namespaces and the daemons in them; everything is removed on drop.
pub struct Net {
    pub prefix: String,
    pub dir: PathBuf,
    namespaces: Vec<String>,
}

impl Net {
    /// A new, empty test network; `tag` makes names readable (e.g. "two").
    pub fn new(tag: &str) -> Net {
        let n = SERIAL.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("apdt-{tag}-{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(&prefix);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Net {
            prefix,
            dir,
            namespaces: Vec::new(),
        }
    }

    /// Creates namespace `<prefix>-<name>` with loopback up and forwarding on; returns its name.
    pub fn ns(&mut self, name: &str) -> String {
        let ns = format!("{}-{name}", self.prefix);
        let _ = Command::new("ip")
            .args(["netns", "del", &ns])
            .stderr(Stdio::null())
            .status();
        sh(&["ip", "netns", "add", &ns]);
        self.namespaces.push(ns.clone());
        sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        self.sysctl(&ns, "net.ipv4.ip_forward", "1");
        self.sysctl(&ns, "net.ipv4.conf.all.rp_filter", "0");
        self.sysctl(&ns, "net.ipv4.conf.default.rp_filter", "0");
        ns
    }

    /// Sets a sysctl inside `ns` (writes /proc/sys from a thread inside the
    /// namespace: no dependency on the `sysctl` tool).
    pub fn sysctl(&self, ns: &str, key: &str, val: &str) {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let val = val.to_owned();
        in_ns(ns, move || {
            std::fs::write(&path, format!("{val}\n")).unwrap_or_else(|e| panic!("{path}: {e}"))
        })
        .join()
        .unwrap();
    }

    /// A veth pair between two namespaces, with an IPv4 address (CIDR) on each end, up.
    pub fn link(&self, a: &str, a_if: &str, a_cidr: &str, b: &str, b_if: &str, b_cidr: &str) {
        sh(&[
            "ip", "link", "add", a_if, "netns", a, "type", "veth", "peer", "name", b_if, "netns", b,
        ]);
        for (ns, ifn, cidr) in [(a, a_if, a_cidr), (b, b_if, b_cidr)] {
            sh(&["ip", "-n", ns, "addr", "add", cidr, "dev", ifn]);
            sh(&["ip", "-n", ns, "link", "set", ifn, "up"]);
        }
    }

    /// `ip -n ns ARGS...`.
    pub fn ip(&self, ns: &str, args: &[&str]) -> String {
        let mut v = vec!["ip", "-n", ns];
        v.extend_from_slice(args);
        sh(&v)
    }

    /// Runs a command inside `ns`.
    pub fn exec(&self, ns: &str, args: &[&str]) -> String {
        let mut v = vec!["ip", "netns", "exec", ns];
        v.extend_from_slice(args);
        sh(&v)
    }

    /// Starts `airpack run` in `ns` with `config` (TOML without `control_socket`,
    /// which the harness sets) plus extra CLI args; waits until it answers.
    pub fn daemon(&self, ns: &str, config: &str, extra: &[&str]) -> Daemon {
        let name = ns.rsplit('-').next().unwrap_or("x");
        let socket = self.dir.join(format!("{name}.sock"));
        let cfg = self.dir.join(format!("{name}.toml"));
        let log = self.dir.join(format!("{name}.log"));
        let text = format!("{config}\n");
        std::fs::write(&cfg, text).unwrap();
        let logf = std::fs::File::create(&log).unwrap();
        let mut args = vec![
            "netns".to_string(),
            "exec".into(),
            ns.into(),
            BIN.into(),
            "run".into(),
            "--config".into(),
            cfg.display().to_string(),
            "--control-socket".into(),
            socket.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = Command::new("ip")
            .args(&args)
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .env(
                "RUST_LOG",
                std::env::var("AIRPACK_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .spawn()
            .expect("spawn airpack run");
        let mut d = Daemon {
            ns: ns.into(),
            child: Some(child),
            socket,
            log,
            config: cfg,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if d.socket.exists() && airpack::daemon::control::query(&d.socket, "stats").is_ok() {
                break;
            }
            if let Some(st) = d.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "daemon in {ns} exited at start ({st}); log:\n{}",
                    d.log_text()
                );
            }
            if Instant::now() > deadline {
                panic!("daemon in {ns} did not come up; log:\n{}", d.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.namespaces.iter().rev() {
            // Kill anything left in the namespace (daemons of a failed test).
            if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    if let Ok(p) = pid.parse::<i32>() {
                        // SAFETY: kill(2) on a pid inside our own test namespace.
                        unsafe { libc::kill(p, libc::SIGKILL) };
                    }
                }
            }
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
        if std::env::var_os("AIRPACK_TEST_KEEP").is_none() && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A running `airpack run` process.
pub struct Daemon {
    pub ns: String,
    child: Option<Child>,
    pub socket: PathBuf,
    pub log: PathBuf,
    pub config: PathBuf,
}

impl Daemon {
    /// `airpack stats --json` (over the control socket).
    pub fn stats(&self) -> Value {
        airpack::daemon::control::query(&self.socket, "stats")
            .unwrap_or_else(|e| panic!("stats from {}: {e:#}\nlog:\n{}", self.ns, self.log_text()))
    }

    /// `airpack peers --json`.
    pub fn peers(&self) -> Value {
        airpack::daemon::control::query(&self.socket, "peers").unwrap()
    }

    /// A number from the stats JSON by pointer (e.g. "/total/bundles").
    pub fn stat(&self, pointer: &str) -> f64 {
        let v = self.stats();
        v.pointer(pointer)
            .and_then(Value::as_f64)
            .unwrap_or_else(|| panic!("{pointer} missing in {v}"))
    }

    /// Runs the CLI (`airpack stats`/`peers`) against this daemon; returns stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let mut v = vec![BIN];
        v.extend_from_slice(args);
        let sock = self.socket.display().to_string();
        v.extend_from_slice(&["--socket", &sock]);
        sh(&v)
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(-1)
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.pid(), sig) };
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// SIGTERM and wait (bounded); returns the exit code.
    pub fn stop(&mut self) -> i32 {
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return st.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                self.signal(libc::SIGKILL);
                panic!(
                    "daemon in {} did not stop within 15 s; log:\n{}",
                    self.ns,
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs `f` on a thread that entered network namespace `ns` first.
pub fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns on a valid namespace fd; affects only this thread.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

/// Payload bytes of packet `seq` of flow `flow` (deterministic, so the
/// receiver checks every byte).
pub fn payload(flow: u16, seq: u32, len: usize, out: &mut [u8]) {
    out[..2].copy_from_slice(&flow.to_be_bytes());
    out[2..6].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in out[6..len].iter_mut().enumerate() {
        *b = (flow as u32)
            .wrapping_mul(31)
            .wrapping_add(seq.wrapping_mul(7))
            .wrapping_add(i as u32) as u8;
    }
}

/// A UDP load: `flows` flows from `src:src_port+i` to `dst:dst_port+i`,
/// `per_flow` packets each, `payload_len` bytes (>= 6), round robin, paced to
/// about `pps` packets per second in total.
#[derive(Clone, Debug)]
pub struct Load {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub flows: u16,
    pub per_flow: u32,
    pub payload_len: usize,
    pub pps: u32,
}

impl Load {
    pub fn total(&self) -> u64 {
        self.flows as u64 * self.per_flow as u64
    }
}

/// Sends a [`Load`] from inside `ns`; returns how many packets the kernel accepted.
pub fn send_load(ns: &str, load: Load) -> std::thread::JoinHandle<u64> {
    in_ns(ns, move || {
        let socks: Vec<UdpSocket> = (0..load.flows)
            .map(|i| {
                let s = UdpSocket::bind(SocketAddr::new(load.src, load.src_port + i))
                    .expect("bind sender");
                s.connect(SocketAddr::new(load.dst, load.dst_port + i))
                    .expect("connect sender");
                s
            })
            .collect();
        let mut buf = vec![0u8; load.payload_len.max(6)];
        let start = Instant::now();
        let mut sent = 0u64;
        let mut n = 0u64;
        let deadline = start + Duration::from_secs(120);
        for seq in 0..load.per_flow {
            for (i, s) in socks.iter().enumerate() {
                payload(i as u16, seq, buf.len(), &mut buf);
                // ENOBUFS etc.: retry a few times, never forever.
                for _ in 0..100 {
                    match s.send(&buf) {
                        Ok(_) => {
                            sent += 1;
                            break;
                        }
                        Err(_) => std::thread::sleep(Duration::from_micros(200)),
                    }
                }
                n += 1;
                // Pace: packet n is due at n / pps seconds.
                let due = Duration::from_secs_f64(n as f64 / load.pps as f64);
                let el = start.elapsed();
                if due > el {
                    std::thread::sleep(due - el);
                }
            }
            if Instant::now() > deadline {
                break;
            }
        }
        sent
    })
}

/// What a receiver saw.
#[derive(Debug, Default)]
pub struct RxLog {
    /// Per flow: sequence numbers in arrival order.
    pub seqs: HashMap<u16, Vec<u32>>,
    /// Packets whose bytes differed from what was sent.
    pub corrupt: u64,
    pub total: u64,
}

impl RxLog {
    /// Asserts every flow got exactly 0..per_flow, in order, byte-identical.
    pub fn assert_complete(&self, flows: u16, per_flow: u32) {
        assert_eq!(self.corrupt, 0, "corrupted packets");
        for f in 0..flows {
            let got = self.seqs.get(&f).map(Vec::as_slice).unwrap_or(&[]);
            let missing = per_flow as usize - got.len().min(per_flow as usize);
            assert!(
                got.iter().copied().eq(0..per_flow),
                "flow {f}: got {} of {per_flow} packets ({missing} missing), in order: {}",
                got.len(),
                got.windows(2).all(|w| w[0] < w[1])
            );
        }
    }
}

/// Receives a [`Load`] inside `ns` until `expect` packets arrived or nothing
/// came for `idle` (bounded overall by `max`).
pub fn receive_load(
    ns: &str,
    load: Load,
    expect: u64,
    idle: Duration,
    max: Duration,
) -> std::thread::JoinHandle<RxLog> {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = in_ns(ns, move || {
        let socks: Vec<UdpSocket> = (0..load.flows)
            .map(|i| {
                let s = UdpSocket::bind(SocketAddr::new(load.dst, load.dst_port + i))
                    .expect("bind receiver");
                s.set_nonblocking(true).unwrap();
                let sz: libc::c_int = 4 << 20;
                // SAFETY: setsockopt with a valid int option value.
                unsafe {
                    libc::setsockopt(
                        s.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_RCVBUFFORCE,
                        (&sz as *const libc::c_int).cast(),
                        std::mem::size_of::<libc::c_int>() as u32,
                    )
                };
                s
            })
            .collect();
        tx.send(()).unwrap();
        let mut log = RxLog::default();
        let mut buf = vec![0u8; 2048];
        let mut want = vec![0u8; 2048];
        let start = Instant::now();
        let mut last = Instant::now();
        while log.total < expect && last.elapsed() < idle && start.elapsed() < max {
            let mut got_any = false;
            for s in &socks {
                while let Ok(n) = s.recv(&mut buf) {
                    got_any = true;
                    log.total += 1;
                    if n < 6 {
                        log.corrupt += 1;
                        continue;
                    }
                    let flow = u16::from_be_bytes([buf[0], buf[1]]);
                    let seq = u32::from_be_bytes([buf[2], buf[3], buf[4], buf[5]]);
                    payload(flow, seq, n, &mut want);
                    if n != load.payload_len.max(6) || buf[..n] != want[..n] {
                        log.corrupt += 1;
                    }
                    log.seqs.entry(flow).or_default().push(seq);
                }
            }
            if got_any {
                last = Instant::now();
            } else {
                std::thread::sleep(Duration::from_micros(300));
            }
        }
        log
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("receiver bound its sockets");
    h
}

/// The byte at offset `i` of the gateway tests' TCP transfers.
pub fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(7) ^ (i >> 11)) as u8
}

/// Writes `bytes` of [`pattern`] to `c` (a write stalled for 60 s panics),
/// shuts its sending side and waits for the peer's FIN, so both FINs cross
/// the path; returns the bytes written.
pub fn write_pattern(c: &mut std::net::TcpStream, bytes: u64) -> u64 {
    use std::io::{Read, Write};
    c.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut buf = vec![0u8; 16_384];
    let mut off = 0u64;
    while off < bytes {
        let n = (bytes - off).min(buf.len() as u64) as usize;
        for (k, b) in buf[..n].iter_mut().enumerate() {
            *b = pattern(off + k as u64);
        }
        c.write_all(&buf[..n])
            .expect("server write (stalled connection?)");
        off += n as u64;
    }
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let _ = c.read(&mut buf);
    off
}

/// Reads `c` to its end (a read error panics: a stalled connection),
/// comparing every byte with [`pattern`]; returns (bytes read, bytes wrong).
pub fn read_pattern(c: &mut impl std::io::Read) -> (u64, u64) {
    let mut buf = vec![0u8; 16_384];
    let (mut got, mut bad) = (0u64, 0u64);
    loop {
        let n = c.read(&mut buf).expect("client read (stalled connection?)");
        if n == 0 {
            return (got, bad);
        }
        for (k, b) in buf[..n].iter().enumerate() {
            if *b != pattern(got + k as u64) {
                bad += 1;
            }
        }
        got += n as u64;
    }
}

/// Sends `bytes` over TCP from `ns_a` to a listener in `ns_b` at `dst:port`;
/// returns (bytes sent, bytes received, received == sent content).
pub fn tcp_transfer(
    ns_a: &str,
    ns_b: &str,
    dst: IpAddr,
    port: u16,
    bytes: usize,
) -> (usize, usize, bool) {
    let (tx, rx) = std::sync::mpsc::channel();
    let server = in_ns(ns_b, move || {
        let l = TcpListener::bind(SocketAddr::new(dst, port)).unwrap();
        tx.send(()).unwrap();
        let (mut c, _) = l.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut got = Vec::with_capacity(bytes);
        let _ = c.read_to_end(&mut got);
        got
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let data: Vec<u8> = (0..bytes).map(|i| (i * 7 + i / 251) as u8).collect();
    let d2 = data.clone();
    let client = in_ns(ns_a, move || {
        let mut c = TcpStream::connect_timeout(&SocketAddr::new(dst, port), Duration::from_secs(5))
            .unwrap();
        c.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
        c.write_all(&d2).unwrap();
        d2.len()
    });
    let sent = client.join().unwrap();
    let got = server.join().unwrap();
    (sent, got.len(), got == data)
}

/// ICMP echo from inside `ns` to `dst` (IPv4): how many of `count` replies came back.
pub fn ping(ns: &str, dst: std::net::Ipv4Addr, count: u16) -> u16 {
    in_ns(ns, move || {
        // SAFETY: plain socket(2); closed at the end.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) };
        assert!(
            fd >= 0,
            "raw ICMP socket: {}",
            std::io::Error::last_os_error()
        );
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 200_000,
        };
        // SAFETY: valid option value.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                16,
            )
        };
        let id: u16 = (std::process::id() & 0xffff) as u16 ^ 0x5a5a;
        let mut ok = 0;
        for seq in 0..count {
            let mut pkt = [0u8; 64];
            pkt[0] = 8;
            pkt[4..6].copy_from_slice(&id.to_be_bytes());
            pkt[6..8].copy_from_slice(&seq.to_be_bytes());
            for (i, b) in pkt[8..].iter_mut().enumerate() {
                *b = i as u8;
            }
            let ck = checksum(&pkt);
            pkt[2..4].copy_from_slice(&ck.to_be_bytes());
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as u16,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from(dst).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: valid buffer and sockaddr_in.
            unsafe {
                libc::sendto(
                    fd,
                    pkt.as_ptr().cast(),
                    pkt.len(),
                    0,
                    (&sa as *const libc::sockaddr_in).cast(),
                    16,
                )
            };
            let deadline = Instant::now() + Duration::from_secs(1);
            while Instant::now() < deadline {
                let mut buf = [0u8; 1500];
                // SAFETY: valid writable buffer.
                let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
                if n < 28 {
                    continue;
                }
                let ihl = ((buf[0] & 0x0f) as usize) * 4;
                let icmp = &buf[ihl..n as usize];
                if icmp.len() >= 8
                    && icmp[0] == 0
                    && icmp[4..6] == id.to_be_bytes()
                    && icmp[6..8] == seq.to_be_bytes()
                {
                    ok += 1;
                    break;
                }
            }
        }
        // SAFETY: fd opened above.
        unsafe { libc::close(fd) };
        ok
    })
    .join()
    .unwrap()
}

/// RFC 1071 checksum.
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        sum += w as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A minimal IPv4/UDP packet (checksums filled).
pub fn udp4_packet(
    src: std::net::Ipv4Addr,
    dst: std::net::Ipv4Addr,
    sport: u16,
    dport: u16,
    body: &[u8],
) -> Vec<u8> {
    let total = 28 + body.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let ck = checksum(&p[..20]);
    p[10..12].copy_from_slice(&ck.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + body.len()) as u16).to_be_bytes());
    p[28..].copy_from_slice(body);
    // UDP checksum 0 = none (IPv4).
    p
}

/// Sends raw IP payloads with protocol `proto` from inside `ns`, bound to
/// source `src`, to `dst` (the kernel builds the IPv4 header).
pub fn send_raw(
    ns: &str,
    src: std::net::Ipv4Addr,
    dst: std::net::Ipv4Addr,
    proto: u8,
    payloads: Vec<Vec<u8>>,
) {
    send_raw_tos(ns, src, dst, proto, 0, payloads)
}

/// [`send_raw`] with the outer header's TOS byte set to `tos`.
pub fn send_raw_tos(
    ns: &str,
    src: std::net::Ipv4Addr,
    dst: std::net::Ipv4Addr,
    proto: u8,
    tos: u8,
    payloads: Vec<Vec<u8>>,
) {
    in_ns(ns, move || {
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, proto as i32) };
        assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
        let tos = libc::c_int::from(tos);
        // SAFETY: a valid socket and an int option value.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_IP,
                libc::IP_TOS,
                (&tos as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0, "IP_TOS: {}", std::io::Error::last_os_error());
        let bind = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(src).to_be(),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: valid sockaddr_in.
        let r = unsafe { libc::bind(fd, (&bind as *const libc::sockaddr_in).cast(), 16) };
        assert_eq!(r, 0, "bind {src}: {}", std::io::Error::last_os_error());
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(dst).to_be(),
            },
            sin_zero: [0; 8],
        };
        for p in payloads {
            // SAFETY: valid buffer and sockaddr.
            let n = unsafe {
                libc::sendto(
                    fd,
                    p.as_ptr().cast(),
                    p.len(),
                    0,
                    (&sa as *const libc::sockaddr_in).cast(),
                    16,
                )
            };
            assert!(n >= 0, "sendto: {}", std::io::Error::last_os_error());
        }
        // SAFETY: fd opened above.
        unsafe { libc::close(fd) };
    })
    .join()
    .unwrap();
}

/// Waits (bounded) until `cond` holds.
pub fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Interface indexes of `ns` (from `ip -o link`).
pub fn ifindexes(net: &Net, ns: &str) -> Vec<(u32, String)> {
    net.ip(ns, &["-o", "link", "show"])
        .lines()
        .filter_map(|l| {
            let mut f = l.split(": ");
            let idx = f.next()?.trim().parse().ok()?;
            let name = f.next()?.split('@').next()?.to_string();
            Some((idx, name))
        })
        .collect()
}

/// airpack's steering programs on the tcx egress of `dev` in `ns`.
pub fn steering_programs(net: &Net, ns: &str, dev: &str) -> Vec<airpack::linux::ebpf::Program> {
    let idx = ifindexes(net, ns)
        .into_iter()
        .find(|(_, n)| n == dev)
        .map(|(i, _)| i);
    let Some(idx) = idx else { return Vec::new() };
    in_ns(ns, move || {
        use airpack::linux::ebpf;
        ebpf::tcx_egress_programs(idx)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|id| ebpf::Program::from_id(id).ok())
            .filter(|p| p.name().is_ok_and(|n| n == ebpf::PROG_NAME))
            .collect()
    })
    .join()
    .unwrap()
}

/// Whether the daemon's kernel steering state is gone from `ns`: no airpack
/// program on any interface's tcx egress, no tc filter redirecting into a
/// device (older versions), and no nftables table.
pub fn steering_gone(net: &Net, ns: &str) -> bool {
    let programs = ifindexes(net, ns)
        .iter()
        .any(|(_, dev)| !steering_programs(net, ns, dev).is_empty());
    let qdiscs = net.exec(ns, &["tc", "qdisc", "show"]);
    let redirects = qdiscs
        .lines()
        .filter(|l| l.starts_with("qdisc clsact "))
        .filter_map(|l| l.split_whitespace().skip_while(|w| *w != "dev").nth(1))
        .any(|dev| {
            net.exec(ns, &["tc", "filter", "show", "dev", dev, "egress"])
                .contains("Redirect to device")
        });
    let nft = Command::new("ip")
        .args([
            "netns", "exec", ns, "nft", "list", "table", "inet", "airpack",
        ])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(true);
    !programs && !redirects && !nft
}

/// Whether the kernel program `prog` steers a minimal IPv4 packet of
/// `protocol` between `sport` and `dport` (run with `BPF_PROG_TEST_RUN`).
pub fn program_steers(
    prog: &airpack::linux::ebpf::Program,
    protocol: u8,
    sport: u16,
    dport: u16,
) -> bool {
    let mut p = vec![0u8; 14 + 40];
    p[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut p[14..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&40u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = protocol;
    ip[20..22].copy_from_slice(&sport.to_be_bytes());
    ip[22..24].copy_from_slice(&dport.to_be_bytes());
    prog.test_run(&p, 0).expect("BPF_PROG_TEST_RUN") == airpack::linux::ebpf::TC_ACT_REDIRECT
}

/// Standard class rule for the tests: UDP with either port in 16000-32000.
pub const VOICE_CLASS: &str =
    "[[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"16000-32000\"\n";

/// Checks the bundling identity between a sender's engine counters `tx` (the
/// `total` object or one peer's) and the matching receiver counters `rx`,
/// for `total` packets of bundle-class traffic handed to the sender:
/// every packet left in a bundle or alone (a queue holding a single packet at
/// its deadline sends it unchanged, by design, so on a loaded machine a few
/// travel alone), the receiver split every bundle sent and delivered exactly
/// the packets bundled. Returns (packets in bundles, packets sent alone).
pub fn assert_bundling_identity(tx: &Value, rx: &Value, total: u64) -> (u64, u64) {
    let n = |v: &Value, k: &str| {
        v[k].as_u64()
            .unwrap_or_else(|| panic!("{k} missing in {v}"))
    };
    let (bundled, alone) = (n(tx, "aggregated_packets"), n(tx, "unaggregated_packets"));
    assert_eq!(
        bundled + alone,
        total,
        "sender: in bundles + alone = total\nsender: {tx}"
    );
    assert_eq!(
        n(rx, "bundles_received"),
        n(tx, "bundles"),
        "receiver split every bundle sent\nsender: {tx}\nreceiver: {rx}"
    );
    assert_eq!(
        n(rx, "packets_received"),
        bundled,
        "receiver delivered the bundled packets\nsender: {tx}\nreceiver: {rx}"
    );
    (bundled, alone)
}

/// Checks that a receive log holds every packet of every flow exactly once,
/// byte-identical; and in order when no packet of the load went alone
/// (`alone == 0`, from [`assert_bundling_identity`] over every hop). A packet
/// sent alone travels through the kernel only and can overtake an earlier one
/// still inside a receiving daemon (decoding its bundle), so otherwise order
/// is not asserted. Returns how many packets arrived after a higher sequence
/// number of their flow.
pub fn assert_delivered(log: &RxLog, flows: u16, per_flow: u32, alone: u64) -> u64 {
    if alone == 0 {
        log.assert_complete(flows, per_flow);
        return 0;
    }
    assert_eq!(log.corrupt, 0, "corrupted packets");
    let mut reordered = 0u64;
    for f in 0..flows {
        let got = log.seqs.get(&f).map(Vec::as_slice).unwrap_or(&[]);
        let mut highest = None;
        for &s in got {
            if highest.is_some_and(|h| s < h) {
                reordered += 1;
            }
            highest = highest.max(Some(s));
        }
        let mut sorted = got.to_vec();
        sorted.sort_unstable();
        assert!(
            sorted.iter().copied().eq(0..per_flow),
            "flow {f}: got {} of {per_flow} packets (as a set, duplicates or gaps)",
            got.len()
        );
    }
    if reordered > 0 {
        println!("{reordered} packets overtaken by {alone} packets sent alone");
    }
    reordered
}

/// Two namespaces `a` and `b` joined by a veth pair `va` - `vb` in
/// 10.`subnet`.0.0/24 (a is .1, b is .2).
pub fn two(tag: &str, subnet: u8) -> (Net, String, String, std::net::Ipv4Addr, std::net::Ipv4Addr) {
    let mut net = Net::new(tag);
    let a = net.ns("a");
    let b = net.ns("b");
    let ip_a = std::net::Ipv4Addr::new(10, subnet, 0, 1);
    let ip_b = std::net::Ipv4Addr::new(10, subnet, 0, 2);
    net.link(
        &a,
        "va",
        &format!("{ip_a}/24"),
        &b,
        "vb",
        &format!("{ip_b}/24"),
    );
    (net, a, b, ip_a, ip_b)
}

/// `GET /metrics` from the daemon's Prometheus listener on `port` inside
/// `ns`: the whole HTTP response (status line and headers included).
pub fn metrics_response(ns: &str, port: u16) -> String {
    in_ns(ns, move || {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        s
    })
    .join()
    .unwrap()
}

/// The gateway tests' network: `srv` (wired side, 10.77.1.2) — `gw` (wired0
/// 10.77.1.1, mesh0 10.77.2.1) — `mob` (mesh side, 10.77.2.2), IPv4 default
/// routes through `gw`. Returns (net, srv, gw, mob).
pub fn gateway_net(tag: &str) -> (Net, String, String, String) {
    let mut net = Net::new(tag);
    let srv = net.ns("srv");
    let gwn = net.ns("gw");
    let mob = net.ns("mob");
    net.link(&srv, "s0", "10.77.1.2/24", &gwn, "wired0", "10.77.1.1/24");
    net.link(&gwn, "mesh0", "10.77.2.1/24", &mob, "m0", "10.77.2.2/24");
    net.ip(&srv, &["route", "add", "default", "via", "10.77.1.1"]);
    net.ip(&mob, &["route", "add", "default", "via", "10.77.2.1"]);
    (net, srv, gwn, mob)
}
