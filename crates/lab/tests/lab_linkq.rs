//! Link-adaptive bundle size from the radio's figures on the ns-3 air
//! (issue 11 point 4): three daemons with discovery and `radio_file` (their
//! node's `NODE.air`), A - B - C at 802.11b 2 Mbit/s, the link B-C losing
//! bits at BER 1e-4 (`[[wifi.link]]`), A-B clean. B sends bundled UDP to A
//! and to C; B's radio counts the retries and failures of its frames to
//! each, and B's daemon turns them into a size per neighbour:
//! - the MAC-counter size (`mac_size`) for C drops well below A's, and the
//!   size B's engine uses toward C (`max_bundle_used`) is at most it;
//! - the bit error rate the counters imply for B->C (per-attempt loss at the
//!   frames' mean length) is the configured 1e-4 within a factor of 2, and
//!   A-B's is far lower;
//! - the radio's signal is shown (`signal_dbm`) and the sources are named.
//!
//! Needs root, ip/tc/nft, Debian's ns-3 and the `airpack` binary; prints
//! SKIP otherwise. Real time: run under `flock /work/lab.lock`. Waits are
//! bounded and wait for the condition (the estimate), not for a duration.

mod common;
use airpack_lab::medium::preset;
use airpack_lab::topology::{MediumOpts, Mesh, Topology};
use serde_json::Value;
use std::net::{SocketAddrV4, UdpSocket};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BER: f64 = 1e-4;

fn topo() -> Topology {
    Topology::from_toml(&format!(
        "name = 'linkq'\nnodes = ['A', 'B', 'C']\nlinks = [['A', 'B'], ['B', 'C']]\n\
         calls = [['A', 'C']]\nphy = 'b2'\nair = 'ns3'\n\n[wifi]\nin_range = [['A', 'C']]\n\n\
         [[wifi.link]]\na = 'B'\nb = 'C'\nber = {BER:e}\n"
    ))
    .unwrap()
}

fn config(sock: &Path, air: &Path) -> String {
    format!(
        "[daemon]\nmode = \"hop-by-hop\"\ntun = \"airpack0\"\ncontrol_socket = \"{}\"\nlog = \"info\"\n\
         interfaces = [\"radio0\"]\n\n[aggregation]\nencoding = \"native\"\nhold_time_us = 20000\n\
         link_mode = \"fixed\"\n\n[[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"16000-32000\"\n\n\
         [discovery]\nenabled = true\nipv6 = false\ninterval_ms = 500\nrate_mbps = 2\n\
         radio_file = \"{}\"\nradio_interval_ms = 1000\n",
        sock.display(),
        air.display()
    )
}

struct Daemons(Vec<Child>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // SAFETY: plain kill(2) of a child we spawned and have not reaped.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        }
        for c in &mut self.0 {
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn peers(mesh: &Mesh, bin: &Path, node: &str, sock: &Path) -> Option<Value> {
    let out = mesh
        .node(node)?
        .ns
        .exec(
            &bin.to_string_lossy(),
            &["peers", "--socket", &sock.to_string_lossy(), "--json"],
        )
        .ok()?;
    serde_json::from_str(&out).ok()
}

/// B's discovery entry for the neighbour at `addr`.
fn entry<'a>(p: &'a Value, addr: &str) -> Option<&'a Value> {
    p["discovery"]["links"].as_array()?.iter().find_map(|l| {
        l["neighbors"]
            .as_array()?
            .iter()
            .find(|n| n["address"].as_str() == Some(addr))
    })
}

/// Bit error rate implied by a per-attempt loss `q` of frames of `len` IP bytes.
fn ber_of(q: f64, len: f64) -> f64 {
    1.0 - (1.0 - q).powf(1.0 / (8.0 * (len + 36.0)))
}

#[test]
fn mac_counters_on_a_bad_link_shrink_its_bundles() {
    if !common::ns3_ready("lab_linkq", "") {
        return;
    }
    let Some(bin) = common::airpack_bin() else {
        eprintln!("SKIP lab_linkq: no airpack binary (set AIRPACK_BIN or build -p airpack)");
        return;
    };
    let opts = MediumOpts {
        phy: preset("b2").unwrap(),
        queue_limit: 50,
        loss_pct: 0.0,
    };
    let mesh = Mesh::build(&topo(), &opts).unwrap();
    let dir = std::env::temp_dir().join(format!("airpack-lab-linkq-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let air = mesh.ns3.as_ref().unwrap();
    let mut daemons = Daemons(Vec::new());
    let mut socks = Vec::new();
    for node in ["A", "B", "C"] {
        let sock = dir.join(format!("{node}.sock"));
        let conf = dir.join(format!("{node}.toml"));
        std::fs::write(&conf, config(&sock, &air.obs_path(node))).unwrap();
        let log = std::fs::File::create(dir.join(format!("{node}.log"))).unwrap();
        let child = mesh
            .node(node)
            .unwrap()
            .ns
            .command(&bin)
            .args(["run", "--config", &conf.to_string_lossy()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        daemons.0.push(child);
        socks.push(sock);
    }
    let (a, c) = (mesh.node("A").unwrap().addr, mesh.node("C").unwrap().addr);
    let (sa, sc) = (a.to_string(), c.to_string());
    // Wait until B counts both neighbours up (bidirectional hellos).
    let t = Instant::now();
    loop {
        let up = peers(&mesh, &bin, "B", &socks[1]).map(|p| {
            [&sa, &sc]
                .iter()
                .all(|x| entry(&p, x).is_some_and(|n| n["up"] == true))
        });
        if up == Some(true) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "neighbours never came up: {:?}",
            peers(&mesh, &bin, "B", &socks[1])
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // B sends 100 packets/s of 200-byte UDP payload to each (bundled by its
    // daemon: the class covers port 16000), until the estimate settles.
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let stop = stop.clone();
        let tx = mesh
            .node("B")
            .unwrap()
            .ns
            .run_in(|| UdpSocket::bind("0.0.0.0:0").unwrap())
            .unwrap();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let due = t0 + Duration::from_millis(10 * i);
                while Instant::now() < due {
                    std::thread::sleep(Duration::from_micros(200));
                }
                for d in [a, c] {
                    let _ = tx.send_to(&[0x5au8; 200], SocketAddrV4::new(d, 16000));
                }
                i += 1;
            }
        })
    };
    let settled = |p: &Value| -> bool {
        let (Some(na), Some(nc)) = (entry(p, &sa), entry(p, &sc)) else {
            return false;
        };
        nc["mac_size"].as_u64().is_some_and(|s| s <= 700)
            && na["mac_size"].as_u64().is_some_and(|s| s >= 1200)
            && nc["mac_frames"].as_u64().is_some_and(|f| f >= 40)
    };
    let t = Instant::now();
    let mut last = Value::Null;
    let mut samples = Vec::new();
    while t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(1000));
        if let Some(p) = peers(&mesh, &bin, "B", &socks[1]) {
            if let (Some(na), Some(nc)) = (entry(&p, &sa), entry(&p, &sc)) {
                samples.push((na.clone(), nc.clone()));
            }
            let done = settled(&p) && samples.len() >= 8;
            last = p;
            if done {
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    for (na, nc) in &samples {
        eprintln!(
            "B->A: mac_size {} used {} ({}) attempt_loss {} len {} signal {} | B->C: mac_size {} used {} ({}) ask {} attempt_loss {} retry_ratio {} mac_loss {} len {} signal {}",
            na["mac_size"], na["max_bundle_used"], na["quality_source"], na["attempt_loss"], na["mac_frame_len"], na["signal_dbm"],
            nc["mac_size"], nc["max_bundle_used"], nc["quality_source"], nc["max_bundle_to_it"], nc["attempt_loss"], nc["retry_ratio"], nc["mac_loss"], nc["mac_frame_len"], nc["signal_dbm"],
        );
    }
    eprintln!("B's radio source: {}", last["discovery"]["radio"]);
    // LINKQ_OUT=FILE keeps B's last `airpack peers --json` and the samples.
    if let Ok(out) = std::env::var("LINKQ_OUT") {
        let s: Vec<Value> = samples
            .iter()
            .map(|(a, c)| serde_json::json!({"A": a, "C": c}))
            .collect();
        let doc = serde_json::json!({"test": "lab_linkq", "air": "ns3", "ber_b_c": BER, "b_peers": last, "samples": s});
        std::fs::write(out, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    }
    assert!(settled(&last), "did not settle: {last}");
    let (na, nc) = (entry(&last, &sa).unwrap(), entry(&last, &sc).unwrap());
    let radio = &last["discovery"]["radio"];
    assert_eq!(radio["source"], "file", "{radio}");
    assert_eq!(radio["errors"]["file"], 0, "{radio}");
    // The size B uses toward C is at most what its MAC counters call for,
    // and well below the clean link's.
    let used_c = nc["max_bundle_used"].as_u64().unwrap();
    let used_a = na["max_bundle_used"].as_u64().unwrap();
    assert!(used_c <= nc["mac_size"].as_u64().unwrap(), "{nc}");
    assert!(
        used_c * 2 <= used_a,
        "B->C {used_c} vs B->A {used_a}: {last}"
    );
    assert!(
        ["mac", "neighbor"].contains(&nc["quality_source"].as_str().unwrap()),
        "{nc}"
    );
    // The counters explain the configured BER (within a factor of 3: about
    // 130 attempts in the window, per-attempt loss 0.19 +- 0.035, so the
    // bounds 0.07 and 0.47 are over 3 standard deviations away) on B->C,
    // and far less on B->A; signals come from the radio (16 dBm - 50 dB).
    let q = nc["attempt_loss"].as_f64().unwrap();
    let len = nc["mac_frame_len"].as_f64().unwrap();
    let ber_c = ber_of(q, len);
    assert!(
        ber_c > BER / 3.0 && ber_c < BER * 3.0,
        "B->C: loss {q} at {len} bytes = BER {ber_c:e}: {nc}"
    );
    let ber_a = ber_of(
        na["attempt_loss"].as_f64().unwrap(),
        na["mac_frame_len"].as_f64().unwrap(),
    );
    assert!(ber_a < BER / 5.0, "B->A: BER {ber_a:e}: {na}");
    for n in [na, nc] {
        let s = n["signal_dbm"].as_i64().unwrap();
        assert!((-40..=-28).contains(&s), "{n}");
    }
    drop(daemons);
    let _ = std::fs::remove_dir_all(&dir);
}
