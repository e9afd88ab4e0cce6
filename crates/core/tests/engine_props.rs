//! Property tests of the aggregation engine: random configurations, packets
//! (IPv4/IPv6 UDP, TCP with and without control flags, sizes), peers, classes,
//! encodings, link-busy changes, time advances and max-size changes, driven the
//! way a real driver does it (drain `poll_transmit` after every event, sleep
//! until `poll_timeout`, with a timer granularity).
//!
//! Checked after every step against an independent model of every queue:
//! * per peer, the packets that come out of bundles and singles are the
//!   packets that went in (bundle and opportunistic classes), byte for byte and
//!   in order, except drops of the oldest which the counters account for;
//!   bypass packets come out unchanged in FIFO order;
//! * no bundle exceeds the peer's maximum size (outer overhead included);
//! * no packet is held past its hold time by more than the timer granularity;
//! * opportunistic packets are never held while the link is idle, and in
//!   hold-while-busy mode nothing is held while the link is idle;
//! * in = sent + dropped + queued, in total and per peer.

mod engine_common;

use airpack_core::engine::{
    Classifier, DropReason, Engine, EngineConfig, LinkMode, PeerConfig, Rule, TrafficClass,
    TransmitKind, Verdict,
};
use airpack_core::wire::Encoding;
use engine_common::*;
use proptest::prelude::*;
use std::collections::VecDeque;

const PEERS: usize = 5;
const OPP_PORT: u16 = 7000;

#[derive(Clone, Debug)]
enum Pkt {
    /// UDP/IPv4 in the voice port range (bundle class).
    Voice(usize),
    /// UDP/IPv4 to the opportunistic port.
    Opp(usize),
    /// UDP/IPv6 voice (bundle class; bypass for kau).
    Voice6(usize),
    /// TCP with the given flags (ACK-only: bundle class; SYN/FIN/RST: bypass).
    Tcp(u8, usize),
    /// Unmatched UDP (default class: bypass).
    Other(usize),
}

#[derive(Clone, Debug)]
enum Op {
    Packet {
        peer: usize,
        pkt: Pkt,
        mark: Option<u16>,
    },
    /// Several packets at the same instant, with no poll in between (a burst
    /// read from the TUN before the driver drains).
    Burst(Vec<(usize, Pkt)>),
    Link(bool),
    Advance(u64),
    MaxSize(usize, usize),
    /// `set_peer` with a new configuration (queue kept, re-costed, trimmed, re-timed).
    SetPeer(usize, PeerConfig),
    /// `remove_peer`: queued packets leave alone; the key may come back as a new peer.
    Remove(usize),
    Flush,
}

#[derive(Clone, Debug)]
struct Case {
    link_mode: LinkMode,
    dynamic_marking: bool,
    max_peers: usize,
    bypass_limit: usize,
    granularity: u64,
    peers: Vec<PeerConfig>,
    ops: Vec<Op>,
}

fn encoding() -> impl Strategy<Value = Encoding> + Clone {
    prop_oneof![
        Just(Encoding::Native),
        Just(Encoding::Kau),
        Just(Encoding::Simplemux)
    ]
}

fn peer_config() -> impl Strategy<Value = PeerConfig> {
    (
        encoding(),
        prop::bool::weighted(0.9),
        0u64..20_000,
        0usize..3_000,
        100usize..3_000,
        1usize..70,
        prop_oneof![Just(0usize), Just(20), Just(28), Just(48)],
        100usize..20_000,
        1usize..40,
    )
        .prop_map(
            |(
                encoding,
                accepts_bundles,
                hold_time,
                min_size,
                max_size,
                max_packets,
                outer_overhead,
                qb,
                qp,
            )| PeerConfig {
                encoding,
                accepts_bundles,
                hold_time,
                min_size,
                max_size,
                max_packets,
                outer_overhead,
                queue_limit_bytes: qb,
                queue_limit_packets: qp,
            },
        )
}

fn pkt() -> impl Strategy<Value = Pkt> {
    prop_oneof![
        6 => (28usize..900).prop_map(Pkt::Voice),
        2 => (28usize..300).prop_map(Pkt::Opp),
        2 => (52usize..700).prop_map(Pkt::Voice6),
        1 => (prop_oneof![Just(0x10u8), Just(0x18), Just(0x02), Just(0x12), Just(0x11), Just(0x04)], 44usize..400)
            .prop_map(|(f, s)| Pkt::Tcp(f, s)),
        1 => (28usize..1600).prop_map(Pkt::Other),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0..PEERS, pkt(), prop::option::weighted(0.1, 0u16..3000))
            .prop_map(|(peer, pkt, mark)| Op::Packet { peer, pkt, mark }),
        2 => prop::collection::vec((0..PEERS, pkt()), 2..40).prop_map(Op::Burst),
        2 => any::<bool>().prop_map(Op::Link),
        4 => prop_oneof![0u64..100, 0u64..10_000, 0u64..50_000].prop_map(Op::Advance),
        1 => (0..PEERS, 60usize..3_000).prop_map(|(p, m)| Op::MaxSize(p, m)),
        1 => (0..PEERS, peer_config()).prop_map(|(p, c)| Op::SetPeer(p, c)),
        1 => (0..PEERS).prop_map(Op::Remove),
        1 => Just(Op::Flush),
    ]
}

fn case(
    encodings: impl Strategy<Value = Encoding> + Clone + 'static,
) -> impl Strategy<Value = Case> {
    let peers = prop::collection::vec(
        (peer_config(), encodings).prop_map(|(mut c, e)| {
            c.encoding = e;
            c
        }),
        PEERS,
    );
    (
        prop_oneof![
            Just(LinkMode::Fixed),
            Just(LinkMode::HoldWhileBusy),
            Just(LinkMode::Adaptive(Default::default()))
        ],
        any::<bool>(),
        prop_oneof![1 => 1usize..PEERS, 4 => Just(PEERS)],
        1usize..64,
        prop_oneof![Just(0u64), Just(1), Just(250), Just(1_000)],
        peers,
        prop::collection::vec(op(), 1..150),
    )
        .prop_map(
            |(link_mode, dynamic_marking, max_peers, bypass_limit, granularity, peers, ops)| Case {
                link_mode,
                dynamic_marking,
                max_peers,
                bypass_limit,
                granularity,
                peers,
                ops,
            },
        )
}

#[derive(Debug)]
struct Queued {
    tag: u32,
    bytes: Vec<u8>,
    arrival: u64,
    /// Latest time it may leave (arrival + hold time, adjusted when the hold time changes).
    deadline: u64,
    opportunistic: bool,
}

struct Model {
    engine: Engine,
    case: Case,
    now: u64,
    link_busy: bool,
    next_tag: u32,
    /// Per peer: packets queued in the engine, oldest first (mirrors the engine's queue).
    queues: Vec<VecDeque<Queued>>,
    /// Per peer: front drops already applied to `queues`.
    front_drops_seen: Vec<u64>,
    /// Per peer: the max size in force (set_peer, MaxSize, dynamic marking).
    max_size: Vec<usize>,
    /// Per peer: whether it exists in the engine.
    exists: Vec<bool>,
    bypass: VecDeque<Vec<u8>>,
    buf: Vec<u8>,
    transmits: u64,
    /// Peer being removed: its packets must come out alone.
    removed: Option<usize>,
    /// The engine's `peer_defaults` (peers created on demand get these).
    defaults: PeerConfig,
    /// Packets and bytes handed to `handle_packet` so far.
    handed_in: (u64, u64),
}

fn front_drops(e: &Engine, p: usize) -> u64 {
    e.peer_stats(peer(p as u32)).map_or(0, |s| {
        s.counters.dropped[DropReason::QueueBytes.index()]
            + s.counters.dropped[DropReason::QueuePackets.index()]
    })
}

impl Model {
    fn new(case: Case) -> Self {
        let classifier = Classifier {
            rules: vec![
                Rule {
                    class: TrafficClass::Bundle,
                    protocol: Some(UDP),
                    ports: Some(16384..=32767),
                    ..Rule::default()
                },
                Rule {
                    class: TrafficClass::Opportunistic,
                    dst_ports: Some(OPP_PORT..=OPP_PORT),
                    ..Rule::default()
                },
                Rule {
                    class: TrafficClass::Bundle,
                    protocol: Some(TCP),
                    ..Rule::default()
                },
            ],
            default: TrafficClass::Bypass,
        };
        let cfg = EngineConfig {
            max_peers: case.max_peers,
            peer_defaults: case.peers[0].clone(),
            link_mode: case.link_mode,
            classifier,
            dynamic_marking: case.dynamic_marking,
            bypass_queue_limit: case.bypass_limit,
        };
        let mut engine = Engine::new(cfg);
        let defaults = case.peers[0].clone();
        let mut exists = vec![false; PEERS];
        let mut max_size = vec![case.peers[0].max_size; PEERS];
        // Configure all but the first peer explicitly (the first is created on demand).
        for p in 1..PEERS {
            if engine
                .set_peer(peer(p as u32), case.peers[p].clone())
                .is_ok()
            {
                exists[p] = true;
                max_size[p] = case.peers[p].max_size;
            }
        }
        Model {
            engine,
            case,
            now: 0,
            link_busy: false,
            next_tag: 0,
            queues: (0..PEERS).map(|_| VecDeque::new()).collect(),
            front_drops_seen: vec![0; PEERS],
            max_size,
            exists,
            bypass: VecDeque::new(),
            buf: vec![0u8; 65_535],
            transmits: 0,
            removed: None,
            defaults,
            handed_in: (0, 0),
        }
    }

    fn cfg(&self, p: usize) -> &PeerConfig {
        &self.case.peers[p]
    }

    fn step(&mut self, op: &Op) {
        match op {
            Op::Packet { peer: p, pkt, mark } => self.packet(*p, pkt, *mark),
            Op::Burst(pkts) => {
                for (p, pkt) in pkts {
                    self.packet(*p, pkt, None);
                }
            }
            Op::Link(b) => {
                self.link_busy = *b;
                self.engine.set_link_busy(self.now, *b);
            }
            Op::Advance(dt) => {
                let target = self.now + dt;
                let g = self.case.granularity;
                let mut guard = 0;
                while let Some(t) = self.engine.poll_timeout() {
                    let fire = if g == 0 { t } else { t.div_ceil(g) * g };
                    if fire > target {
                        break;
                    }
                    self.now = self.now.max(fire);
                    self.engine.handle_timeout(self.now);
                    self.drain();
                    guard += 1;
                    assert!(guard < 10_000, "timer loop does not converge");
                }
                self.now = target;
            }
            Op::MaxSize(p, m) => {
                self.engine.set_peer_max_size(peer(*p as u32), *m);
                if self.exists[*p] {
                    self.max_size[*p] = *m;
                }
            }
            Op::SetPeer(p, c) => {
                let key = peer(*p as u32);
                match self.engine.set_peer(key, c.clone()) {
                    Ok(()) => {
                        self.exists[*p] = true;
                        self.case.peers[*p] = c.clone();
                        self.max_size[*p] = c.max_size;
                        for q in self.queues[*p].iter_mut() {
                            q.deadline = (q.arrival + c.hold_time).max(self.now);
                        }
                    }
                    Err(r) => {
                        assert_eq!(r, DropReason::PeerTableFull);
                        assert!(!self.exists[*p]);
                    }
                }
                self.sync_drops(*p);
            }
            Op::Remove(p) => {
                let key = peer(*p as u32);
                self.engine.remove_peer(key);
                assert!(self.engine.peer(key).is_none());
                self.exists[*p] = false;
                // Everything it had queued leaves now, alone and in order.
                let before = self.transmits;
                let n = self.queues[*p].len();
                self.removed = Some(*p);
                self.drain();
                self.removed = None;
                assert!(
                    self.queues[*p].is_empty(),
                    "a removed peer's packets all leave at once"
                );
                assert!(self.transmits - before >= n as u64);
                self.front_drops_seen[*p] = 0; // a new peer under this key starts from zero
            }
            Op::Flush => {
                self.engine.flush();
                self.drain();
                assert_eq!(
                    self.engine.queued(),
                    (0, 0),
                    "flush + drain leaves nothing queued"
                );
            }
        }
        self.drain();
        self.check();
    }

    fn packet(&mut self, p: usize, pkt: &Pkt, mark: Option<u16>) {
        let tag = self.next_tag;
        self.next_tag += 1;
        let (bytes, expect_bypass) = match pkt {
            Pkt::Voice(n) => (udp4(*n, (tag % 64) as u8, tag), false),
            Pkt::Opp(n) => (ipv4(UDP, OPP_PORT, OPP_PORT, 46, *n, tag, 0), false),
            Pkt::Voice6(n) => (udp6(*n, 0, tag), false),
            Pkt::Tcp(f, n) => (ipv4(TCP, 1000, 80, 0, *n, tag, *f), f & 0x07 != 0),
            Pkt::Other(n) => (ipv4(UDP, 53, 53, 0, *n, tag, 0), true),
        };
        let mark = mark.map_or(0, |m| (m as u32) << 2 | 3);
        let key = peer(p as u32);
        let verdict = self.engine.handle_packet(self.now, key, &bytes, mark);
        self.handed_in.0 += 1;
        self.handed_in.1 += bytes.len() as u64;
        if !self.exists[p] && self.engine.peer(key).is_some() {
            self.exists[p] = true; // created on demand with the defaults
            self.case.peers[p] = self.defaults.clone();
            self.max_size[p] = self.defaults.max_size;
        }
        if self.case.dynamic_marking && mark & 3 == 3 && (mark >> 2) != 0 && self.exists[p] {
            self.max_size[p] = (mark >> 2) as usize;
        }
        match verdict {
            Verdict::Queued(TrafficClass::Bypass) => self.bypass.push_back(bytes),
            Verdict::Queued(class) => {
                assert!(!expect_bypass, "{pkt:?} must bypass, got {class:?}");
                assert!(
                    bytes.len() <= self.max_size[p] / 2,
                    "packets over half the max bypass"
                );
                if matches!(pkt, Pkt::Voice6(_)) {
                    assert!(self.cfg(p).encoding != Encoding::Kau || !self.cfg(p).accepts_bundles);
                }
                let deadline = self.now + self.cfg(p).hold_time;
                self.queues[p].push_back(Queued {
                    tag,
                    bytes,
                    arrival: self.now,
                    deadline,
                    opportunistic: class == TrafficClass::Opportunistic,
                });
            }
            Verdict::Dropped(DropReason::QueueBytes) => {
                assert!(bytes.len() > self.cfg(p).queue_limit_bytes);
                // counted as a front drop by the counters, but it never entered the queue
                self.front_drops_seen[p] += 1;
            }
            Verdict::Dropped(DropReason::QueuePackets) => self.front_drops_seen[p] += 1,
            Verdict::Dropped(DropReason::PeerTableFull) => assert!(!self.exists[p]),
            Verdict::Dropped(r) => assert_eq!(r, DropReason::BypassQueueFull, "{pkt:?}"),
        }
        self.sync_drops(p);
    }

    /// Applies drops of the oldest packets (seen in the counters) to the model queue.
    fn sync_drops(&mut self, p: usize) {
        let d = front_drops(&self.engine, p);
        assert!(d >= self.front_drops_seen[p]);
        for _ in self.front_drops_seen[p]..d {
            self.queues[p]
                .pop_front()
                .expect("engine dropped a packet the model does not have");
        }
        self.front_drops_seen[p] = d;
    }

    fn drain(&mut self) {
        let mut n = 0;
        while let Some(t) = self.engine.poll_transmit(self.now, &mut self.buf) {
            n += 1;
            assert!(n < 100_000, "poll_transmit does not terminate");
            self.transmits += 1;
            let data = &self.buf[..t.len];
            let p = (0..PEERS)
                .find(|&p| peer(p as u32) == t.peer)
                .expect("known peer");
            let inner: Vec<&[u8]> = match t.kind {
                TransmitKind::Bypass => {
                    let want = self
                        .bypass
                        .pop_front()
                        .expect("bypass packet the model does not have");
                    assert_eq!(data, &want[..], "bypass packets leave unchanged, in order");
                    continue;
                }
                TransmitKind::Single => vec![data],
                TransmitKind::Bundle { .. } if self.removed == Some(p) => {
                    panic!("a removed peer's packets leave alone")
                }
                TransmitKind::Bundle { packets, encoding } => {
                    let cfg = &self.case.peers[p];
                    assert!(
                        cfg.accepts_bundles,
                        "bundle sent to a peer that does not accept bundles"
                    );
                    assert_eq!(encoding, cfg.encoding);
                    assert!(
                        packets >= 2,
                        "a bundle of one packet must leave as that packet"
                    );
                    assert!(packets as usize <= cfg.max_packets, "max packets exceeded");
                    assert!(
                        t.len + cfg.outer_overhead <= self.max_size[p],
                        "bundle of {} + {} bytes exceeds max {}",
                        t.len,
                        cfg.outer_overhead,
                        self.max_size[p]
                    );
                    let b = encoding
                        .decode(data)
                        .unwrap_or_else(|e| panic!("engine output does not decode: {e}"));
                    assert_eq!(b.len(), packets as usize);
                    b.iter().collect()
                }
            };
            let mut dscp = 0;
            for pk in inner {
                let q = self.queues[p]
                    .pop_front()
                    .expect("packet out that the model has not queued");
                assert_eq!(
                    pk,
                    &q.bytes[..],
                    "per-peer order and bytes preserved (tag {})",
                    q.tag
                );
                assert!(
                    self.now <= q.deadline + self.case.granularity,
                    "packet held {} µs, past its deadline by {} > granularity {}",
                    self.now - q.arrival,
                    self.now - q.deadline,
                    self.case.granularity
                );
                dscp = dscp.max(pk[1] >> 2);
            }
            assert_eq!(t.dscp, dscp, "DSCP is the highest inside");
        }
        let after = self.engine.poll_timeout();
        assert!(
            after.map_or(true, |t| t > self.now),
            "after a full drain nothing is due: {after:?} at {}",
            self.now
        );
    }

    fn check(&mut self) {
        check_accounting(&self.engine);
        // The totals (summed over peers, removed ones included) count every
        // packet handed in exactly once.
        let c = self.engine.stats().counters;
        assert_eq!(
            (c.packets_in, c.bytes_in),
            self.handed_in,
            "packets and bytes in"
        );
        let mut queued = self.bypass.len();
        for p in 0..PEERS {
            self.sync_drops(p);
            let key = peer(p as u32);
            let q = &self.queues[p];
            queued += q.len();
            match self.engine.peer_queued(key) {
                Some((n, _)) => assert_eq!(n, q.len(), "peer {p} queue length"),
                None => assert!(q.is_empty()),
            }
            if let Some(s) = self.engine.peer_stats(key) {
                let c = &s.counters;
                assert_eq!(
                    c.packets_in,
                    c.aggregated_packets
                        + c.unaggregated_packets
                        + c.bypass_packets
                        + c.dropped_total()
                        + q.len() as u64,
                    "peer accounting"
                );
            }
            if !self.link_busy {
                assert!(
                    !q.iter().any(|x| x.opportunistic),
                    "opportunistic packet held while the link is idle"
                );
                if self.case.link_mode != LinkMode::Fixed {
                    assert!(
                        q.is_empty(),
                        "hold-while-busy: nothing waits while the link is idle"
                    );
                }
            }
            if !self.case.peers[p].accepts_bundles && self.exists[p] {
                assert!(
                    q.is_empty(),
                    "a peer without bundle support never has packets waiting"
                );
            }
        }
        assert!(
            self.bypass.is_empty(),
            "bypass packets never wait after a drain"
        );
        assert_eq!(self.engine.queued().0, queued);
    }

    fn finish(&mut self) {
        self.engine.flush();
        self.drain();
        self.check();
        assert_eq!(self.engine.queued(), (0, 0));
        assert!(self.queues.iter().all(VecDeque::is_empty));
        assert_eq!(self.engine.poll_timeout(), None);
    }
}

fn run(case: Case) {
    let ops = case.ops.clone();
    let mut m = Model::new(case);
    for op in &ops {
        m.step(op);
    }
    m.finish();
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        max_shrink_iters: 2_000,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn engine_invariants_native(c in case(Just(Encoding::Native))) {
        run(c);
    }

    #[test]
    fn engine_invariants_kau(c in case(Just(Encoding::Kau))) {
        run(c);
    }

    #[test]
    fn engine_invariants_simplemux(c in case(Just(Encoding::Simplemux))) {
        run(c);
    }

    #[test]
    fn engine_invariants_mixed_encodings(c in case(encoding())) {
        run(c);
    }
}

/// The model itself must notice a broken engine output: a sanity check that
/// the checks above can fail (a reordered pair is caught).
#[test]
#[should_panic(expected = "per-peer order")]
fn model_catches_reordering() {
    let case = Case {
        link_mode: LinkMode::Fixed,
        dynamic_marking: false,
        max_peers: 8,
        bypass_limit: 8,
        granularity: 0,
        peers: vec![PeerConfig::default(); PEERS],
        ops: vec![],
    };
    let mut m = Model::new(case);
    m.packet(1, &Pkt::Voice(60), None);
    m.packet(1, &Pkt::Voice(60), None);
    m.queues[1].swap(0, 1);
    m.engine.flush();
    m.drain();
}

/// Coverage guard: over a fixed set of generated cases, every behaviour the
/// properties talk about actually happens (bundles of every encoding, each
/// trigger, drops of the oldest, bypass, opportunistic packets), so the
/// properties above are not vacuously true.
#[test]
fn generated_cases_exercise_every_trigger() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let strategy = case(encoding());
    let mut total = airpack_core::engine::Counters::default();
    let mut encodings = std::collections::HashSet::new();
    for _ in 0..200 {
        let c = strategy.new_tree(&mut runner).unwrap().current();
        let ops = c.ops.clone();
        let mut m = Model::new(c);
        for op in &ops {
            m.step(op);
        }
        m.finish();
        for p in 0..PEERS {
            if m.engine
                .peer_stats(peer(p as u32))
                .is_some_and(|s| s.counters.bundles > 0)
            {
                encodings.insert(m.case.peers[p].encoding);
            }
        }
        total.merge(&m.engine.stats().counters);
    }
    eprintln!("coverage: {total:?}, encodings {encodings:?}");
    assert_eq!(encodings.len(), 3, "bundles in every encoding");
    for (name, v) in [
        ("bundles", total.bundles),
        ("singles", total.unaggregated_packets),
        ("bypass", total.bypass_packets),
        ("timeout", total.sent_on_timeout),
        ("size", total.sent_on_size),
        ("idle", total.sent_on_idle),
        ("flush", total.sent_on_flush),
        (
            "drop queue bytes",
            total.dropped[DropReason::QueueBytes.index()],
        ),
        (
            "drop queue packets",
            total.dropped[DropReason::QueuePackets.index()],
        ),
        (
            "drop peer table",
            total.dropped[DropReason::PeerTableFull.index()],
        ),
        (
            "drop bypass full",
            total.dropped[DropReason::BypassQueueFull.index()],
        ),
    ] {
        assert!(v > 0, "no case exercised {name}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Hostile input: arbitrary bytes (and mutated valid packets) handed in as
    /// outgoing packets or received as bundles never panic, and every packet
    /// is accounted for.
    #[test]
    fn arbitrary_bytes_are_counted_never_panic(
        cfg in peer_config(),
        inputs in prop::collection::vec(
            (
                0..PEERS,
                prop_oneof![
                    prop::collection::vec(any::<u8>(), 0..200),
                    (28usize..300, any::<u32>(), 0usize..300, any::<u8>()).prop_map(|(n, tag, at, x)| {
                        let mut p = udp4(n, 0, tag);
                        let i = at % p.len();
                        p[i] ^= x;
                        p
                    }),
                ],
                any::<u32>(),
                any::<bool>(),
            ),
            1..100,
        ),
        dynamic_marking in any::<bool>(),
    ) {
        let mut e = Engine::new(EngineConfig {
            peer_defaults: cfg,
            dynamic_marking,
            classifier: Classifier { rules: vec![], default: TrafficClass::Bundle },
            ..EngineConfig::default()
        });
        let mut buf = vec![0u8; 2048];
        let mut now = 0;
        let mut handed_in = 0u64;
        for (p, bytes, mark, as_bundle) in &inputs {
            now += 100;
            let key = peer(*p as u32);
            if *as_bundle {
                for enc in Encoding::ALL {
                    if let Ok(b) = e.receive_with(key, enc, bytes) {
                        prop_assert!(b.iter().all(|pk| !pk.is_empty()));
                    }
                }
            } else {
                e.handle_packet(now, key, bytes, *mark);
                handed_in += 1;
            }
            while let Some(t) = e.poll_transmit(now, &mut buf) {
                prop_assert!(t.len <= buf.len());
            }
            check_accounting(&e);
        }
        e.flush();
        while e.poll_transmit(now, &mut buf).is_some() {}
        prop_assert_eq!(e.queued(), (0, 0));
        check_accounting(&e);
        let c = &e.stats().counters;
        prop_assert_eq!(c.packets_in, handed_in);
        let received = c.bundles_received + c.decode_errors.iter().sum::<u64>();
        prop_assert_eq!(received, 3 * inputs.iter().filter(|x| x.3).count() as u64);
    }
}
