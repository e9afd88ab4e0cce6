//! The event loop: one thread, one epoll, driving the sans-IO engine.
//!
//! Owns: the daemon's descriptors (TUN, bundle sockets, raw sender, timerfd,
//! signalfd, route monitor, control listeners), the peer lookup (hop-by-hop:
//! the kernel's next hop via the route resolver; end-to-end: longest-prefix
//! match over `allowed_ips`), the receive-side checks (known peer, allowed
//! inner source), the link-busy signal (SIOCOUTQ) and the lifecycle (start,
//! SIGHUP reload, SIGTERM flush and clean exit).
//!
//! Must not touch: packet formats or queueing policy (that is
//! `airpack_core::Engine`), kernel plumbing details (that is `crate::linux`).
//! Per packet it neither allocates nor logs above trace level; every error on
//! the data path is counted and survived.

use super::config::{is_link_local_v6, LinkModeCfg, Mode, Plan, Source, SourceCheck, Transport};
use super::control::{Request, Server, TOK_CONN_BASE, TOK_CONTROL, TOK_METRICS};
use super::stats::{self, DaemonCounters};
use super::sys;
use crate::linux::{
    self, monotonic_micros, BundleSocket, CpuLatency, Events, Family, Interest, Poller,
    RawIpSender, RouteMonitor, RouteResolver, Signals, Steering, Timer, Tun, TunBatch,
    UdpBundleSocket,
};
use airpack_core::{Encoding, Engine, RxContext, Transmit, TransmitKind};
use anyhow::Context;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use tracing::{debug, error, info, trace, warn};

const TOK_TUN: u64 = 1;
const TOK_B4: u64 = 2;
const TOK_B6: u64 = 3;
const TOK_U4: u64 = 4;
const TOK_U6: u64 = 5;
const TOK_TIMER: u64 = 6;
const TOK_SIG: u64 = 7;
const TOK_MON: u64 = 10;

/// Packets read from one descriptor per wakeup (fairness between TUN and sockets).
const BATCH: usize = 64;
/// While packets are held and the link is busy, SIOCOUTQ is re-read this often (µs).
pub const BUSY_RECHECK_US: u64 = 150;
/// Receive buffer of the bundle sockets (bytes).
const RCVBUF: u32 = 4 << 20;
/// Buffers: the largest IP packet.
const BUF: usize = 65_536;
/// Upper bound on TUN packets drained at shutdown (the queue holds at most
/// `tun_txqueuelen` once steering is removed).
const SHUTDOWN_DRAIN_MAX: usize = 1 << 20;
/// Upper bound on the time spent draining the TUN at shutdown (µs).
const SHUTDOWN_DRAIN_US: u64 = 500_000;

/// The daemon's sending and receiving sockets.
struct Sockets {
    transport: Transport,
    udp_port: u16,
    b4: Option<BundleSocket>,
    b6: Option<BundleSocket>,
    u4: Option<UdpBundleSocket>,
    u6: Option<UdpBundleSocket>,
    raw: RawIpSender,
}

impl Sockets {
    fn open(plan: &Plan) -> anyhow::Result<Sockets> {
        let d = &plan.config.daemon;
        let mark = d.bypass_mark;
        let proto = plan.config.aggregation.protocol;
        let raw =
            RawIpSender::open(mark).context("opening the raw IP sender (needs CAP_NET_RAW)")?;
        let (mut b4, mut b6, mut u4, mut u6) = (None, None, None, None);
        match d.transport {
            Transport::Ip => {
                b4 = Some(
                    BundleSocket::open(Family::V4, proto, mark)
                        .context("opening the IPv4 bundle socket")?,
                );
                match BundleSocket::open(Family::V6, proto, mark) {
                    Ok(s) => b6 = Some(s),
                    Err(e) => warn!("no IPv6 bundle socket ({e}); IPv6 peers cannot get bundles"),
                }
            }
            Transport::Udp => {
                let a4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), d.udp_port);
                u4 = Some(
                    UdpBundleSocket::bind(a4, mark).with_context(|| format!("binding UDP {a4}"))?,
                );
                let a6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), d.udp_port);
                match UdpBundleSocket::bind(a6, mark) {
                    Ok(s) => u6 = Some(s),
                    Err(e) => {
                        warn!("no IPv6 UDP bundle socket ({e}); IPv6 peers cannot get bundles")
                    }
                }
            }
        }
        Ok(Sockets {
            transport: d.transport,
            udp_port: d.udp_port,
            b4,
            b6,
            u4,
            u6,
            raw,
        })
    }

    fn register(&self, poller: &Poller) -> io::Result<()> {
        if let Some(s) = &self.b4 {
            poller.add(s.as_raw_fd(), TOK_B4, Interest::READ)?;
        }
        if let Some(s) = &self.b6 {
            poller.add(s.as_raw_fd(), TOK_B6, Interest::READ)?;
        }
        if let Some(s) = &self.u4 {
            poller.add(s.as_raw_fd(), TOK_U4, Interest::READ)?;
        }
        if let Some(s) = &self.u6 {
            poller.add(s.as_raw_fd(), TOK_U6, Interest::READ)?;
        }
        Ok(())
    }

    fn receive_fds(&self) -> Vec<i32> {
        let mut v: Vec<i32> = [&self.b4, &self.b6]
            .into_iter()
            .flatten()
            .map(|s| s.as_raw_fd())
            .collect();
        v.extend(
            [&self.u4, &self.u6]
                .into_iter()
                .flatten()
                .map(|s| s.as_raw_fd()),
        );
        v
    }

    /// `scope`: the interface index of a link-local IPv6 peer (else 0);
    /// `dscp` and `ecn` go into the outer TOS / traffic class.
    fn send_bundle(
        &self,
        peer: IpAddr,
        scope: u32,
        payload: &[u8],
        dscp: u8,
        ecn: u8,
    ) -> io::Result<()> {
        let unsupported = || io::Error::from_raw_os_error(libc::EAFNOSUPPORT);
        match (self.transport, peer.is_ipv4()) {
            (Transport::Ip, true) => self
                .b4
                .as_ref()
                .ok_or_else(unsupported)?
                .send_to_ecn(peer, 0, payload, dscp, ecn),
            (Transport::Ip, false) => self
                .b6
                .as_ref()
                .ok_or_else(unsupported)?
                .send_to_ecn(peer, scope, payload, dscp, ecn),
            (Transport::Udp, true) => self.u4.as_ref().ok_or_else(unsupported)?.send_to_ecn(
                SocketAddr::new(peer, self.udp_port),
                payload,
                dscp,
                ecn,
            ),
            (Transport::Udp, false) => self.u6.as_ref().ok_or_else(unsupported)?.send_to_ecn(
                linux::scoped(peer, self.udp_port, scope),
                payload,
                dscp,
                ecn,
            ),
        }
    }

    /// Unsent bytes over every sending socket (the link-busy signal).
    fn outq(&self) -> usize {
        let mut n = self.raw.outq().unwrap_or(0);
        for s in [&self.b4, &self.b6].into_iter().flatten() {
            n += s.outq().unwrap_or(0);
        }
        for s in [&self.u4, &self.u6].into_iter().flatten() {
            n += s.outq().unwrap_or(0);
        }
        n
    }
}

/// Where a packet read from the TUN goes.
enum Dest {
    /// Into the engine, for this peer.
    Peer(IpAddr),
    /// Out unchanged (no peer, or the next hop does not run airpack).
    Unchanged,
    /// Nowhere: the normal route leads back into the TUN.
    Loop,
}

/// One watched radio interface.
struct Link {
    name: String,
    up: Option<bool>,
}

/// The running daemon.
pub struct Daemon {
    source: Source,
    plan: Plan,
    engine: Engine,
    tun: Tun,
    /// Writes the inner packets of one bundle into the TUN in one system call.
    tun_batch: TunBatch,
    /// Held while the daemon runs (`daemon.cpu_latency_us`).
    _cpu_latency: Option<CpuLatency>,
    /// The TUN's kernel counters, as of the last control request.
    tun_link: Option<linux::LinkStats>,
    steering: Option<Steering>,
    resolver: RouteResolver,
    monitor: RouteMonitor,
    sock: Sockets,
    timer: Timer,
    signals: Signals,
    poller: Poller,
    control: Server,
    counters: DaemonCounters,
    /// Configured peers (the only sources bundles are accepted from), their
    /// encodings and, for link-local ones, their interface.
    peers: HashMap<IpAddr, PeerEntry>,
    link_busy: bool,
    links: Vec<Link>,
    /// No `daemon.interfaces` configured: steer the interfaces of the routes
    /// to the peers, re-evaluated when routes change.
    steer_auto: bool,
    started: u64,
    tun_buf: Vec<u8>,
    tx_buf: Vec<u8>,
    rx_buf: Vec<u8>,
}

/// Sends one engine output: a bundle to its peer (with the scope of a
/// link-local one), anything else unchanged through the raw sender.
fn send_out(
    sock: &Sockets,
    peers: &HashMap<IpAddr, PeerEntry>,
    t: &Transmit,
    data: &[u8],
) -> io::Result<()> {
    match t.kind {
        TransmitKind::Bundle { .. } => {
            let scope = if is_link_local_v6(t.peer) {
                peers.get(&t.peer).map_or(0, PeerEntry::scope)
            } else {
                0
            };
            sock.send_bundle(t.peer, scope, data, t.dscp, t.ecn)
        }
        TransmitKind::Single | TransmitKind::Bypass => sock.raw.send(data),
    }
}

/// What the loop needs to know about a configured peer.
#[derive(Clone, Debug)]
struct PeerEntry {
    encoding: Encoding,
    /// The interface of a link-local IPv6 peer (`fe80::2%wlan0`).
    interface: Option<String>,
    /// Its index (0 while the interface does not exist); re-read on link changes.
    ifindex: u32,
}

impl PeerEntry {
    /// Whether this peer is the one reached through (or heard on) interface
    /// `ifindex`: any interface for a global address; for a link-local one
    /// only its own (an unresolved interface matches nothing).
    fn via(&self, ifindex: u32) -> bool {
        self.interface.is_none() || (self.ifindex != 0 && self.ifindex == ifindex)
    }

    /// sin6_scope_id to send with (0: none).
    fn scope(&self) -> u32 {
        if self.interface.is_some() {
            self.ifindex
        } else {
            0
        }
    }

    /// Re-reads the interface index; true when it changed.
    fn resolve(&mut self) -> bool {
        let idx = self
            .interface
            .as_deref()
            .map_or(0, |n| linux::tun::ifindex(n).unwrap_or(0));
        std::mem::replace(&mut self.ifindex, idx) != idx
    }
}

fn peer_map(plan: &Plan) -> HashMap<IpAddr, PeerEntry> {
    plan.peers
        .iter()
        .map(|p| {
            let mut e = PeerEntry {
                encoding: p.config.encoding,
                interface: p.interface.clone(),
                ifindex: 0,
            };
            e.resolve();
            if let (Some(i), 0) = (&e.interface, e.ifindex) {
                warn!(peer = %p.address, interface = %i, "interface of link-local peer does not exist (yet)");
            }
            (p.address, e)
        })
        .collect()
}

impl Daemon {
    /// Opens everything, installs steering last (so packets are only steered
    /// once the daemon can handle them). `signals` must be created on the
    /// main thread before any other thread.
    pub fn start(source: Source, plan: Plan, signals: Signals) -> anyhow::Result<Daemon> {
        let d = &plan.config.daemon;
        let tun = Tun::open(&d.tun, d.tun_mtu).with_context(|| {
            format!(
                "opening TUN device {:?} (needs CAP_NET_ADMIN and /dev/net/tun)",
                d.tun
            )
        })?;
        if let Err(e) = linux::tun::set_txqueuelen(tun.name(), d.tun_txqueuelen) {
            warn!(
                "cannot set txqueuelen {} on {}: {e}",
                d.tun_txqueuelen,
                tun.name()
            );
        }
        let sock = Sockets::open(&plan)?;
        for fd in sock.receive_fds() {
            if let Err(e) = linux::set_buffer(fd, RCVBUF, false) {
                warn!("cannot raise the bundle socket receive buffer: {e}");
            }
        }
        if let Err(e) = linux::set_timer_slack(1_000) {
            debug!("timer slack: {e}");
        }
        if d.sched_priority > 0 {
            match linux::set_realtime(d.sched_priority) {
                Ok(()) => info!(priority = d.sched_priority, "running under SCHED_FIFO"),
                Err(e) => warn!("cannot use SCHED_FIFO priority {}: {e}", d.sched_priority),
            }
        }
        let cpu_latency = d
            .cpu_latency_us
            .and_then(|us| match CpuLatency::request(us) {
                Ok(l) => {
                    info!(us, "CPU wake-up latency limited");
                    Some(l)
                }
                Err(e) => {
                    warn!("cannot limit the CPU wake-up latency to {us} µs: {e}");
                    None
                }
            });
        let mut resolver =
            RouteResolver::new(d.bypass_mark).context("opening the netlink route resolver")?;
        let monitor = RouteMonitor::new().context("opening the netlink route monitor")?;
        let timer = Timer::new()?;
        let poller = Poller::new()?;
        let control = Server::bind(&d.control_socket, plan.prometheus)?;

        let mut engine = Engine::new(plan.engine.clone());
        for p in &plan.peers {
            engine.set_peer(p.address, p.config.clone()).map_err(|r| {
                anyhow::anyhow!("engine refused peer {}: {}", p.address, r.reason())
            })?;
        }
        let now = monotonic_micros();
        if plan.config.aggregation.link_mode == LinkModeCfg::HoldWhileBusy {
            engine.set_link_busy(now, false);
        }

        poller.add(tun.as_raw_fd(), TOK_TUN, Interest::READ)?;
        sock.register(&poller)?;
        poller.add(timer.as_raw_fd(), TOK_TIMER, Interest::READ)?;
        poller.add(signals.as_raw_fd(), TOK_SIG, Interest::READ)?;
        poller.add(monitor.as_raw_fd(), TOK_MON, Interest::READ)?;
        control.register(&poller)?;

        let links = d
            .interfaces
            .iter()
            .map(|n| Link {
                name: n.clone(),
                up: link_state(n),
            })
            .collect::<Vec<_>>();
        for l in &links {
            match l.up {
                Some(up) => info!(interface = %l.name, up, "watching interface"),
                None => warn!(interface = %l.name, "configured interface does not exist (yet)"),
            }
        }

        let mut spec = plan.steer_spec();
        let steer_auto = spec.interfaces.is_empty();
        if steer_auto {
            spec.interfaces = auto_interfaces(&plan, &mut resolver, tun.ifindex());
        }
        let steering = Steering::install(&spec)
            .context("installing kernel steering (tc clsact egress filters)")?;
        if spec.interfaces.is_empty() {
            warn!("no interface to steer yet (no route to any peer): nothing is aggregated until one appears");
        }
        info!(
            interfaces = ?spec.interfaces,
            steered = ?steering.steered(),
            auto = steer_auto,
            "steering"
        );
        info!(
            tun = %tun.name(),
            mode = ?d.mode,
            link_mode = ?plan.config.aggregation.link_mode,
            peers = plan.peers.len(),
            rules = spec.matches.len(),
            control = %d.control_socket.display(),
            metrics = ?control.metrics_addr(),
            "airpack daemon running"
        );
        let tun_batch = TunBatch::new(&tun, true);
        if !tun_batch.uses_io_uring() {
            info!("io_uring not available: one write per inner packet");
        }
        let peers = peer_map(&plan);
        Ok(Daemon {
            source,
            engine,
            tun,
            tun_batch,
            _cpu_latency: cpu_latency,
            tun_link: None,
            steering: Some(steering),
            resolver,
            monitor,
            sock,
            timer,
            signals,
            poller,
            control,
            counters: DaemonCounters::default(),
            peers,
            link_busy: false,
            links,
            steer_auto,
            started: now,
            tun_buf: vec![0; BUF],
            tx_buf: vec![0; BUF],
            rx_buf: vec![0; BUF],
            plan,
        })
    }

    /// Runs until SIGTERM/SIGINT; returns after a clean stop.
    pub fn run(mut self) -> anyhow::Result<()> {
        let mut events = Events::with_capacity(64);
        loop {
            match self.poller.wait(&mut events, None) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("epoll_wait"),
            }
            self.counters.wakeups += 1;
            let now = monotonic_micros();
            let mut stop = false;
            for ev in events.iter() {
                match ev.token {
                    TOK_TUN => self.on_tun(now),
                    TOK_B4 | TOK_B6 | TOK_U4 | TOK_U6 => self.on_bundles(ev.token),
                    TOK_TIMER => {
                        let deadline = self.timer.deadline();
                        if let (Ok(n), Some(d)) = (self.timer.read(), deadline) {
                            if n > 0 {
                                self.counters.timer_late_us.record(now.saturating_sub(d));
                            }
                        }
                    }
                    TOK_SIG => {
                        while let Ok(Some(sig)) = self.signals.read() {
                            match sig {
                                libc::SIGTERM | libc::SIGINT => stop = true,
                                libc::SIGHUP => self.reload(now),
                                _ => {}
                            }
                        }
                    }
                    TOK_MON => self.on_route_change(),
                    TOK_CONTROL | TOK_METRICS => self.control.accept(&self.poller, ev.token),
                    t if t >= TOK_CONN_BASE => {
                        let slot = (t - TOK_CONN_BASE) as usize;
                        if let Some(req) = self.control.ready(&self.poller, slot, ev.writable) {
                            let (ok, body) = self.answer(req);
                            self.counters.control_requests += 1;
                            self.control.respond(&self.poller, slot, ok, body);
                        }
                    }
                    _ => {}
                }
            }
            if stop {
                return self.shutdown();
            }
            self.update_busy(now);
            if self.engine.poll_timeout().is_some_and(|t| t <= now) {
                self.engine.handle_timeout(now);
            }
            self.transmit(now);
            self.arm_timer(now);
        }
    }

    fn hold_while_busy(&self) -> bool {
        self.plan.config.aggregation.link_mode == LinkModeCfg::HoldWhileBusy
    }

    /// Reads the link-busy signal and tells the engine when it changed.
    fn update_busy(&mut self, now: u64) -> bool {
        if !self.hold_while_busy() {
            return false;
        }
        let busy = self.sock.outq() > 0;
        if busy == self.link_busy {
            return false;
        }
        self.link_busy = busy;
        self.counters.busy_transitions += 1;
        self.engine.set_link_busy(now, busy);
        true
    }

    fn arm_timer(&mut self, now: u64) {
        let mut deadline = self.engine.poll_timeout();
        if self.hold_while_busy() && self.link_busy && self.engine.queued().0 > 0 {
            let recheck = now + BUSY_RECHECK_US;
            deadline = Some(deadline.map_or(recheck, |d| d.min(recheck)));
        }
        let r = match deadline {
            Some(d) => self.timer.arm_at(d),
            None => self.timer.disarm(),
        };
        if let Err(e) = r {
            error!("timerfd: {e}");
        }
    }

    /// Where a packet for `dst` goes: a configured peer's queue, out unchanged,
    /// or nowhere (its route leads back into the TUN: sending it would loop).
    fn route_for(&mut self, dst: IpAddr) -> Dest {
        let tun = self.tun.ifindex();
        let nh = self.resolver.lookup(dst);
        if matches!(&nh, Ok(nh) if nh.oif == tun) {
            return Dest::Loop;
        }
        match self.plan.config.daemon.mode {
            Mode::HopByHop => match nh {
                Ok(nh) if !nh.local && self.peers.get(&nh.addr).is_some_and(|p| p.via(nh.oif)) => {
                    Dest::Peer(nh.addr)
                }
                Ok(_) => {
                    self.counters.passthrough_not_peer += 1;
                    Dest::Unchanged
                }
                Err(_) => Dest::Unchanged,
            },
            Mode::EndToEnd => match self.plan.allowed_ips.lookup(dst) {
                Some(p) => Dest::Peer(p),
                None => Dest::Unchanged,
            },
        }
    }

    fn on_tun(&mut self, now: u64) {
        for _ in 0..BATCH {
            if !self.read_tun_one(now) {
                break;
            }
        }
    }

    /// Reads and handles one TUN packet; false when the queue is empty.
    fn read_tun_one(&mut self, now: u64) -> bool {
        let n = match self.tun.read(&mut self.tun_buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
            Err(e) => {
                self.counters.tun_read_errors += 1;
                debug!("TUN read: {e}");
                return false;
            }
        };
        self.counters.tun_read += 1;
        self.counters.tun_read_bytes += n as u64;
        let Some((_, dst)) = sys::addrs(&self.tun_buf[..n]) else {
            self.counters.tun_unparsable += 1;
            return true;
        };
        if sys::link_scoped(dst) {
            // The kernel's own traffic on the TUN (IPv6 router solicitations,
            // MLD, ...): never steered by us, meaningless elsewhere.
            self.counters.tun_ignored += 1;
            return true;
        }
        match self.route_for(dst) {
            Dest::Peer(peer) => {
                let v = self.engine.handle_packet(now, peer, &self.tun_buf[..n], 0);
                trace!(%dst, %peer, ?v, len = n, "queued");
            }
            Dest::Loop => {
                self.counters.tun_looped += 1;
                trace!(%dst, "route leads back into the TUN; dropped");
            }
            Dest::Unchanged => {
                self.counters.passthrough += 1;
                match self.sock.raw.send(&self.tun_buf[..n]) {
                    Ok(()) => self.counters.unchanged_sent += 1,
                    Err(e) => {
                        trace!(%dst, "passthrough send: {e}");
                        self.counters.send_error(&e);
                    }
                }
            }
        }
        true
    }

    fn on_bundles(&mut self, token: u64) {
        for _ in 0..BATCH {
            let r = match token {
                TOK_B4 => self.sock.b4.as_ref().map(|s| s.recv_from(&mut self.rx_buf)),
                TOK_B6 => self.sock.b6.as_ref().map(|s| s.recv_from(&mut self.rx_buf)),
                TOK_U4 => self
                    .sock
                    .u4
                    .as_ref()
                    .map(|s| s.recv_from(&mut self.rx_buf).map(|(r, _)| r)),
                _ => self
                    .sock
                    .u6
                    .as_ref()
                    .map(|s| s.recv_from(&mut self.rx_buf).map(|(r, _)| r)),
            };
            match r {
                None => return,
                Some(Ok(r)) => {
                    self.counters.rx_datagrams += 1;
                    let end = r.offset.saturating_add(r.len);
                    if end > self.rx_buf.len() || r.offset > end {
                        self.counters.rx_errors += 1;
                        continue;
                    }
                    self.on_bundle(r.src, r.scope, r.ecn, r.offset, end);
                }
                Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => return,
                Some(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Some(Err(e)) if e.kind() == io::ErrorKind::InvalidData => {
                    self.counters.rx_errors += 1;
                    continue;
                }
                Some(Err(e)) => {
                    self.counters.rx_errors += 1;
                    debug!("bundle socket receive: {e}");
                    return;
                }
            }
        }
    }

    /// Handles one received bundle at `rx_buf[start..end]` from `src`.
    /// `src` is already canonical (the sockets report IPv4-mapped sources as
    /// IPv4); `scope` is its IPv6 scope (the receiving interface of a
    /// link-local source). A link-local peer is accepted only on its interface.
    /// `ecn` is the outer ECN field (RFC 6040 decapsulation, in the engine);
    /// with the UDP transport an inner UDP packet to the bundle port is
    /// refused as nested (it would come back as a fresh bundle).
    fn on_bundle(&mut self, src: IpAddr, scope: u32, ecn: u8, start: usize, end: usize) {
        let (encoding, peer_if) = match self.peers.get(&src) {
            Some(p) if p.via(scope) => (p.encoding, p.scope()),
            _ => {
                self.counters.rx_unknown_peer += 1;
                trace!(%src, scope, "bundle from unknown peer dropped");
                return;
            }
        };
        // Take the buffer out so the bundle view can borrow it while the
        // checks below use the resolver (no allocation: the Vec moves).
        let mut rx = std::mem::take(&mut self.rx_buf);
        let ctx = RxContext {
            outer_ecn: ecn,
            udp_port: (self.sock.transport == Transport::Udp).then_some(self.sock.udp_port),
        };
        match self
            .engine
            .receive_rx(src, encoding, &mut rx[start..end], ctx)
        {
            Err(e) => trace!(%src, "bundle rejected: {e}"),
            Ok(bundle) => {
                let Daemon {
                    tun,
                    tun_batch,
                    plan,
                    resolver,
                    counters,
                    ..
                } = self;
                let mut spoofed = 0;
                let allowed = bundle.iter().filter(|pkt| {
                    let ok = sys::addrs(pkt).is_some_and(|(inner_src, _)| {
                        source_allowed(plan, resolver, src, peer_if, inner_src)
                    });
                    if !ok {
                        spoofed += 1;
                        trace!(peer = %src, "inner packet with a source the peer may not send dropped");
                    }
                    ok
                });
                tun_batch.write(tun, allowed, |r| match r {
                    Ok(()) => counters.tun_written += 1,
                    Err(e) => {
                        trace!("TUN write: {e}");
                        counters.tun_write_error(&e);
                    }
                });
                counters.rx_spoofed_source += spoofed;
            }
        }
        self.rx_buf = rx;
    }

    /// Drains the engine's output onto the wire.
    fn transmit(&mut self, now: u64) {
        for _round in 0..4 {
            let mut sent = false;
            while let Some(t) = self.engine.poll_transmit(now, &mut self.tx_buf) {
                sent = true;
                let len = t.len.min(self.tx_buf.len());
                let data = &self.tx_buf[..len];
                let r = send_out(&self.sock, &self.peers, &t, data);
                match (r, t.kind) {
                    (Ok(()), TransmitKind::Bundle { .. }) => self.counters.bundles_sent += 1,
                    (Ok(()), _) => self.counters.unchanged_sent += 1,
                    (Err(e), _) => {
                        trace!(peer = %t.peer, "send: {e}");
                        self.counters.send_error(&e);
                    }
                }
            }
            // In hold-while-busy our own sends change the link state; an idle
            // link may release more at once.
            if !sent || !self.update_busy(now) {
                break;
            }
        }
    }

    fn on_route_change(&mut self) {
        match self.monitor.drain() {
            Ok(ch) if ch.any() => {
                self.resolver.invalidate();
                self.counters.route_changes += 1;
                self.update_steering(ch.link || ch.overrun);
                if ch.link || ch.overrun {
                    for (addr, p) in self.peers.iter_mut() {
                        if p.resolve() {
                            info!(peer = %addr, interface = ?p.interface, ifindex = p.ifindex, "link-local peer's interface changed");
                        }
                    }
                    for l in &mut self.links {
                        let now_up = link_state(&l.name);
                        if now_up != l.up {
                            self.counters.link_transitions += 1;
                            match now_up {
                                Some(true) => info!(interface = %l.name, "link up"),
                                Some(false) => warn!(interface = %l.name, "link down"),
                                None => warn!(interface = %l.name, "link removed"),
                            }
                            l.up = now_up;
                        }
                    }
                }
            }
            Ok(_) => {}
            Err(e) => {
                debug!("route monitor: {e}");
                self.resolver.invalidate();
                self.update_steering(true);
            }
        }
    }

    /// Keeps the steered interfaces right after a route or link change: in
    /// auto mode the interfaces of the routes to the peers; `links`: also
    /// attach to interfaces that appeared (or were created again).
    fn update_steering(&mut self, links: bool) {
        let Some(st) = &mut self.steering else { return };
        let before = st.steered();
        let want = self
            .steer_auto
            .then(|| auto_interfaces(&self.plan, &mut self.resolver, self.tun.ifindex()))
            .filter(|w| *w != st.spec().interfaces);
        let r = match want {
            Some(want) => st.set_interfaces(&want),
            None if links => st.refresh().map(|_| ()),
            None => Ok(()),
        };
        if let Err(e) = r {
            self.counters.steering_errors += 1;
            warn!("steering: {e}");
        }
        let after = st.steered();
        if after != before {
            self.counters.steering_changes += 1;
            info!(steered = ?after, "steered interfaces changed");
        }
    }

    /// SIGHUP: re-reads the configuration; a bad one is logged and ignored.
    fn reload(&mut self, now: u64) {
        let mut new = match self.source.load() {
            Ok(p) => p,
            Err(e) => {
                self.counters.reload_errors += 1;
                error!("reload rejected, keeping the running configuration: {e:#}");
                return;
            }
        };
        // Keys bound to open descriptors need a restart; keep their old values.
        {
            let (o, n) = (&self.plan.config, &mut new.config);
            let mut kept = Vec::new();
            macro_rules! keep {
                ($($f:ident).+) => {
                    if o.$($f).+ != n.$($f).+ {
                        kept.push(stringify!($($f).+));
                        n.$($f).+ = o.$($f).+.clone();
                    }
                };
            }
            keep!(daemon.tun);
            keep!(daemon.tun_mtu);
            keep!(daemon.tun_txqueuelen);
            keep!(daemon.control_socket);
            keep!(daemon.prometheus);
            keep!(daemon.transport);
            keep!(daemon.udp_port);
            keep!(daemon.log);
            keep!(daemon.sched_priority);
            keep!(daemon.cpu_latency_us);
            keep!(aggregation.protocol);
            if !kept.is_empty() {
                warn!(
                    "reload: {} only take effect after a restart; keeping the running values",
                    kept.join(", ")
                );
            }
        }
        new.prometheus = self.plan.prometheus;
        let mut new_spec = new.steer_spec();
        self.steer_auto = new_spec.interfaces.is_empty();
        if self.steer_auto {
            new_spec.interfaces = auto_interfaces(&new, &mut self.resolver, self.tun.ifindex());
        }
        if let Some(st) = &mut self.steering {
            let old = st.spec().clone();
            let r = if SteerKey::of(&old) == SteerKey::of(&new_spec) {
                let r = if old.matches != new_spec.matches {
                    st.update_matches(&new_spec.matches)
                } else {
                    Ok(())
                };
                r.and(st.set_interfaces(&new_spec.interfaces))
            } else {
                // Mark, priority or mode changed: remove and install anew.
                let st = self.steering.take().expect("present");
                if let Err(e) = st.remove() {
                    warn!("removing old steering: {e}");
                }
                Steering::install(&new_spec).map(|s| {
                    self.steering = Some(s);
                })
            };
            if let Err(e) = r {
                self.counters.reload_errors += 1;
                error!("reload: steering update failed ({e}); packets may not be steered until the next reload");
            }
        } else {
            // A previous reload failed to reinstall the steering: try again.
            match Steering::install(&new_spec) {
                Ok(s) => self.steering = Some(s),
                Err(e) => {
                    self.counters.reload_errors += 1;
                    error!("reload: installing steering failed ({e}); packets are not steered");
                }
            }
        }
        self.engine.reconfigure(new.engine.clone());
        for old in &self.plan.peers {
            if new.peer(old.address).is_none() {
                // Queued packets for it leave unbundled, never lost.
                self.engine.remove_peer(old.address);
            }
        }
        for p in &new.peers {
            if let Err(r) = self.engine.set_peer(p.address, p.config.clone()) {
                error!("reload: engine refused peer {}: {}", p.address, r.reason());
            }
        }
        if self.hold_while_busy()
            != (new.config.aggregation.link_mode == LinkModeCfg::HoldWhileBusy)
        {
            self.link_busy = false;
            self.engine.set_link_busy(now, false);
        }
        self.peers = peer_map(&new);
        self.resolver.invalidate();
        self.plan = new;
        self.counters.reloads += 1;
        info!(peers = self.plan.peers.len(), "configuration reloaded");
    }

    /// SIGTERM/SIGINT: stop steering, hand every packet already in the TUN and
    /// the engine to the wire, remove the control socket.
    fn shutdown(mut self) -> anyhow::Result<()> {
        info!("stopping: removing steering, flushing queued packets");
        if let Some(st) = self.steering.take() {
            if let Err(e) = st.remove() {
                error!("removing steering: {e}");
            }
        }
        // Two passes: packets that were already on their way into the TUN when
        // the steering went away arrive a moment later; catch them too.
        let (mut drained, mut sent) = (0usize, 0u64);
        for pass in 0..2 {
            if pass == 1 {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            let now = monotonic_micros();
            let limit =
                SHUTDOWN_DRAIN_MAX.min(self.plan.config.daemon.tun_txqueuelen as usize * 2 + BATCH);
            let mut n = 0;
            while n < limit
                && monotonic_micros() < now + SHUTDOWN_DRAIN_US
                && self.read_tun_one(now)
            {
                n += 1;
            }
            drained += n;
            self.engine.flush();
            sent += self.drain_all(now);
        }
        self.control.remove_socket_file();
        let c = &self.engine.stats().counters;
        info!(
            packets_in = c.packets_in,
            bundles = c.bundles,
            aggregated = c.aggregated_packets,
            dropped = c.dropped_total(),
            tun_drained = drained,
            flushed = sent,
            "stopped"
        );
        Ok(())
    }

    /// Sends everything the engine holds (after `flush`); bounded.
    fn drain_all(&mut self, now: u64) -> u64 {
        let mut sent = 0u64;
        let limit =
            self.engine.queued().0 as u64 + 1 + self.engine.config().bypass_queue_limit as u64;
        while let Some(t) = self.engine.poll_transmit(now, &mut self.tx_buf) {
            let data = &self.tx_buf[..t.len.min(self.tx_buf.len())];
            let r = send_out(&self.sock, &self.peers, &t, data);
            match (r, t.kind) {
                (Ok(()), TransmitKind::Bundle { .. }) => self.counters.bundles_sent += 1,
                (Ok(()), _) => self.counters.unchanged_sent += 1,
                (Err(e), _) => self.counters.send_error(&e),
            }
            sent += 1;
            if sent > limit.saturating_mul(2) + 1024 {
                warn!("flush did not converge; stopping anyway");
                break;
            }
        }
        sent
    }

    fn answer(&mut self, req: Request) -> (bool, Vec<u8>) {
        // The kernel's counters of the TUN (its queue toward the daemon can
        // overflow before the daemon sees a packet): read per request.
        self.tun_link = self.resolver.link_stats(self.tun.ifindex()).ok();
        match req {
            Request::Stats => (true, self.stats_bytes()),
            Request::Peers => (true, self.peers_bytes()),
            Request::Metrics => (true, self.metrics_bytes()),
            Request::Bad(r) => (
                false,
                serde_json::to_vec(&json!({"error": format!("unknown request {r:?} (expected \"stats\" or \"peers\")")}))
                    .unwrap_or_default(),
            ),
        }
    }

    fn sorted_peers(&self) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self.engine.peers().collect();
        v.sort();
        v
    }

    /// The `airpack stats --json` document without `peers`.
    fn stats_head(&self) -> serde_json::Map<String, Value> {
        let mut total = stats::stats_json(&self.engine.stats());
        total.insert("daemon".into(), stats::daemon_json(&self.counters));
        let (qp, qb) = self.engine.queued();
        let head = json!({
            "version": env!("CARGO_PKG_VERSION"),
            "mode": mode_name(self.plan.config.daemon.mode),
            "link_mode": link_mode_name(self.plan.config.aggregation.link_mode),
            "link_busy": self.link_busy,
            "uptime_s": (monotonic_micros().saturating_sub(self.started)) as f64 / 1e6,
            "queued": {"packets": qp, "bytes": qb},
            "links": self.links.iter().map(|l| json!({"interface": l.name, "up": l.up})).collect::<Vec<_>>(),
            "steered_interfaces": self.steering.as_ref().map(|s| s.steered()).unwrap_or_default(),
            "tun": self.tun_link.as_ref().map(|l| json!({
                "name": self.tun.name(),
                "queue_drops": l.tx_dropped,
                "read_by_daemon": l.tx_packets,
                "written_by_daemon": l.rx_packets,
                "rx_dropped": l.rx_dropped,
            })),
            "total": total,
        });
        match head {
            Value::Object(m) => m,
            _ => unreachable!("json! object"),
        }
    }

    /// One element of the stats document's `peers`.
    fn stats_peer(&self, p: IpAddr) -> Value {
        let mut m = self
            .engine
            .peer_stats(p)
            .map(stats::stats_json)
            .unwrap_or_default();
        m.insert("peer".into(), self.peer_name(p).into());
        m.insert("configured".into(), self.peers.contains_key(&p).into());
        Value::Object(m)
    }

    /// The `airpack stats --json` document, serialized peer by peer (see
    /// [`stats::write_with_peers`]: no whole-document tree).
    pub fn stats_bytes(&self) -> Vec<u8> {
        let peers = self.sorted_peers();
        let mut out = Vec::new();
        stats::write_with_peers(&mut out, &self.stats_head(), peers.len(), |i| {
            self.stats_peer(peers[i])
        });
        out
    }

    /// The `/metrics` text, peer by peer.
    fn metrics_bytes(&self) -> Vec<u8> {
        let mut out = String::new();
        stats::prometheus_head(&Value::Object(self.stats_head()), &mut out);
        for p in self.sorted_peers() {
            stats::prometheus_peer(&self.stats_peer(p), &mut out);
        }
        out.into_bytes()
    }

    /// A peer as `airpack stats`/`peers` name it: its address, with
    /// `%interface` for a link-local one (the config syntax).
    fn peer_name(&self, p: IpAddr) -> String {
        match self.peers.get(&p).and_then(|e| e.interface.as_deref()) {
            Some(i) => format!("{p}%{i}"),
            None => p.to_string(),
        }
    }

    /// The `airpack peers --json` document, serialized peer by peer.
    pub fn peers_bytes(&self) -> Vec<u8> {
        let peers = self.sorted_peers();
        let mut head = serde_json::Map::new();
        head.insert(
            "mode".into(),
            mode_name(self.plan.config.daemon.mode).into(),
        );
        let mut out = Vec::new();
        stats::write_with_peers(&mut out, &head, peers.len(), |i| {
            let p = peers[i];
            {
                let cfg = self.engine.peer(p);
                let plan = self.plan.peer(p);
                let c = self
                    .engine
                    .peer_stats(p)
                    .map(|s| s.counters.clone())
                    .unwrap_or_default();
                json!({
                    "peer": self.peer_name(p),
                    "configured": plan.is_some(),
                    "accepts_bundles": cfg.map(|c| c.accepts_bundles),
                    "encoding": cfg.map(|c| c.encoding.name()),
                    "hold_time_us": cfg.map(|c| c.hold_time),
                    "min_size": cfg.map(|c| c.min_size),
                    "max_size": cfg.map(|c| c.max_size),
                    "max_packets": cfg.map(|c| c.max_packets),
                    "outer_overhead": cfg.map(|c| c.outer_overhead),
                    "allowed_ips": plan.map(|p| p.allowed_ips.iter().map(|c| c.to_string()).collect::<Vec<_>>()).unwrap_or_default(),
                    "packets_in": c.packets_in,
                    "bundles": c.bundles,
                    "aggregation_ratio": c.aggregation_ratio(),
                    "bundles_received": c.bundles_received,
                })
            }
        });
        out
    }
}

/// Whether `peer` may send inner packets from `inner_src`; `peer_if` is the
/// interface of a link-local peer (0: any), which the route back to
/// `inner_src` must use too.
fn source_allowed(
    plan: &Plan,
    resolver: &mut RouteResolver,
    peer: IpAddr,
    peer_if: u32,
    inner_src: IpAddr,
) -> bool {
    match plan.source_check {
        SourceCheck::Off => true,
        SourceCheck::AllowedIps => plan.allowed_ips.lookup(inner_src) == Some(peer),
        SourceCheck::Route => match resolver.lookup(inner_src) {
            Ok(nh) => !nh.local && nh.addr == peer && (peer_if == 0 || nh.oif == peer_if),
            Err(_) => false,
        },
    }
}

/// The parts of a steering spec that need a full reinstall when changed.
#[derive(PartialEq, Eq)]
struct SteerKey {
    tun: String,
    bypass: u32,
    prio: u16,
    from_tun: bool,
}

impl SteerKey {
    fn of(s: &crate::linux::SteerSpec) -> SteerKey {
        SteerKey {
            tun: s.tun.clone(),
            bypass: s.bypass_mark,
            prio: s.priority,
            from_tun: s.steer_from_tun,
        }
    }
}

/// The interfaces to steer when none are configured: those of the kernel's
/// routes to the configured peers (a link-local peer's own interface) and,
/// end-to-end, to the allowed-IPs prefixes. Sorted, without the TUN.
fn auto_interfaces(plan: &Plan, resolver: &mut RouteResolver, tun: u32) -> Vec<String> {
    let mut names = Vec::new();
    let mut via = |dst: IpAddr, names: &mut Vec<String>| {
        if let Ok(nh) = resolver.lookup(dst) {
            if !nh.local && nh.oif != tun {
                if let Ok(n) = linux::tun::ifname(nh.oif) {
                    names.push(n);
                }
            }
        }
    };
    for p in &plan.peers {
        match &p.interface {
            Some(i) => names.push(i.clone()),
            None => via(p.address, &mut names),
        }
    }
    if plan.config.daemon.mode == Mode::EndToEnd {
        for (c, _) in plan.allowed_ips.entries() {
            via(c.addr, &mut names);
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Up and running (`Some(true)`), down (`Some(false)`) or missing/unreadable (`None`).
fn link_state(name: &str) -> Option<bool> {
    linux::tun::link_up(name).ok().flatten()
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::HopByHop => "hop-by-hop",
        Mode::EndToEnd => "end-to-end",
    }
}

fn link_mode_name(m: LinkModeCfg) -> &'static str {
    match m {
        LinkModeCfg::Fixed => "fixed",
        LinkModeCfg::HoldWhileBusy => "hold-while-busy",
    }
}
