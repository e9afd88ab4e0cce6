//! Neighbour discovery on the steered interfaces (issue 11 point 2, first
//! step): UDP sockets on each interface of `daemon.interfaces`, one per
//! family (IPv4 and, unless `discovery.ipv6 = false`, IPv6), sending hellos
//! to a link-local multicast group and reading the neighbours', each
//! driving an `airpack_core::neighbor::table::Table`; its events set up and
//! remove engine peers and move the daemon's [`super::peer::Peer`]s between
//! link states (discovered, lost), so hop-by-hop mode needs no `[[peer]]`
//! list. Static peers override: discovery never changes or removes them.
//!
//! Must not touch: the packet path (hellos are a few per second), the
//! hello format or the neighbour rules (that is `airpack_core::neighbor`).
//! IPv6 neighbours are known by their link-local address and interface
//! (`fe80::x%if`), as link-local `[[peer]]`s are. Radio figures (nl80211
//! or the lab's counters file) reach the tables through
//! [`super::link_radio`]. An interface missing at start (or deleted and
//! created again) gets its sockets when the route monitor reports the link.

use super::Daemon;
use crate::daemon::config::{is_link_local_v6, Plan, Transport};
use crate::linux;
use crate::linux::mcast::{join_v6, mreqn, set_int};
use airpack_core::auth::Key;
use airpack_core::neighbor::hello::Encodings;
use airpack_core::neighbor::quality::AirModel;
use airpack_core::neighbor::table::{Config as TableConfig, DropReason, Event, PeerInfo, Table};
use airpack_core::{Encoding, Micros};
use nix::sys::socket::{self as ns, sockopt};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use tracing::{debug, info, warn};

/// Poll tokens of the hello sockets: `TOK_HELLO_BASE + link index`.
pub(super) const TOK_HELLO_BASE: u64 = 20;
/// Most hello sockets (interfaces × families; tokens up to `TOK_CONN_BASE`).
const MAX_LINKS: usize = 64;
/// Hellos read per socket per wakeup.
const RX_BATCH: usize = 32;
/// A hello fits one 1500-byte frame with IPv4 and UDP headers.
const HELLO_BUF: usize = 1472;

/// One interface's hello socket of one family and its neighbour table.
struct HelloLink {
    ifname: String,
    v6: bool,
    /// The interface's index when the socket was opened (0: never).
    ifindex: u32,
    /// Where hellos go: the group, with the interface as scope for IPv6.
    dest: SocketAddr,
    /// `None` while the interface is missing or unusable.
    sock: Option<UdpSocket>,
    table: Table,
    send_errors: u64,
    recv_errors: u64,
}

/// What opening a hello socket needs.
struct Spec {
    port: u16,
    group_v4: Ipv4Addr,
    group_v6: Ipv6Addr,
    mark: u32,
}

impl HelloLink {
    /// (Re)opens the socket on the interface's current index.
    fn open(&mut self, spec: &Spec) -> io::Result<()> {
        self.sock = None;
        let ifindex = linux::tun::ifindex(&self.ifname)?;
        let sock = if self.v6 {
            open_socket_v6(ifindex, &self.ifname, spec.port, spec.group_v6, spec.mark)?
        } else {
            open_socket(ifindex, &self.ifname, spec.port, spec.group_v4, spec.mark)?
        };
        self.ifindex = ifindex;
        self.dest = if self.v6 {
            SocketAddr::V6(SocketAddrV6::new(spec.group_v6, spec.port, 0, ifindex))
        } else {
            SocketAddr::V4(SocketAddrV4::new(spec.group_v4, spec.port))
        };
        self.sock = Some(sock);
        Ok(())
    }

    fn family(&self) -> &'static str {
        if self.v6 {
            "IPv6"
        } else {
            "IPv4"
        }
    }
}

/// The daemon's discovery state.
pub(super) struct Discovery {
    spec: Spec,
    /// One per (interface, family), fixed at start: the index is the token.
    links: Vec<HelloLink>,
    /// Up neighbours over all links, by address, with their link.
    up: HashMap<IpAddr, (PeerInfo, usize)>,
    /// Up neighbours that are also static peers (left alone).
    overridden: u64,
    id: u64,
    rng: u64,
    buf: Vec<u8>,
    /// Earliest table deadline, recomputed after every read and tick (the
    /// loop checks it on every wakeup, so it must be cheap).
    next: Micros,
    /// Radio figures for the link estimate (`discovery.radio`, `radio_file`).
    radio: Option<super::link_radio::LinkRadio>,
}

/// The encodings this daemon accepts (all it can decode).
fn ours() -> Encodings {
    Encodings::of(&Encoding::ALL)
}

/// 8 random bytes from the kernel (ids must differ between nodes).
pub(super) fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        // Fallback: time and pid (ids only need to differ, not be secret).
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        return t ^ (u64::from(std::process::id()) << 32);
    }
    u64::from_ne_bytes(b)
}

/// µs since the Unix epoch: the first hello's sequence number, so it grows
/// across restarts (replay windows of keyed neighbours).
pub(super) fn epoch_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A nonblocking IPv6 UDP socket on `ifname` only, bound to `port`, member
/// of `group`, sending with hop limit 1, no loopback and the bypass mark.
fn open_socket_v6(
    ifindex: u32,
    ifname: &str,
    port: u16,
    group: Ipv6Addr,
    mark: u32,
) -> io::Result<UdpSocket> {
    let fd = ns::socket(
        ns::AddressFamily::Inet6,
        ns::SockType::Datagram,
        ns::SockFlag::SOCK_NONBLOCK | ns::SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    ns::setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
    ns::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    ns::setsockopt(&fd, sockopt::BindToDevice, &OsString::from(ifname))?;
    ns::setsockopt(&fd, sockopt::Mark, &mark)?;
    ns::setsockopt(&fd, sockopt::Ipv6MulticastHops, &1)?;
    let raw = fd.as_raw_fd();
    set_int(raw, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_LOOP, 0)?;
    set_int(
        raw,
        libc::IPPROTO_IPV6,
        libc::IPV6_MULTICAST_IF,
        ifindex as libc::c_int,
    )?;
    ns::bind(
        raw,
        &ns::SockaddrIn6::from(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0)),
    )?;
    join_v6(raw, group, ifindex)?;
    Ok(UdpSocket::from(fd))
}

/// A nonblocking UDP socket on `ifname` only, bound to `port`, member of
/// `group`, sending with TTL 1, no loopback and the bypass mark.
fn open_socket(
    ifindex: u32,
    ifname: &str,
    port: u16,
    group: Ipv4Addr,
    mark: u32,
) -> io::Result<UdpSocket> {
    let fd = ns::socket(
        ns::AddressFamily::Inet,
        ns::SockType::Datagram,
        ns::SockFlag::SOCK_NONBLOCK | ns::SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    ns::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    ns::setsockopt(&fd, sockopt::BindToDevice, &OsString::from(ifname))?;
    ns::setsockopt(&fd, sockopt::Mark, &mark)?;
    ns::setsockopt(&fd, sockopt::IpMulticastTtl, &1)?;
    ns::setsockopt(&fd, sockopt::IpMulticastLoop, &false)?;
    ns::bind(fd.as_raw_fd(), &ns::SockaddrIn::new(0, 0, 0, 0, port))?;
    mreqn(fd.as_raw_fd(), libc::IP_ADD_MEMBERSHIP, group, ifindex)?;
    mreqn(fd.as_raw_fd(), libc::IP_MULTICAST_IF, group, ifindex)?;
    Ok(UdpSocket::from(fd))
}

impl Discovery {
    /// Opens a hello socket on each of `daemon.interfaces` (an interface
    /// that cannot be used is skipped with a warning). `None` when
    /// discovery is off.
    pub(super) fn open(plan: &Plan) -> anyhow::Result<Option<Discovery>> {
        let c = &plan.config.discovery;
        if !c.enabled {
            return Ok(None);
        }
        let key = match &c.key {
            Some(k) => Some((c.key_id, Key::from_hex(k).map_err(anyhow::Error::msg)?)),
            None => None,
        };
        let id = random_u64();
        let seq0 = epoch_micros();
        let mut links = Vec::new();
        let spec = Spec {
            port: c.port,
            group_v4: c.group_v4,
            group_v6: c.group_v6,
            mark: plan.config.daemon.bypass_mark,
        };
        let families = if c.ipv6 {
            &[false, true][..]
        } else {
            &[false][..]
        };
        for ifname in &plan.config.daemon.interfaces {
            for &v6 in families {
                if links.len() >= MAX_LINKS {
                    warn!(interface = %ifname, "too many hello sockets; no hellos here");
                    continue;
                }
                let mut tc = TableConfig::new(id);
                tc.interval = u64::from(c.interval_ms) * 1000;
                tc.hold_intervals = c.hold_intervals;
                tc.capacity = c.max_neighbors;
                tc.auth = key.clone();
                tc.encodings = ours();
                tc.model = AirModel::dot11b_long(c.rate_mbps);
                tc.min_bundle = c.min_size.min(usize::from(u16::MAX)) as u16;
                tc.max_bundle = plan.config.aggregation.max_size.min(usize::from(u16::MAX)) as u16;
                let mut l = HelloLink {
                    ifname: ifname.clone(),
                    v6,
                    ifindex: 0,
                    dest: SocketAddr::V4(SocketAddrV4::new(c.group_v4, c.port)),
                    sock: None,
                    table: Table::new(tc, seq0),
                    send_errors: 0,
                    recv_errors: 0,
                };
                if let Err(e) = l.open(&spec) {
                    warn!(interface = %ifname, "no {} hellos on this interface (yet): {e}", l.family());
                }
                links.push(l);
            }
        }
        info!(
            id = format!("{id:016x}"),
            sockets = ?links.iter().filter(|l| l.sock.is_some()).map(|l| format!("{}%{}", l.dest, l.ifname)).collect::<Vec<_>>(),
            port = c.port,
            authenticated = key.is_some(),
            "neighbour discovery on"
        );
        Ok(Some(Discovery {
            spec,
            links,
            up: HashMap::new(),
            overridden: 0,
            id,
            rng: id | 1,
            buf: vec![0; HELLO_BUF],
            next: 0,
            radio: super::link_radio::LinkRadio::start(plan),
        }))
    }

    /// The encoding bundles from `src` (arriving with IPv6 scope `scope`)
    /// use and the interface index to check its inner sources against (0:
    /// any), if `src` is a neighbour whose hellos we take (up or not yet: see
    /// `Table::heard`). A link-local neighbour counts only on its interface.
    pub(super) fn heard(&self, src: IpAddr, scope: u32) -> Option<(Encoding, u32)> {
        let ll = is_link_local_v6(src);
        self.links
            .iter()
            .filter(|l| !ll || (l.ifindex != 0 && l.ifindex == scope))
            .find_map(|l| {
                l.table
                    .heard(src)
                    .map(|e| (e, if ll { l.ifindex } else { 0 }))
            })
            .and_then(|(e, i)| ours().common(e).map(|e| (e, i)))
    }

    /// (descriptor, token) of each hello socket, for the poller.
    pub(super) fn fds(&self) -> impl Iterator<Item = (RawFd, u64)> + '_ {
        self.links.iter().enumerate().filter_map(|(i, l)| {
            l.sock
                .as_ref()
                .map(|s| (s.as_raw_fd(), TOK_HELLO_BASE + i as u64))
        })
    }

    /// Whether `token` is a hello socket's.
    pub(super) fn owns(token: u64) -> bool {
        (TOK_HELLO_BASE..TOK_HELLO_BASE + MAX_LINKS as u64).contains(&token)
    }

    /// The earliest deadline of any table.
    pub(super) fn deadline(&self) -> Option<Micros> {
        (!self.links.is_empty()).then_some(self.next)
    }

    fn recompute(&mut self) {
        self.next = self
            .links
            .iter()
            .map(|l| l.table.poll_timeout())
            .min()
            .unwrap_or(Micros::MAX);
    }

    fn random(&mut self) -> u32 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 32) as u32
    }

    /// Reads the hellos waiting on link `i`.
    fn read(&mut self, i: usize, now: Micros) {
        let Some(l) = self.links.get_mut(i) else {
            return;
        };
        let Some(sock) = &l.sock else { return };
        for _ in 0..RX_BATCH {
            match sock.recv_from(&mut self.buf) {
                Ok((n, from)) => {
                    let ip = match from {
                        SocketAddr::V4(a) => IpAddr::V4(*a.ip()),
                        SocketAddr::V6(a) => a.ip().to_canonical(),
                    };
                    if let Err(r) = l.table.handle_hello(now, ip, &self.buf[..n]) {
                        if r != DropReason::Own {
                            debug!(interface = %l.ifname, from = %ip, reason = r.reason(), "hello dropped");
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    l.recv_errors += 1;
                    debug!(interface = %l.ifname, "hello receive: {e}");
                    return;
                }
            }
        }
    }

    /// Expires neighbours and sends the hellos that are due.
    fn tick(&mut self, now: Micros) {
        for i in 0..self.links.len() {
            if self.links[i].table.poll_timeout() > now {
                continue;
            }
            let r = self.random();
            let l = &mut self.links[i];
            l.table.handle_timeout(now);
            // Without a socket the table still runs: its neighbours expire.
            if let (Some(n), Some(sock)) = (l.table.poll_hello(now, r, &mut self.buf), &l.sock) {
                if let Err(e) = sock.send_to(&self.buf[..n], l.dest) {
                    l.send_errors += 1;
                    debug!(interface = %l.ifname, "hello send: {e}");
                }
            }
        }
    }

    /// The next neighbour event of any link, with the link's index.
    fn next_event(&mut self) -> Option<(usize, Event)> {
        self.links
            .iter_mut()
            .enumerate()
            .find_map(|(i, l)| l.table.poll_event().map(|e| (i, e)))
    }

    /// The `discovery` object of `airpack peers --json`.
    pub(super) fn json(&self, now: Micros) -> Value {
        let links: Vec<Value> = self
            .links
            .iter()
            .map(|l| {
                let s = l.table.stats();
                let drops: serde_json::Map<String, Value> = DropReason::LABELS
                    .iter()
                    .zip(s.drops)
                    .map(|(k, v)| ((*k).to_string(), v.into()))
                    .collect();
                let neighbors: Vec<Value> = l
                    .table
                    .neighbors()
                    .map(|n| {
                        json!({
                            "address": n.addr.to_string(),
                            "id": format!("{:016x}", n.id),
                            "up": n.up,
                            "heard_ms_ago": now.saturating_sub(n.last_heard) / 1000,
                            "encodings": Encoding::ALL.iter().filter(|e| n.encodings.contains(**e)).map(|e| e.name()).collect::<Vec<_>>(),
                            "rx_ratio": n.rx_ratio,
                            "etx": n.etx.filter(|e| e.is_finite()),
                            "snr_db": n.snr_db,
                            "max_bundle_to_it": n.max_bundle_to_it,
                            "max_bundle_from_it": n.max_bundle_from_it,
                            "ask_source": n.ask_source.name(),
                            "max_bundle_used": n.max_bundle_used,
                            "quality_source": n.quality_source.name(),
                            "mac_size": n.tx_size,
                            "mac_loss": n.mac.map(|w| w.loss),
                            "retry_ratio": n.mac.map(|w| w.retry_ratio),
                            "attempt_loss": n.mac.map(|w| w.attempt_loss),
                            "mac_frames": n.mac.map(|w| w.frames),
                            "mac_frame_len": n.mac.map(|w| w.frame_len),
                            "signal_dbm": n.radio.and_then(|r| r.signal_dbm),
                            "signal_avg_dbm": n.radio.and_then(|r| r.signal_avg_dbm),
                            "noise_dbm": n.radio.and_then(|r| r.noise_dbm),
                        })
                    })
                    .collect();
                json!({
                    "interface": l.ifname,
                    "family": if l.v6 { "ipv6" } else { "ipv4" },
                    "open": l.sock.is_some(),
                    "hellos_sent": s.sent,
                    "hellos_received": s.received,
                    "hellos_accepted": s.accepted,
                    "hello_drops": drops,
                    "send_errors": l.send_errors,
                    "receive_errors": l.recv_errors,
                    "ups": s.ups,
                    "downs": s.downs,
                    "neighbors": neighbors,
                })
            })
            .collect();
        json!({
            "id": format!("{:016x}", self.id),
            "up": self.up.len(),
            "static_overrides": self.overridden,
            "radio": self.radio.as_ref().map(|r| r.json()),
            "links": links,
        })
    }
}

impl Daemon {
    /// A hello socket is readable: read, then apply what changed.
    pub(super) fn on_hello(&mut self, token: u64, now: Micros) {
        let Some(mut d) = self.discovery.take() else {
            return;
        };
        d.read((token - TOK_HELLO_BASE) as usize, now);
        self.discovery_settle(&mut d, now);
        self.discovery = Some(d);
    }

    /// Called on every wakeup: when a table's deadline has come, expire
    /// neighbours, send hellos and apply what changed (else nothing).
    pub(super) fn discovery_poll(&mut self, now: Micros) {
        match &self.discovery {
            Some(d) if d.next <= now => {}
            _ => return,
        }
        let Some(mut d) = self.discovery.take() else {
            return;
        };
        self.discovery_settle(&mut d, now);
        self.discovery = Some(d);
    }

    fn discovery_settle(&mut self, d: &mut Discovery, now: Micros) {
        if let Some(r) = &mut d.radio {
            let tables = d.links.iter_mut().map(|l| (l.ifindex, l.v6, &mut l.table));
            r.apply(&self.engine, tables);
        }
        d.tick(now);
        while let Some((link, ev)) = d.next_event() {
            self.apply_neighbor(d, link, ev, now);
        }
        d.recompute();
    }

    /// The engine configuration for a discovered neighbour. The encoding is
    /// the preferred one both accept (the receiver picks the same one:
    /// `Encodings::common` is symmetric), not `aggregation.encoding`.
    fn discovered_config(&self, p: &PeerInfo) -> airpack_core::PeerConfig {
        let mut cfg = self.plan.engine.peer_defaults.clone();
        let enc = ours().common(p.encodings);
        let transport: Transport = self.plan.config.daemon.transport;
        let keyed = self.plan.bundle_key.is_some();
        cfg.outer_overhead = Plan::outer_overhead(transport, p.addr, keyed);
        cfg.max_size = cfg.max_size.min(usize::from(p.max_bundle));
        cfg.min_size = cfg.min_size.min(cfg.max_size);
        // Bundles only when it accepts one of our encodings and asks for a
        // size that holds more than the outer header and one small packet.
        cfg.accepts_bundles = enc.is_some() && cfg.max_size > cfg.outer_overhead + 28;
        cfg.encoding = enc.unwrap_or(cfg.encoding);
        cfg
    }

    fn apply_neighbor(&mut self, d: &mut Discovery, link: usize, ev: Event, now: Micros) {
        match ev {
            Event::Up(p) | Event::Changed(p) => {
                let first = d.up.insert(p.addr, (p, link)).is_none();
                if self.peers.is_static(p.addr) {
                    self.peers.discovered(p.addr, None, first);
                    if first {
                        d.overridden += 1;
                        info!(neighbor = %p.addr, "neighbour up; a static [[peer]] keeps its configuration");
                    }
                    return;
                }
                let cfg = self.discovered_config(&p);
                if first {
                    info!(
                        neighbor = %p.addr,
                        id = format!("{:016x}", p.id),
                        encoding = cfg.encoding.name(),
                        max_size = cfg.max_size,
                        bundles = cfg.accepts_bundles,
                        "neighbour up"
                    );
                }
                if let Err(r) = self.engine.set_peer(p.addr, cfg) {
                    warn!(neighbor = %p.addr, "engine refused discovered peer: {}", r.reason());
                    return;
                }
                // A link-local neighbour is reached (and heard) on its link only.
                let interface = match d.links.get(link) {
                    Some(l) if is_link_local_v6(p.addr) => Some((l.ifname.clone(), l.ifindex)),
                    _ => None,
                };
                self.peers.discovered(p.addr, interface, first);
            }
            Event::Down { addr, id } => {
                d.up.remove(&addr);
                let is_static = self.peers.is_static(addr);
                self.peers.lost(addr, now);
                if is_static {
                    return;
                }
                info!(neighbor = %addr, id = format!("{id:016x}"), "neighbour down: plain forwarding");
                // Queued packets leave unbundled, never lost.
                self.engine.remove_peer(addr);
            }
        }
    }

    /// Links changed (route monitor): open the hello sockets of interfaces
    /// that appeared, reopen those whose interface was created again.
    pub(super) fn discovery_refresh(&mut self) {
        let Some(d) = &mut self.discovery else { return };
        for (i, l) in d.links.iter_mut().enumerate() {
            let now_index = linux::tun::ifindex(&l.ifname).unwrap_or(0);
            if l.sock.is_some() && now_index == l.ifindex {
                continue;
            }
            if let Some(s) = l.sock.take() {
                let _ = self.poller.delete(s.as_raw_fd());
                info!(interface = %l.ifname, "{} hello socket closed: interface changed", l.family());
            }
            if now_index == 0 {
                continue;
            }
            let token = TOK_HELLO_BASE + i as u64;
            let opened = l.open(&d.spec).and_then(|()| {
                let fd = l.sock.as_ref().map_or(-1, |s| s.as_raw_fd());
                self.poller.add(fd, token, crate::linux::Interest::READ)
            });
            match opened {
                Ok(()) => info!(interface = %l.ifname, "{} hellos on", l.family()),
                Err(e) => {
                    l.sock = None;
                    debug!(interface = %l.ifname, "no {} hellos yet: {e}", l.family());
                }
            }
        }
    }

    /// After a reload replaced the static peers: set the discovered
    /// neighbours that are not (or no longer) static peers up again.
    pub(super) fn reapply_discovered(&mut self, now: Micros) {
        let Some(mut d) = self.discovery.take() else {
            return;
        };
        let up: Vec<(PeerInfo, usize)> = d.up.values().copied().collect();
        for (p, link) in up {
            self.apply_neighbor(&mut d, link, Event::Changed(p), now);
        }
        self.discovery = Some(d);
    }
}
