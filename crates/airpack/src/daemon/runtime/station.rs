//! The station role of downlink multiplexing (`[station]`, issue 14) in the
//! daemon's one event loop: registration with the AP (register, renew every
//! `renew_secs`, retry every second while unanswered, unregister at a clean
//! stop), the loss report every `report_secs` while registered (frames
//! received / missed / not recovered, for the AP's loss rule), the frame receiver (member of the group on the interface facing
//! the AP; frames from any other source are dropped and counted), the core
//! demultiplexer, and the rebuilt packets written into the TUN, from where
//! the kernel delivers them to local sockets like any received packet.
//!
//! Must not touch: frame layouts and rebuilding (`airpack_core::downlink`),
//! the aggregation path, steering.

use super::Daemon;
use crate::daemon::config::downlink::StationPlan;
use crate::daemon::config::Plan;
use crate::linux::mcast;
use crate::linux::poll::Interest;
use airpack_core::downlink::demux::{Demux, DemuxConfig, MAX_REBUILT};
use airpack_core::downlink::loss::ReportWindow;
use airpack_core::downlink::register::{self, Answer, Body, Message, RegError, MAX_MESSAGE};
use airpack_core::downlink::StreamId;
use airpack_core::Micros;
use serde_json::{json, Value};
use std::io;
use std::net::{IpAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use tracing::{debug, error, info, warn};

/// Poll token of the registration client socket.
pub(super) const TOK_ST_REG: u64 = 17;
/// Poll token of the frame receiver.
pub(super) const TOK_ST_FRAMES: u64 = 18;
/// Frames (or answers) read per wakeup.
const RX_BATCH: usize = 64;
/// An unanswered request is sent again after this long (µs).
const RETRY_US: Micros = 1_000_000;
const SEC: Micros = 1_000_000;

/// The station role's state.
pub(super) struct Station {
    plan: StationPlan,
    reg: UdpSocket,
    frames: UdpSocket,
    /// Our address toward the AP (what we register).
    addr: IpAddr,
    demux: Demux,
    /// (stream id, port) currently given to the demux.
    streams: Vec<(StreamId, u16)>,
    seq: u64,
    /// Highest sequence number of an accepted AP message.
    ap_seq: u64,
    registered: bool,
    /// When to send the next register / renew.
    next_request: Micros,
    /// The loss report's window and when the next is due (while registered).
    window: ReportWindow,
    next_report: Micros,
    reports_sent: u64,
    scratch: Vec<u8>,
    frame_buf: Vec<u8>,
    // Counters.
    requests_sent: u64,
    answers: u64,
    errors_answered: u64,
    answers_refused: u64,
    answers_replayed: u64,
    /// Frame datagrams read from the frame socket.
    frames_read: u64,
    not_from_ap: u64,
    /// Rebuilt packets written into the TUN.
    packets_written: u64,
    tun_write_errors: u64,
    socket_errors: u64,
}

fn epoch_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Station {
    /// Opens the registration client (connected to the AP) and the frame receiver.
    pub(super) fn open(p: &StationPlan, mark: u32, now: Micros) -> anyhow::Result<Station> {
        use anyhow::Context;
        let reg = mcast::udp_socket(p.ap.is_ipv6(), Some(&p.interface), 0, mark)
            .with_context(|| format!("station: registration socket on {}", p.interface))?;
        reg.connect(p.registration)
            .with_context(|| format!("station: no route to the AP {}", p.registration))?;
        let addr = reg.local_addr()?.ip();
        let frames =
            mcast::frame_receiver(&p.interface, p.group, p.port, mark).with_context(|| {
                format!(
                    "station: frame socket {}:{} on {}",
                    p.group, p.port, p.interface
                )
            })?;
        info!(ap = %p.ap, address = %addr, group = %p.group, port = p.port, "station role running");
        Ok(Station {
            demux: Demux::new(DemuxConfig {
                format: p.format,
                ..DemuxConfig::default()
            }),
            plan: p.clone(),
            reg,
            frames,
            addr,
            streams: Vec::new(),
            seq: epoch_micros(),
            ap_seq: 0,
            registered: false,
            next_request: now,
            window: ReportWindow::default(),
            next_report: now,
            reports_sent: 0,
            scratch: vec![0; MAX_REBUILT],
            frame_buf: vec![0; 65_536],
            requests_sent: 0,
            answers: 0,
            errors_answered: 0,
            answers_refused: 0,
            answers_replayed: 0,
            frames_read: 0,
            not_from_ap: 0,
            packets_written: 0,
            tun_write_errors: 0,
            socket_errors: 0,
        })
    }

    /// (descriptor, token) of both sockets.
    pub(super) fn fds(&self) -> [(RawFd, u64); 2] {
        [
            (self.reg.as_raw_fd(), TOK_ST_REG),
            (self.frames.as_raw_fd(), TOK_ST_FRAMES),
        ]
    }

    /// Whether `token` is one of the station's.
    pub(super) fn owns(token: u64) -> bool {
        token == TOK_ST_REG || token == TOK_ST_FRAMES
    }

    /// When the next request (or loss report) is due.
    pub(super) fn deadline(&self) -> Option<Micros> {
        Some(match self.reporting() {
            true => self.next_request.min(self.next_report),
            false => self.next_request,
        })
    }

    fn reporting(&self) -> bool {
        self.registered && self.plan.report_secs > 0
    }

    fn send(&mut self, body: Body) {
        self.seq += 1;
        let m = Message {
            key_id: self.plan.key_id,
            seq: self.seq,
            body,
        };
        let mut out = [0u8; MAX_MESSAGE];
        let report = matches!(body, Body::Report { .. });
        match register::encode(&m, &self.plan.key, &mut out) {
            Ok(n) => match self.reg.send(&out[..n]) {
                Ok(_) if report => self.reports_sent += 1,
                Ok(_) => self.requests_sent += 1,
                Err(e) => {
                    self.socket_errors += 1;
                    debug!("station: request to the AP: {e}");
                }
            },
            Err(e) => warn!("station: cannot encode a request: {e:?}"),
        }
    }

    /// Sends a register (no lease) or renew when due; retries until answered.
    fn poll(&mut self, now: Micros) {
        if self.reporting() && now >= self.next_report {
            let report = self.window.take(self.demux.stats());
            self.send(Body::Report {
                addr: self.addr,
                report,
            });
            self.next_report = now + u64::from(self.plan.report_secs) * SEC;
        }
        if now < self.next_request {
            return;
        }
        let body = if self.registered {
            Body::Renew {
                addr: self.addr,
                lease_secs: self.plan.lease_secs,
            }
        } else {
            Body::Register {
                addr: self.addr,
                ports: self.plan.ports,
                lease_secs: self.plan.lease_secs,
            }
        };
        self.send(body);
        self.next_request = now + RETRY_US;
    }

    fn apply(&mut self, a: &Answer, now: Micros) {
        // A renew answer repeats the streams: only changes touch the demux
        // (re-adding a stream would drop its decompression context).
        let mut want: Vec<(StreamId, u16)> = Vec::new();
        for r in a.runs() {
            for i in 0..r.count {
                want.push((r.first_sid.wrapping_add(i), r.first_port.wrapping_add(i)));
            }
        }
        self.demux.set_epoch(a.epoch);
        if want != self.streams {
            for (sid, _) in self.streams.drain(..) {
                self.demux.remove_stream(sid);
            }
            for &(sid, port) in &want {
                self.demux.add_stream(sid, self.addr, port);
            }
            self.streams = want;
        }
        let renew = u64::from(
            self.plan
                .renew_secs
                .min(a.lease_secs.saturating_sub(1).max(1)),
        );
        self.next_request = now + renew * SEC;
        if !self.registered {
            // A new lease: the first window starts now.
            self.window = ReportWindow::new(self.demux.stats());
            self.next_report = now + u64::from(self.plan.report_secs) * SEC;
        }
        self.registered = true;
    }

    fn on_answers(&mut self, now: Micros) {
        let mut buf = [0u8; MAX_MESSAGE + 1];
        for _ in 0..RX_BATCH {
            let n = match self.reg.recv(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    // ECONNREFUSED and the like: the AP is not there (yet).
                    self.socket_errors += 1;
                    debug!("station: registration socket: {e}");
                    return;
                }
            };
            let (key, id) = (&self.plan.key, self.plan.key_id);
            let m = match register::open(&buf[..n], |k| (k == id).then_some(key)) {
                Ok(m) => m,
                Err(RegError::Format(_) | RegError::UnknownKey | RegError::BadTag) => {
                    self.answers_refused += 1;
                    continue;
                }
            };
            if m.seq <= self.ap_seq {
                self.answers_replayed += 1;
                continue;
            }
            self.ap_seq = m.seq;
            self.answers += 1;
            match m.body {
                Body::RegisterOk(a) | Body::RenewOk(a) => {
                    if !self.registered {
                        info!(
                            streams = a.runs().iter().map(|r| r.count as usize).sum::<usize>(),
                            lease_secs = a.lease_secs,
                            "station: registered"
                        );
                    }
                    self.apply(&a, now);
                }
                Body::Error { code, .. } => {
                    self.errors_answered += 1;
                    warn!(?code, "station: the AP refused the request");
                    // Start over with a register (e.g. the lease ended).
                    self.registered = false;
                    self.next_request = now + RETRY_US;
                }
                _ => {}
            }
        }
    }

    /// The `station` object of `airpack stats --json` (and of `/metrics`,
    /// `airpack_station_*`). Frames read = accepted + dropped (by reason);
    /// packets extracted = written into the TUN + dropped (by reason).
    pub(super) fn json(&self) -> Value {
        let s = self.demux.stats();
        let mut frame_drops = serde_json::Map::new();
        for (k, v) in self.frame_drops() {
            frame_drops.insert(k, v.into());
        }
        json!({
            "ap": self.plan.ap.to_string(),
            "address": self.addr.to_string(),
            "registered": self.registered,
            "streams": self.streams.len(),
            "frames_received": self.frames_read,
            "frames": s.frames,
            "lost_frames": s.lost_frames,
            "packets": s.delivered,
            "packets_written": self.packets_written,
            "packets_for_others": s.skipped,
            "packets_recovered": s.recovered,
            "duplicates": s.duplicates,
            "frame_copies": s.copies,
            "recovered_frames": s.recovered_frames,
            "requests_sent": self.requests_sent,
            "loss_reports_sent": self.reports_sent,
            "answers": self.answers,
            "errors_answered": self.errors_answered,
            "drops": {
                "frames": frame_drops,
                "packets": {
                    "no_context": s.no_context,
                    "bad_entry": s.bad_entry,
                    "tun_write_failed": self.tun_write_errors,
                },
                "answers": {
                    "refused": self.answers_refused,
                    "replayed": self.answers_replayed,
                },
            },
            "socket_errors": self.socket_errors,
        })
    }

    /// This role's frames and extracted packets in the receive-side accounting.
    fn account(&self, a: &mut crate::daemon::accounting::Extra) {
        let s = self.demux.stats();
        a.datagrams_in += self.frames_read;
        a.datagrams_out += s.frames;
        for (k, v) in self.frame_drops() {
            a.datagrams_dropped.push((format!("downlink_{k}"), v));
        }
        // A copy is read and consumed without output, but loses nothing.
        a.datagrams_dropped
            .push(("downlink_frame_copy".into(), s.copies));
        a.receive_in += s.delivered;
        a.receive_out += self.packets_written;
        a.receive_dropped
            .push(("downlink_tun_write_failed".into(), self.tun_write_errors));
    }

    /// Frames read but not accepted, by reason.
    fn frame_drops(&self) -> Vec<(String, u64)> {
        let s = self.demux.stats();
        let mut v = vec![
            ("not_from_ap".to_owned(), self.not_from_ap),
            ("wrong_epoch".to_owned(), s.wrong_epoch),
        ];
        for e in airpack_core::downlink::FrameError::ALL {
            v.push((format!("refused_{}", e.reason()), s.refused[e.index()]));
        }
        v
    }
}

/// An IPv4-mapped IPv6 source as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl Daemon {
    /// A station socket is readable.
    pub(super) fn on_station(&mut self, token: u64, now: Micros) {
        let Some(st) = self.station.as_mut() else {
            return;
        };
        if token == TOK_ST_REG {
            st.on_answers(now);
            return;
        }
        let tun = &self.tun;
        for _ in 0..RX_BATCH {
            let (n, from) = match st.frames.recv_from(&mut st.frame_buf) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    st.socket_errors += 1;
                    debug!("station: frame socket: {e}");
                    return;
                }
            };
            st.frames_read += 1;
            if canonical(from.ip()) != st.plan.ap {
                st.not_from_ap += 1;
                continue;
            }
            let (mut ok, mut werr) = (0, 0);
            let _ = st
                .demux
                .handle_frame(&st.frame_buf[..n], &mut st.scratch, |pkt| {
                    if tun.write(pkt).is_ok() {
                        ok += 1;
                    } else {
                        werr += 1;
                    }
                });
            st.packets_written += ok;
            st.tun_write_errors += werr;
        }
    }

    /// Called on every wakeup: register / renew when due.
    pub(super) fn station_poll(&mut self, now: Micros) {
        if let Some(st) = self.station.as_mut() {
            st.poll(now);
        }
    }

    /// The station's frames and packets join the receive-side accounting:
    /// frame datagrams as received datagrams, extracted packets as
    /// received inner packets.
    pub(super) fn station_account(&self, a: &mut crate::daemon::accounting::Extra) {
        if let Some(st) = &self.station {
            st.account(a);
        }
    }

    /// The `station` object of `airpack peers`: the AP and the lease.
    pub(super) fn station_peer_json(&self) -> Option<Value> {
        let st = self.station.as_ref()?;
        let ports: Vec<Value> = st
            .streams
            .iter()
            .map(|(sid, port)| json!({"port": port, "stream_id": sid}))
            .collect();
        Some(json!({
            "ap": st.plan.ap.to_string(),
            "address": st.addr.to_string(),
            "registered": st.registered,
            "streams": ports,
        }))
    }

    /// SIGHUP with a changed `[station]`: the role is started, stopped
    /// (unregistering first), or rebuilt with the new settings (it
    /// unregisters from the old AP with the old key, then registers anew).
    /// When the new role cannot be opened (no interface, no route to the
    /// AP) the change is refused: the running role and its settings stay,
    /// in `new` too, and the reason is logged. Returns a phrase for the
    /// reload's log line.
    pub(super) fn reload_station(&mut self, new: &mut Plan, now: Micros) -> Option<String> {
        if self.plan.config.station == new.config.station {
            return None;
        }
        let mark = new.config.daemon.bypass_mark;
        let opened = match &new.station {
            None => None,
            Some(p) => {
                match Station::open(p, mark, now) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        self.counters.reload_errors += 1;
                        error!("reload: [station] change refused, the running station role is kept: {e:#}");
                        new.config.station = self.plan.config.station.clone();
                        new.station = self.plan.station.clone();
                        return Some("[station] change refused (see the error above)".into());
                    }
                }
            }
        };
        let was = self.station.is_some();
        self.station_stop();
        if let Some(old) = self.station.take() {
            // Its packets stay in the accounting.
            let mut e = crate::daemon::accounting::Extra::default();
            old.account(&mut e);
            self.downlink_retired.add(&e);
            for (fd, _) in old.fds() {
                let _ = self.poller.delete(fd);
            }
        }
        let phrase = match opened {
            Some(s) => {
                for (fd, token) in s.fds() {
                    if let Err(e) = self.poller.add(fd, token, Interest::READ) {
                        error!("reload: cannot watch the station's sockets: {e}");
                    }
                }
                self.station = Some(s);
                if was {
                    "[station] restarted with the new settings; registering again"
                } else {
                    "[station] started"
                }
            }
            None => "[station] stopped",
        };
        Some(phrase.into())
    }

    /// At a clean stop: unregister (best effort, one datagram).
    pub(super) fn station_stop(&mut self) {
        if let Some(st) = self.station.as_mut() {
            if st.registered {
                st.send(Body::Unregister { addr: st.addr });
                info!("station: unregistered");
            }
        }
    }
}
