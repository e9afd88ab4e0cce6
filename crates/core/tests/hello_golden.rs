//! Hello golden vectors: byte-exact hellos built by hand
//! (tests/vectors/hello/*.hex, made by make_hello_vectors.py there, which
//! shares no code with the crate, SipHash included). For each vector:
//! parse(bytes) gives exactly the listed fields and entries, writing those
//! fields gives the same bytes (unless decode-only), the tag verifies or not
//! as the vector says, and negative vectors fail with exactly the named reason.
//!
//! Owns nothing but these checks; must not touch the vectors' bytes.

use airpack_core::auth::Key;
use airpack_core::neighbor::hello::{
    Encodings, Hello, HelloHeader, HelloWriter, NeighborEntry, Radio, MAX_HELLO,
};
use std::path::PathBuf;

#[derive(Debug, Default)]
struct Vector {
    name: String,
    sender: Option<u64>,
    seq: Option<u64>,
    interval_ms: Option<u16>,
    encodings: Option<u8>,
    entries: Vec<NeighborEntry>,
    key: Option<Key>,
    key_id: Option<u8>,
    verify: Option<bool>,
    decode_only: bool,
    error: Option<String>,
    bytes: Vec<u8>,
}

fn parse_entry(v: &str) -> NeighborEntry {
    let f: Vec<&str> = v.split_whitespace().collect();
    assert_eq!(f.len(), 5, "entry {v:?}");
    NeighborEntry {
        id: u64::from_str_radix(f[0], 16).unwrap(),
        addr: f[1].parse().unwrap(),
        rx_ratio: f[2].parse().unwrap(),
        max_bundle: f[3].parse().unwrap(),
        radio: (f[4] != "-").then(|| {
            let (s, n) = f[4].split_once('/').unwrap();
            Radio {
                signal_dbm: s.parse().unwrap(),
                noise_dbm: n.parse().unwrap(),
            }
        }),
    }
}

fn load(path: &PathBuf) -> Vector {
    let text = std::fs::read_to_string(path).unwrap();
    let mut v = Vector {
        name: path.file_name().unwrap().to_string_lossy().into(),
        ..Default::default()
    };
    let mut in_bytes = false;
    for raw in text.lines() {
        let line = raw.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        if !in_bytes {
            let (key, val) = line
                .split_once(':')
                .unwrap_or_else(|| panic!("{}: {line:?}", v.name));
            let val = val.trim();
            match key.trim() {
                "sender" => v.sender = Some(u64::from_str_radix(val, 16).unwrap()),
                "seq" => v.seq = Some(val.parse().unwrap()),
                "interval_ms" => v.interval_ms = Some(val.parse().unwrap()),
                "encodings" => v.encodings = Some(u8::from_str_radix(val, 16).unwrap()),
                "entry" => v.entries.push(parse_entry(val)),
                "key" => v.key = Some(Key::from_hex(val).unwrap()),
                "key_id" => v.key_id = Some(val.parse().unwrap()),
                "verify" => v.verify = Some(val == "yes"),
                "decode-only" => v.decode_only = val == "yes",
                "error" => v.error = Some(val.to_string()),
                "hello" => in_bytes = true,
                k => panic!("{}: unknown key {k:?}", v.name),
            }
            continue;
        }
        for tok in line.split_whitespace() {
            v.bytes.push(u8::from_str_radix(tok, 16).unwrap());
        }
    }
    v
}

fn vectors() -> Vec<Vector> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/hello");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hex"))
        .collect();
    files.sort();
    files.iter().map(load).collect()
}

#[test]
fn hello_vectors() {
    let all = vectors();
    assert!(all.len() >= 8, "only {} hello vectors", all.len());
    let mut positive = 0;
    for v in &all {
        let parsed = Hello::parse(&v.bytes);
        if let Some(reason) = &v.error {
            let e = parsed.expect_err(&v.name);
            assert_eq!(e.reason(), reason, "{}", v.name);
            continue;
        }
        let h = parsed.unwrap_or_else(|e| panic!("{}: {e}", v.name));
        let header = HelloHeader {
            sender: v.sender.unwrap(),
            seq: v.seq.unwrap(),
            interval_ms: v.interval_ms.unwrap(),
            encodings: Encodings(v.encodings.unwrap()),
        };
        assert_eq!(h.header, header, "{}", v.name);
        assert_eq!(h.neighbors().collect::<Vec<_>>(), v.entries, "{}", v.name);
        assert_eq!(h.len(), v.entries.len());
        match (&v.key, v.key_id, v.verify) {
            (Some(k), Some(id), Some(want)) => {
                assert!(h.auth.is_some(), "{}", v.name);
                assert_eq!(h.verify(id, k), want, "{}", v.name);
            }
            (None, None, None) => assert!(h.auth.is_none(), "{}", v.name),
            _ => panic!("{}: key, key_id and verify go together", v.name),
        }
        if !v.decode_only {
            let mut buf = [0u8; MAX_HELLO];
            let auth = v.key.as_ref().map(|k| (v.key_id.unwrap(), k));
            let mut w = HelloWriter::new(&mut buf, &header, auth).unwrap();
            for e in &v.entries {
                w.push(e).unwrap();
            }
            let n = w.finish();
            assert_eq!(&buf[..n], v.bytes.as_slice(), "{}: writer differs", v.name);
        }
        positive += 1;
    }
    assert!(positive >= 4);
}
