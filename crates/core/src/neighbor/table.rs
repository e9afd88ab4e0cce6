//! The neighbour table of one link: which neighbours run airpack, what they
//! accept, and what we tell them in our hellos.
//!
//! Owns: per-neighbour state (last heard, the interval it announced, its
//! encodings, whether it lists us, the size it wants from us, our
//! [`LinkEstimate`] of its link, its replay window), the hello schedule, the
//! bounded slot array and the drop counters. Driven by the daemon:
//! [`Table::handle_hello`] for each received hello, [`Table::handle_timeout`]
//! and [`Table::poll_hello`] when [`Table::poll_timeout`] is reached, then
//! [`Table::poll_event`] until `None`. Must not touch: sockets, clocks,
//! randomness, the engine (events say what to set up there).
//!
//! Rules: a neighbour is *up* (runs airpack, bundles may go to it) only while
//! its latest accepted hello lists our id (a bidirectional exchange); it goes
//! down when a hello stops listing us, or `hold_intervals` of its announced
//! intervals (clamped to `max_peer_interval`) after its last accepted hello.
//! The table never holds more than `capacity` neighbours: hellos from new
//! neighbours beyond that are dropped (`table_full`) and up neighbours are
//! never displaced. Events are level-triggered: each slot remembers what the
//! daemon was last told and reports the difference, so nothing is queued and
//! nothing can overflow; a slot is reused only after its `Down` was polled.

use super::hello::{Encodings, Hello, HelloError, HelloHeader, HelloWriter, NeighborEntry, Radio};
use super::quality::{AirModel, LinkEstimate, Source};
use super::radio::{MacWindow, RadioReport, TxEstimate};
use crate::auth::{Key, ReplayWindow};
use crate::Micros;
use core::net::IpAddr;

/// How a table behaves; one per link.
#[derive(Clone, Debug)]
pub struct Config {
    /// Our sender id (random, the same on all links).
    pub id: u64,
    /// Our hello interval, µs (1 s by default); each is sent up to a quarter
    /// earlier at random (RFC 5148 jitter), never later.
    pub interval: Micros,
    /// Encodings we accept.
    pub encodings: Encodings,
    /// Most neighbours held at once.
    pub capacity: usize,
    /// A neighbour goes down this many of its intervals after its last hello.
    pub hold_intervals: u32,
    /// A neighbour's announced interval counts as at most this long, µs.
    pub max_peer_interval: Micros,
    /// Key id and key: hellos are tagged, and only tagged hellos accepted.
    pub auth: Option<(u8, Key)>,
    /// Airtime model for the size we ask each neighbour to send.
    pub model: AirModel,
    /// Sizes we ask for stay in `min_bundle..=max_bundle` (outer IP bytes).
    pub min_bundle: u16,
    /// See `min_bundle`.
    pub max_bundle: u16,
    /// EWMA weight of a new hello sample.
    pub alpha: f64,
}

impl Config {
    /// Defaults: 1 s interval, all encodings, 64 neighbours, hold 3
    /// intervals (at most 5 s each), no key, 802.11b 11 Mbit/s, 128..1500
    /// bytes, EWMA 1/8.
    pub fn new(id: u64) -> Config {
        Config {
            id,
            interval: 1_000_000,
            encodings: Encodings(0x07),
            capacity: 64,
            hold_intervals: 3,
            max_peer_interval: 5_000_000,
            auth: None,
            model: AirModel::dot11b_long(11.0),
            min_bundle: 128,
            max_bundle: 1500,
            alpha: 0.125,
        }
    }
}

/// Why a received hello was not taken into the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The parser refused it.
    Malformed(HelloError),
    /// Our own hello (multicast loopback).
    Own,
    /// A key is configured and the hello has no trailer.
    NoAuth,
    /// The trailer names another key.
    BadKeyId,
    /// The tag does not verify.
    BadTag,
    /// The sequence number was seen before or is too old.
    Replay,
    /// A new neighbour, and the table is full.
    TableFull,
}

impl DropReason {
    /// Number of distinct reasons (the length of [`Stats::drops`]).
    pub const COUNT: usize = 11;

    /// Index into [`Stats::drops`].
    pub fn index(self) -> usize {
        match self {
            DropReason::Malformed(e) => match e {
                HelloError::Truncated => 0,
                HelloError::BadVersion => 1,
                HelloError::Unsupported => 2,
                HelloError::BadField => 3,
                HelloError::TrailingGarbage => 4,
            },
            DropReason::Own => 5,
            DropReason::NoAuth => 6,
            DropReason::BadKeyId => 7,
            DropReason::BadTag => 8,
            DropReason::Replay => 9,
            DropReason::TableFull => 10,
        }
    }

    /// Statistics label (the parser's reasons as they are).
    pub fn reason(self) -> &'static str {
        match self {
            DropReason::Malformed(e) => e.reason(),
            DropReason::Own => "own",
            DropReason::NoAuth => "no_auth",
            DropReason::BadKeyId => "bad_key_id",
            DropReason::BadTag => "bad_tag",
            DropReason::Replay => "replay",
            DropReason::TableFull => "table_full",
        }
    }

    /// The labels in index order.
    pub const LABELS: [&'static str; Self::COUNT] = [
        "truncated",
        "bad_version",
        "unsupported",
        "bad_field",
        "trailing_garbage",
        "own",
        "no_auth",
        "bad_key_id",
        "bad_tag",
        "replay",
        "table_full",
    ];
}

/// Counters of one table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Hellos handed to [`Table::handle_hello`].
    pub received: u64,
    /// Hellos taken into the table.
    pub accepted: u64,
    /// Hellos written by [`Table::poll_hello`].
    pub sent: u64,
    /// Dropped hellos by [`DropReason::index`].
    pub drops: [u64; DropReason::COUNT],
    /// Neighbours left out of our hellos for lack of room.
    pub entries_left_out: u64,
    /// `Up` events.
    pub ups: u64,
    /// `Down` events.
    pub downs: u64,
}

/// What the daemon needs to set a neighbour up as a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// The address its hellos come from (the engine's peer key).
    pub addr: IpAddr,
    /// Its sender id.
    pub id: u64,
    /// Encodings it accepts.
    pub encodings: Encodings,
    /// Largest bundle it wants from us (outer IP bytes); 0 = plain packets only.
    pub max_bundle: u16,
}

/// A change the daemon must apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The neighbour runs airpack and hears us: bundles may go to it.
    Up(PeerInfo),
    /// An up neighbour's encodings or size changed.
    Changed(PeerInfo),
    /// The neighbour is gone or no longer hears us: back to plain forwarding.
    Down {
        /// Its address.
        addr: IpAddr,
        /// Its sender id.
        id: u64,
    },
}

/// One neighbour as the operator sees it (`airpack peers`).
#[derive(Clone, Debug, PartialEq)]
pub struct NeighborView {
    /// Address of its hellos.
    pub addr: IpAddr,
    /// Its sender id.
    pub id: u64,
    /// Bidirectional exchange: it lists us.
    pub up: bool,
    /// When its last hello was accepted.
    pub last_heard: Micros,
    /// What it accepts and wants from us.
    pub encodings: Encodings,
    /// Largest bundle it wants from us.
    pub max_bundle_to_it: u16,
    /// Largest bundle we ask it to send us.
    pub max_bundle_from_it: u16,
    /// Share of its hellos we receive (0..1).
    pub rx_ratio: f64,
    /// ETX, once it has reported our ratio.
    pub etx: Option<f64>,
    /// Smoothed SNR of its frames, dB, when the radio reports it.
    pub snr_db: Option<f64>,
    /// What decided `max_bundle_from_it`: none, hello or snr.
    pub ask_source: Source,
    /// Largest bundle we send it: its ask, capped by `tx_size`.
    pub max_bundle_used: u16,
    /// What decided `max_bundle_used`: neighbor (its ask) or mac (`tx_size`).
    pub quality_source: Source,
    /// Size our radio's MAC counters call for (frames to it), while fresh.
    pub tx_size: Option<u16>,
    /// The radio's last full window of MAC counters of our frames to it.
    pub mac: Option<MacWindow>,
    /// The radio's last report (signal, noise, counters).
    pub radio: Option<RadioReport>,
}

#[derive(Clone, Debug)]
struct Neighbor {
    id: u64,
    addr: IpAddr,
    last_heard: Micros,
    expires: Micros,
    encodings: Encodings,
    lists_us: bool,
    max_to_it: u16,
    est: LinkEstimate,
    radio: Option<Radio>,
    /// Transmit-side estimate from the radio's MAC counters.
    tx: TxEstimate,
    /// Size `tx` calls for, while fresh.
    tx_cap: Option<u16>,
    report: Option<RadioReport>,
    window: ReplayWindow,
    /// IP length of its last hello (for the error-rate estimate).
    hello_len: usize,
    /// Expired (or replaced); freed once `reported` is `None`.
    gone: bool,
    /// What the daemon was last told: `Some` = up with these figures.
    reported: Option<(Encodings, u16)>,
}

impl Neighbor {
    /// The size we send it and what decided it: its ask, unless our MAC
    /// counters call for less.
    fn used(&self) -> (u16, Source) {
        match self.tx_cap {
            Some(c) if c < self.max_to_it => (c, Source::Mac),
            _ => (self.max_to_it, Source::Neighbor),
        }
    }

    fn desired(&self) -> Option<(Encodings, u16)> {
        (!self.gone && self.lists_us).then_some((self.encodings, self.used().0))
    }
}

/// The neighbour table of one link (see the module doc).
#[derive(Debug)]
pub struct Table {
    cfg: Config,
    slots: Vec<Option<Neighbor>>,
    seq: u64,
    next_hello: Micros,
    /// Slots whose `desired()` may differ from `reported`.
    dirty: bool,
    stats: Stats,
}

impl Table {
    /// An empty table; `seq0` is the first hello's sequence number (with a
    /// key it must exceed any used before, e.g. µs since the epoch). The
    /// first hello is due at once.
    pub fn new(cfg: Config, seq0: u64) -> Table {
        let mut slots = Vec::with_capacity(cfg.capacity);
        slots.resize_with(cfg.capacity, || None);
        Table {
            cfg,
            slots,
            seq: seq0,
            next_hello: 0,
            dirty: false,
            stats: Stats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Neighbours held (including ones whose `Down` is not polled yet).
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Whether no neighbour is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn find(&self, addr: IpAddr) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|n| !n.gone && n.addr == addr))
    }

    fn drop(&mut self, r: DropReason) -> Result<(), DropReason> {
        self.stats.drops[r.index()] += 1;
        Err(r)
    }

    /// Takes in a hello received at `now` from `from` (its source address).
    pub fn handle_hello(
        &mut self,
        now: Micros,
        from: IpAddr,
        bytes: &[u8],
    ) -> Result<(), DropReason> {
        self.stats.received += 1;
        let h = match Hello::parse(bytes) {
            Ok(h) => h,
            Err(e) => return self.drop(DropReason::Malformed(e)),
        };
        if h.header.sender == self.cfg.id {
            return self.drop(DropReason::Own);
        }
        if let Some((key_id, key)) = &self.cfg.auth {
            match h.auth {
                None => return self.drop(DropReason::NoAuth),
                Some((id, _)) if id != *key_id => return self.drop(DropReason::BadKeyId),
                Some(_) if !h.verify(*key_id, key) => return self.drop(DropReason::BadTag),
                Some(_) => {}
            }
        }
        let auth = self.cfg.auth.is_some();
        let mut existing = self.find(from);
        if let Some(j) = existing {
            let n = self.slots[j].as_mut().expect("found");
            if n.id != h.header.sender {
                // The address now belongs to another node (a restart with a
                // new id): the old one is gone; the new one needs a slot.
                n.gone = true;
                self.dirty = true;
                existing = None;
            } else if auth && n.window.check_and_update(h.header.seq).is_err() {
                return self.drop(DropReason::Replay);
            }
        }
        let i = match existing {
            Some(i) => i,
            None => {
                let Some(free) = self.slots.iter().position(Option::is_none) else {
                    return self.drop(DropReason::TableFull);
                };
                let mut window = ReplayWindow::new();
                // A fresh window accepts any first number.
                let _ = window.check_and_update(h.header.seq);
                self.slots[free] = Some(Neighbor {
                    id: h.header.sender,
                    addr: from,
                    last_heard: now,
                    expires: now,
                    encodings: Encodings(0),
                    lists_us: false,
                    max_to_it: 0,
                    est: LinkEstimate::new(self.cfg.alpha),
                    radio: None,
                    tx: TxEstimate::new(self.cfg.alpha),
                    tx_cap: None,
                    report: None,
                    window,
                    hello_len: 0,
                    gone: false,
                    reported: None,
                });
                free
            }
        };
        let n = self.slots[i].as_mut().expect("just filled");
        let interval = (u64::from(h.header.interval_ms) * 1000).min(self.cfg.max_peer_interval);
        n.last_heard = now;
        n.expires = now.saturating_add(u64::from(self.cfg.hold_intervals) * interval);
        n.encodings = h.header.encodings;
        n.est.on_hello(h.header.seq);
        n.hello_len = bytes.len() + 8 + if from.is_ipv4() { 20 } else { 40 };
        let me = h
            .neighbors()
            .find(|e| e.id == self.cfg.id && e.addr.is_ipv4() == from.is_ipv4());
        n.lists_us = me.is_some();
        if let Some(e) = me {
            n.max_to_it = e.max_bundle;
            n.est.on_reported(e.rx_ratio);
        }
        self.dirty = true;
        self.stats.accepted += 1;
        Ok(())
    }

    /// The radio reported signal and noise for a frame from `addr`.
    pub fn set_radio(&mut self, addr: IpAddr, signal_dbm: i8, noise_dbm: i8) {
        if let Some(i) = self.find(addr) {
            let n = self.slots[i].as_mut().expect("found");
            n.est.on_radio(signal_dbm, noise_dbm);
            n.radio = Some(Radio {
                signal_dbm,
                noise_dbm,
            });
        }
    }

    /// The radio's reading about the neighbour at `addr` (see
    /// [`RadioReport`]): its signal over the noise floor feeds the SNR of
    /// the size we ask it for; the MAC counters of our frames to it bound
    /// the size we send it ([`TxEstimate`]). Returns whether `addr` is held.
    pub fn radio_report(&mut self, addr: IpAddr, r: &RadioReport) -> bool {
        let Some(i) = self.find(addr) else {
            return false;
        };
        let (lo, hi) = (self.cfg.min_bundle as usize, self.cfg.max_bundle as usize);
        let model = self.cfg.model;
        let n = self.slots[i].as_mut().expect("found");
        if let Some(signal_dbm) = r.signal() {
            let noise_dbm = r.noise();
            n.est.on_radio(signal_dbm, noise_dbm);
            n.radio = Some(Radio {
                signal_dbm,
                noise_dbm,
            });
        }
        if let Some(m) = r.mac {
            n.tx.on_counters(m, r.frame_len);
        }
        let cap = n.tx.ber().map(|b| model.best_size(b, lo, hi) as u16);
        if cap != n.tx_cap {
            n.tx_cap = cap;
            self.dirty = true;
        }
        n.report = Some(*r);
        true
    }

    /// Expires neighbours not heard from in time.
    pub fn handle_timeout(&mut self, now: Micros) {
        for n in self.slots.iter_mut().flatten() {
            if !n.gone && n.expires <= now {
                n.gone = true;
                self.dirty = true;
            }
        }
    }

    /// When [`Table::handle_timeout`] / [`Table::poll_hello`] next have work.
    pub fn poll_timeout(&self) -> Micros {
        self.slots
            .iter()
            .flatten()
            .filter(|n| !n.gone)
            .map(|n| n.expires)
            .fold(self.next_hello, Micros::min)
    }

    fn ask(&self, n: &Neighbor) -> u16 {
        if self.cfg.encodings.0 == 0 {
            return 0;
        }
        let (lo, hi) = (self.cfg.min_bundle as usize, self.cfg.max_bundle as usize);
        n.est.max_bundle(&self.cfg.model, n.hello_len, lo, hi) as u16
    }

    /// Writes our hello into `buf` when one is due (returns its length), and
    /// schedules the next one `interval` minus up to a quarter of it
    /// (`random` picks how much) later. Up neighbours are listed first; those
    /// that do not fit are left out (counted).
    pub fn poll_hello(&mut self, now: Micros, random: u32, buf: &mut [u8]) -> Option<usize> {
        if now < self.next_hello {
            return None;
        }
        let header = HelloHeader {
            sender: self.cfg.id,
            seq: self.seq,
            interval_ms: (self.cfg.interval / 1000).clamp(1, u64::from(u16::MAX)) as u16,
            encodings: self.cfg.encodings,
        };
        let auth = self.cfg.auth.as_ref().map(|(id, k)| (*id, k));
        let mut w = HelloWriter::new(buf, &header, auth).ok()?;
        let mut left_out = 0;
        for pass_up in [true, false] {
            for n in self.slots.iter().flatten() {
                if n.gone || n.lists_us != pass_up {
                    continue;
                }
                let e = NeighborEntry {
                    id: n.id,
                    addr: n.addr,
                    rx_ratio: n.est.rx_ratio_u8(),
                    max_bundle: self.ask(n),
                    radio: n.radio,
                };
                if w.push(&e).is_err() {
                    left_out += 1;
                }
            }
        }
        let len = w.finish();
        self.stats.entries_left_out += left_out;
        self.stats.sent += 1;
        self.seq = self.seq.wrapping_add(1);
        let jitter = u64::from(random) % (self.cfg.interval / 4 + 1);
        self.next_hello = now + self.cfg.interval.max(1) - jitter;
        Some(len)
    }

    /// The next change the daemon must apply, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        if !self.dirty {
            return None;
        }
        for slot in self.slots.iter_mut() {
            let Some(n) = slot else { continue };
            let want = n.desired();
            if want == n.reported {
                if n.gone {
                    *slot = None;
                }
                continue;
            }
            let info = |(encodings, max_bundle)| PeerInfo {
                addr: n.addr,
                id: n.id,
                encodings,
                max_bundle,
            };
            let ev = match (n.reported, want) {
                (None, Some(w)) => {
                    self.stats.ups += 1;
                    Event::Up(info(w))
                }
                (Some(_), Some(w)) => Event::Changed(info(w)),
                (Some(_), None) => {
                    self.stats.downs += 1;
                    Event::Down {
                        addr: n.addr,
                        id: n.id,
                    }
                }
                (None, None) => unreachable!("equal states skipped"),
            };
            n.reported = want;
            if n.gone && want.is_none() {
                *slot = None;
            }
            return Some(ev);
        }
        self.dirty = false;
        None
    }

    /// The encodings of a neighbour we hear (up or not), if we hear it: a
    /// receiver accepts bundles from any node whose hellos it takes (with a
    /// key: authenticated ones), since the sender may count the link up one
    /// hello before the receiver does.
    pub fn heard(&self, addr: IpAddr) -> Option<Encodings> {
        self.find(addr)
            .and_then(|i| self.slots[i].as_ref())
            .map(|n| n.encodings)
    }

    /// The neighbours held, for the operator.
    pub fn neighbors(&self) -> impl Iterator<Item = NeighborView> + '_ {
        self.slots
            .iter()
            .flatten()
            .filter(|n| !n.gone)
            .map(|n| NeighborView {
                addr: n.addr,
                id: n.id,
                up: n.lists_us,
                last_heard: n.last_heard,
                encodings: n.encodings,
                max_bundle_to_it: n.max_to_it,
                max_bundle_from_it: self.ask(n),
                rx_ratio: n.est.rx_ratio(),
                etx: n.est.etx(),
                snr_db: n.est.snr_db(),
                ask_source: n.est.ber_source(&self.cfg.model, n.hello_len).1,
                max_bundle_used: n.used().0,
                quality_source: n.used().1,
                tx_size: n.tx_cap,
                mac: n.tx.window(),
                radio: n.report,
            })
    }
}
