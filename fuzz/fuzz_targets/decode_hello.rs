//! Fuzz target: the hello parser (`neighbor::hello`) on untrusted bytes.
//! Whatever it accepts must list exactly `len()` entries, re-encode to the
//! same bytes (tag aside, may-ignore flag bits aside), and verification must
//! never succeed under a key the input was not made with (the input has no
//! way to know the fixed key below, so a pass would be a forgery).
#![no_main]
use airpack_core::auth::Key;
use airpack_core::neighbor::hello::{Hello, HelloWriter, MAX_HELLO};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(h) = Hello::parse(data) else { return };
    let entries: Vec<_> = h.neighbors().collect();
    assert_eq!(entries.len(), h.len());
    let mut buf = vec![0u8; MAX_HELLO];
    let mut w = HelloWriter::new(&mut buf, &h.header, None).expect("header re-encodes");
    for e in &entries {
        w.push(e).expect("entry re-encodes");
    }
    let n = w.finish();
    let mut expect = data[..n].to_vec();
    expect[1] &= !0xf1; // may-ignore flags and the auth flag
    assert_eq!(&buf[..n], &expect[..]);
    match h.auth {
        Some((id, tag)) => {
            assert_eq!(data.len(), n + 1 + tag.len());
            let key = Key::from_bytes(*b"fuzzer-never-kno");
            assert!(!h.verify(id, &key), "forged tag accepted");
        }
        None => assert_eq!(data.len(), n),
    }
});
