//! The AP role of downlink multiplexing (`[ap]`, issue 14 point 2) in the
//! daemon's one event loop: the registration server (a UDP socket; tags
//! checked with `register::open`, replays and leases by the core's
//! `LeaseTable`, which adds and removes the mux's streams), interception of
//! TUN packets bound for registered streams (`Mux::handle_packet` before the
//! aggregation path; what the mux passes back takes the normal path), and
//! the frames out on one UDP socket per interface facing the stations (or
//! one unicast socket). Stations' loss reports (authenticated like
//! requests, never answered) feed the core's `LossControl`, which serves a
//! station above `ap.loss_limit_pct` by unicast: the mux then hands its
//! packets back (`UnicastReason::Loss`) and they take the normal path.
//! A new station starts that way; on its trial (`Verdict::Trial`) its
//! packets are queued in a frame and also take the normal path.
//!
//! Interception: the whole configured `ap.media_ports` range (UDP
//! destination ports) is steered into the TUN by a steering rule placed
//! before the `[[class]]` rules (`ApPlan::steer_rule`, added by
//! `Plan::steer_spec`, so reloads and route changes keep it); the mux hands back every
//! packet of an unregistered (address, port), which is then forwarded as
//! usual. Chosen over recompiling and re-attaching the tcx program at each
//! registration because registrations then never touch the kernel (no
//! window where the program is swapped, no per-registration cost, nothing
//! a registration flood can make the daemon do to the kernel); the price is
//! that unregistered media traffic in the range takes the detour through
//! the daemon. Registered ports outside the range are never intercepted
//! (the operator sets the range to what the phones use).
//!
//! Must not touch: frame layouts, lease policy (the core), the aggregation
//! engine, the steering program itself (`crate::linux::steer`).

use super::Daemon;
use crate::daemon::config::downlink::{ApPlan, Destination};
use crate::daemon::config::Plan;
use crate::linux::poll::Interest;
use crate::linux::socket::RawIpSender;
use crate::linux::{self, mcast};
use airpack_core::downlink::lease::LeaseTable;
use airpack_core::downlink::loss::LossControl;
use airpack_core::downlink::mux::{FrameReason, Mux, UnicastReason, Verdict};
use airpack_core::downlink::register::{self, Body, ErrorCode, Message, RegError, MAX_MESSAGE};
use airpack_core::Micros;
use serde_json::{json, Value};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use tracing::{debug, error, info, warn};

/// Poll token of the registration server (IPv4 and IPv6 sockets).
pub(super) const TOK_AP_REG4: u64 = 15;
/// Poll token of the IPv6 registration server.
pub(super) const TOK_AP_REG6: u64 = 16;
/// UDP port of the guard datagrams (`ap.frame_guard`): discard (RFC 863).
const GUARD_PORT: u16 = 9;
/// Registration messages read per wakeup.
const RX_BATCH: usize = 32;

/// Registration messages refused before the lease table, by reason.
#[derive(Clone, Copy, Debug, Default)]
struct RegDrops {
    malformed: u64,
    unknown_key: u64,
    bad_tag: u64,
}

/// The AP role's state.
pub(super) struct Ap {
    plan: ApPlan,
    mux: Mux,
    leases: LeaseTable,
    /// The loss rule (stations' reports -> unicast by loss).
    loss: LossControl,
    reg: Vec<UdpSocket>,
    /// Frame sockets with their destination.
    out: Vec<(UdpSocket, SocketAddr)>,
    seq: u64,
    /// Last medium state given to the mux.
    busy: bool,
    drops: RegDrops,
    requests: u64,
    answers: u64,
    reg_errors: u64,
    /// Frame datagrams sent (one per frame and destination).
    frames_sent: u64,
    frame_send_errors: u64,
    /// Guard datagrams sent (`ap.frame_guard`), and failed sends of them.
    guards_sent: u64,
    guard_send_errors: u64,
    /// Packets of frames at least one destination took.
    packets_out: u64,
    /// Packets of frames no destination took (lost).
    packets_send_failed: u64,
    /// Sender of the packets the airtime rule hands back (rule on only).
    raw: Option<RawIpSender>,
    /// Those packets sent, and lost in failed sends.
    fallback_sent: u64,
    fallback_failed: u64,
    frame_buf: Vec<u8>,
}

fn epoch_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Ap {
    /// Opens the registration server and the frame senders.
    pub(super) fn open(ap: &ApPlan, mark: u32) -> anyhow::Result<Ap> {
        use anyhow::Context;
        let mut reg = Vec::new();
        reg.push(
            mcast::udp_socket(false, None, ap.registration_port, mark).with_context(|| {
                format!("ap: registration socket on port {}", ap.registration_port)
            })?,
        );
        match mcast::udp_socket(true, None, ap.registration_port, mark) {
            Ok(s) => reg.push(s),
            Err(e) => warn!("ap: no IPv6 registration socket: {e}"),
        }
        let mut out = Vec::new();
        match ap.destination {
            Destination::Unicast(d) => out.push((
                mcast::frame_sender(None, d, ap.port, mark).context("ap: frame socket")?,
                d,
            )),
            Destination::Group(g) => {
                for i in &ap.interfaces {
                    let mut dest = g;
                    if let (SocketAddr::V6(d), Ok(idx)) = (&mut dest, linux::tun::ifindex(i)) {
                        d.set_scope_id(idx);
                    }
                    let s = mcast::frame_sender(Some(i), g, ap.port, mark)
                        .with_context(|| format!("ap: frame socket on {i}"))?;
                    out.push((s, dest));
                }
            }
        }
        // The frames' DSCP and 802.11 user priority (ap.frame_dscp: EF ->
        // a WMM AP's AC_VO, linux::wmm).
        for (sock, dest) in &out {
            linux::wmm::mark(sock.as_raw_fd(), dest.is_ipv6(), ap.frame_dscp)
                .context("ap: mark the frame socket (ap.frame_dscp)")?;
        }
        let up = linux::wmm::user_priority(ap.frame_dscp);
        info!(destination = ?ap.destination, interfaces = ?ap.interfaces,
              dscp = ap.frame_dscp, queue = linux::wmm::access_category(up), "ap role running");
        Ok(Ap {
            mux: Mux::new(ap.mux.clone()),
            leases: LeaseTable::new(ap.lease.clone()),
            loss: LossControl::new(ap.loss.clone()),
            plan: ap.clone(),
            reg,
            out,
            seq: epoch_micros(),
            busy: false,
            drops: RegDrops::default(),
            requests: 0,
            answers: 0,
            reg_errors: 0,
            frames_sent: 0,
            frame_send_errors: 0,
            guards_sent: 0,
            guard_send_errors: 0,
            packets_out: 0,
            packets_send_failed: 0,
            raw: match ap.mux.airtime {
                Some(_) => {
                    let raw =
                        RawIpSender::open(mark).context("ap: raw sender for unicast fallback")?;
                    // the fallback's packets keep their own DSCP (rebuilt
                    // byte-identical); their queue follows the frames'
                    if ap.frame_dscp != 0 {
                        raw.set_user_priority(up)
                            .context("ap: priority of the unicast fallback")?;
                    }
                    Some(raw)
                }
                None => None,
            },
            fallback_sent: 0,
            fallback_failed: 0,
            frame_buf: vec![0; ap.mux.max_frame.max(2048)],
        })
    }

    /// (descriptor, token) of the registration sockets.
    pub(super) fn fds(&self) -> impl Iterator<Item = (RawFd, u64)> + '_ {
        self.reg
            .iter()
            .zip([TOK_AP_REG4, TOK_AP_REG6])
            .map(|(s, t)| (s.as_raw_fd(), t))
    }

    /// Whether `token` is the registration server's.
    pub(super) fn owns(token: u64) -> bool {
        token == TOK_AP_REG4 || token == TOK_AP_REG6
    }

    /// Earliest deadline: the open frame's, a lease's end, or a loss probe.
    pub(super) fn deadline(&self) -> Option<Micros> {
        [
            self.mux.poll_timeout(),
            self.leases.poll_timeout(),
            self.loss.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Drops the loss records of stations whose lease ended.
    fn sync_loss(loss: &mut LossControl, leases: &LeaseTable, mux: &mut Mux) {
        loss.retain(|a| leases.is_leased(a), mux);
    }

    /// Reads registration requests and answers them.
    fn on_registration(&mut self, token: u64, now: Micros) {
        let i = usize::from(token == TOK_AP_REG6);
        let mut buf = [0u8; MAX_MESSAGE + 1];
        for _ in 0..RX_BATCH {
            let Some(sock) = self.reg.get(i) else { return };
            let (n, from) = match sock.recv_from(&mut buf) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    self.reg_errors += 1;
                    debug!("ap: registration receive: {e}");
                    return;
                }
            };
            self.requests += 1;
            let key = &self.plan.key;
            let key_id = self.plan.key_id;
            let m = match register::open(&buf[..n], |id| (id == key_id).then_some(key)) {
                Ok(m) => m,
                Err(RegError::Format(_)) => {
                    self.drops.malformed += 1;
                    continue;
                }
                Err(RegError::UnknownKey) => {
                    self.drops.unknown_key += 1;
                    continue;
                }
                Err(RegError::BadTag) => {
                    self.drops.bad_tag += 1;
                    continue;
                }
            };
            let ip = canonical(from.ip());
            if let Body::Report { .. } = m.body {
                match self.leases.accept_report(now, ip, &m, &mut self.mux) {
                    Some((addr, r)) => {
                        let sent = self.mux.stats().frames_sent();
                        self.loss.report(now, addr, &r, sent, &mut self.mux);
                    }
                    None => self.loss.rejected(),
                }
                Self::sync_loss(&mut self.loss, &self.leases, &mut self.mux);
                continue;
            }
            let body = self.leases.handle(now, ip, &m, &mut self.mux);
            Self::sync_loss(&mut self.loss, &self.leases, &mut self.mux);
            if self.leases.is_leased(ip) {
                // A new lease starts on unicast (no-op for a known station).
                self.loss.admit(now, ip, &mut self.mux);
            }
            let Some(body) = body else {
                continue;
            };
            self.seq += 1;
            let answer = Message {
                key_id,
                seq: self.seq,
                body,
            };
            let mut out = [0u8; MAX_MESSAGE];
            match register::encode(&answer, key, &mut out) {
                Ok(len) => match self.reg[i].send_to(&out[..len], from) {
                    Ok(_) => self.answers += 1,
                    Err(e) => {
                        self.reg_errors += 1;
                        debug!("ap: answer to {from}: {e}");
                    }
                },
                Err(e) => warn!("ap: cannot encode an answer: {e:?}"),
            }
        }
    }

    /// Sends every closed frame to each destination.
    fn transmit(&mut self, now: Micros) {
        while let Some(t) = self.mux.poll_transmit(now, &mut self.frame_buf) {
            if t.unicast {
                // The airtime rule: this packet leaves as it came.
                let r = match &self.raw {
                    Some(raw) => raw.send(&self.frame_buf[..t.len]),
                    None => Err(io::Error::from_raw_os_error(libc::EBADF)),
                };
                match r {
                    Ok(()) => self.fallback_sent += 1,
                    Err(e) => {
                        self.fallback_failed += 1;
                        debug!("ap: unicast fallback: {e}");
                    }
                }
                continue;
            }
            let mut taken = false;
            for (s, d) in &self.out {
                if self.plan.frame_guard && !t.copy && d.ip().is_multicast() {
                    // Empty, to the discard port: no station takes it
                    // (operator guide, "The guard before each frame").
                    let mut g = *d;
                    g.set_port(GUARD_PORT);
                    match s.send_to(&[], g) {
                        Ok(_) => self.guards_sent += 1,
                        Err(e) => {
                            self.guard_send_errors += 1;
                            debug!("ap: guard to {g}: {e}");
                        }
                    }
                }
                match s.send_to(&self.frame_buf[..t.len], *d) {
                    Ok(_) => {
                        self.frames_sent += 1;
                        taken = true;
                    }
                    Err(e) => {
                        self.frame_send_errors += 1;
                        debug!("ap: frame to {d}: {e}");
                    }
                }
            }
            // Trial copies: the packet also took the normal path, which
            // counts it.
            let own = (t.packets - t.trial) as u64;
            if taken {
                self.packets_out += own;
            } else {
                self.packets_send_failed += own;
            }
        }
    }

    /// Expires leases and sends what is due. `medium_busy`: the daemon's
    /// medium-aware busy signal (`[medium]` sources, when the link mode uses
    /// them), added to the frame sockets' own backlog.
    fn poll(&mut self, now: Micros, medium_busy: bool) {
        if self.leases.poll_timeout().is_some_and(|t| t <= now) {
            let n = self.leases.expire(now, &mut self.mux);
            if n > 0 {
                info!(leases = n, "ap: leases expired");
            }
            Self::sync_loss(&mut self.loss, &self.leases, &mut self.mux);
        }
        if self.loss.poll_timeout().is_some_and(|t| t <= now) {
            self.loss.handle_timeout(now, &mut self.mux);
        }
        self.mux.handle_timeout(now);
        self.transmit(now);
        // The medium's state for the idle release, as the engine's
        // hold-while-busy reads it: bytes still queued on the frame sockets.
        let busy = medium_busy
            || self
                .out
                .iter()
                .any(|(s, _)| linux::socket::outq_bytes(s.as_raw_fd()).unwrap_or(0) > 0);
        if busy != self.busy {
            self.busy = busy;
            self.mux.set_link_busy(now, busy);
            self.transmit(now);
        }
    }

    /// The `ap` object of `airpack stats --json` (and of `/metrics`,
    /// `airpack_ap_*`): every packet the mux took is multiplexed, pending,
    /// or in `drops`; every registration message refused is in
    /// `registrations.rejected`, by reason.
    pub(super) fn json(&self) -> Value {
        let m = self.mux.stats();
        let l = self.leases.stats();
        let ls = self.loss.stats();
        let mut unicast: serde_json::Map<String, Value> = UnicastReason::ALL
            .iter()
            .zip(m.unicast)
            .map(|(r, v)| (r.reason().to_owned(), v.into()))
            .collect();
        unicast.insert("airtime".into(), self.fallback_sent.into());
        let frames: serde_json::Map<String, Value> = FrameReason::ALL
            .iter()
            .zip(m.frames)
            .map(|(r, v)| (r.reason().to_owned(), v.into()))
            .collect();
        let mut rejected = serde_json::Map::new();
        for (k, v) in [
            ("malformed", self.drops.malformed),
            ("unknown_key", self.drops.unknown_key),
            ("bad_tag", self.drops.bad_tag),
            ("replay", l.replays),
            ("not_for_ap", l.ignored),
        ] {
            rejected.insert(k.into(), v.into());
        }
        for c in ErrorCode::ALL {
            rejected.insert(c.reason().into(), l.errors_by_code[c.index()].into());
        }
        json!({
            "stations": self.leases.active(),
            "streams": self.mux.streams(),
            "packets_in": m.handled,
            "packets": self.packets_out,
            "packets_pending": self.mux.pending(),
            "packets_passed": m.passed,
            "unicast": unicast,
            "frames": m.frames_sent(),
            "frame_copies": m.copies,
            "frames_by_reason": frames,
            "frame_datagrams_sent": self.frames_sent,
            "frame_send_errors": self.frame_send_errors,
            "guards_sent": self.guards_sent,
            "guard_send_errors": self.guard_send_errors,
            "bytes_in": m.bytes_in,
            "bytes_out": m.bytes_out,
            "bytes_saved": m.bytes_saved(),
            "packets_repeated": m.repeated,
            "drops": {
                "queue_full": m.dropped,
                "frame_send_failed": self.packets_send_failed,
                "unicast_send_failed": self.fallback_failed,
            },
            "airtime": {
                "rule": self.plan.mux.airtime.is_some(),
                "frames_not_sent": m.fallback_frames,
                "copies_priced_out": m.copies_priced_out,
                "frames_us": m.airtime_frames_us,
                "as_unicast_us": m.airtime_unicast_us,
            },
            "lease_expiries": l.expired,
            "loss_rule": {
                "enabled": self.loss.config().enabled,
                "limit_pct": self.loss.config().limit * 100.0,
                "stations_unicast": self.loss.on_unicast(),
                "reports": ls.reports,
                "reports_rejected": ls.rejected,
                "blackouts": ls.blackouts,
                "to_unicast": ls.to_unicast,
                "to_multicast": ls.to_multicast,
                "probes": ls.probes,
                "held_by_airtime": ls.held_airtime,
                "shed_by_airtime": ls.shed,
                "start_unicast": self.loss.config().start_unicast,
                "started_unicast": ls.start_unicast,
                "start_held_by_airtime": ls.start_held,
                "start_cleared": ls.start_cleared,
                "start_trials": ls.start_trials,
                "trial_packets": m.trial,
                "estimated_load": self.loss.load(),
            },
            "registrations": {
                "received": self.requests,
                "answered": self.answers,
                "registered": l.registered,
                "renewed": l.renewed,
                "unregistered": l.unregistered,
                "auto_found": l.auto_found,
                "socket_errors": self.reg_errors,
                "rejected": rejected,
            },
        })
    }

    /// This role's packets in the send-side accounting: multiplexed (or
    /// forwarded by the airtime rule), waiting in the mux, or lost. Trial
    /// copies are not counted (their packets took the normal path too).
    fn account(&self, a: &mut crate::daemon::accounting::Extra) {
        let m = self.mux.stats();
        a.send_out += self.packets_out + self.fallback_sent;
        a.send_queued += (self.mux.pending() - self.mux.pending_trial()) as u64;
        for (k, v) in [
            ("downlink_queue_full", m.dropped - m.trial_dropped),
            ("downlink_frame_send_failed", self.packets_send_failed),
            ("downlink_unicast_send_failed", self.fallback_failed),
        ] {
            a.send_dropped.push((k.into(), v));
        }
    }

    /// The `stations` list of `airpack peers`: one object per active lease.
    pub(super) fn stations_json(&self, now: Micros) -> Value {
        let list: Vec<Value> = self
            .leases
            .leases()
            .map(|l| {
                let runs: Vec<Value> = l
                    .runs
                    .iter()
                    .zip(l.live)
                    .map(|(r, live)| {
                        let last = r.first_port.saturating_add(r.count - 1);
                        json!({
                            "ports": if r.count == 1 { r.first_port.to_string() } else { format!("{}-{last}", r.first_port) },
                            "first_stream_id": r.first_sid,
                            "multiplexed": live,
                        })
                    })
                    .collect();
                let loss = self.loss.stations().find(|s| s.addr == l.addr);
                json!({
                    "station": l.addr.to_string(),
                    "auto": l.auto,
                    "unicast_by_loss": loss.is_some_and(|s| s.unicast),
                    "loss_trial": loss.is_some_and(|s| s.trial),
                    "multicast_loss_pct": loss.and_then(|s| s.loss).map(|x| x * 100.0),
                    "lease_left_s": l.expires.saturating_sub(now) as f64 / 1e6,
                    "streams": l.runs.iter().zip(l.live).filter(|(_, v)| **v).map(|(r, _)| u64::from(r.count)).sum::<u64>(),
                    "runs": runs,
                })
            })
            .collect();
        Value::Array(list)
    }
}

/// An IPv4-mapped IPv6 source as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// UDP destination (address, port) of an IP packet without options or
/// extension headers (what "auto" leases watch).
fn udp_dst(p: &[u8]) -> Option<(IpAddr, u16)> {
    match p.first()? >> 4 {
        4 if p.len() >= 28 && p[9] == 17 => {
            let ihl = usize::from(p[0] & 0xf) * 4;
            let port = p.get(ihl + 2..ihl + 4)?;
            let dst: [u8; 4] = p[16..20].try_into().ok()?;
            Some((IpAddr::from(dst), u16::from_be_bytes([port[0], port[1]])))
        }
        6 if p.len() >= 48 && p[6] == 17 => {
            let dst: [u8; 16] = p[24..40].try_into().ok()?;
            Some((IpAddr::from(dst), u16::from_be_bytes([p[42], p[43]])))
        }
        _ => None,
    }
}

impl Daemon {
    /// Hook on the TUN path: a packet for a registered stream goes to the
    /// mux (true: consumed); everything else continues on the normal path.
    pub(super) fn ap_intercept(&mut self, now: Micros, len: usize) -> bool {
        let Some(ap) = self.ap.as_mut() else {
            return false;
        };
        let pkt = &self.tun_buf[..len];
        match ap.mux.handle_packet(now, pkt) {
            Verdict::Queued(_) => {
                ap.transmit(now);
                true
            }
            Verdict::Pass => {
                if let Some((dst, port)) = udp_dst(pkt) {
                    ap.leases.observe(dst, port);
                }
                false
            }
            Verdict::Unicast(_) => false,
            Verdict::Trial(_) => {
                // In a frame for the station to measure, and by unicast.
                ap.transmit(now);
                false
            }
        }
    }

    /// A registration socket is readable.
    pub(super) fn on_ap_registration(&mut self, token: u64, now: Micros) {
        if let Some(ap) = self.ap.as_mut() {
            ap.on_registration(token, now);
        }
    }

    /// Called on every wakeup: leases, the frame deadline, frames out.
    pub(super) fn ap_poll(&mut self, now: Micros) {
        // On a radio whose driver frees frames before they are sent (a tap,
        // the lab's ns-3 air) the sockets' backlog never shows a busy
        // medium; with a medium-aware link mode the `[medium]` sources do.
        let medium_busy = self.hold_while_busy() && self.link_busy;
        if let Some(ap) = self.ap.as_mut() {
            ap.poll(now, medium_busy);
        }
    }

    /// TUN packets the mux took leave in frames, wait in it, or were
    /// dropped with a frame: they join the send-side accounting.
    pub(super) fn ap_account(&self, a: &mut crate::daemon::accounting::Extra) {
        if let Some(ap) = &self.ap {
            ap.account(a);
        }
    }

    /// The `ap` and `station` objects of `airpack stats`.
    pub(super) fn downlink_json(&self) -> Vec<(&'static str, Value)> {
        let mut v = Vec::new();
        if let Some(a) = &self.ap {
            v.push(("ap", a.json()));
        }
        if let Some(s) = &self.station {
            v.push(("station", s.json()));
        }
        v
    }

    /// The downlink part of `airpack peers`: the AP's `stations`, the
    /// station's `station`.
    pub(super) fn downlink_peers_json(&self) -> Vec<(&'static str, Value)> {
        let mut v = Vec::new();
        if let Some(a) = &self.ap {
            v.push((
                "stations",
                a.stations_json(crate::linux::timer::monotonic_micros()),
            ));
        }
        if let Some(s) = self.station_peer_json() {
            v.push(("station", s));
        }
        v
    }

    /// SIGHUP with a changed `[ap]`: the role is started, stopped, or
    /// rebuilt with the new settings (a new key, group, interfaces, ...):
    /// the running mux is flushed (its packets leave in a last frame), the
    /// leases start anew (stations get "no lease" at their next renew and
    /// register again, with the new key if it changed). When the new role
    /// cannot be opened (an interface missing, a port taken) the change is
    /// refused: the running role and its settings stay, in `new` too, and
    /// the reason is logged. Returns a phrase for the reload's log line.
    pub(super) fn reload_ap(&mut self, new: &mut Plan, now: Micros) -> Option<String> {
        if self.plan.config.ap == new.config.ap {
            return None;
        }
        let mark = new.config.daemon.bypass_mark;
        let opened = match &new.ap {
            None => None,
            Some(p) => match Ap::open(p, mark) {
                Ok(a) => Some(a),
                Err(e) => {
                    self.counters.reload_errors += 1;
                    error!("reload: [ap] change refused, the running AP role is kept: {e:#}");
                    new.config.ap = self.plan.config.ap.clone();
                    new.ap = self.plan.ap.clone();
                    return Some("[ap] change refused (see the error above)".into());
                }
            },
        };
        let was = self.ap.is_some();
        if let Some(mut old) = self.ap.take() {
            old.mux.flush();
            old.transmit(now);
            // Its packets stay in the accounting.
            let mut e = crate::daemon::accounting::Extra::default();
            old.account(&mut e);
            self.downlink_retired.add(&e);
            for (fd, _) in old.fds() {
                let _ = self.poller.delete(fd);
            }
            info!(
                stations = old.leases.active(),
                "reload: the running AP role stopped (leases dropped)"
            );
        }
        let phrase = match opened {
            Some(a) => {
                for (fd, token) in a.fds() {
                    if let Err(e) = self.poller.add(fd, token, Interest::READ) {
                        error!("reload: cannot watch the AP's registration socket: {e}");
                    }
                }
                self.ap = Some(a);
                if was {
                    "[ap] restarted with the new settings; stations register again"
                } else {
                    "[ap] started"
                }
            }
            None => "[ap] stopped",
        };
        Some(phrase.into())
    }

    /// At stop: every packet in the mux leaves in a last frame.
    pub(super) fn ap_flush(&mut self, now: Micros) {
        if let Some(ap) = self.ap.as_mut() {
            ap.mux.flush();
            ap.transmit(now);
            let m = ap.mux.stats();
            debug!(
                frames = m.frames_sent(),
                packets = m.sent_packets,
                dropped = m.dropped,
                pending = ap.mux.pending(),
                "ap: flushed"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_dst_reads_both_families_and_refuses_others() {
        let mut v4 = [0u8; 28];
        v4[0] = 0x45;
        v4[9] = 17;
        v4[16..20].copy_from_slice(&[10, 0, 0, 7]);
        v4[22..24].copy_from_slice(&5004u16.to_be_bytes());
        assert_eq!(udp_dst(&v4), Some(("10.0.0.7".parse().unwrap(), 5004)));
        v4[9] = 6;
        assert_eq!(udp_dst(&v4), None);
        let mut v6 = [0u8; 48];
        v6[0] = 0x60;
        v6[6] = 17;
        v6[39] = 1;
        v6[42..44].copy_from_slice(&16384u16.to_be_bytes());
        assert_eq!(udp_dst(&v6), Some(("::1".parse().unwrap(), 16384)));
        assert_eq!(udp_dst(&v6[..40]), None);
        assert_eq!(udp_dst(&[]), None);
    }

    #[test]
    fn mapped_sources_become_ipv4() {
        assert_eq!(
            canonical("::ffff:10.0.0.2".parse().unwrap()),
            "10.0.0.2".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            canonical("fd00::2".parse().unwrap()),
            "fd00::2".parse::<IpAddr>().unwrap()
        );
    }
}
