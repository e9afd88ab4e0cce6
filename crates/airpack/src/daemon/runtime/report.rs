//! Answers to control requests: the `stats`, `peers` and `/metrics`
//! documents, built from the engine's and the daemon's counters, and the
//! packet accounting ([`accounting::Accounting`]) they and the stop log carry.
//!
//! The loop only copies what an answer needs ([`Snapshot`]: counters and
//! histograms by value, a few hundred bytes per peer); rendering the JSON or
//! Prometheus text, and reading the TUN's kernel counters (RTM_GETLINK), is
//! done on a render thread ([`Renderer`]) at normal scheduling priority, whose
//! answers come back through an eventfd on the loop. A request thus holds
//! the packet path for the copy only (numbers in docs/performance.md).
//!
//! Must not touch: the packet path (nothing here runs per packet).

use super::peer::PeerCounters;
use super::{link_mode_name, mode_name, Daemon};
use crate::daemon::accounting;
use crate::daemon::control::{Request, MAX_CONNS};
use crate::daemon::stats::{self, DaemonCounters};
use crate::linux::{monotonic_micros, LinkStats, RouteResolver};
use airpack_core::{PeerConfig, Stats};
use serde_json::{json, Value};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use tracing::warn;

/// One peer as an answer shows it.
pub(super) struct PeerSnap {
    name: String,
    configured: bool,
    /// `peers` only: its link state and daemon-side counters (`None`: an
    /// engine peer the daemon does not know, created on demand).
    link: Option<(&'static str, PeerCounters)>,
    stats: Option<Stats>,
    /// `peers` only: its engine configuration and allowed IPs.
    cfg: Option<PeerConfig>,
    allowed_ips: Vec<String>,
}

/// Everything an answer needs, copied on the loop.
pub(super) struct Snapshot {
    req: Request,
    total: Stats,
    counters: DaemonCounters,
    mode: &'static str,
    link_mode: &'static str,
    link_busy: bool,
    uptime_s: f64,
    queued: (usize, usize),
    /// Datagrams the bundle sockets' receive queues dropped (read on the loop).
    rx_queue_drops: u64,
    links: Vec<(String, Option<bool>)>,
    steered: Vec<String>,
    tun_name: String,
    tun_ifindex: u32,
    routes: Value,
    loop_times: Value,
    peers: Vec<PeerSnap>,
    /// `peers` only: the neighbour tables, when discovery is on.
    discovery: Option<Value>,
    /// `stats`, `metrics`: the downlink roles' objects (`ap`, `station`),
    /// when enabled; `peers`: the AP's `stations` and the station's `station`.
    downlink: Vec<(&'static str, Value)>,
    /// `stats` and `/metrics`: the gateway role's object, when enabled.
    gateway: Option<Value>,
    /// `stats`: the busy sources' object (`medium`).
    medium: Option<Value>,
    /// The downlink roles' packets in the accounting.
    downlink_account: accounting::Extra,
}

impl Daemon {
    /// The packet accounting now, given the engine's totals and the TUN's
    /// kernel queue drops (`None`: unknown).
    pub(super) fn accounting_of(
        &self,
        engine: &airpack_core::engine::Counters,
        tun_queue_drops: Option<u64>,
    ) -> accounting::Accounting {
        let mut a = accounting::Accounting::new(
            engine,
            self.engine.queued().0 as u64,
            &self.counters,
            tun_queue_drops,
            self.sock.rx_queue_drops(),
        );
        a.add(&self.downlink_account());
        a
    }

    /// The downlink roles' part of the accounting.
    pub(super) fn downlink_account(&self) -> accounting::Extra {
        let mut now = accounting::Extra::default();
        self.ap_account(&mut now);
        self.station_account(&mut now);
        let mut e = self.downlink_retired.clone();
        e.add(&now);
        e
    }

    pub(super) fn sorted_peers(&self) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self.engine.peers().collect();
        v.sort();
        v
    }

    /// Copies what the answer to `req` needs (no rendering).
    pub(super) fn snapshot(&self, req: Request) -> Snapshot {
        let with_config = req == Request::Peers;
        let medium = (req == Request::Stats).then(|| self.busy_sources.json());
        let peers = self
            .sorted_peers()
            .into_iter()
            .map(|p| {
                let peer = self.peers.get(&p);
                PeerSnap {
                    name: self.peer_name(p),
                    // `peers`: a `[[peer]]`; `stats`: static or discovered.
                    configured: if with_config {
                        self.peers.is_static(p)
                    } else {
                        peer.is_some()
                    },
                    link: with_config
                        .then(|| peer.map(|e| (e.state().name(), e.counters)))
                        .flatten(),
                    stats: self.engine.peer_stats(p).cloned(),
                    cfg: with_config.then(|| self.engine.peer(p).cloned()).flatten(),
                    allowed_ips: peer
                        .filter(|_| with_config)
                        .map(|e| e.allowed().iter().map(|c| c.to_string()).collect())
                        .unwrap_or_default(),
                }
            })
            .collect();
        Snapshot {
            req,
            total: self.engine.stats(),
            counters: self.counters.clone(),
            mode: mode_name(self.plan.config.daemon.mode),
            link_mode: link_mode_name(self.plan.link_mode),
            link_busy: self.link_busy,
            uptime_s: (monotonic_micros().saturating_sub(self.started)) as f64 / 1e6,
            queued: self.engine.queued(),
            rx_queue_drops: self.sock.rx_queue_drops(),
            links: self.links.iter().map(|l| (l.name.clone(), l.up)).collect(),
            steered: self
                .steering
                .as_ref()
                .map(|s| s.steered())
                .unwrap_or_default(),
            tun_name: self.tun.name().to_string(),
            tun_ifindex: self.tun.ifindex(),
            routes: self.routes_json(),
            loop_times: json!({
                "max_route_change_us": self.times.max_route_change_us,
                "max_control_us": self.times.max_control_us,
                "last_control_us": self.times.last_control_us,
            }),
            peers,
            discovery: with_config
                .then(|| self.discovery.as_ref().map(|d| d.json(monotonic_micros())))
                .flatten(),
            downlink_account: self.downlink_account(),
            downlink: if with_config {
                self.downlink_peers_json()
            } else {
                self.downlink_json()
            },
            gateway: self.gateway.as_ref().map(|g| g.json()),
            medium,
        }
    }

    /// The TUN path's next-hop lookups and the packets that waited for them.
    pub(super) fn routes_json(&self) -> Value {
        let s = self.lookups.stats();
        json!({
            "cached": self.lookups.cached(),
            "pending": self.lookups.pending(),
            "requests": s.requests,
            "answers": s.answers,
            "answered_at_once": s.answered_at_once,
            "input_fallbacks": s.input_fallbacks,
            "stale_replies": s.stale_replies,
            "timeouts": s.timeouts,
            "unavailable": s.unavailable,
            "overruns": s.overruns,
            "malformed": s.malformed,
            "evicted": s.evicted,
            "flushes": s.flushes,
            "capacity_evictions": s.capacity_evictions,
            "max_send_us": s.max_send_us,
            "park": self.park.json(),
        })
    }

    /// A peer as `airpack stats`/`peers` name it: its address, with
    /// `%interface` for a link-local one (the config syntax).
    pub(super) fn peer_name(&self, p: IpAddr) -> String {
        match self.peers.get(&p).and_then(|e| e.interface()) {
            Some(i) => format!("{p}%{i}"),
            None => p.to_string(),
        }
    }

    /// The `airpack stats --json` document, rendered on the calling thread
    /// (tests and tools; the loop uses the [`Renderer`]).
    pub fn stats_bytes(&self) -> Vec<u8> {
        render(self.snapshot(Request::Stats), None).1
    }

    /// The `airpack peers --json` document, rendered on the calling thread.
    pub fn peers_bytes(&self) -> Vec<u8> {
        render(self.snapshot(Request::Peers), None).1
    }

    /// A control request for connection `slot` (`serial` identifies the
    /// connection): copied here, rendered on the render thread; answered
    /// on the loop at once only if it is malformed or the thread is gone.
    pub(super) fn dispatch(&mut self, slot: usize, serial: u64, req: Request) {
        if let Request::Bad(_) = req {
            let (ok, body) = render_bad(&req);
            self.control.respond(&self.poller, slot, ok, body);
            return;
        }
        let snap = Box::new(self.snapshot(req));
        if let Err(snap) = self.renderer.submit(slot, serial, snap) {
            let (ok, body) = render(*snap, None);
            self.control.respond(&self.poller, slot, ok, body);
        }
    }

    /// The render thread finished answers: hand them to their connections
    /// (if still open: a connection evicted meanwhile is skipped).
    pub(super) fn on_rendered(&mut self) {
        self.renderer.clear_wake();
        while let Some(done) = self.renderer.finished() {
            if self.control.serial(done.slot) == Some(done.serial) {
                self.control
                    .respond(&self.poller, done.slot, done.ok, done.body);
            }
        }
    }
}

fn render_bad(req: &Request) -> (bool, Vec<u8>) {
    let r = match req {
        Request::Bad(r) => r.as_str(),
        _ => "",
    };
    (
        false,
        serde_json::to_vec(
            &json!({"error": format!("unknown request {r:?} (expected \"stats\" or \"peers\")")}),
        )
        .unwrap_or_default(),
    )
}

/// The `airpack stats --json` document without `peers`.
fn stats_head(s: &Snapshot, tun: Option<&LinkStats>) -> serde_json::Map<String, Value> {
    let mut total = stats::stats_json(&s.total);
    total.insert("daemon".into(), stats::daemon_json(&s.counters));
    let mut acc = accounting::Accounting::new(
        &s.total.counters,
        s.queued.0 as u64,
        &s.counters,
        tun.map(|l| l.tx_dropped),
        s.rx_queue_drops,
    );
    acc.add(&s.downlink_account);
    let head = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "mode": s.mode,
        "link_mode": s.link_mode,
        "link_busy": s.link_busy,
        "uptime_s": s.uptime_s,
        "queued": {"packets": s.queued.0, "bytes": s.queued.1},
        "links": s.links.iter().map(|(name, up)| json!({"interface": name, "up": up})).collect::<Vec<_>>(),
        "steered_interfaces": s.steered,
        "tun": tun.map(|l| json!({
            "name": s.tun_name,
            "queue_drops": l.tx_dropped,
            "read_by_daemon": l.tx_packets,
            "written_by_daemon": l.rx_packets,
            "rx_dropped": l.rx_dropped,
        })),
        "routes": s.routes,
        "loop": s.loop_times,
        "total": total,
        "accounting": acc.json(),
    });
    match head {
        Value::Object(mut m) => {
            // Why nothing is being bundled, when that is so (`None`: it is).
            let note = stats::match_note(&Value::Object(m.clone()));
            m.insert("note".into(), note.into());
            m
        }
        _ => unreachable!("json! object"),
    }
}

/// One element of the stats document's `peers`.
fn stats_peer(p: &PeerSnap) -> Value {
    let mut m = p.stats.as_ref().map(stats::stats_json).unwrap_or_default();
    m.insert("peer".into(), p.name.clone().into());
    m.insert("configured".into(), p.configured.into());
    Value::Object(m)
}

fn peers_peer(p: &PeerSnap) -> Value {
    let cfg = p.cfg.as_ref();
    let c = p
        .stats
        .as_ref()
        .map(|s| s.counters.clone())
        .unwrap_or_default();
    let link = p.link.map(|l| l.1);
    json!({
        "peer": p.name,
        "configured": p.configured,
        "link": p.link.map(|l| l.0),
        "spoofed_source": link.map(|c| c.spoofed_source),
        "auth_failed": link.map(|c| c.auth_failed),
        "replayed": link.map(|c| c.replayed),
        "neighbor_ups": link.map(|c| c.neighbor_ups),
        "neighbor_downs": link.map(|c| c.neighbor_downs),
        "accepts_bundles": cfg.map(|c| c.accepts_bundles),
        "encoding": cfg.map(|c| c.encoding.name()),
        "hold_time_us": cfg.map(|c| c.hold_time),
        "min_size": cfg.map(|c| c.min_size),
        "max_size": cfg.map(|c| c.max_size),
        "max_packets": cfg.map(|c| c.max_packets),
        "outer_overhead": cfg.map(|c| c.outer_overhead),
        "allowed_ips": p.allowed_ips,
        "packets_in": c.packets_in,
        "bundles": c.bundles,
        "aggregation_ratio": c.aggregation_ratio(),
        "bundles_received": c.bundles_received,
    })
}

/// Renders the answer to a snapshot (any thread), peer by peer (see
/// [`stats::write_with_peers`]: no whole-document tree).
fn render(s: Snapshot, tun: Option<LinkStats>) -> (bool, Vec<u8>) {
    let mut out = Vec::new();
    match &s.req {
        Request::Stats => {
            let mut head = stats_head(&s, tun.as_ref());
            for (k, v) in &s.downlink {
                head.insert((*k).into(), v.clone());
            }
            if let Some(g) = &s.gateway {
                head.insert("gateway".into(), g.clone());
            }
            if let Some(m) = &s.medium {
                head.insert("medium".into(), m.clone());
            }
            stats::write_with_peers(&mut out, &head, s.peers.len(), |i| stats_peer(&s.peers[i]));
        }
        Request::Metrics => {
            let mut head = stats_head(&s, tun.as_ref());
            for (k, v) in &s.downlink {
                head.insert((*k).into(), v.clone());
            }
            if let Some(g) = &s.gateway {
                head.insert("gateway".into(), g.clone());
            }
            let head = Value::Object(head);
            out =
                crate::daemon::metrics::render(&head, s.peers.iter().map(stats_peer)).into_bytes();
        }
        Request::Peers => {
            let mut head = serde_json::Map::new();
            head.insert("mode".into(), s.mode.into());
            if let Some(d) = &s.discovery {
                head.insert("discovery".into(), d.clone());
            }
            for (k, v) in &s.downlink {
                head.insert((*k).into(), v.clone());
            }
            stats::write_with_peers(&mut out, &head, s.peers.len(), |i| peers_peer(&s.peers[i]));
        }
        Request::Bad(_) => return render_bad(&s.req),
    }
    (true, out)
}

struct Job {
    slot: usize,
    serial: u64,
    snap: Box<Snapshot>,
}

/// A rendered answer.
pub(super) struct Done {
    slot: usize,
    serial: u64,
    ok: bool,
    body: Vec<u8>,
}

/// The render thread: snapshots in, answers out, an eventfd to wake the loop.
pub(super) struct Renderer {
    jobs: SyncSender<Job>,
    done: Receiver<Done>,
    wake: OwnedFd,
}

impl Renderer {
    /// Starts the thread (in the caller's network namespace; it drops any
    /// real-time priority: rendering must not compete with the loop).
    pub(super) fn start() -> anyhow::Result<Renderer> {
        // SAFETY: plain eventfd(2), checked before wrapping.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: fd is fresh and owned here.
        let wake = unsafe { OwnedFd::from_raw_fd(fd) };
        let wake_raw = wake.try_clone()?;
        let mut link = RouteResolver::new(0)?;
        let (jobs, job_rx) = mpsc::sync_channel::<Job>(MAX_CONNS);
        let (done_tx, done) = mpsc::channel::<Done>();
        std::thread::Builder::new()
            .name("airpack-render".into())
            .spawn(move || {
                // SAFETY: sched_param is plain integers; all zeroes is
                // priority 0 (and portable to musl's wider struct).
                let normal: libc::sched_param = unsafe { std::mem::zeroed() };
                // SAFETY: changes the calling thread's own policy.
                unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &normal) };
                while let Ok(job) = job_rx.recv() {
                    let tun = link.link_stats(job.snap.tun_ifindex).ok();
                    let (ok, body) = render(*job.snap, tun);
                    let d = Done {
                        slot: job.slot,
                        serial: job.serial,
                        ok,
                        body,
                    };
                    if done_tx.send(d).is_err() {
                        return;
                    }
                    let one = 1u64;
                    // SAFETY: writes 8 bytes from a live u64 to our eventfd.
                    unsafe { libc::write(wake_raw.as_raw_fd(), (&one as *const u64).cast(), 8) };
                }
            })?;
        Ok(Renderer { jobs, done, wake })
    }

    /// Queues a snapshot; gives it back if the thread cannot take it.
    fn submit(&self, slot: usize, serial: u64, snap: Box<Snapshot>) -> Result<(), Box<Snapshot>> {
        match self.jobs.try_send(Job { slot, serial, snap }) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(j)) | Err(TrySendError::Disconnected(j)) => {
                warn!("render thread unavailable: answering on the loop");
                Err(j.snap)
            }
        }
    }

    fn clear_wake(&self) {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into a live u64 (nonblocking eventfd).
        unsafe { libc::read(self.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    fn finished(&self) -> Option<Done> {
        self.done.try_recv().ok()
    }
}

impl AsRawFd for Renderer {
    fn as_raw_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }
}
