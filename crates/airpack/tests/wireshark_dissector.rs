//! The Wireshark dissector (dist/wireshark/airpack.lua) on the golden pcaps
//! (dist/wireshark/pcaps/, made from the wire-format golden vectors by
//! dist/wireshark/make_pcaps.py): tshark decodes every bundle with the
//! encoding, packet count, refusal reasons and separator fields the vector
//! states, and hands every inner packet to its IP dissector (their addresses
//! and lengths appear as decoded `ip.*` / `ipv6.*` fields). The pcaps are
//! checked to be exactly what the script makes from the vectors today.
//!
//! Then the same on bundles of real daemons (root, two namespaces): the
//! bundles captured on their link (a packet socket, written as a pcap), one
//! encoding and transport at a time, decode to exactly the bundles and inner
//! packets the sending daemon counted.
//!
//! Hellos, downlink frames and registration messages (dist/wireshark/airpack/)
//! are checked in `wireshark_formats/` (the same test binary).
//!
//! Needs tshark (scripts/setup.sh installs it); prints SKIP without it.

mod common;
mod wireshark_formats;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn have(cmd: &str) -> bool {
    Command::new(cmd).arg("--version").output().is_ok()
}

/// What a golden vector file says about its bundle.
struct Vector {
    name: String,
    encoding: String,
    error: Option<String>,
    refused: Vec<String>,
    /// The delivered inner packets.
    packets: Vec<Vec<u8>>,
    /// The bundle payload.
    payload: Vec<u8>,
}

fn parse_vector(path: &Path) -> Vector {
    let text = std::fs::read_to_string(path).unwrap();
    let mut v = Vector {
        name: path.file_stem().unwrap().to_string_lossy().into_owned(),
        encoding: String::new(),
        error: None,
        refused: Vec::new(),
        packets: Vec::new(),
        payload: Vec::new(),
    };
    let mut section = String::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        if let Some(k) = line.strip_suffix(':').filter(|k| !k.contains(' ')) {
            section = k.to_owned();
            if k == "packet" {
                v.packets.push(Vec::new());
            }
            continue;
        }
        if let Some((k, val)) = line.split_once(": ") {
            match k {
                "encoding" => v.encoding = val.to_owned(),
                "error" => v.error = Some(val.to_owned()),
                "refused" => v.refused = val.split(", ").map(str::to_owned).collect(),
                _ => {}
            }
            continue;
        }
        let bytes: Vec<u8> = line
            .split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect();
        match section.as_str() {
            "packet" => v.packets.last_mut().unwrap().extend(bytes),
            "payload" => v.payload.extend(bytes),
            _ => {}
        }
    }
    assert!(!v.encoding.is_empty(), "{}: no encoding", v.name);
    v
}

fn vectors() -> Vec<Vector> {
    let dir = repo().join("crates/core/tests/vectors");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hex"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 10, "vectors in {dir:?}");
    paths.iter().map(|p| parse_vector(p)).collect()
}

const FIELDS: &[&str] = &[
    "airpack.encoding",
    "airpack.count",
    "airpack.error",
    "airpack.inner_error",
    "ip.src",
    "ip.len",
    "ipv6.src",
    "airpack.native.version",
    "airpack.simplemux.protocol",
    "airpack.simplemux.spb",
    "airpack.len",
];

/// One row of fields per frame, each field split at commas.
fn tshark(pcap: &Path, encoding: &str) -> Vec<Vec<Vec<String>>> {
    let lua = repo().join("dist/wireshark/airpack.lua");
    let mut cmd = Command::new("tshark");
    cmd.arg("-n")
        .arg("-X")
        .arg(format!("lua_script:{}", lua.display()))
        .args(["-o", &format!("airpack.encoding:{encoding}")])
        .arg("-r")
        .arg(pcap)
        .args(["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark failed: {err}");
    assert!(
        !err.contains("Lua"),
        "the dissector did not load cleanly: {err}"
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            l.split('\t')
                .map(|c| {
                    if c.is_empty() {
                        Vec::new()
                    } else {
                        c.split(',').map(str::to_owned).collect()
                    }
                })
                .collect()
        })
        .collect()
}

fn col<'a>(row: &'a [Vec<String>], field: &str) -> &'a [String] {
    let i = FIELDS.iter().position(|f| *f == field).unwrap();
    &row[i]
}

/// `sub` appears in `all` in order (not necessarily adjacent).
fn subsequence(sub: &[String], all: &[String]) -> bool {
    let mut it = all.iter();
    sub.iter().all(|s| it.any(|a| a == s))
}

fn v4_src(p: &[u8]) -> String {
    format!("{}.{}.{}.{}", p[12], p[13], p[14], p[15])
}

fn v6_src(p: &[u8]) -> String {
    let a: [u8; 16] = p[8..24].try_into().unwrap();
    std::net::Ipv6Addr::from(a).to_string()
}

#[test]
fn dissector_decodes_the_golden_pcaps() {
    if !have("tshark") {
        println!("SKIP dissector_decodes_the_golden_pcaps: tshark not installed (scripts/setup.sh installs it)");
        return;
    }
    let pcaps = repo().join("dist/wireshark/pcaps");
    let mut checked = 0;
    for v in vectors() {
        let pcap = pcaps.join(format!("{}.pcap", v.name));
        assert!(
            pcap.exists(),
            "{pcap:?} missing: run dist/wireshark/make_pcaps.py"
        );
        // Forced to the vector's encoding, and (bundles that decode) guessed.
        let mut runs = vec![v.encoding.as_str()];
        if v.error.is_none() {
            runs.push("auto");
        }
        for enc in runs {
            let rows = tshark(&pcap, enc);
            assert_eq!(rows.len(), 2, "{}: raw IP and UDP frames", v.name);
            for (frame, row) in rows.iter().enumerate() {
                let ctx = format!("{} frame {} ({enc}): {row:?}", v.name, frame + 1);
                assert_eq!(col(row, "airpack.encoding"), [v.encoding.as_str()], "{ctx}");
                if let Some(e) = &v.error {
                    assert_eq!(col(row, "airpack.error"), [e.as_str()], "{ctx}");
                    continue;
                }
                assert!(col(row, "airpack.error").is_empty(), "{ctx}");
                let framed = v.packets.len() + v.refused.len();
                assert_eq!(col(row, "airpack.count"), [framed.to_string()], "{ctx}");
                assert_eq!(col(row, "airpack.inner_error"), v.refused, "{ctx}");
                // Each framed packet's length, and the delivered ones decoded by IP.
                let lens = col(row, "airpack.len");
                assert_eq!(lens.len(), framed, "{ctx}");
                let v4: Vec<&Vec<u8>> = v.packets.iter().filter(|p| p[0] >> 4 == 4).collect();
                let v6: Vec<&Vec<u8>> = v.packets.iter().filter(|p| p[0] >> 4 == 6).collect();
                let srcs: Vec<String> = v4.iter().map(|p| v4_src(p)).collect();
                let ip_lens: Vec<String> = v4.iter().map(|p| p.len().to_string()).collect();
                let ip_src = col(row, "ip.src");
                assert_eq!(ip_src[0], "10.0.0.1", "outer header first: {ctx}");
                assert!(
                    subsequence(&srcs, &ip_src[1..]),
                    "inner IPv4 sources {srcs:?}: {ctx}"
                );
                assert!(
                    subsequence(&ip_lens, &col(row, "ip.len")[1..]),
                    "inner lengths: {ctx}"
                );
                let v6_srcs: Vec<String> = v6.iter().map(|p| v6_src(p)).collect();
                assert_eq!(col(row, "ipv6.src"), v6_srcs, "{ctx}");
                match v.encoding.as_str() {
                    "native" => assert_eq!(col(row, "airpack.native.version"), ["1"], "{ctx}"),
                    "simplemux" => {
                        assert_eq!(
                            col(row, "airpack.simplemux.protocol").len(),
                            framed,
                            "{ctx}"
                        );
                        let spb = v.payload[0] & 0x80 != 0;
                        let want = if spb { "1" } else { "0" };
                        assert_eq!(col(row, "airpack.simplemux.spb"), [want], "{ctx}");
                    }
                    _ => {}
                }
                checked += 1;
            }
        }
    }
    // 8 vectors that decode x 2 frames x 2 runs.
    assert!(checked >= 32, "only {checked} frames checked");
    println!("dissector: {checked} decoded frames checked");
}

#[test]
fn simplemux_labels_and_fields_are_shown() {
    if !have("tshark") {
        println!("SKIP simplemux_labels_and_fields_are_shown: tshark not installed");
        return;
    }
    // simplemux_voice: three IPv4 packets labelled 4, one IPv6 labelled 41.
    let rows = tshark(
        &repo().join("dist/wireshark/pcaps/simplemux_voice.pcap"),
        "auto",
    );
    assert_eq!(
        col(&rows[0], "airpack.simplemux.protocol"),
        ["4", "4", "4", "41"]
    );
    assert_eq!(col(&rows[0], "airpack.len"), ["60", "60", "200", "80"]);
}

#[test]
fn pcaps_are_made_from_the_vectors() {
    if !have("python3") {
        println!("SKIP pcaps_are_made_from_the_vectors: python3 not installed");
        return;
    }
    let out = std::env::temp_dir().join(format!("airpack-pcaps-{}", std::process::id()));
    let st = Command::new("python3")
        .arg(repo().join("dist/wireshark/make_pcaps.py"))
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let mut n = 0;
    for v in vectors() {
        let name = format!("{}.pcap", v.name);
        let made = std::fs::read(out.join(&name)).unwrap();
        let committed = std::fs::read(repo().join("dist/wireshark/pcaps").join(&name))
            .unwrap_or_else(|_| panic!("{name} not committed"));
        assert!(
            made == committed,
            "{name} differs from make_pcaps.py's output: rerun it"
        );
        // The payload follows the outer headers in both frames.
        let hay = committed
            .windows(v.payload.len())
            .filter(|w| *w == v.payload)
            .count();
        assert_eq!(hay, 2, "{name}: payload in both frames");
        n += 1;
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(n >= 10);
}

/// Runs tshark with the dissector on `pcap` (encoding forced): per frame
/// the fields `fields`, each split at commas.
fn decode(pcap: &Path, encoding: &str, fields: &[&str]) -> Vec<Vec<Vec<String>>> {
    let lua = repo().join("dist/wireshark/airpack.lua");
    let mut cmd = Command::new("tshark");
    cmd.arg("-n")
        .arg("-X")
        .arg(format!("lua_script:{}", lua.display()))
        .args(["-o", &format!("airpack.encoding:{encoding}")])
        .arg("-r")
        .arg(pcap)
        .args(["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            l.split('\t')
                .map(|c| {
                    c.split(',')
                        .filter(|x| !x.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .collect()
        })
        .collect()
}

#[test]
fn dissector_decodes_real_daemons_bundles() {
    if !have("tshark") {
        println!("SKIP dissector_decodes_real_daemons_bundles: tshark not installed");
        return;
    }
    if !can_run("dissector_decodes_real_daemons_bundles") {
        return;
    }
    for (enc, transport) in [("native", "ip"), ("kau", "ip"), ("simplemux", "udp")] {
        let (net, a, b, ip_a, ip_b) = two(&format!("opsws{enc}"), 122);
        let cfg = |iface: &str, peer: std::net::Ipv4Addr| {
            format!(
                "[daemon]\ninterfaces = [\"{iface}\"]\ntransport = \"{transport}\"\n\
                 [aggregation]\nencoding = \"{enc}\"\nhold_time_us = 5000\nlink_mode = \"fixed\"\n\
                 [[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"16000-32000\"\n\
                 [[peer]]\naddress = \"{peer}\"\n"
            )
        };
        let mut da = net.daemon(&a, &cfg("va", ip_b), &[]);
        let mut db = net.daemon(&b, &cfg("vb", ip_a), &[]);
        // Capture on B's side of the link: every bundle from A, as it arrived.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cap = capture(&b, "vb", ip_a, transport == "udp", stop.clone());
        let load = Load {
            src: ip_a.into(),
            dst: ip_b.into(),
            src_port: 17000,
            dst_port: 20000,
            flows: 10,
            per_flow: 50,
            payload_len: 32,
            pps: 5_000,
        };
        let rx = receive_load(
            &b,
            load.clone(),
            load.total(),
            Duration::from_secs(3),
            Duration::from_secs(60),
        );
        assert_eq!(send_load(&a, load.clone()).join().unwrap(), load.total());
        rx.join()
            .unwrap()
            .assert_complete(load.flows, load.per_flow);
        // Everything arrived, so every bundle crossed vb (and was queued on
        // the capture socket before B's daemon saw it).
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let frames = cap.join().unwrap();
        let pcap = net.dir.join(format!("{enc}.pcap"));
        write_pcap(&pcap, &frames);
        let d = da.stats()["total"]["daemon"].clone();
        let bundles = d["bundles_sent"].as_u64().unwrap();
        let packets = d["bundled_packets_sent"].as_u64().unwrap();
        assert!(bundles > 0, "{d}");

        let rows = decode(
            &pcap,
            enc,
            &[
                "airpack.encoding",
                "airpack.count",
                "airpack.error",
                "udp.dstport",
                "ip.src",
            ],
        );
        assert_eq!(
            rows.len() as u64,
            bundles,
            "{enc}: one captured frame per bundle sent"
        );
        let mut inner = 0u64;
        for r in &rows {
            assert_eq!(r[0], [enc], "{enc}: {r:?}");
            assert!(r[2].is_empty(), "{enc}: refused: {r:?}");
            let count: u64 = r[1][0].parse().unwrap();
            // Each inner packet decoded down to its UDP header (the UDP
            // transport adds the outer one, port 4150).
            let ports: Vec<&String> = r[3].iter().filter(|p| *p != "4150").collect();
            assert_eq!(ports.len() as u64, count, "{enc}: {r:?}");
            assert!(
                ports
                    .iter()
                    .all(|p| (20000..20010).contains(&p.parse::<u16>().unwrap())),
                "{r:?}"
            );
            assert!(r[4].iter().skip(1).all(|s| *s == ip_a.to_string()), "{r:?}");
            inner += count;
        }
        assert_eq!(
            inner, packets,
            "{enc}: inner packets decoded = bundled packets sent"
        );
        println!("{enc} over {transport}: {bundles} bundles, {inner} inner packets decoded");
        assert_eq!(da.stop(), 0);
        assert_eq!(db.stop(), 0);
    }
}

/// In `ns`: the IPv4 packets from `from` arriving on `dev` that are bundles
/// (protocol 253, or UDP to port 4150 with `udp`), read from a packet socket
/// until `stop` is set and its queue is empty.
fn capture(
    ns: &str,
    dev: &str,
    from: std::net::Ipv4Addr,
    udp: bool,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let dev = std::ffi::CString::new(dev).unwrap();
    let h = in_ns(ns, move || {
        let proto = (libc::ETH_P_IP as u16).to_be();
        // SAFETY: plain socket(2), checked.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, proto as i32) };
        assert!(fd >= 0, "AF_PACKET socket");
        // SAFETY: a NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(dev.as_ptr()) };
        assert!(ifindex > 0);
        // SAFETY: an all-zero sockaddr_ll is valid; the fields are set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: binds fd to a sockaddr_ll of the right size.
        let r = unsafe {
            libc::bind(
                fd,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(r, 0, "bind AF_PACKET");
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 50_000,
        };
        // SAFETY: a timeval option.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let stopping = stop.load(std::sync::atomic::Ordering::SeqCst);
            let flags = if stopping { libc::MSG_DONTWAIT } else { 0 };
            // SAFETY: writable buffer of its length.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
            if n < 0 {
                if stopping || std::time::Instant::now() > deadline {
                    break; // queue empty after stop
                }
                continue;
            }
            let p = &buf[..n as usize];
            let bundle = p.len() >= 20
                && p[0] >> 4 == 4
                && p[12..16] == from.octets()
                && if udp {
                    let ihl = (p[0] & 15) as usize * 4;
                    p[9] == 17 && p.len() >= ihl + 8 && p[ihl + 2..ihl + 4] == 4150u16.to_be_bytes()
                } else {
                    p[9] == 253
                };
            if bundle {
                got.push(p.to_vec());
            }
        }
        // SAFETY: fd opened above.
        unsafe { libc::close(fd) };
        got
    });
    rx.recv().unwrap();
    h
}

/// Writes `frames` (IP packets) as a pcap file, link type raw IP.
fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut out = Vec::new();
    out.extend(0xA1B2C3D4u32.to_le_bytes());
    out.extend(2u16.to_le_bytes());
    out.extend(4u16.to_le_bytes());
    out.extend(0i32.to_le_bytes());
    out.extend(0u32.to_le_bytes());
    out.extend(65535u32.to_le_bytes());
    out.extend(101u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        out.extend((i as u32).to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend((f.len() as u32).to_le_bytes());
        out.extend((f.len() as u32).to_le_bytes());
        out.extend(f);
    }
    std::fs::write(path, out).unwrap();
}

/// An IPv4 protocol-253 frame around `payload` (checksum left 0: Wireshark
/// dissects the payload anyway).
fn frame_253(payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut f = vec![0x45, 0xb8];
    f.extend(total.to_be_bytes());
    f.extend([0, 1, 0, 0, 64, 253, 0, 0, 10, 0, 0, 1, 10, 0, 0, 9]);
    f.extend(payload);
    f
}

#[test]
fn hostile_payloads_never_raise_lua_errors() {
    if !have("tshark") {
        println!("SKIP hostile_payloads_never_raise_lua_errors: tshark not installed");
        return;
    }
    // Every truncation of every golden payload, and each of its first 64
    // bytes flipped: framing errors everywhere a parser can stop.
    let mut frames = Vec::new();
    for v in vectors() {
        for n in 0..=v.payload.len() {
            frames.push(frame_253(&v.payload[..n]));
        }
        for i in 0..v.payload.len().min(64) {
            let mut p = v.payload.clone();
            p[i] ^= 0xff;
            frames.push(frame_253(&p));
        }
    }
    let dir = std::env::temp_dir().join(format!("airpack-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("hostile.pcap");
    write_pcap(&pcap, &frames);
    let lua = repo().join("dist/wireshark/airpack.lua");
    for enc in ["auto", "native", "kau", "simplemux"] {
        let out = Command::new("tshark")
            .arg("-n")
            .arg("-X")
            .arg(format!("lua_script:{}", lua.display()))
            .args(["-o", &format!("airpack.encoding:{enc}")])
            .arg("-r")
            .arg(&pcap)
            .arg("-V")
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !text.contains("Lua Error") && !err.contains("Lua"),
            "{enc}: {err}"
        );
        let bundles = text.matches("airpack bundle (").count();
        // Wireshark hands no empty payload to a subdissector.
        let nonempty = frames.iter().filter(|f| f.len() > 20).count();
        assert_eq!(bundles, nonempty, "{enc}: every frame dissected");
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "hostile: {} frames x 4 encodings, no Lua error",
        frames.len()
    );
}

/// A bundle sealed with a mesh key (`wire::sealed`): with the `airpack.sealed`
/// preference the dissector shows the trailer's node and sequence number and
/// decodes the inner packets before it; a bundle too short for a trailer is
/// refused, not decoded.
#[test]
fn sealed_bundles_show_their_trailer() {
    use airpack_core::auth::Key;
    use airpack_core::wire::sealed;
    use airpack_core::{BundleWriter, Encoding};
    if !have("tshark") {
        println!("SKIP sealed_bundles_show_their_trailer: tshark not installed");
        return;
    }
    let inner: Vec<Vec<u8>> = (0..3u8)
        .map(|i| {
            let mut p = vec![
                0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
            ];
            p.extend([0x42, 0x68, 0x4e, 0x20, 0, 8, 0, 0]);
            p[19] = 10 + i;
            let c = airpack_core::wire::ip::checksum(&p[..20]);
            p[10..12].copy_from_slice(&c.to_be_bytes());
            p
        })
        .collect();
    let mut buf = vec![0u8; 2000];
    let mut w = BundleWriter::new(Encoding::Native, &mut buf).unwrap();
    for p in &inner {
        w.push(p).unwrap();
    }
    let n = w.finish();
    let key = Key::from_bytes([3; 16]);
    let m = sealed::seal(&key, 0x0a0b_0c0d, 77, &mut buf, n).unwrap();
    let dir = std::env::temp_dir().join(format!("airpack-sealed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("sealed.pcap");
    write_pcap(&pcap, &[frame_253(&buf[..m]), frame_253(&buf[..15])]);
    let lua = repo().join("dist/wireshark/airpack.lua");
    let out = Command::new("tshark")
        .arg("-n")
        .arg("-X")
        .arg(format!("lua_script:{}", lua.display()))
        .args(["-o", "airpack.encoding:native", "-o", "airpack.sealed:TRUE"])
        .arg("-r")
        .arg(&pcap)
        .args(["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"])
        .args(["-e", "airpack.auth.node", "-e", "airpack.auth.seq"])
        .args(["-e", "airpack.count", "-e", "ip.dst", "-e", "airpack.error"])
        .output()
        .expect("tshark runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert_eq!(rows[0][0], "0x0a0b0c0d", "{text}");
    assert_eq!(rows[0][1], "77", "{text}");
    assert_eq!(rows[0][2], "3", "{text}");
    assert_eq!(
        rows[0][3], "10.0.0.9,10.0.0.10,10.0.0.11,10.0.0.12",
        "{text}"
    );
    assert_eq!(rows[0][4], "", "{text}");
    assert_eq!(rows[1][2], "0", "{text}");
    assert!(rows[1][4].contains("trailer"), "{text}");
}
