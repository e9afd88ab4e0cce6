//! Golden vectors of the downlink formats (tests/vectors/downlink/*.hex,
//! made by make_downlink_vectors.py from docs/wire-format.md, sharing no
//! code with the crate). Frame vectors: the mux turns the `packet`s into
//! exactly `frame`, and a station with the listed streams turns `frame` back
//! into exactly the `delivered` packets; error vectors fail with exactly the
//! named reason, in the parser and in the demultiplexer. Registration
//! vectors: the message opens with the key and re-encodes to the same bytes,
//! or fails with the named reason.
//!
//! Owns nothing but these checks; must not touch the vectors' bytes.

use airpack_core::auth::Key;
use airpack_core::downlink::demux::{Demux, DemuxConfig, MAX_REBUILT};
use airpack_core::downlink::mux::{Format, Mux, MuxConfig, Verdict};
use airpack_core::downlink::register::{self, RegError, MAX_MESSAGE};
use airpack_core::downlink::{compact, seed, FrameError};
use std::net::IpAddr;
use std::path::PathBuf;

#[derive(Debug, Default)]
struct Vector {
    name: String,
    format: String,
    epoch: u8,
    first_seq: u16,
    streams: Vec<(IpAddr, u16, u16)>,
    error: Option<String>,
    key: Option<[u8; 16]>,
    packets: Vec<Vec<u8>>,
    frame: Vec<u8>,
    delivered: Vec<Vec<u8>>,
    message: Vec<u8>,
}

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .flat_map(|t| {
            (0..t.len())
                .step_by(2)
                .map(move |i| u8::from_str_radix(&t[i..i + 2], 16).unwrap())
        })
        .collect()
}

fn load(path: &PathBuf) -> Vector {
    let text = std::fs::read_to_string(path).unwrap();
    let mut v = Vector {
        name: path.file_name().unwrap().to_string_lossy().into(),
        ..Default::default()
    };
    let mut sec = String::new();
    for raw in text.lines() {
        let line = raw.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        if let Some((k, val)) = line
            .split_once(':')
            .filter(|(k, _)| k.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        {
            let val = val.trim();
            match k {
                "format" => v.format = val.into(),
                "epoch" => v.epoch = val.parse().unwrap(),
                "first-seq" => v.first_seq = val.parse().unwrap(),
                "error" => v.error = Some(val.into()),
                "key" => v.key = Some(hex(val).try_into().unwrap()),
                "streams" => {
                    for s in val.split_whitespace() {
                        let (ap, sid) = s.split_once('=').unwrap();
                        let (a, p) = ap.rsplit_once(':').unwrap();
                        let a: IpAddr = a.trim_matches(|c| c == '[' || c == ']').parse().unwrap();
                        v.streams
                            .push((a, p.parse().unwrap(), sid.parse().unwrap()));
                    }
                }
                "packet" | "frame" | "delivered" | "message" => {
                    sec = k.into();
                    match k {
                        "packet" => v.packets.push(Vec::new()),
                        "delivered" => v.delivered.push(Vec::new()),
                        _ => {}
                    }
                }
                _ => panic!("{}: unknown key {k}", v.name),
            }
            continue;
        }
        let b = hex(line);
        match sec.as_str() {
            "packet" => v.packets.last_mut().unwrap().extend(b),
            "delivered" => v.delivered.last_mut().unwrap().extend(b),
            "frame" => v.frame.extend(b),
            "message" => v.message.extend(b),
            _ => panic!("{}: hex outside a section", v.name),
        }
    }
    v
}

fn vectors() -> Vec<Vector> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/downlink");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hex"))
        .collect();
    files.sort();
    files.iter().map(load).collect()
}

fn reason(name: &str) -> FrameError {
    *FrameError::ALL
        .iter()
        .find(|e| e.reason() == name)
        .unwrap_or_else(|| panic!("reason {name}"))
}

#[test]
fn every_format_has_positive_and_negative_vectors() {
    let vs = vectors();
    for f in ["seed", "compact", "register"] {
        assert!(
            vs.iter().any(|v| v.format == f && v.error.is_none()),
            "{f}: no positive vector"
        );
        assert!(
            vs.iter().any(|v| v.format == f && v.error.is_some()),
            "{f}: no error vector"
        );
    }
}

#[test]
fn frame_vectors() {
    for v in vectors().iter().filter(|v| v.format != "register") {
        let format = if v.format == "seed" {
            Format::Seed
        } else {
            Format::Compact
        };
        let mut demux = Demux::new(DemuxConfig {
            format,
            seed_ttl: 64,
        });
        demux.set_epoch(v.epoch);
        for &(a, p, sid) in &v.streams {
            demux.add_stream(sid, a, p);
        }
        let mut scratch = vec![0u8; MAX_REBUILT];
        if let Some(e) = &v.error {
            let want = reason(e);
            let got = match format {
                Format::Seed => seed::decode(&v.frame).map(|_| ()),
                Format::Compact => compact::decode(&v.frame).map(|_| ()),
            };
            assert_eq!(got, Err(want), "{}", v.name);
            assert_eq!(
                demux.handle_frame(&v.frame, &mut scratch, |_| panic!()),
                Err(want),
                "{}",
                v.name
            );
            continue;
        }
        let mut mux = Mux::new(MuxConfig {
            format,
            epoch: v.epoch,
            first_seq: v.first_seq,
            ..MuxConfig::default()
        });
        for &(a, p, sid) in &v.streams {
            mux.add_stream(a, p, sid).unwrap();
        }
        mux.set_link_busy(0, true);
        for p in &v.packets {
            assert!(
                matches!(mux.handle_packet(0, p), Verdict::Queued(_)),
                "{}",
                v.name
            );
        }
        mux.flush();
        let mut buf = vec![0u8; 1440];
        let t = mux.poll_transmit(0, &mut buf).unwrap();
        assert_eq!(&buf[..t.len], &v.frame[..], "{}: the mux's frame", v.name);
        assert!(mux.poll_transmit(0, &mut buf).is_none());
        let mut got = Vec::new();
        let n = demux
            .handle_frame(&v.frame, &mut scratch, |p| got.push(p.to_vec()))
            .unwrap();
        assert_eq!(n, v.delivered.len());
        assert_eq!(got, v.delivered, "{}: rebuilt packets", v.name);
    }
}

#[test]
fn register_vectors() {
    for v in vectors().iter().filter(|v| v.format == "register") {
        let key = Key::from_bytes(v.key.unwrap());
        let r = register::open(&v.message, |_| Some(&key));
        match v.error.as_deref() {
            Some("bad_tag") => assert_eq!(r, Err(RegError::BadTag), "{}", v.name),
            Some(e) => assert_eq!(r, Err(RegError::Format(reason(e))), "{}", v.name),
            None => {
                let m = r.unwrap_or_else(|e| panic!("{}: {e:?}", v.name));
                let mut out = [0u8; MAX_MESSAGE];
                let n = register::encode(&m, &key, &mut out).unwrap();
                assert_eq!(&out[..n], &v.message[..], "{}: re-encoded", v.name);
            }
        }
    }
}
