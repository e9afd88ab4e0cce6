//! `auth`: SipHash-2-4 and SipHash-2-4-128 against the 128 reference vectors
//! of the SipHash reference implementation (tests/vectors/siphash24_reference.txt),
//! and the replay window against a plain model (a set of every accepted number).
//!
//! Owns nothing but these checks; must not touch the vector file's bytes.

use airpack_core::auth::{tag, tag128, verify, Key, Replay, ReplayWindow};
use proptest::prelude::*;
use std::collections::BTreeSet;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn reference_vectors() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/siphash24_reference.txt"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let key = Key::from_bytes(core::array::from_fn(|i| i as u8));
    let msg: Vec<u8> = (0..64u8).collect();
    let (mut n64, mut n128) = (0, 0);
    for line in text.lines() {
        let line = line.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 3, "bad line {line:?}");
        let len: usize = f[1].parse().unwrap();
        let want = hex(f[2]);
        let m = &msg[..len];
        // Also split the message in two, to exercise the streaming path.
        let (a, b) = m.split_at(len / 3);
        match f[0] {
            "64" => {
                assert_eq!(tag(&key, &[m]).as_slice(), want, "sip64 len {len}");
                assert_eq!(tag(&key, &[a, b]).as_slice(), want, "sip64 split {len}");
                assert!(verify(&key, &[m], &want));
                n64 += 1;
            }
            "128" => {
                assert_eq!(tag128(&key, &[m]).as_slice(), want, "sip128 len {len}");
                assert_eq!(tag128(&key, &[a, b]).as_slice(), want, "sip128 split {len}");
                assert!(verify(&key, &[m], &want));
                n128 += 1;
            }
            v => panic!("unknown variant {v}"),
        }
    }
    assert_eq!((n64, n128), (64, 64));
}

/// The window's contract in plain terms: accept a number iff it was never
/// accepted and is within WINDOW of the highest accepted one (or above it).
struct Model {
    seen: BTreeSet<u64>,
    window: u64,
}

impl Model {
    fn check_and_update(&mut self, seq: u64) -> Result<(), Replay> {
        if let Some(&top) = self.seen.last() {
            if seq <= top && top - seq >= self.window {
                return Err(Replay::TooOld);
            }
        }
        if !self.seen.insert(seq) {
            return Err(Replay::Duplicate);
        }
        Ok(())
    }
}

fn run_against_model<const W: usize>(start: u64, steps: &[(bool, u64)]) {
    let mut w = ReplayWindow::<W>::new();
    let mut m = Model {
        seen: BTreeSet::new(),
        window: ReplayWindow::<W>::WINDOW,
    };
    let mut cur = start;
    for &(back, d) in steps {
        cur = if back {
            cur.saturating_sub(d)
        } else {
            cur.saturating_add(d)
        };
        let want = m.check_and_update(cur);
        assert_eq!(w.check(cur), want, "check({cur})");
        assert_eq!(w.check_and_update(cur), want, "check_and_update({cur})");
        assert_eq!(w.highest(), m.seen.last().copied());
    }
}

proptest! {
    #[test]
    fn replay_window_matches_model(
        start in prop_oneof![0u64..1000, (u64::MAX - 5000)..=u64::MAX],
        steps in prop::collection::vec(
            (any::<bool>(), prop_oneof![0u64..4, 0u64..70, 0u64..300, 0u64..3000]),
            1..400,
        ),
    ) {
        run_against_model::<2>(start, &steps);
        run_against_model::<16>(start, &steps);
    }

    #[test]
    fn a_changed_byte_or_key_fails(msg in prop::collection::vec(any::<u8>(), 1..300),
                                   idx in any::<prop::sample::Index>(),
                                   flip in 1u8..=255,
                                   key in any::<[u8; 16]>(), other in any::<[u8; 16]>()) {
        let k = Key::from_bytes(key);
        let t = tag(&k, &[&msg]);
        prop_assert!(verify(&k, &[&msg], &t));
        let mut bad = msg.clone();
        bad[idx.index(msg.len())] ^= flip;
        prop_assert!(!verify(&k, &[&bad], &t));
        prop_assume!(key != other);
        prop_assert!(!verify(&Key::from_bytes(other), &[&msg], &t));
    }
}
