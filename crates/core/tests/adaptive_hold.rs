//! The medium-aware hold policy (`LinkMode::Adaptive`, issue 11 point 7)
//! under simulated time: no packet waits beyond min(hold time, its share of
//! the delay budget), and along a chain of nodes no packet accumulates more
//! than the delay budget; on an idle medium, or without a second flow to the
//! same peer, no packet waits at all; on a busy medium bundles form, and one
//! quiet window under load does not release them. The drivers below call
//! `handle_timeout` exactly at every `poll_timeout`, so waiting times are
//! exact. Talk spurts: a spurt's first packet waits its full limit at every
//! node, so no later packet of the spurt crosses a chain faster than
//! it (holds alone never make a packet late behind a playout point set by the
//! spurt's first packet).

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

/// A voice-like packet of flow `flow` (its source port) with the given TTL /
/// hop limit; `tag` identifies it.
fn packet(v6: bool, total: usize, ttl: u8, tag: u32, flow: u16) -> Vec<u8> {
    let port = (16384 + 2 * flow).to_be_bytes();
    if v6 {
        let mut p = udp6(total, 46, tag);
        p[7] = ttl;
        p[40..42].copy_from_slice(&port);
        p
    } else {
        let mut p = udp4(total, 46, tag);
        p[20..22].copy_from_slice(&port);
        set_ttl4(&mut p, ttl);
        p
    }
}

/// Sets an IPv4 packet's TTL and header checksum.
fn set_ttl4(p: &mut [u8], ttl: u8) {
    p[8] = ttl;
    p[10..12].copy_from_slice(&[0, 0]);
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
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
        flow: u16,
    },
    Medium {
        utilisation: u16,
        busy: bool,
    },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0u32..3, any::<bool>(), prop_oneof![Just(64u8), Just(63), Just(61), Just(128), Just(125), Just(255), Just(250), 1u8..=255], 60usize..200, 0u16..4)
            .prop_map(|(peer, v6, ttl, size, flow)| Event::Packet { peer, v6, ttl, size, flow }),
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
                flow,
            } => {
                let tag = self.next_tag;
                self.next_tag += 1;
                let p = packet(v6, size, ttl, tag, flow);
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

/// `flows` G.729-like flows (one packet every 20 ms each, one every 2 ms in
/// all) to one peer on a medium reported busy or utilised, the report
/// repeated every 20 ms.
fn busy_run_flows(utilisation: u16, busy: bool, flows: u64) -> Run {
    let mut r = Run::new(10_000, 40_000, 300);
    let step = 20_000 / flows;
    for k in 0..500u64 {
        r.advance(k * step);
        if (k * step) % 20_000 < step {
            r.apply(&Event::Medium { utilisation, busy });
        }
        r.apply(&Event::Packet {
            peer: 0,
            v6: false,
            ttl: 64,
            size: 60,
            flow: (k % flows) as u16,
        });
    }
    r.finish();
    r
}

/// Ten flows, staggered by 2 ms: packets are held and leave in bundles, none
/// beyond the hold time.
fn busy_run(utilisation: u16, busy: bool) -> Run {
    busy_run_flows(utilisation, busy, 10)
}

#[test]
fn busy_medium_forms_bundles() {
    for (util, busy) in [(600, false), (0, true), (1000, true)] {
        let r = busy_run(util, busy);
        assert_eq!(r.waited.len(), 500);
        assert!(r.waited.iter().all(|&(w, l)| w <= l && l == 10_000));
        // Every bundle but the first (no company yet), the last, and those of
        // the first 20 ms holds the packets of one hold time (10 ms / 2 ms).
        // At the start each flow's first packet starts a talk spurt: it waits
        // its full limit, so it is not taken along by the queue in front of
        // it and leaves alone (9 packets).
        assert!(
            r.transmits.len() <= 500 / 5 + 2 + 9,
            "{} transmits: {:?}",
            r.transmits.len(),
            r.transmits
        );
        assert!(
            r.transmits[..9].iter().all(|&n| n == 1),
            "{:?}",
            r.transmits
        );
        assert!(r.transmits.iter().filter(|&&n| n >= 5).count() >= 98);
    }
}

#[test]
fn idle_medium_sends_each_packet_alone() {
    let r = busy_run(299, false);
    assert_eq!(r.transmits, vec![1; 500]);
    assert!(r.waited.iter().all(|&(w, _)| w == 0));
}

#[test]
fn a_lone_flow_never_waits_even_on_a_busy_medium() {
    // One call's voice to a next hop: nothing could join its packets within
    // the hold, so holding them would only add delay.
    for (util, busy) in [(1000, true), (1000, false), (0, true)] {
        let r = busy_run_flows(util, busy, 1);
        assert_eq!(r.transmits, vec![1; 500]);
        assert!(r.waited.iter().all(|&(w, _)| w == 0));
    }
    // Four flows (5 ms apart, hold 10 ms): held again, in pairs.
    let r = busy_run_flows(1000, true, 4);
    assert!(r.transmits.len() < 300, "{} transmits", r.transmits.len());
}

#[test]
fn a_lone_talker_is_held_only_on_a_saturated_medium() {
    // Three flows to one peer for 100 ms, then flow 0 alone (the others
    // silent), one packet every 20 ms, hold 10 ms, threshold 0.3.
    let run = |utilisation| {
        let mut r = Run::new(10_000, 40_000, 300);
        for k in 0..20u64 {
            r.advance(k * 20_000);
            r.apply(&Event::Medium {
                utilisation,
                busy: false,
            });
            for f in 0..if k < 5 { 3 } else { 1 } {
                r.apply(&Event::Packet {
                    peer: 0,
                    v6: false,
                    ttl: 64,
                    size: 60,
                    flow: f,
                });
            }
        }
        r.finish();
        r.waited[15..].to_vec()
    };
    // Busy (0.5 >= 0.3) but not saturated (< 0.6): the lone talker waits nothing.
    assert!(run(500).iter().all(|&(w, _)| w == 0));
    // Saturated: held its full limit while the silent flows were seen within
    // 8-16 hold times (80-160 ms), then no longer.
    let w = run(700);
    let held: Vec<bool> = w.iter().map(|&(w, _)| w == 10_000).collect();
    assert!(held[..4].iter().all(|&h| h), "{w:?}");
    assert!(!held[held.len() - 1], "{w:?}");
}

#[test]
fn one_quiet_window_under_load_keeps_holding() {
    let mut e = Engine::new(config(10_000, 40_000, 300));
    let mut t = 0;
    for _ in 0..10 {
        t += 20_000;
        e.set_medium(t, 600, false);
    }
    assert!(e.utilisation_high());
    // Bundled voice is bursty: one window at 0, then load again.
    t += 20_000;
    e.set_medium(t, 0, false);
    assert!(e.link_busy() && e.utilisation_high(), "{}", e.utilisation());
    t += 20_000;
    e.set_medium(t, 600, false);
    assert!(e.link_busy());
    // The load ends: released within a few windows (600 -> below 150).
    let mut n = 0;
    while e.link_busy() {
        t += 20_000;
        e.set_medium(t, 0, false);
        n += 1;
    }
    assert!((5..=9).contains(&n), "{n} windows");
}

#[test]
fn budget_spent_packets_pass_at_once_on_a_busy_medium() {
    // Hold 20 ms, budget 40 ms: a packet that crossed two hops (TTL 62) may wait 0 here.
    let mut r = Run::new(20_000, 40_000, 300);
    r.engine.set_medium(0, 1000, true);
    let p = |flow, ttl| Event::Packet {
        peer: 0,
        v6: false,
        ttl,
        size: 60,
        flow,
    };
    // The first packet of flow 1 has no company yet: it leaves at once.
    r.apply(&p(1, 64));
    assert_eq!(r.transmits, vec![1]);
    r.advance(100);
    // Flow 0 has flow 1's company: held.
    r.apply(&p(0, 64));
    assert_eq!(r.transmits, vec![1]);
    r.advance(1_100);
    r.apply(&p(1, 62));
    // The last packet's budget is spent: both leave now, in one bundle.
    assert_eq!(r.transmits, vec![1, 2]);
    assert_eq!(r.waited, vec![(0, 20_000), (1_000, 20_000), (0, 0)]);
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
    // Reports 2 s apart replace the average (over 16 time constants).
    let mut e = Engine::new(config(10_000, 40_000, 300));
    let mut t = 0;
    let mut report = |e: &mut Engine, u| {
        t += 2_000_000;
        e.set_medium(t, u, false);
        assert_eq!(e.utilisation(), u);
    };
    report(&mut e, 299);
    assert!(!e.link_busy());
    report(&mut e, 300);
    assert!(e.link_busy());
    // Below the threshold but not below half of it: still utilised.
    report(&mut e, 150);
    assert!(e.link_busy() && e.utilisation_high());
    report(&mut e, 149);
    assert!(!e.link_busy() && !e.utilisation_high());
    report(&mut e, 200);
    assert!(!e.link_busy());
}

/// A chain of `n` adaptive nodes: node `i` forwards to node `i + 1` (peer
/// `i + 1`), decrementing the TTL as a router does; transmission takes no
/// time. Returns, per packet, the time from entering node 0 to leaving the
/// last node.
struct Chain {
    nodes: Vec<Engine>,
    now: Micros,
    entered: HashMap<u32, Micros>,
    total: Vec<Micros>,
    /// tag -> time through the chain
    by_tag: HashMap<u32, Micros>,
    bundles: usize,
}

impl Chain {
    fn new(n: usize, hold: Micros, budget: Micros, util: u16) -> Chain {
        Chain {
            nodes: (0..n)
                .map(|_| Engine::new(config(hold, budget, util)))
                .collect(),
            now: 0,
            entered: HashMap::new(),
            total: Vec::new(),
            by_tag: HashMap::new(),
            bundles: 0,
        }
    }

    /// Drains every node's output into the next, in order (an output can
    /// only go downstream).
    fn drain(&mut self) {
        let mut buf = vec![0u8; 65_535];
        for i in 0..self.nodes.len() {
            while let Some(t) = self.nodes[i].poll_transmit(self.now, &mut buf) {
                let inner: Vec<Vec<u8>> = match t.kind {
                    TransmitKind::Bundle { encoding, .. } => {
                        self.bundles += 1;
                        encoding
                            .decode(&buf[..t.len])
                            .expect("engine output decodes")
                            .iter()
                            .map(<[u8]>::to_vec)
                            .collect()
                    }
                    _ => vec![buf[..t.len].to_vec()],
                };
                for mut p in inner {
                    if i + 1 == self.nodes.len() {
                        let at = self.entered.remove(&tag_of(&p)).expect("delivered once");
                        self.total.push(self.now - at);
                        self.by_tag.insert(tag_of(&p), self.now - at);
                    } else {
                        let ttl = p[8] - 1;
                        set_ttl4(&mut p, ttl);
                        self.nodes[i + 1].handle_packet(self.now, peer(i as u32 + 2), &p, 0);
                    }
                }
            }
            check_accounting(&self.nodes[i]);
        }
    }

    fn advance(&mut self, to: Micros) {
        loop {
            let next = self.nodes.iter_mut().filter_map(|e| e.poll_timeout()).min();
            match next {
                Some(t) if t <= to => {
                    self.now = self.now.max(t);
                    for e in &mut self.nodes {
                        e.handle_timeout(self.now);
                    }
                    self.drain();
                }
                _ => break,
            }
        }
        self.now = self.now.max(to);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// The per-flow delay budget along a path: through a chain of 1-6
    /// adaptive nodes with the same hold time, each told its own random
    /// medium state, no packet accumulates more than the delay budget, nor
    /// more than the sum of the per-hop limits.
    #[test]
    fn a_path_never_exceeds_the_delay_budget(
        n in 1usize..=6,
        hold in 1_000u64..30_000,
        budget in 0u64..80_000,
        util in 0u16..=1000,
        events in prop::collection::vec(
            (0u64..6_000, prop_oneof![
                4 => (0u16..6, 60usize..200).prop_map(|(f, s)| (None, f, s)),
                1 => (0usize..6, 0u16..=1200, any::<bool>())
                    .prop_map(|(node, u, b)| (Some((node, u, b)), 0, 0)),
            ]),
            1..300,
        ),
    ) {
        let mut c = Chain::new(n, hold, budget, util);
        let mut tag = 0u32;
        for (gap, (medium, flow, size)) in &events {
            let to = c.now + gap;
            c.advance(to);
            match medium {
                Some((node, u, busy)) => {
                    let now = c.now;
                    c.nodes[node % n].set_medium(now, *u, *busy);
                }
                None => {
                    let p = packet(false, *size, 64, tag, *flow);
                    c.entered.insert(tag, c.now);
                    tag += 1;
                    let now = c.now;
                    c.nodes[0].handle_packet(now, peer(1), &p, 0);
                }
            }
            c.drain();
        }
        c.advance(Micros::MAX / 2);
        prop_assert!(c.entered.is_empty(), "stranded: {:?}", c.entered);
        let per_hop: Micros = (0..n as u32).map(|h| hold_limit(hold, budget, h)).sum();
        for &t in &c.total {
            prop_assert!(t <= budget && t <= per_hop, "{} > budget {} / {}", t, budget, per_hop);
        }
    }
}

#[test]
fn a_busy_chain_bundles_within_the_budget() {
    // Six flows through three busy nodes, hold 20 ms, budget 40 ms: the
    // first two hops hold (bundles form), the third passes at once, and no
    // packet accumulates more than 40 ms.
    let mut c = Chain::new(3, 20_000, 40_000, 300);
    for e in &mut c.nodes {
        e.set_medium(0, 1000, true);
    }
    for k in 0..600u64 {
        let to = k * 20_000 / 6;
        c.advance(to);
        let tag = k as u32;
        c.entered.insert(tag, c.now);
        let now = c.now;
        let p = packet(false, 60, 64, tag, (k % 6) as u16);
        c.nodes[0].handle_packet(now, peer(1), &p, 0);
        c.drain();
    }
    c.advance(Micros::MAX / 2);
    assert_eq!(c.total.len(), 600);
    assert!(c.total.iter().all(|&t| t <= 40_000));
    let mean = c.total.iter().sum::<Micros>() as f64 / 600.0;
    assert!(mean > 10_000.0, "held: mean {mean} µs");
    // Far fewer bundles than packets per hop.
    assert!(c.bundles < 3 * 600 / 3, "{} bundles", c.bundles);
}

/// One talk spurt of a test flow: starts `start` µs into the run, `len`
/// packets 20 ms apart.
#[derive(Clone, Debug)]
struct Spurt {
    flow: u16,
    start: Micros,
    len: u64,
}

/// Spurts of flows 1-5, each flow's separated by silences of at least
/// `4 × 20 ms + budget` (so every node sees a new spurt), with random phases.
fn spurts() -> impl Strategy<Value = Vec<Spurt>> {
    prop::collection::vec(
        (
            0u64..20_000,
            prop::collection::vec((1u64..30, 0u64..400_000), 1..4),
        ),
        1..6,
    )
    .prop_map(|flows| {
        let mut out = Vec::new();
        for (flow, (phase, runs)) in (1u16..).zip(flows) {
            let mut t = 40_000 + phase;
            for (len, silence) in runs {
                out.push(Spurt {
                    flow,
                    start: t,
                    len,
                });
                t += len * 20_000 + 80_000 + 80_000 + silence;
            }
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// A talk spurt's first packet crosses a busy chain of 1-4 adaptive
    /// nodes (hold 20 ms, any budget; the medium saturated, so every packet
    /// may be held) no faster than any later packet of its spurt, and no
    /// packet beyond the delay budget. Flow 0 talks all the time; flows 1-5
    /// talk in spurts at random phases.
    #[test]
    fn a_spurts_first_packet_is_never_ahead_of_its_spurt(
        n in 1usize..=4,
        budget in 0u64..80_000,
        spurts in spurts(),
    ) {
        let hold = 20_000;
        let mut c = Chain::new(n, hold, budget, 300);
        for e in &mut c.nodes {
            e.set_medium(0, 1000, true);
        }
        // (time, flow, tag, index within its spurt: 0 = first)
        let mut sends: Vec<(Micros, u16, u32, u64, usize)> = Vec::new();
        let end = spurts.iter().map(|s| s.start + s.len * 20_000).max().unwrap_or(0);
        let mut tag = 0u32;
        for k in 0..=end / 20_000 {
            sends.push((k * 20_000 + 7_000, 0, 0, k, usize::MAX));
        }
        for (i, s) in spurts.iter().enumerate() {
            for k in 0..s.len {
                sends.push((s.start + k * 20_000, s.flow, 0, k, i));
            }
        }
        sends.sort_by_key(|&(t, f, ..)| (t, f));
        for s in &mut sends {
            s.2 = tag;
            tag += 1;
        }
        for &(t, flow, tag, _, _) in &sends {
            c.advance(t);
            c.entered.insert(tag, c.now);
            let now = c.now;
            c.nodes[0].handle_packet(now, peer(1), &packet(false, 60, 64, tag, flow), 0);
            c.drain();
        }
        c.advance(Micros::MAX / 2);
        prop_assert!(c.entered.is_empty(), "stranded: {:?}", c.entered);
        let mut first: HashMap<usize, Micros> = HashMap::new();
        for &(_, _, tag, k, i) in &sends {
            let d = c.by_tag[&tag];
            prop_assert!(d <= budget, "{} > budget {}", d, budget);
            if i == usize::MAX {
                continue;
            }
            if k == 0 {
                first.insert(i, d);
            } else {
                prop_assert!(d <= first[&i], "spurt {}: packet {} took {} µs, its first {}", i, k, d, first[&i]);
            }
        }
    }
}
