//! RTCP golden vectors (tests/vectors/rtcp_*.hex, made by
//! tests/vectors/make_rtcp_vectors.py with Python's struct only, and decoded
//! field for field by tshark 4's RTCP dissector before being committed; see
//! docs/wire-format.md, "RTCP"). For each vector: the parser yields exactly
//! the `expect:` lines; the writer rebuilds the positive vectors byte for
//! byte; negative vectors fail with exactly the named error.
//!
//! Owns nothing but these checks; must not touch the vectors' bytes.

use airpack_voice::rtcp::{parse_compound, Packet, ReportBlock, Writer};
use std::path::PathBuf;

struct Vector {
    name: String,
    expects: Vec<String>,
    bytes: Vec<u8>,
}

fn load() -> Vec<Vector> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hex"))
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("rtcp_")
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let mut v = Vector {
                name: p.file_name().unwrap().to_string_lossy().into(),
                expects: vec![],
                bytes: vec![],
            };
            let mut in_packet = false;
            for raw in text.lines() {
                let line = raw.split('#').next().unwrap().trim();
                if let Some(e) = line.strip_prefix("expect:") {
                    v.expects.push(e.trim().to_string());
                } else if line == "packet:" {
                    in_packet = true;
                } else if in_packet && !line.is_empty() {
                    for tok in line.split_whitespace() {
                        v.bytes.push(u8::from_str_radix(tok, 16).unwrap());
                    }
                }
            }
            v
        })
        .collect()
}

fn describe(bytes: &[u8]) -> Vec<String> {
    let c = match parse_compound(bytes) {
        Ok(c) => c,
        Err(e) => return vec![format!("error={}", e.name())],
    };
    let block = |b: ReportBlock| {
        format!(
            "block ssrc={:#010x} fraction={} cumulative={} ext_seq={:#010x} jitter={} lsr={:#010x} dlsr={:#010x}",
            b.ssrc, b.fraction_lost, b.cumulative_lost, b.ext_highest_seq, b.jitter, b.lsr, b.dlsr
        )
    };
    let mut out = Vec::new();
    for p in c.packets() {
        match p {
            Packet::SenderReport { ssrc, info, blocks } => {
                out.push(format!(
                    "sr ssrc={ssrc:#010x} ntp={:#018x} rtp_ts={} packets={} octets={}",
                    info.ntp, info.rtp_ts, info.packets, info.octets
                ));
                out.extend(blocks.map(block));
            }
            Packet::ReceiverReport { ssrc, blocks } => {
                out.push(format!("rr ssrc={ssrc:#010x}"));
                out.extend(blocks.map(block));
            }
            Packet::Sdes(chunks) => {
                for ch in chunks {
                    for (t, v) in ch.items {
                        assert_eq!(t, 1, "only CNAMEs in the vectors");
                        out.push(format!(
                            "cname ssrc={:#010x} value={}",
                            ch.ssrc,
                            String::from_utf8_lossy(v)
                        ));
                    }
                }
            }
            Packet::Bye { sources, reason } => {
                for s in sources {
                    out.push(format!(
                        "bye ssrc={s:#010x} reason={}",
                        String::from_utf8_lossy(reason.unwrap_or_default())
                    ));
                }
            }
            other => out.push(format!("{other:?}")),
        }
    }
    out
}

#[test]
fn vectors_parse_to_their_expectations() {
    let vs = load();
    assert!(vs.len() >= 4, "vectors missing");
    assert!(vs
        .iter()
        .any(|v| v.expects.iter().any(|e| e.starts_with("error="))));
    for v in &vs {
        assert!(!v.bytes.is_empty() && !v.expects.is_empty(), "{}", v.name);
        assert_eq!(describe(&v.bytes), v.expects, "{}", v.name);
    }
}

#[test]
fn writer_rebuilds_the_positive_vectors_byte_for_byte() {
    for v in load()
        .iter()
        .filter(|v| !v.expects[0].starts_with("error="))
    {
        let c = parse_compound(&v.bytes).unwrap();
        let mut buf = [0u8; 512];
        let mut w = Writer::new(&mut buf);
        for p in c.packets() {
            match p {
                Packet::SenderReport { ssrc, info, blocks } => w
                    .sender_report(ssrc, &info, &blocks.collect::<Vec<_>>())
                    .unwrap(),
                Packet::ReceiverReport { ssrc, blocks } => w
                    .receiver_report(ssrc, &blocks.collect::<Vec<_>>())
                    .unwrap(),
                Packet::Sdes(mut chunks) => {
                    let ch = chunks.next().unwrap();
                    w.sdes_cname(ch.ssrc, ch.items.cname().unwrap()).unwrap()
                }
                Packet::Bye { sources, reason } => {
                    w.bye(&sources.collect::<Vec<_>>(), reason).unwrap()
                }
                other => panic!("{}: {other:?}", v.name),
            }
        }
        assert_eq!(w.bytes(), &v.bytes[..], "{}", v.name);
    }
}
