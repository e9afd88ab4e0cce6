//! The daemon's radio figures against the kernel (issue 11 point 4), in a
//! fresh network namespace (`radio<pid>`, deleted on drop) with a veth pair
//! and a permanent neighbour entry: no Wi-Fi here, so the nl80211 reader
//! must degrade cleanly on the veth (counted as `no_nl80211` when the kernel
//! has no cfg80211, else `not_wireless`), while the neighbour table dump
//! (RTM_GETNEIGH) resolves the neighbour's MAC and the `NODE.air` file
//! source is matched to its IP.
//!
//! Needs root and `ip`; prints "SKIP: ..." and returns otherwise. Addresses
//! 10.78.0.0/24 only inside the namespace. Waits are bounded and wait for
//! readings, never for a time window.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use airpack::linux::netns::NetNs;
use airpack::linux::radio::{RadioMonitor, RadioSpec, Reading};
use airpack_core::neighbor::radio::MacCounters;

fn can_run() -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP: needs root");
        return false;
    }
    true
}

/// Waits (bounded) until the monitor has published `n` readings.
fn readings(m: &RadioMonitor, n: u64) -> Reading {
    let t = Instant::now();
    loop {
        if m.stats().rounds >= n {
            return m.reading_after(0).expect("a reading");
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "radio reader stalled"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn nl80211_degrades_on_a_veth_and_the_file_source_matches_by_mac() {
    if !can_run() {
        return;
    }
    let ns = NetNs::create(&format!("radio{}", std::process::id())).unwrap();
    for cmd in [
        "ip link add veth0 type veth peer name veth1",
        "ip link set veth1 up",
        "ip link set veth0 up",
        "ip addr add 10.78.0.1/24 dev veth0",
        "ip neigh add 10.78.0.2 lladdr 02:00:00:00:00:02 dev veth0 nud permanent",
        "ip neigh add 10.78.0.3 lladdr 02:00:00:00:00:03 dev veth0 nud permanent",
    ] {
        ns.exec(&cmd.split(' ').collect::<Vec<_>>()).unwrap();
    }
    let dir = std::env::temp_dir().join(format!("airpack-radio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("A.air");
    std::fs::write(
        &file,
        "airpack-air 1\nnode A\nmac 02:00:00:00:00:01\ntime_us 5\n\
         peer 02:00:00:00:00:02 B signal_dbm -61.4 signal_avg_dbm -63.0 rx_frames 40 tx_acked 97 tx_retries 30 tx_failed 3\n\
         peer 02:00:00:00:00:09 X signal_dbm -70 signal_avg_dbm -70 rx_frames 1 tx_acked 0 tx_retries 0 tx_failed 0\n",
    )
    .unwrap();
    let f2 = file.clone();
    ns.run(move || {
        // nl80211 on a veth (and on an interface that does not exist).
        let m = RadioMonitor::start(
            vec!["veth0".into(), "nosuch0".into()],
            RadioSpec::Nl80211,
            Duration::from_millis(50),
            -95,
        )
        .unwrap();
        let r = readings(&m, 3);
        let s = m.stats();
        eprintln!("nl80211 on veth0: {s:?}");
        assert!(r.entries.is_empty(), "{r:?}");
        assert!(
            s.no_nl80211 >= 3 || s.not_wireless >= 3,
            "each reading counts the missing radio: {s:?}"
        );
        assert_eq!(
            (s.stations, s.matched, s.netlink_errors),
            (0, 0, 0),
            "{s:?}"
        );
        drop(m);

        // The counters file: B's MAC resolves to 10.78.0.2 on veth0; X's
        // station has no neighbour entry, 10.78.0.3 no station.
        let m = RadioMonitor::start(
            vec!["veth0".into()],
            RadioSpec::File(f2),
            Duration::from_millis(50),
            -92,
        )
        .unwrap();
        let r = readings(&m, 2);
        let s = m.stats();
        assert_eq!((s.stations, s.matched, s.file_errors), (2, 1, 0), "{s:?}");
        let veth0 = nix::net::if_::if_nametoindex("veth0").unwrap();
        let (ix, ip, rep) = r.entries[0];
        assert_eq!((ix, ip), (veth0, IpAddr::V4(Ipv4Addr::new(10, 78, 0, 2))));
        assert_eq!(
            (rep.signal_dbm, rep.signal_avg_dbm, rep.noise_dbm),
            (Some(-61), Some(-63), Some(-92))
        );
        assert_eq!(
            rep.mac,
            Some(MacCounters {
                tx_frames: 100,
                tx_retries: 30,
                tx_failed: 3
            })
        );
    })
    .unwrap();
    // A missing file is counted, never a stale reading.
    std::fs::remove_file(&file).unwrap();
    ns.run(move || {
        let m = RadioMonitor::start(
            vec!["veth0".into()],
            RadioSpec::File(file),
            Duration::from_millis(50),
            -95,
        )
        .unwrap();
        let r = readings(&m, 2);
        assert!(r.entries.is_empty());
        assert!(m.stats().file_errors >= 2);
    })
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
