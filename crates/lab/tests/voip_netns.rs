//! `airpack voip` across two network namespaces joined by a veth pair: the
//! deployment shape of the lab (one tool instance per node namespace, the
//! shared CLOCK_MONOTONIC, kernel receive timestamps through veth).
//!
//! Owns: this check only. Needs root and `ip`; prints SKIP otherwise.
//! Namespaces are named `apv<pid>a` / `apv<pid>b` and removed on exit.

use std::fs::File;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use airpack_lab::voip::{self, merge, summarize, Spec};

struct Netns(Vec<String>);

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Run `f` on a thread that has joined the named network namespace.
fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let fd = File::open(format!("/run/netns/{name}")).expect("open netns");
            nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
        .join()
        .unwrap()
    })
}

#[test]
fn calls_between_two_namespaces() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP calls_between_two_namespaces: needs root (network namespaces)");
        return;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        eprintln!("SKIP calls_between_two_namespaces: iproute2 `ip` not installed");
        return;
    }
    let pid = std::process::id();
    let (a, b) = (format!("apv{pid}a"), format!("apv{pid}b"));
    let _guard = Netns(vec![a.clone(), b.clone()]);
    let (va, vb) = (format!("apv{pid}x"), format!("apv{pid}y"));
    assert!(
        ip(&["netns", "add", &a]) && ip(&["netns", "add", &b]),
        "netns add"
    );
    assert!(ip(&[
        "link", "add", &va, "netns", &a, "type", "veth", "peer", "name", &vb, "netns", &b
    ]));
    assert!(ip(&["-n", &a, "addr", "add", "10.77.0.1/24", "dev", &va]));
    assert!(ip(&["-n", &b, "addr", "add", "10.77.0.2/24", "dev", &vb]));
    for (n, d) in [(&a, &va), (&b, &vb)] {
        assert!(ip(&["-n", n, "link", "set", d, "up"]));
        assert!(ip(&["-n", n, "link", "set", "lo", "up"]));
    }

    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 500;
    let calls: Vec<_> = (0..4u32)
        .map(|i| {
            serde_json::json!({"id": i,
                "a": {"node": "A", "addr": "10.77.0.1", "port": 16000 + 2 * i},
                "b": {"node": "B", "addr": "10.77.0.2", "port": 16000 + 2 * i}})
        })
        .collect();
    let spec: Spec = serde_json::from_value(serde_json::json!({
        "codec": "g711", "interval_ms": 20, "vad": false, "seed": 9, "duration_s": 2.0,
        "start_at_unix_ms": start, "playout_ms": 60, "criterion": "mos", "grace_ms": 300,
        "calls": calls,
    }))
    .unwrap();
    let results = std::thread::scope(|s| {
        let ra = s.spawn(|| in_netns(&a, || voip::run(&spec, "A")));
        let rb = s.spawn(|| in_netns(&b, || voip::run(&spec, "B")));
        vec![ra.join().unwrap().unwrap(), rb.join().unwrap().unwrap()]
    });
    for r in &results {
        assert_eq!(r.rx.rejected(), 0, "{:?}", r.rx);
        assert_eq!(r.rx.accepted, 400, "{:?}", r.rx);
        assert_eq!(
            r.rx.kernel_timestamps, r.rx.datagrams,
            "kernel timestamps through veth: {:?}",
            r.rx
        );
    }
    let calls = merge(&spec, &results);
    for c in &calls {
        for q in [&c.a_to_b, &c.b_to_a] {
            assert_eq!((q.sent, q.received, q.late_pct), (100, 100, 0.0), "{q:?}");
            assert!(
                q.delay_ms.unwrap() < 20.0 && q.delay_ms.unwrap() >= 0.0,
                "{q:?}"
            );
            // G.711 with PLC, no loss, d ~ 80 ms: MOS ~ 4.37
            assert!(q.mos > 4.3, "{q:?}");
        }
    }
    let s = summarize(&calls);
    assert!(s.all_supported, "{s:?}");
    eprintln!("namespaces: {s:?}");
}
