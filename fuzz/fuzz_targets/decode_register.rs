//! Fuzz target: the downlink registration message parser on untrusted
//! bytes. An accepted layout re-encodes to the same bytes before the tag;
//! opening with a key never panics and never accepts a message whose tag
//! was not made with that key (the input's tag is random).
#![no_main]
use airpack_core::auth::Key;
use airpack_core::downlink::register::{self, MAX_MESSAGE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let key = Key::from_bytes(*b"fuzzing-key-0123");
    let opened = register::open(data, |_| Some(&key));
    let Ok((m, _tag)) = register::decode(data) else {
        assert!(opened.is_err());
        return;
    };
    let mut out = [0u8; MAX_MESSAGE];
    let n = register::encode(&m, &key, &mut out).expect("accepted message re-encodes");
    assert_eq!(n, data.len());
    assert_eq!(&out[..n - 8], &data[..n - 8]);
    // Our own tag opens; the input opened only if its tag is exactly ours.
    assert_eq!(register::open(&out[..n], |_| Some(&key)), Ok(m));
    assert_eq!(opened.is_ok(), out[n - 8..n] == data[n - 8..]);
});
