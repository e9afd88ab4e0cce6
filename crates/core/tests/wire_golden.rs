//! Golden vectors: byte-exact bundles built by hand (tests/vectors/*.hex,
//! made by tests/vectors/make_vectors.py from the seed 001 / Simplemux draft /
//! native layouts, sharing no code with the crate). For each vector:
//! encode(packets) == payload (unless decode-only), decode(payload) == packets,
//! negative vectors fail with exactly the named reason, and vectors with
//! `refused:` deliver their packets and refuse the listed inner packets alone.
//!
//! Owns nothing but these checks; must not touch the vectors' bytes.

use airpack_core::wire::{ip, BundleWriter, DecodeError, Encoding, MAX_BUNDLE};
use std::net::Ipv4Addr;
use std::path::PathBuf;

#[derive(Debug, Default)]
struct Vector {
    name: String,
    encoding: Option<Encoding>,
    decode_only: bool,
    error: Option<String>,
    /// Reasons of the inner packets refused on their own, in order.
    refused: Vec<String>,
    packets: Vec<Vec<u8>>,
    outer: Option<Vec<u8>>,
    payload: Vec<u8>,
}

fn parse_hex_line(line: &str, out: &mut Vec<u8>) {
    for tok in line.split_whitespace() {
        assert!(tok.len() == 2, "bad hex token {tok:?}");
        out.push(u8::from_str_radix(tok, 16).unwrap_or_else(|_| panic!("bad hex {tok:?}")));
    }
}

fn load(path: &PathBuf) -> Vector {
    let text = std::fs::read_to_string(path).unwrap();
    let mut v = Vector {
        name: path.file_name().unwrap().to_string_lossy().into(),
        ..Default::default()
    };
    #[derive(PartialEq)]
    enum Sec {
        None,
        Packet,
        Outer,
        Payload,
    }
    let mut sec = Sec::None;
    for raw in text.lines() {
        let line = raw.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        if let Some((key, val)) = line.split_once(':') {
            let val = val.trim();
            match (key.trim(), val) {
                ("encoding", e) => v.encoding = Some(e.parse().unwrap()),
                ("decode-only", "yes") => v.decode_only = true,
                ("error", e) => v.error = Some(e.to_string()),
                ("refused", r) => v.refused = r.split(',').map(|x| x.trim().into()).collect(),
                ("packet", "") => {
                    v.packets.push(Vec::new());
                    sec = Sec::Packet;
                }
                ("outer", "") => {
                    v.outer = Some(Vec::new());
                    sec = Sec::Outer;
                }
                ("payload", "") => sec = Sec::Payload,
                (k, _) => panic!("{}: unknown key {k:?}", v.name),
            }
            continue;
        }
        let buf = match sec {
            Sec::Packet => v.packets.last_mut().unwrap(),
            Sec::Outer => v.outer.as_mut().unwrap(),
            Sec::Payload => &mut v.payload,
            Sec::None => panic!("{}: hex outside a section", v.name),
        };
        parse_hex_line(line, buf);
    }
    v
}

fn vectors() -> Vec<Vector> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hex"))
        .collect();
    files.sort();
    files.iter().map(load).collect()
}

fn encode(enc: Encoding, packets: &[Vec<u8>]) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_BUNDLE];
    let mut w = BundleWriter::new(enc, &mut buf).unwrap();
    for p in packets {
        w.push(p).unwrap();
    }
    let n = w.finish();
    buf.truncate(n);
    buf
}

#[test]
fn every_encoding_has_positive_and_negative_vectors() {
    let vs = vectors();
    for enc in Encoding::ALL {
        assert!(
            vs.iter()
                .any(|v| v.encoding == Some(enc) && v.error.is_none() && !v.decode_only),
            "no encode vector for {enc}"
        );
        assert!(
            vs.iter()
                .any(|v| v.encoding == Some(enc) && v.error.is_some()),
            "no error vector for {enc}"
        );
    }
}

#[test]
fn golden_vectors() {
    let vs = vectors();
    assert!(
        vs.len() >= 9,
        "expected the vector files, found {}",
        vs.len()
    );
    for v in &vs {
        let enc = v
            .encoding
            .unwrap_or_else(|| panic!("{}: no encoding", v.name));
        assert!(!v.payload.is_empty(), "{}: empty payload", v.name);
        match &v.error {
            Some(reason) => {
                let err = enc.decode(&v.payload).map(|b| b.len()).unwrap_err();
                assert_eq!(err.reason(), reason, "{}", v.name);
            }
            None => {
                assert!(!v.packets.is_empty(), "{}", v.name);
                for p in &v.packets {
                    ip::inspect(p)
                        .unwrap_or_else(|e| panic!("{}: inner packet invalid: {e}", v.name));
                }
                if !v.decode_only {
                    assert_eq!(
                        encode(enc, &v.packets),
                        v.payload,
                        "{}: encode differs",
                        v.name
                    );
                }
                let b = enc
                    .decode(&v.payload)
                    .unwrap_or_else(|e| panic!("{}: {e}", v.name));
                assert_eq!(b.len(), v.packets.len(), "{}", v.name);
                let got: Vec<&[u8]> = b.iter().collect();
                let want: Vec<&[u8]> = v.packets.iter().map(|p| &p[..]).collect();
                assert_eq!(got, want, "{}: decode differs", v.name);
                let refused: Vec<&str> = b.refused().map(|e| e.reason()).collect();
                assert_eq!(refused, v.refused, "{}: refused packets", v.name);
                assert_eq!(b.framed(), b.len() + v.refused.len(), "{}", v.name);
                assert!(v.refused.is_empty() || v.decode_only, "{}", v.name);
            }
        }
    }
}

#[test]
fn kau_full_meta_packet() {
    let v = vectors()
        .into_iter()
        .find(|v| v.name == "kau_meta_packet.hex")
        .unwrap();
    let outer = v.outer.clone().unwrap();
    let mut hdr = [0u8; 20];
    ip::emit_ipv4_header(
        &mut hdr,
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 9),
        253,
        46,
        64,
        1,
        v.payload.len(),
    );
    assert_eq!(hdr.to_vec(), outer, "outer meta header differs");
    // The whole meta packet on the wire: outer header + payload.
    let mut full = outer.clone();
    full.extend_from_slice(&v.payload);
    let info = ip::inspect(&full).unwrap();
    assert_eq!((info.protocol, info.dscp, info.len), (253, 46, 340));
    let b = Encoding::Kau.decode(&full[20..]).unwrap();
    assert_eq!(b.len(), 3);
    // The meta packet itself is not carryable inside another bundle.
    for enc in Encoding::ALL {
        assert!(!enc.can_carry(&full), "{enc} would nest a meta packet");
        let got = enc
            .decode(&full)
            .map(|b| (b.len(), b.refused().collect::<Vec<_>>()));
        assert_eq!(got, expected_for_full(enc), "{enc}");
    }
}

/// What each decoder says about a whole meta packet given as a payload:
/// (delivered packets, refused reasons), or the bundle's error.
fn expected_for_full(enc: Encoding) -> Result<(usize, Vec<DecodeError>), DecodeError> {
    match enc {
        // 0x45: version nibble 4 is not native version 1.
        Encoding::Native => Err(DecodeError::BadVersion),
        // The meta packet frames as one inner IPv4 packet of protocol 253:
        // refused alone, nothing delivered.
        Encoding::Kau => Ok((0, vec![DecodeError::Nested])),
        // 0x45 = SPB 0, LXT 1, ...; 0xb8 = LXT 1 -> 3 length bytes 0x05,0x38,0x01 -> 5<<14|..: > 65535.
        Encoding::Simplemux => Err(DecodeError::Overlong),
    }
}
