//! The event loop: one thread, one epoll, driving the sans-IO engine.
//!
//! Owns: the daemon's descriptors (TUN, bundle sockets, raw sender, timerfd,
//! signalfd, route monitor and resolver sockets, control listeners, the
//! render thread's eventfd), the peer lookup (hop-by-hop: the kernel's next
//! hop for the packet's source and destination, asked without waiting;
//! end-to-end: longest-prefix match over `allowed_ips`), the receive-side checks (known peer, allowed
//! inner source), the link-busy signal (SIOCOUTQ) and the lifecycle (start,
//! SIGHUP reload, SIGTERM flush and clean exit).
//!
//! Split by concern: [`sockets`] (bundle sockets, raw sender), [`peer`]
//! (the peers, static and discovered: address, scope, allowed sources,
//! link state, counters; the inner source check), [`datapath`] (TUN, bundles,
//! transmit), [`lookups`] (packets waiting for a next hop), [`routing`]
//! (route/link changes, steered interfaces), [`reload`] (SIGHUP),
//! [`discovery`] (hellos, discovered peers) and
//! [`report`] (control answers, rendered off the loop); this file holds the
//! daemon's state, start, the loop and the clean stop.
//!
//! Must not touch: packet formats or queueing policy (that is
//! `airpack_core::Engine`), kernel plumbing details (that is `crate::linux`).
//! Per packet it neither allocates nor logs above trace level; every error on
//! the data path is counted and survived.

use super::accounting;
use super::config::{LinkModeCfg, Mode, Plan, Source};
use super::control::{Server, TOK_CONN_BASE, TOK_CONTROL, TOK_METRICS};
use super::stats::DaemonCounters;
use crate::linux::{
    self, monotonic_micros,
    route::{AsyncResolver, DEFAULT_CACHE_ENTRIES},
    CpuLatency, Events, Interest, Poller, RouteMonitor, RouteResolver, Signals, Steering, Timer,
    Tun, TunBatch,
};
use airpack_core::Engine;
use anyhow::Context;
use peer::Peers;
use routing::{auto_interfaces, link_state};
use sockets::Sockets;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use tracing::{debug, error, info, warn};

mod ap;
mod bundle_auth;
mod busy;
mod datapath;
mod discovery;
mod gateway;
mod gateway_tim;
mod link_radio;
mod lookups;
mod peer;
mod reload;
mod report;
mod routing;
mod sockets;
mod station;

const TOK_TUN: u64 = 1;
const TOK_B4: u64 = 2;
const TOK_B6: u64 = 3;
const TOK_U4: u64 = 4;
const TOK_U6: u64 = 5;
const TOK_TIMER: u64 = 6;
const TOK_SIG: u64 = 7;
const TOK_MON: u64 = 10;
/// The raw senders (registered for EPOLLERR only: error-queue entries).
const TOK_R4: u64 = 11;
const TOK_R6: u64 = 12;
const TOK_LOOKUP: u64 = 13;
const TOK_RENDER: u64 = 14;

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

/// Where a packet read from the TUN goes.
enum Dest {
    /// Into the engine, for this peer.
    Peer(IpAddr),
    /// Out unchanged (no peer, or the next hop does not run airpack).
    Unchanged,
    /// Nowhere: the normal route leads back into the TUN.
    Loop,
    /// Into the park: the next hop is being asked (see [`lookups`]).
    Wait,
}

/// How long the loop spent on work other than packets (µs), for `stats`.
#[derive(Clone, Copy, Debug, Default)]
struct LoopTimes {
    /// Longest handling of a route monitor wakeup.
    max_route_change_us: u64,
    /// Longest handling of one control request on the loop.
    max_control_us: u64,
    /// The previous control request's.
    last_control_us: u64,
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
    steering: Option<Steering>,
    /// Synchronous lookups off the TUN path (steered interfaces, the
    /// receive-side source check), with the bypass mark.
    resolver: RouteResolver,
    /// The TUN path's next hops by (source, destination); never waits.
    lookups: AsyncResolver,
    /// TUN packets waiting for `lookups`.
    park: lookups::Park,
    times: LoopTimes,
    monitor: RouteMonitor,
    sock: Sockets,
    timer: Timer,
    signals: Signals,
    poller: Poller,
    control: Server,
    /// Renders control answers off the loop.
    renderer: report::Renderer,
    counters: DaemonCounters,
    /// The peers, static and discovered (the only sources bundles are
    /// accepted from); their encodings are the engine's.
    peers: Peers,
    link_busy: bool,
    /// Busy-signal sources besides SIOCOUTQ (`[medium]`).
    busy_sources: busy::BusySources,
    /// The last signal given to the engine.
    medium: busy::Sample,
    links: Vec<Link>,
    /// No `daemon.interfaces` configured: steer the interfaces of the routes
    /// to the peers, re-evaluated when routes change.
    steer_auto: bool,
    started: u64,
    /// Neighbour discovery (`[discovery]`), if enabled.
    discovery: Option<discovery::Discovery>,
    /// The downlink multiplexer role (`[ap]`), if enabled.
    ap: Option<ap::Ap>,
    /// The downlink demultiplexer role (`[station]`), if enabled.
    station: Option<station::Station>,
    /// Bundle authentication (a mesh key is set).
    auth: Option<bundle_auth::BundleAuth>,
    /// The voice-adaptive gateway pacer role (`[gateway]`), if enabled.
    gateway: Option<gateway::Gateway>,
    /// Accounting of downlink roles a reload stopped or rebuilt.
    downlink_retired: crate::daemon::accounting::Extra,
    tun_buf: Vec<u8>,
    /// Batched TUN reads (see [`datapath::TunReads`]).
    tun_reads: datapath::TunReads,
    tx_buf: Vec<u8>,
    rx_buf: Vec<u8>,
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
        // Mark 0: a steered packet never carries the bypass mark, and the
        // TUN does not tell its own mark; unmarked is the usual case.
        let lookups = AsyncResolver::new(0, DEFAULT_CACHE_ENTRIES, lookups::LOOKUP_TIMEOUT_US)
            .context("opening the netlink route resolver")?;
        let monitor = RouteMonitor::new().context("opening the netlink route monitor")?;
        let timer = Timer::new()?;
        let poller = Poller::new()?;
        let control = Server::bind(&d.control_socket, plan.prometheus)?;
        let renderer = report::Renderer::start().context("starting the render thread")?;

        let mut engine = Engine::new(plan.engine.clone());
        for p in &plan.peers {
            engine.set_peer(p.address, p.config.clone()).map_err(|r| {
                anyhow::anyhow!("engine refused peer {}: {}", p.address, r.reason())
            })?;
        }
        let now = monotonic_micros();
        if busy::medium_aware(&plan) {
            engine.set_link_busy(now, false);
        }
        let busy_sources = busy::BusySources::new(&plan);

        poller.add(tun.as_raw_fd(), TOK_TUN, Interest::READ)?;
        sock.register(&poller)?;
        poller.add(timer.as_raw_fd(), TOK_TIMER, Interest::READ)?;
        poller.add(signals.as_raw_fd(), TOK_SIG, Interest::READ)?;
        poller.add(monitor.as_raw_fd(), TOK_MON, Interest::READ)?;
        poller.add(lookups.as_raw_fd(), TOK_LOOKUP, Interest::READ)?;
        control.register(&poller)?;
        poller.add(renderer.as_raw_fd(), TOK_RENDER, Interest::READ)?;
        let discovery = discovery::Discovery::open(&plan)?;
        for (fd, token) in discovery.iter().flat_map(|d| d.fds()) {
            poller.add(fd, token, Interest::READ)?;
        }

        let ap = match &plan.ap {
            Some(a) => Some(ap::Ap::open(a, d.bypass_mark)?),
            None => None,
        };
        for (fd, token) in ap.iter().flat_map(|a| a.fds()) {
            poller.add(fd, token, Interest::READ)?;
        }
        let station = match &plan.station {
            Some(s) => Some(station::Station::open(s, d.bypass_mark, now)?),
            None => None,
        };
        for (fd, token) in station.iter().flat_map(|s| s.fds()) {
            poller.add(fd, token, Interest::READ)?;
        }
        let gateway = match &plan.gateway {
            Some(g) => Some(gateway::Gateway::open(g, d.bypass_mark, now)?),
            None => None,
        };
        for (fd, token) in gateway.iter().flat_map(|g| g.fds()) {
            poller.add(fd, token, Interest::READ)?;
        }

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
        let mut steering =
            Steering::install(&spec).context("installing kernel steering (tcx egress programs)")?;
        if let Some(g) = &plan.gateway {
            steering
                .record_htb(Some(g.interface.clone()))
                .context("recording the gateway's qdisc in the state file")?;
        }
        // After the steering: it may turn every existing interface's
        // reverse-path filter strict, the module's TUNs need it off.
        let mut gateway = gateway;
        for g in gateway.iter_mut() {
            for (fd, token) in g.start_tim(d.bypass_mark)? {
                poller.add(fd, token, Interest::READ)?;
            }
        }
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
            link_mode = ?plan.link_mode,
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
        let peers = Peers::from_plan(&plan, |a| engine.peer(a).is_some());
        Ok(Daemon {
            source,
            engine,
            tun,
            tun_batch,
            _cpu_latency: cpu_latency,
            steering: Some(steering),
            resolver,
            lookups,
            park: lookups::Park::new(),
            times: LoopTimes::default(),
            monitor,
            sock,
            timer,
            signals,
            poller,
            control,
            renderer,
            counters: DaemonCounters::default(),
            peers,
            link_busy: false,
            busy_sources,
            medium: busy::Sample::default(),
            links,
            steer_auto,
            started: now,
            discovery,
            ap,
            station,
            auth: auth_for(&plan),
            gateway,
            downlink_retired: Default::default(),
            tun_buf: vec![0; BUF],
            tun_reads: datapath::TunReads::new(),
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
                    TOK_B4 | TOK_B6 | TOK_U4 | TOK_U6 => self.on_bundles(ev.token, ev.error),
                    TOK_R4 | TOK_R6 => self.on_socket_errors(),
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
                    TOK_MON => self.on_route_change(now),
                    TOK_LOOKUP => self.on_lookups(now),
                    TOK_RENDER => {
                        // Handing the answer to its connection (the first
                        // write of it) is loop time too.
                        let t0 = monotonic_micros();
                        self.on_rendered();
                        let took = monotonic_micros().saturating_sub(t0);
                        self.times.max_control_us = self.times.max_control_us.max(took);
                    }
                    TOK_CONTROL | TOK_METRICS => self.control.accept(&self.poller, ev.token),
                    t if discovery::Discovery::owns(t) => self.on_hello(t, now),
                    t if ap::Ap::owns(t) => self.on_ap_registration(t, now),
                    t if station::Station::owns(t) => self.on_station(t, now),
                    t if gateway::Gateway::owns(t) => self.on_gateway(t),
                    t if t >= TOK_CONN_BASE => {
                        let slot = (t - TOK_CONN_BASE) as usize;
                        if let Some(req) = self.control.ready(&self.poller, slot, ev.writable) {
                            let t0 = monotonic_micros();
                            let serial = self.control.serial(slot).unwrap_or(0);
                            self.dispatch(slot, serial, req);
                            self.counters.control_requests += 1;
                            let took = monotonic_micros().saturating_sub(t0);
                            self.times.last_control_us = took;
                            self.times.max_control_us = self.times.max_control_us.max(took);
                        }
                    }
                    _ => {}
                }
            }
            if self.park.len() > 0 || self.lookups.pending() > 0 {
                // Answers read meanwhile (a lookup polls right after asking)
                // and expired requests release their packets.
                self.on_lookups(now);
            }
            if stop {
                return self.shutdown();
            }
            self.discovery_poll(now);
            self.ap_poll(now);
            self.station_poll(now);
            self.gateway_poll(now);
            self.update_busy(now);
            if self.engine.poll_timeout().is_some_and(|t| t <= now) {
                self.engine.handle_timeout(now);
            }
            self.transmit(now);
            self.arm_timer(now);
        }
    }

    /// The link mode uses the busy signal (hold-while-busy or adaptive).
    fn hold_while_busy(&self) -> bool {
        busy::medium_aware(&self.plan)
    }

    /// Reads the link-busy signal and tells the engine when it changed.
    fn update_busy(&mut self, now: u64) -> bool {
        if !self.hold_while_busy() {
            return false;
        }
        let held = self.engine.queued().0 > 0;
        let m = self.busy_sources.sample(now, self.sock.outq(), held);
        if m == self.medium {
            return false;
        }
        self.medium = m;
        self.engine.set_medium(now, m.utilisation, m.busy);
        let busy = self.engine.link_busy();
        if busy == self.link_busy {
            return false;
        }
        self.link_busy = busy;
        self.counters.busy_transitions += 1;
        true
    }

    fn arm_timer(&mut self, now: u64) {
        let mut deadline = self.engine.poll_timeout();
        if let Some(l) = self.lookups.next_deadline() {
            deadline = Some(deadline.map_or(l, |d| d.min(l)));
        }
        if let Some(h) = self.discovery.as_ref().and_then(|d| d.deadline()) {
            deadline = Some(deadline.map_or(h, |d| d.min(h)));
        }
        for h in [
            self.ap.as_ref().and_then(|a| a.deadline()),
            self.station.as_ref().and_then(|s| s.deadline()),
            self.gateway.as_ref().and_then(|g| g.deadline()),
        ]
        .into_iter()
        .flatten()
        {
            deadline = Some(deadline.map_or(h, |d| d.min(h)));
        }
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

    /// SIGTERM/SIGINT: stop steering, hand every packet already in the TUN and
    /// the engine to the wire, remove the control socket.
    fn shutdown(mut self) -> anyhow::Result<()> {
        info!("stopping: removing steering, flushing queued packets");
        self.station_stop();
        self.gateway_stop();
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
            // Parked packets go out (with their answer, or unchanged).
            self.lookups.poll();
            self.release(now, true);
            self.ap_flush(now);
            self.engine.flush();
            sent += self.drain_all(now);
        }
        // What the bounded drain left in the TUN would be freed uncounted
        // when the descriptor closes: read and count it instead.
        let (discarded, tun_empty) = self.discard_tun();
        self.sock.drain_errors(&mut self.counters);
        self.control.remove_socket_file();
        // The kernel's TUN counters just before close (its queue drops).
        let tun_drops = self
            .resolver
            .link_stats(self.tun.ifindex())
            .ok()
            .map(|l| l.tx_dropped);
        let c = self.engine.stats().counters;
        info!(
            packets_in = c.packets_in,
            bundles = c.bundles,
            aggregated = c.aggregated_packets,
            dropped = c.dropped_total(),
            tun_drained = drained,
            tun_discarded = discarded,
            flushed = sent,
            "stopped"
        );
        self.log_accounting(&c, tun_drops, tun_empty);
        Ok(())
    }

    /// Reads and discards what is left in the TUN (counted as
    /// `shutdown_discarded`), bounded by the TUN's queue length (steering
    /// is gone: nothing refills it but the kernel's own rare packets).
    /// Returns (packets discarded, whether the TUN was found empty).
    fn discard_tun(&mut self) -> (u64, bool) {
        let limit = self.plan.config.daemon.tun_txqueuelen as u64 * 2 + BATCH as u64;
        let mut n = 0;
        while n < limit {
            match self.tun.read(&mut self.tun_buf) {
                Ok(len) => {
                    n += 1;
                    self.counters.tun_read += 1;
                    self.counters.tun_read_bytes += len as u64;
                    self.counters.shutdown_discarded += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return (n, true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.counters.tun_read_errors += 1;
                    warn!("TUN read at stop: {e}");
                    return (n, false);
                }
            }
        }
        (n, false)
    }

    /// The final accounting, in the log (`airpack stats` is gone by now).
    fn log_accounting(
        &self,
        c: &airpack_core::engine::Counters,
        tun_drops: Option<u64>,
        tun_empty: bool,
    ) {
        let a = self.accounting_of(c, tun_drops);
        info!(
            balanced = a.balanced(),
            send_in = a.send_in,
            send_out = a.send_out,
            send_dropped = a.send_dropped_total(),
            send_queued = a.send_queued,
            send_dropped_by = %accounting::Accounting::nonzero(&a.send_dropped),
            receive_in = a.receive_in,
            receive_out = a.receive_out,
            receive_dropped_by = %accounting::Accounting::nonzero(&a.receive_dropped),
            datagrams_in = a.datagrams_in,
            datagrams_out = a.datagrams_out,
            datagrams_dropped_by = %accounting::Accounting::nonzero(&a.datagrams_dropped),
            tun_queue_drops = a.tun_queue_drops.unwrap_or(0),
            rx_queue_drops = a.rx_queue_drops,
            tun_empty_at_close = tun_empty,
            "accounting at stop"
        );
        if !a.balanced() {
            error!(
                "packet accounting does not balance at stop (a bug): {:?}",
                a
            );
        }
        if a.send_queued > 0 {
            warn!(
                packets = a.send_queued,
                "packets still queued in the engine at exit are lost"
            );
        }
        if !tun_empty {
            warn!("the TUN still held packets when it was closed; they are lost uncounted");
        }
    }

    /// Sends everything the engine holds (after `flush`); bounded.
    fn drain_all(&mut self, now: u64) -> u64 {
        let mut sent = 0u64;
        let limit =
            self.engine.queued().0 as u64 + 1 + self.engine.config().bypass_queue_limit as u64;
        while let Some(t) = self.engine.poll_transmit(now, &mut self.tx_buf) {
            self.send_transmit(&t);
            sent += 1;
            if sent > limit.saturating_mul(2) + 1024 {
                warn!("flush did not converge; stopping anyway");
                break;
            }
        }
        sent
    }
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
        LinkModeCfg::Adaptive => "adaptive",
    }
}

/// Bundle authentication for `plan`'s mesh key, remembering as many sending
/// nodes as the daemon may have peers and neighbours (twice, for restarts).
fn auth_for(plan: &Plan) -> Option<bundle_auth::BundleAuth> {
    let c = &plan.config;
    plan.bundle_key.clone().map(|k| {
        bundle_auth::BundleAuth::new(k, 2 * (c.aggregation.max_peers + c.discovery.max_neighbors))
    })
}
