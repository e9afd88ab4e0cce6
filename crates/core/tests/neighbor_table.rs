//! The neighbour table with simulated time: several tables exchange hellos
//! over a simulated link (per-direction reachability and random loss), each
//! woken exactly at its `poll_timeout`, as the daemon does.
//!
//! Properties: a neighbour is reported up only when the hello that made it
//! up lists us (bidirectional), never over a one-way link; a neighbour that
//! stops goes down no later than 3 hello intervals after its last hello; on
//! a loss-free link nothing ever goes down; hostile hellos (any ids and
//! addresses, forged tags) never grow the table past its capacity, never
//! displace an up neighbour, and are counted by reason.
//!
//! Owns these checks only.

use airpack_core::auth::Key;
use airpack_core::neighbor::hello::{Encodings, Hello, HelloHeader, HelloWriter, NeighborEntry};
use airpack_core::neighbor::table::{Config, DropReason, Event, Table};
use airpack_core::Micros;
use proptest::prelude::*;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

const INTERVAL: Micros = 1_000_000;

struct Node {
    table: Table,
    addr: IpAddr,
    /// Stops sending (and hearing) from this time on.
    dies_at: Micros,
    /// Up neighbours as the daemon would hold them.
    up: HashMap<IpAddr, u64>,
    /// Time of the last hello accepted from each address.
    last_accepted: HashMap<IpAddr, Micros>,
    /// Every Down: (time, address).
    downs: Vec<(Micros, IpAddr)>,
}

struct Net {
    nodes: Vec<Node>,
    /// reach[a][b]: b can hear a.
    reach: Vec<Vec<bool>>,
    /// Probability that one hello is lost on a reachable link, in 1/256.
    loss: u32,
    rng: u64,
    now: Micros,
}

impl Net {
    fn new(n: usize, key: Option<Key>, seed: u64) -> Net {
        let nodes = (0..n)
            .map(|i| {
                let mut cfg = Config::new(1000 + i as u64);
                cfg.interval = INTERVAL;
                cfg.auth = key.clone().map(|k| (1, k));
                Node {
                    table: Table::new(cfg, 5_000 * i as u64),
                    addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1 + i as u8)),
                    dies_at: Micros::MAX,
                    up: HashMap::new(),
                    last_accepted: HashMap::new(),
                    downs: Vec::new(),
                }
            })
            .collect();
        Net {
            nodes,
            reach: vec![vec![true; n]; n],
            loss: 0,
            rng: seed | 1,
            now: 0,
        }
    }

    fn rand(&mut self) -> u32 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 32) as u32
    }

    fn drain(&mut self, j: usize, hello_from: Option<(usize, &[u8])>) {
        let now = self.now;
        while let Some(ev) = self.nodes[j].table.poll_event() {
            let me = self.nodes[j].table.config().id;
            match ev {
                Event::Up(p) | Event::Changed(p) => {
                    // Up only right after a hello from that neighbour that lists us.
                    let (k, bytes) = hello_from.expect("up/changed only after a hello");
                    assert_eq!(self.nodes[k].addr, p.addr);
                    let h = Hello::parse(bytes).unwrap();
                    assert!(
                        h.neighbors().any(|e| e.id == me),
                        "node {j} took {} up from a hello that does not list it",
                        p.addr
                    );
                    self.nodes[j].up.insert(p.addr, p.id);
                }
                Event::Down { addr, .. } => {
                    assert!(self.nodes[j].up.remove(&addr).is_some(), "down without up");
                    self.nodes[j].downs.push((now, addr));
                }
            }
        }
    }

    fn alive(&self, i: usize) -> bool {
        self.now < self.nodes[i].dies_at
    }

    /// Runs until `end`, waking each node at its own deadline.
    fn run(&mut self, end: Micros) {
        let mut buf = [0u8; 1500];
        loop {
            let (t, k) = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].dies_at > self.now)
                .map(|i| (self.nodes[i].table.poll_timeout(), i))
                .min()
                .unwrap();
            if t > end {
                self.now = end;
                return;
            }
            assert!(t >= self.now, "deadline in the past");
            self.now = t;
            if !self.alive(k) {
                // Its death comes before its next deadline: it just stops.
                continue;
            }
            self.nodes[k].table.handle_timeout(t);
            self.drain(k, None);
            let r = self.rand();
            if let Some(len) = self.nodes[k].table.poll_hello(t, r, &mut buf) {
                for j in 0..self.nodes.len() {
                    if j == k || !self.alive(j) || !self.reach[k][j] {
                        continue;
                    }
                    if self.rand() % 256 < self.loss {
                        continue;
                    }
                    let from = self.nodes[k].addr;
                    if self.nodes[j]
                        .table
                        .handle_hello(t, from, &buf[..len])
                        .is_ok()
                    {
                        self.nodes[j].last_accepted.insert(from, t);
                    }
                    self.drain(j, Some((k, &buf[..len])));
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Loss-free, fully connected: everyone is up with everyone within two
    /// intervals, nothing ever goes down, then a node dies and every other
    /// node takes it down no later than 3 intervals after its last hello.
    #[test]
    fn up_when_bidirectional_down_within_three_intervals(
        n in 2usize..6, seed in any::<u64>(), death in 3_000_000u64..9_000_000, auth in any::<bool>(),
    ) {
        let mut net = Net::new(n, auth.then(|| Key::from_bytes([4; 16])), seed);
        net.nodes[0].dies_at = death;
        net.run(2 * INTERVAL + 1);
        for i in 0..n {
            prop_assert_eq!(net.nodes[i].up.len(), n - 1, "node {} at 2 intervals", i);
        }
        net.run(death + 4 * INTERVAL);
        let dead = net.nodes[0].addr;
        for j in 1..n {
            let node = &net.nodes[j];
            prop_assert!(!node.up.contains_key(&dead));
            prop_assert_eq!(node.downs.len(), 1, "node {}: only the dead node goes down", j);
            let (t, addr) = node.downs[0];
            prop_assert_eq!(addr, dead);
            let last = node.last_accepted[&dead];
            prop_assert!(last < death);
            prop_assert!(t <= last + 3 * INTERVAL, "down at {} after last hello at {}", t, last);
            prop_assert!(t > last + 2 * INTERVAL, "down too early: {} (last {})", t, last);
            prop_assert_eq!(node.up.len(), n - 2);
        }
    }

    /// One-way links never bring a neighbour up; with random loss, every Up
    /// still comes from a hello that lists us (checked in `drain`).
    #[test]
    fn one_way_links_never_up(seed in any::<u64>(), loss in 0u32..200) {
        let mut net = Net::new(3, None, seed);
        // 1 hears 0, 0 never hears 1; 2 is fully connected.
        net.reach[1][0] = false;
        net.loss = loss;
        net.run(20 * INTERVAL);
        let (a0, a1) = (net.nodes[0].addr, net.nodes[1].addr);
        prop_assert!(!net.nodes[1].up.contains_key(&a0));
        prop_assert!(!net.nodes[0].up.contains_key(&a1));
        prop_assert!(net.nodes[1].table.neighbors().any(|v| v.addr == a0 && !v.up) || loss > 0);
    }
}

fn hello(sender: u64, seq: u64, lists: &[(u64, IpAddr)], key: Option<&Key>) -> Vec<u8> {
    let mut buf = [0u8; 1500];
    let h = HelloHeader {
        sender,
        seq,
        interval_ms: 1000,
        encodings: Encodings(1),
    };
    let mut w = HelloWriter::new(&mut buf, &h, key.map(|k| (1, k))).unwrap();
    for &(id, addr) in lists {
        w.push(&NeighborEntry {
            id,
            addr,
            rx_ratio: 255,
            max_bundle: 1500,
            radio: None,
        })
        .unwrap();
    }
    let n = w.finish();
    buf[..n].to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Hellos from any number of strangers: the table never holds more than
    /// its capacity, every refusal is counted as table_full, and the one up
    /// neighbour (which keeps sending) stays up throughout.
    #[test]
    fn hostile_hellos_cannot_grow_the_table(
        cap in 1usize..10,
        strangers in prop::collection::vec((any::<u64>(), any::<[u8; 4]>(), any::<u64>()), 1..200),
    ) {
        let me = 1u64;
        let mut cfg = Config::new(me);
        cfg.capacity = cap;
        let mut t = Table::new(cfg, 0);
        let friend: IpAddr = "10.9.9.9".parse().unwrap();
        let mut now = 0;
        t.handle_hello(now, friend, &hello(77, 0, &[(me, "10.0.0.1".parse().unwrap())], None)).unwrap();
        let up = matches!(t.poll_event(), Some(Event::Up(p)) if p.addr == friend);
        prop_assert!(up);
        let mut refused = 0u64;
        for (k, (id, addr, seq)) in strangers.iter().enumerate() {
            now += 10_000;
            let id = if *id == me || *id == 77 { 2 } else { *id };
            let from = IpAddr::from(*addr);
            if from == friend { continue; }
            match t.handle_hello(now, from, &hello(id, *seq, &[], None)) {
                Ok(()) => {}
                Err(DropReason::TableFull) => refused += 1,
                Err(e) => prop_assert!(false, "unexpected {:?}", e),
            }
            prop_assert!(t.len() <= cap);
            // The friend keeps its hellos coming.
            t.handle_hello(now, friend, &hello(77, 1 + k as u64, &[(me, "10.0.0.1".parse().unwrap())], None)).unwrap();
            t.handle_timeout(now);
            while let Some(ev) = t.poll_event() {
                let friend_down = matches!(ev, Event::Down { addr, .. } if addr == friend);
                prop_assert!(!friend_down, "the up neighbour was displaced");
            }
        }
        prop_assert_eq!(t.stats().drops[DropReason::TableFull.index()], refused);
        prop_assert!(t.neighbors().any(|v| v.addr == friend && v.up));
    }

    /// With a key: hellos without a trailer, under another key or key id, or
    /// replayed, never enter the table; each is counted under its reason.
    #[test]
    fn forged_and_replayed_hellos_are_refused(
        wrong in any::<[u8; 16]>(), seqs in prop::collection::vec(any::<u64>(), 1..30),
    ) {
        let key = Key::from_bytes([0x42; 16]);
        prop_assume!(wrong != [0x42; 16]);
        let bad = Key::from_bytes(wrong);
        let mut cfg = Config::new(1);
        cfg.auth = Some((1, key.clone()));
        let mut t = Table::new(cfg, 0);
        let us = (1u64, "10.0.0.1".parse::<IpAddr>().unwrap());
        for (i, &s) in seqs.iter().enumerate() {
            let from = IpAddr::from([10, 1, 0, i as u8]);
            prop_assert_eq!(t.handle_hello(0, from, &hello(50 + i as u64, s, &[us], None)), Err(DropReason::NoAuth));
            prop_assert_eq!(t.handle_hello(0, from, &hello(50 + i as u64, s, &[us], Some(&bad))), Err(DropReason::BadTag));
            let mut other_id = hello(50 + i as u64, s, &[us], Some(&key));
            let kid = other_id.len() - 9;
            other_id[kid] = 2;
            prop_assert_eq!(t.handle_hello(0, from, &other_id), Err(DropReason::BadKeyId));
        }
        prop_assert!(t.is_empty());
        prop_assert_eq!(t.poll_event(), None);
        // A genuine hello is taken, and its replay refused.
        let from: IpAddr = "10.2.0.1".parse().unwrap();
        let good = hello(9, seqs[0], &[us], Some(&key));
        prop_assert_eq!(t.handle_hello(0, from, &good), Ok(()));
        prop_assert_eq!(t.handle_hello(1, from, &good), Err(DropReason::Replay));
        prop_assert_eq!(t.stats().accepted, 1);
        let n = seqs.len() as u64;
        let d = &t.stats().drops;
        prop_assert_eq!(
            (d[DropReason::NoAuth.index()], d[DropReason::BadTag.index()], d[DropReason::BadKeyId.index()], d[DropReason::Replay.index()]),
            (n, n, n, 1)
        );
    }
}

/// A neighbour that stops listing us goes down at once; our hello lists it
/// with the size we ask for; a hello looped back to us is dropped as `own`;
/// the next hello comes after 3/4 to 1 interval depending on the random value.
#[test]
fn stops_listing_us_and_own_hellos_and_jitter() {
    let mut t = Table::new(Config::new(1), 100);
    let b: IpAddr = "10.0.0.2".parse().unwrap();
    let us = (1u64, "10.0.0.1".parse::<IpAddr>().unwrap());
    t.handle_hello(0, b, &hello(2, 0, &[us], None)).unwrap();
    assert!(matches!(t.poll_event(), Some(Event::Up(p)) if p.id == 2 && p.max_bundle == 1500));
    assert_eq!(t.poll_event(), None);
    t.handle_hello(10, b, &hello(2, 1, &[], None)).unwrap();
    assert_eq!(t.poll_event(), Some(Event::Down { addr: b, id: 2 }));
    assert_eq!(t.len(), 1, "still heard, one-way now");
    assert_eq!(t.heard(b), Some(Encodings(1)));
    assert_eq!(t.heard("10.0.0.9".parse().unwrap()), None);
    let mut buf = [0u8; 1500];
    let n = t.poll_hello(20, 0, &mut buf).unwrap();
    let h = Hello::parse(&buf[..n]).unwrap();
    assert_eq!(h.header.seq, 100);
    let e: Vec<_> = h.neighbors().collect();
    assert_eq!(e.len(), 1);
    assert_eq!((e[0].id, e[0].addr, e[0].rx_ratio), (2, b, 255));
    assert_eq!(e[0].max_bundle, 1500, "no loss seen: the largest size");
    assert_eq!(
        t.handle_hello(30, "10.0.0.1".parse().unwrap(), &buf[..n]),
        Err(DropReason::Own)
    );
    assert_eq!(t.poll_hello(21, 0, &mut buf), None);
    assert_eq!(
        t.poll_timeout(),
        20 + INTERVAL,
        "random 0: a whole interval"
    );
    let mut t2 = Table::new(Config::new(1), 0);
    t2.poll_hello(0, u32::MAX, &mut buf).unwrap();
    let next = t2.poll_timeout();
    assert!((3 * INTERVAL / 4..=INTERVAL).contains(&next), "{next}");
}

/// Lost hellos lower the size we ask a neighbour for: hellos 0..=10 with
/// every other one lost from 2 on.
#[test]
fn losses_shrink_the_size_we_ask_for() {
    let mut t = Table::new(Config::new(1), 0);
    let b: IpAddr = "10.0.0.2".parse().unwrap();
    for s in [0u64, 1, 3, 5, 7, 9, 11, 13] {
        t.handle_hello(s * INTERVAL, b, &hello(2, s, &[], None))
            .unwrap();
    }
    let v = t.neighbors().next().unwrap();
    assert!(v.rx_ratio < 0.75, "{}", v.rx_ratio);
    assert!(v.max_bundle_from_it < 1500, "{}", v.max_bundle_from_it);
    assert!(v.max_bundle_from_it >= 128);
}
