//! Fuzz target: the `kau` bundle decoder on untrusted bytes, with a re-encode check.
#![no_main]
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    common::check(airpack_core::wire::Encoding::Kau, data);
});
