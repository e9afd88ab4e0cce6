//! The loss rule of downlink multiplexing (issue 14 point 10) end to end
//! in network namespaces, real daemons: a wired node W, an AP running
//! `[ap]` (loss rule on by default), three stations running `[station]`
//! (a loss report every second) on one bridge. W sends each station a
//! 20 ms RTP stream through the AP.
//!
//! - new stations start on unicast (the default `ap.loss_start_unicast`):
//!   before any voice all three are on unicast; once W sends, the AP's
//!   trial puts their packets in frames as well, their clean reports move
//!   them to the frame, and each station's socket has received every
//!   packet sent until then;
//! - an nftables rule in station 0's namespace drops 30 % of the AP's
//!   multicast frames: its reports show the loss, the AP serves it by
//!   unicast (its packets forwarded as usual, counted as `unicast.loss`,
//!   and still received by station 0's socket) while stations 1 and 2 stay
//!   multiplexed;
//! - the rule removed, station 0's reports are clean again and it returns
//!   to the multiplexed frame (its demultiplexer delivers again).
//!
//! No timing assertions: every wait is for a condition, bounded.

mod common;
use common::*;
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KEY: &str = "000102030405060708090a0b0c0d0e0f";
const WIRED: Ipv4Addr = Ipv4Addr::new(10, 173, 0, 2);
const AP_CELL: Ipv4Addr = Ipv4Addr::new(10, 174, 0, 1);
const WAIT: Duration = Duration::from_secs(40);
/// Bound on a new station's join: the rule's own is its check (0.2 s),
/// the trial's delay (1 s) and two report periods (2 s); the rest is
/// margin for a loaded machine.
const JOIN: Duration = Duration::from_secs(20);

fn station_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 174, 0, 11 + i as u8)
}

fn port(i: usize) -> u16 {
    20_000 + i as u16
}

/// The RTP sequence numbers a station's socket received.
type Seen = Arc<Mutex<HashSet<u16>>>;

/// Counts the datagrams arriving on `port` in `ns` until `stop`, and
/// keeps their RTP sequence numbers.
fn receiver(ns: &str, port: u16, stop: Arc<AtomicBool>) -> (Arc<AtomicU64>, Seen) {
    let got = Arc::new(AtomicU64::new(0));
    let g = got.clone();
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    in_ns(ns, move || {
        let sock = UdpSocket::bind(("0.0.0.0", port)).unwrap();
        airpack::linux::set_buffer(sock.as_raw_fd(), 4 << 20, false).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        tx.send(()).unwrap();
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            if let Ok(n) = sock.recv(&mut buf) {
                g.fetch_add(1, Ordering::Relaxed);
                if n >= 4 {
                    s.lock()
                        .unwrap()
                        .insert(u16::from_be_bytes([buf[2], buf[3]]));
                }
            }
        }
    });
    rx.recv().unwrap();
    (got, seen)
}

/// W sends every station one 20-byte-payload RTP packet per 20 ms until
/// `stop`; `rounds`: how many each station was sent so far.
fn voice(ns: &str, stop: Arc<AtomicBool>, rounds: Arc<AtomicU32>) -> std::thread::JoinHandle<()> {
    in_ns(ns, move || {
        let sock = UdpSocket::bind(("0.0.0.0", 0)).unwrap();
        let mut k: u32 = 0;
        while !stop.load(Ordering::Relaxed) {
            for i in 0..3 {
                let mut body = [0u8; 32];
                body[0] = 0x80;
                body[1] = 18; // G.729
                body[2..4].copy_from_slice(&(k as u16).to_be_bytes());
                body[4..8].copy_from_slice(&(k * 160).to_be_bytes());
                body[8..12].copy_from_slice(&(0x7000 + i as u32).to_be_bytes());
                let dst = SocketAddr::new(IpAddr::V4(station_ip(i)), port(i));
                let _ = sock.send_to(&body, dst);
            }
            k += 1;
            rounds.store(k, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

fn ap_config() -> String {
    format!(
        "[ap]\nenabled = true\ninterfaces = [\"cell\"]\nkey = \"{KEY}\"\nidle_release = false\n"
    )
}

fn station_config(i: usize) -> String {
    format!(
        "[station]\nenabled = true\ninterface = \"wl\"\nap = \"{AP_CELL}\"\nkey = \"{KEY}\"\nports = {}\nlease_secs = 10\nrenew_secs = 3\nreport_secs = 1\n",
        port(i)
    )
}

#[test]
fn lossy_station_is_served_by_unicast_and_returns() {
    if !can_run("daemon_downlink_loss") {
        return;
    }
    let mut net = Net::new("dll");
    let w = net.ns("w");
    let ap = net.ns("ap");
    let hub = net.ns("hub");
    net.link(&w, "w0", &format!("{WIRED}/24"), &ap, "a0", "10.173.0.1/24");
    net.ip(&w, &["route", "add", "10.174.0.0/24", "via", "10.173.0.1"]);
    net.bridge(&hub);
    net.attach(&hub, &ap, "cell", "pap", &format!("{AP_CELL}/24"));
    let mut st = Vec::new();
    for i in 0..3 {
        let ns = net.ns(&format!("s{i}"));
        let cidr = format!("{}/24", station_ip(i));
        net.attach(&hub, &ns, "wl", &format!("ps{i}"), &cidr);
        net.ip(
            &ns,
            &["route", "add", "default", "via", &AP_CELL.to_string()],
        );
        st.push(ns);
    }
    let apd = net.daemon(&ap, &ap_config(), &[]);
    let sd: Vec<_> = (0..3)
        .map(|i| net.daemon(&st[i], &station_config(i), &[]))
        .collect();
    wait_until("3 registered stations", WAIT, || {
        apd.stat("/ap/stations") as u64 == 3
            && sd.iter().all(|d| d.stats()["station"]["streams"] == 1)
    });
    // New stations start on unicast: no frame can carry anything yet.
    wait_until("3 new stations on unicast", WAIT, || {
        apd.stat("/ap/loss_rule/started_unicast") == 3.0
            && apd.stat("/ap/loss_rule/stations_unicast") == 3.0
    });
    assert_eq!(apd.stat("/ap/frames"), 0.0);
    let stop = Arc::new(AtomicBool::new(false));
    let (got, seen): (Vec<_>, Vec<_>) = (0..3)
        .map(|i| receiver(&st[i], port(i), stop.clone()))
        .unzip();
    let rounds = Arc::new(AtomicU32::new(0));
    let sender = voice(&w, stop.clone(), rounds.clone());
    // The trial sends frames they can measure; clean reports move them.
    wait_until("3 new stations joined the frame", JOIN, || {
        apd.stat("/ap/loss_rule/start_cleared") == 3.0
            && apd.stat("/ap/loss_rule/stations_unicast") == 0.0
    });
    let a = apd.stats();
    let rule = &a["ap"]["loss_rule"];
    assert!(rule["start_trials"].as_u64() >= Some(3), "{a}");
    assert!(rule["trial_packets"].as_u64() > Some(0), "{a}");
    assert!(a["ap"]["unicast"]["loss"].as_u64() > Some(0), "{a}");
    assert_eq!(rule["shed_by_airtime"], 0, "{a}");
    // Every packet sent until the join reached its station's socket
    // (by unicast, by unicast and a trial frame, or in a frame).
    let k = rounds.load(Ordering::Relaxed);
    wait_until("every packet up to the join received", WAIT, || {
        seen.iter().all(|s| {
            let s = s.lock().unwrap();
            (0..k).all(|q| s.contains(&(q as u16)))
        })
    });
    let delivered = |i: usize| sd[i].stat("/station/packets") as u64;
    wait_until("every station demultiplexes and reports", WAIT, || {
        (0..3).all(|i| delivered(i) > 50) && apd.stat("/ap/loss_rule/reports") >= 6.0
    });
    assert_eq!(apd.stat("/ap/loss_rule/stations_unicast"), 0.0);

    // 30 % of the AP's frames never reach station 0's demultiplexer.
    let nft = |args: &str| {
        let mut v = vec!["nft"];
        v.extend(args.split(' '));
        net.exec(&st[0], &v)
    };
    nft("add table inet aploss");
    nft("add chain inet aploss in { type filter hook input priority -10 ; }");
    nft("add rule inet aploss in ip daddr 225.0.0.10 udp dport 8888 numgen random mod 10 < 3 drop");
    wait_until("station 0 served by unicast", WAIT, || {
        apd.stat("/ap/loss_rule/stations_unicast") == 1.0
            && apd.stat("/ap/loss_rule/to_unicast") >= 1.0
    });
    let p = apd.peers();
    let list = p["stations"].as_array().expect("stations list");
    assert_eq!(list.len(), 3, "{p}");
    for s in list {
        let lossy = s["station"] == station_ip(0).to_string();
        assert_eq!(s["unicast_by_loss"], lossy, "{p}");
    }
    // From now on station 0's packets go unicast: its socket still gets them,
    // its demultiplexer none; the others stay multiplexed.
    let (u0, d0, g0) = (
        apd.stat("/ap/unicast/loss"),
        delivered(0),
        got[0].load(Ordering::Relaxed),
    );
    let d12 = (delivered(1), delivered(2));
    wait_until("unicast packets reach station 0", WAIT, || {
        apd.stat("/ap/unicast/loss") >= u0 + 100.0 && got[0].load(Ordering::Relaxed) >= g0 + 100
    });
    wait_until("stations 1 and 2 still multiplexed", WAIT, || {
        delivered(1) >= d12.0 + 100 && delivered(2) >= d12.1 + 100
    });
    assert_eq!(apd.stat("/ap/loss_rule/stations_unicast"), 1.0);
    assert!(
        delivered(0) <= d0 + 30,
        "station 0's demux kept delivering: {} -> {}",
        d0,
        delivered(0)
    );

    // The medium clears: station 0 returns to the frame.
    nft("delete table inet aploss");
    wait_until("station 0 back in the frame", WAIT, || {
        apd.stat("/ap/loss_rule/stations_unicast") == 0.0
            && apd.stat("/ap/loss_rule/to_multicast") >= 1.0
    });
    let d0 = delivered(0);
    let no_ctx = sd[0].stat("/station/drops/packets/no_context");
    wait_until("station 0 demultiplexes again", WAIT, || {
        delivered(0) >= d0 + 100
    });
    let s0 = sd[0].stats();
    // Its streams started over with full entries: nothing undecodable.
    assert_eq!(
        sd[0].stat("/station/drops/packets/no_context"),
        no_ctx,
        "{s0}"
    );
    assert!(
        s0["station"]["loss_reports_sent"].as_u64().unwrap() >= 5,
        "{s0}"
    );
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    let a = apd.stats();
    assert_eq!(a["ap"]["loss_rule"]["reports_rejected"], 0, "{a}");
    assert_eq!(a["ap"]["drops"]["queue_full"], 0, "{a}");
    // Trial copies are not counted twice: the send side still balances.
    assert_eq!(a["accounting"]["send"]["balanced"], true, "{a}");
}
