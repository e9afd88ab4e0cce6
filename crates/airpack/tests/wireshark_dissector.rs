//! The Wireshark dissector (dist/wireshark/airpack.lua) on the golden pcaps
//! (dist/wireshark/pcaps/, made from the wire-format golden vectors by
//! dist/wireshark/make_pcaps.py): tshark decodes every bundle with the
//! encoding, packet count, refusal reasons and separator fields the vector
//! states, and hands every inner packet to its IP dissector (their addresses
//! and lengths appear as decoded `ip.*` / `ipv6.*` fields). The pcaps are
//! checked to be exactly what the script makes from the vectors today.
//!
//! Needs tshark (scripts/setup.sh installs it); prints SKIP without it.
//! No root, no network.

use std::path::{Path, PathBuf};
use std::process::Command;

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
