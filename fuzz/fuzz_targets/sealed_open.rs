//! Fuzz target: the authentication trailer (`wire::sealed::open`) on
//! untrusted bytes. It never panics, and it never accepts a bundle under a
//! key the input cannot know (a pass would be a forgery); a bundle sealed
//! with the key from the input's bytes opens to exactly those bytes.
#![no_main]
use airpack_core::auth::Key;
use airpack_core::wire::sealed::{open, seal, Opened, TRAILER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let secret = Key::from_bytes(*b"fuzzer-never-kno");
    assert!(open(&secret, data).is_err(), "forged trailer accepted");
    // Round trip: the input's bytes as a bundle, sealed and opened again.
    if data.is_empty() {
        return;
    }
    let mut buf = data.to_vec();
    buf.resize(data.len() + TRAILER_LEN, 0);
    let node = data.len() as u32;
    let seq = u64::from(data[0]) << 40 | data.len() as u64;
    let n = seal(&secret, node, seq, &mut buf, data.len()).expect("room");
    assert_eq!(n, data.len() + TRAILER_LEN);
    assert_eq!(
        open(&secret, &buf),
        Ok(Opened {
            node,
            seq,
            len: data.len()
        })
    );
    assert_eq!(&buf[..data.len()], data);
});
