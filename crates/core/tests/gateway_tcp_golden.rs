//! Golden vectors of the gateway's TCP parser and window rewrite
//! (tests/vectors/tcp/*.hex, made by tests/vectors/tcp/make_tcp_vectors.py
//! with Python's struct and its own RFC 1071 checksum; tshark confirmed the
//! TCP checksums). For each vector: the parser yields exactly the `expect:`
//! lines, and where a `rewritten:` packet is given, `set_window` with its
//! window turns the packet into it byte for byte (RFC 1624 incremental
//! update == Python's full recompute).
//!
//! Owns nothing but these checks; must not touch the vectors' bytes.

use airpack_core::gateway::tcp;
use std::path::PathBuf;

struct Vector {
    name: String,
    expects: Vec<String>,
    packet: Vec<u8>,
    rewritten: Vec<u8>,
}

fn load() -> Vec<Vector> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/tcp");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hex"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let mut v = Vector {
                name: p.file_name().unwrap().to_string_lossy().into(),
                expects: vec![],
                packet: vec![],
                rewritten: vec![],
            };
            let mut sec = "";
            for raw in text.lines() {
                let line = raw.split('#').next().unwrap().trim();
                if let Some(e) = line.strip_prefix("expect:") {
                    v.expects.push(e.trim().to_string());
                } else if line == "packet:" || line == "rewritten:" {
                    sec = if line == "packet:" { "p" } else { "r" };
                } else if !line.is_empty() {
                    let out = if sec == "p" {
                        &mut v.packet
                    } else {
                        &mut v.rewritten
                    };
                    for tok in line.split_whitespace() {
                        out.push(u8::from_str_radix(tok, 16).unwrap());
                    }
                }
            }
            v
        })
        .collect()
}

fn opt<T: std::fmt::Display>(x: Option<T>) -> String {
    x.map_or("-".into(), |v| v.to_string())
}

fn describe(p: &[u8]) -> Vec<String> {
    let s = match tcp::parse(p) {
        Ok(s) => s,
        Err(e) => return vec![format!("error={e:?}")],
    };
    let o = s.options;
    vec![
        format!(
            "ip={} sport={} dport={} seq={} ack={} flags={:#05x} window={} header_len={} payload={}",
            s.ip_version, s.src_port, s.dst_port, s.seq, s.ack, s.flags, s.window, s.header_len, s.payload_len
        ),
        format!(
            "options mss={} wscale={} sack_permitted={} sack={:?} ts={} unknown={}",
            opt(o.mss),
            opt(o.wscale),
            o.sack_permitted,
            &o.sack[..usize::from(o.sack_len)],
            o.timestamps.map_or("-".into(), |(a, b)| format!("{a},{b}")),
            o.unknown
        ),
    ]
}

#[test]
fn vectors_parse_to_their_expectations() {
    let vs = load();
    assert!(vs.len() >= 5, "vectors missing");
    for v in &vs {
        assert!(!v.packet.is_empty() && !v.expects.is_empty(), "{}", v.name);
        assert_eq!(describe(&v.packet), v.expects, "{}", v.name);
        if let Ok(s) = tcp::parse(&v.packet) {
            assert_eq!(
                tcp::full_checksum(&v.packet),
                Some(s.checksum),
                "{}: checksum",
                v.name
            );
        }
    }
}

#[test]
fn window_rewrites_match_the_recomputed_packets() {
    let vs = load();
    let with: Vec<&Vector> = vs.iter().filter(|v| !v.rewritten.is_empty()).collect();
    assert!(with.len() >= 2);
    for v in with {
        let target = tcp::parse(&v.rewritten).unwrap();
        let mut p = v.packet.clone();
        let s = tcp::parse(&p).unwrap();
        tcp::set_window(&mut p, &s, target.window).unwrap();
        assert_eq!(p, v.rewritten, "{}", v.name);
    }
}
