//! The packet path: packets read from the TUN go to a peer's queue or out
//! unchanged; received bundles are checked (known peer, allowed inner
//! sources) and their inner packets written into the TUN; the engine's
//! output is sent. Every packet read from the TUN or received in a bundle is
//! counted where it leaves or is dropped (see `stats::Accounting`): a failed
//! send counts the packets it held, by errno, in the daemon's totals and in
//! the peer's engine statistics.
//!
//! Must not touch: configuration, steering, the lifecycle.

use super::bundle_auth::Refused;
use super::sockets::send_out;
use super::{Daemon, Dest, BATCH, TOK_B4, TOK_B6, TOK_U4};
use crate::daemon::config::{Mode, Transport};
use crate::daemon::sys;
use crate::linux::route::Answer;
use crate::linux::NextHop;
use airpack_core::{RxContext, Transmit, TransmitKind};
use std::io;
use std::net::IpAddr;
use tracing::{debug, trace};

impl Daemon {
    /// Where a packet from `src` to `dst` goes: a configured peer's queue,
    /// out unchanged, nowhere (its route leads back into the TUN: sending it
    /// would loop), or into the park until the kernel's answer is read
    /// (never waits; see [`super::lookups`]).
    pub(super) fn route_for(&mut self, now: u64, src: IpAddr, dst: IpAddr) -> Dest {
        match self
            .lookups
            .lookup(now, super::lookups::lookup_source(src), dst)
        {
            Answer::Ready(r) => self.resolved(dst, r),
            Answer::Pending => Dest::Wait,
            Answer::Unavailable => {
                self.park.counters.unavailable_unchanged += 1;
                Dest::Unchanged
            }
        }
    }

    /// Where a packet for `dst` goes, given the kernel's next hop for it.
    pub(super) fn resolved(&mut self, dst: IpAddr, nh: Result<NextHop, i32>) -> Dest {
        let tun = self.tun.ifindex();
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
            Mode::EndToEnd => match self.peers.endpoint(dst) {
                Some(p) => Dest::Peer(p),
                None => Dest::Unchanged,
            },
        }
    }

    /// Reads what the TUN holds, up to [`BATCH`] packets, several per system
    /// call ([`TunReads`]).
    pub(super) fn on_tun(&mut self, now: u64) {
        let mut budget = BATCH;
        while budget > 0 {
            let want = self.tun_reads.want.min(budget);
            budget -= want;
            let r = &mut self.tun_reads;
            let got = self
                .tun_batch
                .read(&self.tun, &mut r.bufs[..want], &mut r.res[..want]);
            let mut failed = false;
            for i in 0..want {
                let res = self.tun_reads.res[i];
                if res >= 0 {
                    // The packet's buffer becomes the one every handler reads
                    // (`tun_buf`); the old one takes its place for the next read.
                    std::mem::swap(&mut self.tun_buf, &mut self.tun_reads.bufs[i]);
                    self.handle_tun(now, res as usize);
                } else if res != -libc::EAGAIN && res != -libc::EINTR {
                    self.counters.tun_read_errors += 1;
                    debug!("TUN read: {}", io::Error::from_raw_os_error(-res));
                    failed = true;
                }
            }
            self.tun_reads.adapt(want, got);
            if got < want || failed {
                break;
            }
        }
    }

    /// Reads and handles one TUN packet; false when the queue is empty.
    pub(super) fn read_tun_one(&mut self, now: u64) -> bool {
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
        self.handle_tun(now, n);
        true
    }

    /// Handles the packet read from the TUN into `tun_buf[..n]`.
    fn handle_tun(&mut self, now: u64, n: usize) {
        self.counters.tun_read += 1;
        self.counters.tun_read_bytes += n as u64;
        let Some((src, dst)) = sys::addrs(&self.tun_buf[..n]) else {
            self.counters.tun_unparsable += 1;
            return;
        };
        if sys::link_scoped(dst) {
            // The kernel's own traffic on the TUN (IPv6 router solicitations,
            // MLD, ...): never steered by us, meaningless elsewhere.
            self.counters.tun_ignored += 1;
            return;
        }
        if self.ap_intercept(now, n) {
            // A registered downlink stream: it leaves in an AP frame.
            return;
        }
        match self.route_for(now, src, dst) {
            Dest::Wait => self.park(now, src, dst, n),
            dest => {
                let buf = std::mem::take(&mut self.tun_buf);
                self.deliver(now, dst, dest, &buf[..n]);
                self.tun_buf = buf;
            }
        }
    }

    /// Hands a TUN packet to its destination (the engine, the wire unchanged,
    /// or the loop counter).
    pub(super) fn deliver(&mut self, now: u64, dst: IpAddr, dest: Dest, pkt: &[u8]) {
        match dest {
            Dest::Peer(peer) => {
                let v = self.engine.handle_packet(now, peer, pkt, 0);
                trace!(%dst, %peer, ?v, len = pkt.len(), "queued");
            }
            Dest::Loop => {
                self.counters.tun_looped += 1;
                trace!(%dst, "route leads back into the TUN; dropped");
            }
            Dest::Unchanged | Dest::Wait => {
                self.counters.passthrough += 1;
                match self.sock.raw.send(pkt) {
                    Ok(()) => self.counters.unchanged_sent += 1,
                    Err(e) => {
                        trace!(%dst, "passthrough send: {e}");
                        self.counters.send_error(&e, 1);
                    }
                }
            }
        }
    }

    /// Reads the bundle socket of `token`; `error`: it (or another socket)
    /// reported EPOLLERR, so the error queues are drained first.
    pub(super) fn on_bundles(&mut self, token: u64, error: bool) {
        if error {
            self.sock.drain_errors(&mut self.counters);
        }
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
    pub(super) fn on_bundle(&mut self, src: IpAddr, scope: u32, ecn: u8, start: usize, end: usize) {
        // A peer's bundles are decoded with the encoding the engine holds
        // for it; `heard` is the encoding of a discovered neighbour that
        // counts us up one hello before we count it (its hellos are taken;
        // see `Table::heard`): no peer yet, so no engine slot.
        let known = match self.peers.get(&src) {
            Some(p) if p.via(scope) => Some((None, p.scope())),
            Some(_) => None,
            None => self
                .discovery
                .as_ref()
                .and_then(|d| d.heard(src, scope))
                .map(|(e, i)| (Some(e), i)),
        };
        let Some((heard, peer_if)) = known else {
            self.counters.rx_unknown_peer += 1;
            trace!(%src, scope, "bundle from unknown peer dropped");
            return;
        };
        let end = match self.auth.as_mut().map(|a| a.open(&self.rx_buf[start..end])) {
            None => end,
            Some(Ok(len)) => start + len,
            Some(Err(r)) => {
                match r {
                    Refused::BadTag => {
                        self.counters.rx_auth_failed += 1;
                        self.peers.count(src, |c| c.auth_failed += 1);
                    }
                    Refused::Replayed => {
                        self.counters.rx_replayed += 1;
                        self.peers.count(src, |c| c.replayed += 1);
                    }
                }
                trace!(%src, ?r, "bundle refused by authentication");
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
        let payload = &mut rx[start..end];
        let decoded = match heard {
            None => self.engine.receive_rx(src, payload, ctx),
            Some(enc) => Some(self.engine.receive_rx_with(src, enc, payload, ctx)),
        };
        match decoded {
            // A peer the engine has no slot for (it refused it): not a peer.
            None => {
                self.counters.rx_unknown_peer += 1;
                trace!(%src, "bundle from a peer without an engine slot dropped");
            }
            Some(Err(e)) => trace!(%src, "bundle rejected: {e}"),
            Some(Ok(bundle)) => {
                let Daemon {
                    tun,
                    tun_batch,
                    peers,
                    resolver,
                    counters,
                    ..
                } = self;
                let mut spoofed = 0;
                let allowed = bundle.iter().filter(|pkt| {
                    let ok = sys::addrs(pkt).is_some_and(|(inner_src, _)| {
                        peers.source_allowed(resolver, src, peer_if, inner_src)
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
                if spoofed > 0 {
                    peers.count(src, |c| c.spoofed_source += spoofed);
                }
            }
        }
        self.rx_buf = rx;
    }

    /// Drains the engine's output onto the wire.
    pub(super) fn transmit(&mut self, now: u64) {
        for _round in 0..4 {
            let mut sent = false;
            while let Some(t) = self.engine.poll_transmit(now, &mut self.tx_buf) {
                sent = true;
                self.send_transmit(&t);
            }
            // In hold-while-busy our own sends change the link state; an idle
            // link may release more at once.
            if !sent || !self.update_busy(now) {
                break;
            }
        }
    }

    /// Sends the engine output `t` (in `tx_buf`) and counts where its
    /// packets went: sent, or lost with the errno's reason (in the daemon's
    /// totals and, per peer, in the engine's `send_failed_packets`).
    pub(super) fn send_transmit(&mut self, t: &Transmit) {
        let mut len = t.len.min(self.tx_buf.len());
        if let (Some(a), TransmitKind::Bundle { .. }) = (self.auth.as_mut(), t.kind) {
            // Room is reserved: the trailer is in every peer's outer_overhead.
            len = a.seal(&mut self.tx_buf, len).unwrap_or(len);
        }
        let data = &self.tx_buf[..len];
        let r = send_out(&self.sock, &self.peers, t, data, &mut self.counters);
        let packets = match t.kind {
            TransmitKind::Bundle { packets, .. } => u64::from(packets),
            TransmitKind::Single | TransmitKind::Bypass => 1,
        };
        match (r, t.kind) {
            (Ok(()), TransmitKind::Bundle { .. }) => {
                self.counters.bundles_sent += 1;
                self.counters.bundled_packets_sent += packets;
            }
            (Ok(()), _) => self.counters.unchanged_sent += 1,
            (Err(e), _) => {
                trace!(peer = %t.peer, packets, "send: {e}");
                self.counters.send_error(&e, packets);
                self.engine.report_send_failure(t.peer, packets);
            }
        }
    }

    /// EPOLLERR on a socket without data to read (the raw senders): drain
    /// and count the error queues.
    pub(super) fn on_socket_errors(&mut self) {
        self.sock.drain_errors(&mut self.counters);
    }
}

/// Buffers of the batched TUN reads, and how many reads to ask for next:
/// twice what the last batch got (2 to [`TUN_READS`]), so a busy TUN is read
/// [`TUN_READS`] packets per system call while a quiet one (a voice packet per
/// wakeup) costs one empty read, as the read-until-empty loop before it did.
/// The buffers are [`super::BUF`] bytes (the largest packet) but only the
/// pages packets touch become resident.
pub(super) struct TunReads {
    bufs: Vec<Vec<u8>>,
    res: Vec<i32>,
    want: usize,
}

/// Most TUN reads per system call.
pub(super) const TUN_READS: usize = 32;

impl TunReads {
    pub(super) fn new() -> TunReads {
        TunReads {
            bufs: (0..TUN_READS).map(|_| vec![0; super::BUF]).collect(),
            res: vec![0; TUN_READS],
            want: 2,
        }
    }

    fn adapt(&mut self, want: usize, got: usize) {
        self.want = if got < want { got * 2 } else { want * 2 }.clamp(2, TUN_READS);
    }
}
