//! Fail-safe steering and crash recovery (issue 9, points 1 and 2):
//! - a SIGKILLed daemon does not blackhole steered traffic: the kernel
//!   detaches its tcx programs with the process, and a voice-like flow
//!   through the steered hop keeps arriving, unaggregated (the longest gap in
//!   arrivals is measured and printed);
//! - a restart after a crash keeps the crashed run's ORIGINAL sysctls and a
//!   clean stop restores them;
//! - `airpack cleanup` removes every trace of a SIGKILLed daemon without its
//!   configuration, and is idempotent.

mod common;
use common::*;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn cfg(iface: &str, hold_us: u64, peer: Ipv4Addr) -> String {
    format!("[daemon]\ninterfaces = [\"{iface}\"]\n[aggregation]\nhold_time_us = {hold_us}\nlink_mode = \"fixed\"\n{VOICE_CLASS}[[peer]]\naddress = \"{peer}\"\n")
}

/// A sysctl's value inside `ns`.
fn sysctl(net: &Net, ns: &str, key: &str) -> String {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    net.exec(ns, &["cat", &path]).trim().to_string()
}

#[test]
fn sigkill_under_load_does_not_blackhole_traffic() {
    if !can_run("sigkill_under_load_does_not_blackhole_traffic") {
        return;
    }
    let (net, a, b, ip_a, ip_b) = two("kill", 104);
    let mut da = net.daemon(&a, &cfg("va", 20_000, ip_b), &[]);
    let mut db = net.daemon(&b, &cfg("vb", 20_000, ip_a), &[]);
    assert_eq!(steering_programs(&net, &a, "va").len(), 1);

    // A voice-like flow a -> b: one packet every 2 ms, sequence-numbered.
    const GAP: Duration = Duration::from_millis(2);
    const PACKETS: u32 = 4000; // 8 s
    let dst = SocketAddr::new(ip_b.into(), 20000);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let rx = in_ns(&b, move || {
        let s = UdpSocket::bind(dst).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        ready_tx.send(()).unwrap();
        let mut got: Vec<(u32, Instant)> = Vec::new();
        let mut buf = [0u8; 64];
        while let Ok(n) = s.recv(&mut buf) {
            if n >= 4 {
                let seq = u32::from_be_bytes(buf[..4].try_into().unwrap());
                got.push((seq, Instant::now()));
            }
            if got.last().is_some_and(|l| l.0 == PACKETS - 1) {
                break;
            }
        }
        got
    });
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let tx = in_ns(&a, move || {
        let s = UdpSocket::bind(SocketAddr::new(ip_a.into(), 17000)).unwrap();
        let start = Instant::now();
        let mut sent = 0u32;
        for seq in 0..PACKETS {
            let mut p = [0u8; 32];
            p[..4].copy_from_slice(&seq.to_be_bytes());
            if s.send_to(&p, dst).is_ok() {
                sent += 1;
            }
            let due = GAP * (seq + 1);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        (sent, Instant::now())
    });
    // Aggregating before the kill.
    wait_until("bundles from a", Duration::from_secs(10), || {
        da.stat("/total/bundles") >= 20.0
    });
    let killed_at = Instant::now();
    da.signal(libc::SIGKILL);
    wait_until("daemon a gone", Duration::from_secs(10), || !da.alive());
    // The kernel detached the program with the process: nothing steers any more.
    wait_until("steering gone", Duration::from_secs(10), || {
        steering_gone(&net, &a)
    });
    // A bundle a sent just before it died may still be on its way into b.
    std::thread::sleep(Duration::from_millis(500));
    let bundles_after_kill = db.stat("/total/bundles_received");
    let (sent, sent_last) = tx.join().unwrap();
    let got = rx.join().unwrap();
    assert_eq!(sent, PACKETS);

    // The longest silence between two arrivals, and what was lost. The last
    // send closes the window, so traffic that never resumes is a gap too.
    let times: Vec<Instant> = got.iter().map(|g| g.1).chain([sent_last]).collect();
    let longest = times
        .windows(2)
        .map(|w| w[1].saturating_duration_since(w[0]))
        .max()
        .unwrap_or_default();
    let mut seqs: Vec<u32> = got.iter().map(|g| g.0).collect();
    seqs.sort_unstable();
    seqs.dedup();
    let lost = PACKETS as usize - seqs.len();
    let after_kill = got.iter().filter(|g| g.1 > killed_at).count();
    println!(
        "SIGKILL under load: {} of {PACKETS} packets received, {lost} lost, longest gap {:.1} ms, {after_kill} received after the kill",
        seqs.len(),
        longest.as_secs_f64() * 1e3
    );
    assert!(
        longest < Duration::from_secs(1),
        "traffic stopped for {longest:?} after the daemon was killed"
    );
    // Traffic resumed: the last packets (sent seconds after the kill) all arrived...
    let tail = PACKETS - 500..PACKETS;
    assert!(
        tail.clone().all(|s| seqs.binary_search(&s).is_ok()),
        "packets sent after the kill must arrive"
    );
    // ...unaggregated: b received no bundle after the kill settled.
    assert_eq!(db.stat("/total/bundles_received"), bundles_after_kill);
    // At most what the dead daemon held (hold time 20 ms at 500 packets/s,
    // plus the TUN queue) is lost, not seconds of traffic.
    assert!(lost < 250, "{lost} packets lost");
    assert_eq!(db.stop(), 0);
}

/// Starts `airpack run` in `ns` with its control socket at `socket`; waits
/// until it answers.
fn start(ns: &str, config: &Path, socket: &Path, log: &Path) -> std::process::Child {
    let logf = std::fs::File::create(log).unwrap();
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, BIN, "run", "--config"])
        .arg(config)
        .arg("--control-socket")
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(logf.try_clone().unwrap())
        .stderr(logf)
        .spawn()
        .unwrap();
    wait_until("daemon up", Duration::from_secs(20), || {
        if let Ok(Some(st)) = child.try_wait() {
            panic!(
                "daemon exited ({st}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        socket.exists() && airpack::daemon::control::query(socket, "stats").is_ok()
    });
    child
}

fn kill(child: &mut std::process::Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

fn cleanup(net: &Net, ns: &str, dir: &Path) -> String {
    net.exec(
        ns,
        &[BIN, "cleanup", "--runtime-dir", &dir.display().to_string()],
    )
}

#[test]
fn restart_after_crash_keeps_the_original_sysctls() {
    if !can_run("restart_after_crash_keeps_the_original_sysctls") {
        return;
    }
    let (net, a, _b, _ip_a, ip_b) = two("sysctl", 105);
    // The operator's values, all different from what the daemon needs.
    net.sysctl(&a, "net.ipv4.ip_forward", "0");
    net.sysctl(&a, "net.ipv6.conf.all.forwarding", "0");
    net.sysctl(&a, "net.ipv4.conf.all.rp_filter", "1");
    let originals = [
        ("net.ipv4.ip_forward", "0"),
        ("net.ipv6.conf.all.forwarding", "0"),
        ("net.ipv4.conf.all.rp_filter", "1"),
        ("net.ipv4.conf.va.rp_filter", "0"),
    ];
    let run = net.dir.join("run");
    let (config, socket, log) = (
        net.dir.join("a.toml"),
        run.join("a.sock"),
        net.dir.join("a.log"),
    );
    let state = run.join("a.state");
    std::fs::write(&config, cfg("va", 5000, ip_b)).unwrap();

    let mut d1 = start(&a, &config, &socket, &log);
    assert!(state.exists(), "state file written at start");
    let changed = |net: &Net| {
        sysctl(net, &a, "net.ipv4.ip_forward") == "1"
            && sysctl(net, &a, "net.ipv6.conf.all.forwarding") == "1"
            && sysctl(net, &a, "net.ipv4.conf.all.rp_filter") == "0"
            && sysctl(net, &a, "net.ipv4.conf.va.rp_filter") == "1"
    };
    assert!(changed(&net), "the daemon set what it needs");
    kill(&mut d1);
    assert!(changed(&net), "a crash cannot restore anything");
    assert!(state.exists(), "the state file survives the crash");

    // Restart over the crash's values, then a clean stop: the ORIGINAL values return.
    let mut d2 = start(&a, &config, &socket, &log);
    assert!(changed(&net));
    assert!(steering_programs(&net, &a, "va").len() == 1);
    // `airpack cleanup` refuses to touch a running daemon's state.
    let out = Command::new("ip")
        .args(["netns", "exec", &a, BIN, "cleanup", "--runtime-dir"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("still running"));
    assert!(state.exists() && changed(&net));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(d2.id() as i32, libc::SIGTERM) };
    assert!(d2.wait().unwrap().success());
    for (k, v) in originals {
        assert_eq!(sysctl(&net, &a, k), v, "{k} restored to the original");
    }
    assert!(!state.exists(), "a clean stop removes the state file");
    assert!(steering_gone(&net, &a));
    assert!(cleanup(&net, &a, &run).contains("nothing to do") || !run.exists());
}

#[test]
fn cleanup_after_sigkill_removes_every_trace() {
    if !can_run("cleanup_after_sigkill_removes_every_trace") {
        return;
    }
    let (net, a, _b, _ip_a, ip_b) = two("cleanup", 106);
    net.sysctl(&a, "net.ipv4.ip_forward", "0");
    net.sysctl(&a, "net.ipv6.conf.all.forwarding", "0");
    let run: PathBuf = net.dir.join("run");
    let (config, socket, log) = (
        net.dir.join("a.toml"),
        run.join("a.sock"),
        net.dir.join("a.log"),
    );
    let state = run.join("a.state");
    // End-to-end: the daemon also creates the nftables table.
    std::fs::write(
        &config,
        format!(
            "[daemon]\nmode = \"end-to-end\"\ntun = \"apc0\"\ninterfaces = [\"va\"]\n{VOICE_CLASS}[[peer]]\naddress = \"{ip_b}\"\nallowed_ips = [\"{ip_b}/32\"]\n"
        ),
    )
    .unwrap();
    let mut d = start(&a, &config, &socket, &log);
    let nft = |net: &Net| {
        Command::new("ip")
            .args([
                "netns", "exec", &a, "nft", "list", "table", "inet", "airpack",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
            && net.dir.exists()
    };
    assert!(nft(&net));
    kill(&mut d);
    // What a crash leaves: the table, the sysctls, the socket, the state file
    // (not the steering programs: they died with the process).
    assert!(nft(&net));
    assert_eq!(sysctl(&net, &a, "net.ipv4.ip_forward"), "1");
    assert!(socket.exists() && state.exists());
    assert!(steering_programs(&net, &a, "va").is_empty());

    let out = cleanup(&net, &a, &run);
    assert!(out.contains("restored"), "{out}");
    assert!(!nft(&net), "nftables table removed");
    assert_eq!(sysctl(&net, &a, "net.ipv4.ip_forward"), "0");
    assert_eq!(sysctl(&net, &a, "net.ipv6.conf.all.forwarding"), "0");
    assert!(!socket.exists() && !state.exists());
    assert!(!run.exists(), "the empty runtime directory is removed");
    assert!(!net.ip(&a, &["link", "show"]).contains("apc0"), "no TUN");
    assert!(steering_gone(&net, &a));
    // Idempotent: nothing left to do, exit 0.
    assert!(cleanup(&net, &a, &run).contains("nothing to do"));
}
