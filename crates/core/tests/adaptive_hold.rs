//! The medium-aware hold policy (`LinkMode::Adaptive`, issue 11 point 7)
//! under simulated time: no packet waits beyond min(hold time, its share of
//! the delay budget); on an idle medium no packet waits at all; on a busy
//! medium bundles form. The driver below calls `handle_timeout` exactly at
//! every `poll_timeout`, so waiting times are exact.

mod engine_common;

use airpack_core::engine::policy::{hold_limit, hops_crossed};
use airpack_core::engine::{
    AdaptiveHold, Classifier, Engine, EngineConfig, LinkMode, PeerConfig, Rule, TrafficClass,
    Transmit, TransmitKind,
};
use airpack_core::wire::ip::checksum;
use airpack_core::Micros;
use engine_common::*;
use proptest::prelude::*;
use std::collections::HashMap;

fn config(hold_time: Micros, delay_budget: Micros, busy_utilisation: u16) -> EngineConfig {
    EngineConfig {
        peer_defaults: PeerConfig {
            hold_time,
            ..PeerConfig::default()
        },
        link_mode: LinkMode::Adaptive(AdaptiveHold {
            delay_budget,
            busy_utilisation,
        }),
        classifier: Classifier {
            rules: vec![Rule {
                class: TrafficClass::Bundle,
                protocol: Some(UDP),
                ports: Some(16384..=32767),
                ..Rule::default()
            }],
            default: TrafficClass::Bypass,
        },
        ..EngineConfig::default()
    }
}

/// A voice-like packet with the given TTL / hop limit; `tag` identifies it.
fn packet(v6: bool, total: usize, ttl: u8, tag: u32) -> Vec<u8> {
    if v6 {
        let mut p = udp6(total, 46, tag);
        p[7] = ttl;
        p
    } else {
        let mut p = udp4(total, 46, tag);
        p[8] = ttl;
        p[10..12].copy_from_slice(&[0, 0]);
        let c = checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }
}

fn tag_of(p: &[u8]) -> u32 {
    let off = if p[0] >> 4 == 6 { 48 } else { 28 };
    u32::from_be_bytes(p[off..off + 4].try_into().unwrap())
}

#[derive(Clone, Debug)]
enum Event {
    Packet {
        peer: u32,
        v6: bool,
        ttl: u8,
        size: usize,
    },
    Medium {
        utilisation: u16,
        busy: bool,
    },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0u32..3, any::<bool>(), prop_oneof![Just(64u8), Just(63), Just(61), Just(128), Just(125), Just(255), Just(250), 1u8..=255], 60usize..200)
            .prop_map(|(peer, v6, ttl, size)| Event::Packet { peer, v6, ttl, size }),
        1 => (0u16..=1200, any::<bool>()).prop_map(|(utilisation, busy)| Event::Medium { utilisation, busy }),
    ]
}

/// Drives an engine through events separated by gaps; returns, for every
/// packet, (time waited, its limit) and the transmits (packets per transmit).
struct Run {
    engine: Engine,
    now: Micros,
    next_tag: u32,
    /// tag -> (arrival, hold limit)
    pending: HashMap<u32, (Micros, Micros)>,
    waited: Vec<(Micros, Micros)>,
    transmits: Vec<usize>,
    hold: Micros,
    budget: Micros,
}

impl Run {
    fn new(hold: Micros, budget: Micros, util: u16) -> Self {
        Run {
            engine: Engine::new(config(hold, budget, util)),
            now: 0,
            next_tag: 0,
            pending: HashMap::new(),
            waited: Vec::new(),
            transmits: Vec::new(),
            hold,
            budget,
        }
    }

    fn drain(&mut self) {
        let mut buf = vec![0u8; 65_535];
        while let Some(t) = self.engine.poll_transmit(self.now, &mut buf) {
            self.record(&t, &buf[..t.len]);
        }
        check_accounting(&self.engine);
    }

    fn record(&mut self, t: &Transmit, bytes: &[u8]) {
        let inner: Vec<Vec<u8>> = match t.kind {
            TransmitKind::Bundle { encoding, .. } => encoding
                .decode(bytes)
                .expect("engine output decodes")
                .iter()
                .map(<[u8]>::to_vec)
                .collect(),
            _ => vec![bytes.to_vec()],
        };
        self.transmits.push(inner.len());
        for p in inner {
            let (arrival, limit) = self.pending.remove(&tag_of(&p)).expect("sent once");
            self.waited.push((self.now - arrival, limit));
        }
    }

    /// Moves simulated time to `to`, serving every deadline on the way exactly when due.
    fn advance(&mut self, to: Micros) {
        while let Some(t) = self.engine.poll_timeout() {
            if t > to {
                break;
            }
            self.now = self.now.max(t);
            self.engine.handle_timeout(self.now);
            self.drain();
        }
        self.now = self.now.max(to);
    }

    fn apply(&mut self, ev: &Event) {
        match *ev {
            Event::Packet {
                peer: n,
                v6,
                ttl,
                size,
            } => {
                let tag = self.next_tag;
                self.next_tag += 1;
                let p = packet(v6, size, ttl, tag);
                let limit = hold_limit(self.hold, self.budget, hops_crossed(&p));
                self.pending.insert(tag, (self.now, limit));
                self.engine.handle_packet(self.now, peer(n), &p, 0);
            }
            Event::Medium { utilisation, busy } => {
                self.engine.set_medium(self.now, utilisation, busy)
            }
        }
        self.drain();
    }

    fn finish(&mut self) {
        self.advance(Micros::MAX / 2);
        assert!(
            self.pending.is_empty(),
            "packets stranded: {:?}",
            self.pending
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// No packet is ever held beyond min(hold time, its budget share).
    #[test]
    fn never_beyond_hold_or_budget(
        hold in 1_000u64..30_000,
        budget in 0u64..80_000,
        util in 0u16..=1000,
        events in prop::collection::vec((0u64..8_000, event()), 1..300),
    ) {
        let mut r = Run::new(hold, budget, util);
        for (gap, ev) in &events {
            let to = r.now + gap;
            r.advance(to);
            r.apply(ev);
        }
        r.finish();
        for &(waited, limit) in &r.waited {
            prop_assert!(waited <= limit, "waited {} > limit {}", waited, limit);
            prop_assert!(limit <= hold);
        }
    }

    /// With an idle medium (busy signal clear, utilisation below the
    /// threshold) no packet waits at all.
    #[test]
    fn idle_medium_no_wait(
        hold in 1_000u64..30_000,
        util in 1u16..=1000,
        events in prop::collection::vec((0u64..8_000, event()), 1..300),
    ) {
        let mut r = Run::new(hold, 40_000, util);
        for (gap, ev) in &events {
            let to = r.now + gap;
            r.advance(to);
            let ev = match ev {
                Event::Medium { utilisation, .. } => Event::Medium {
                    utilisation: utilisation % util,
                    busy: false,
                },
                e => e.clone(),
            };
            r.apply(&ev);
        }
        r.finish();
        prop_assert!(r.waited.iter().all(|&(w, _)| w == 0), "{:?}", r.waited);
    }
}

/// Ten G.729-like flows (one packet every 20 ms each, staggered by 2 ms) on
/// a medium reported 60 % utilised: packets are held and leave in bundles,
/// none beyond the hold time.
fn busy_run(utilisation: u16, busy: bool) -> Run {
    let mut r = Run::new(10_000, 40_000, 300);
    r.engine.set_medium(0, utilisation, busy);
    for k in 0..500u64 {
        r.advance(k * 2_000);
        r.apply(&Event::Packet {
            peer: 0,
            v6: false,
            ttl: 64,
            size: 60,
        });
    }
    r.finish();
    r
}

#[test]
fn busy_medium_forms_bundles() {
    for (util, busy) in [(600, false), (0, true), (1000, true)] {
        let r = busy_run(util, busy);
        assert_eq!(r.waited.len(), 500);
        assert!(r.waited.iter().all(|&(w, l)| w <= l && l == 10_000));
        // Every bundle but the last holds the packets of one hold time (10 ms / 2 ms).
        assert!(
            r.transmits.len() <= 500 / 5 + 1,
            "{} transmits",
            r.transmits.len()
        );
        assert!(r.transmits.iter().filter(|&&n| n >= 5).count() >= 99);
    }
}

#[test]
fn idle_medium_sends_each_packet_alone() {
    let r = busy_run(299, false);
    assert_eq!(r.transmits, vec![1; 500]);
    assert!(r.waited.iter().all(|&(w, _)| w == 0));
}

#[test]
fn budget_spent_packets_pass_at_once_on_a_busy_medium() {
    // Hold 20 ms, budget 40 ms: a packet that crossed two hops (TTL 62) may wait 0 here.
    let mut r = Run::new(20_000, 40_000, 300);
    r.engine.set_medium(0, 1000, true);
    r.apply(&Event::Packet {
        peer: 0,
        v6: false,
        ttl: 64,
        size: 60,
    });
    r.advance(1_000);
    r.apply(&Event::Packet {
        peer: 0,
        v6: false,
        ttl: 62,
        size: 60,
    });
    // The second packet's budget is spent: both leave now, in one bundle.
    assert_eq!(r.transmits, vec![2]);
    assert_eq!(r.waited, vec![(1_000, 20_000), (0, 0)]);
}

#[test]
fn utilisation_is_ignored_outside_adaptive_mode() {
    let mut cfg = config(10_000, 40_000, 300);
    cfg.link_mode = LinkMode::HoldWhileBusy;
    let mut e = Engine::new(cfg.clone());
    e.set_medium(0, 1000, false);
    assert!(!e.link_busy());
    e.set_medium(0, 0, true);
    assert!(e.link_busy());
    // Switching an adaptive engine to another mode drops the utilisation signal.
    cfg.link_mode = LinkMode::Adaptive(AdaptiveHold::default());
    let mut e = Engine::new(cfg.clone());
    e.set_medium(0, 1000, false);
    assert!(e.link_busy() && e.utilisation_high());
    cfg.link_mode = LinkMode::HoldWhileBusy;
    e.reconfigure(cfg);
    assert!(!e.link_busy() && !e.utilisation_high());
}

#[test]
fn utilisation_has_hysteresis() {
    let mut e = Engine::new(config(10_000, 40_000, 300));
    e.set_medium(0, 299, false);
    assert!(!e.link_busy());
    e.set_medium(0, 300, false);
    assert!(e.link_busy());
    // Below the threshold but not below half of it: still utilised.
    e.set_medium(0, 150, false);
    assert!(e.link_busy() && e.utilisation_high());
    e.set_medium(0, 149, false);
    assert!(!e.link_busy() && !e.utilisation_high());
    e.set_medium(0, 200, false);
    assert!(!e.link_busy());
}
