//! The daemon's sockets: the bundle sockets (raw IP protocol or UDP, per
//! family), the raw sender for packets that leave unchanged, and
//! [`send_out`], which sends one engine output on the right one; the
//! draining of their error queues (ICMP and local error reports, counted by
//! kind) and their receive-queue drop counts.
//!
//! Must not touch: the engine, the TUN, routing.

use super::peer::{Peer, Peers};
use super::{TOK_B4, TOK_B6, TOK_R4, TOK_R6, TOK_U4, TOK_U6};
use crate::daemon::config::{is_link_local_v6, Plan, Transport};
use crate::daemon::stats::DaemonCounters;
use crate::linux::{self, BundleSocket, Family, Interest, Poller, RawIpSender, UdpBundleSocket};
use airpack_core::{Transmit, TransmitKind};
use anyhow::Context;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use tracing::warn;

/// The daemon's sending and receiving sockets.
pub(super) struct Sockets {
    pub(super) transport: Transport,
    pub(super) udp_port: u16,
    pub(super) b4: Option<BundleSocket>,
    pub(super) b6: Option<BundleSocket>,
    pub(super) u4: Option<UdpBundleSocket>,
    pub(super) u6: Option<UdpBundleSocket>,
    pub(super) raw: RawIpSender,
}

impl Sockets {
    pub(super) fn open(plan: &Plan) -> anyhow::Result<Sockets> {
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

    pub(super) fn register(&self, poller: &Poller) -> io::Result<()> {
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
        // The raw senders never receive; registered with no interest, they
        // still report EPOLLERR when their error queue holds something.
        let none = Interest {
            readable: false,
            writable: false,
        };
        poller.add(self.raw.v4_fd(), TOK_R4, none)?;
        if let Some(fd) = self.raw.v6_fd() {
            poller.add(fd, TOK_R6, none)?;
        }
        Ok(())
    }

    /// Reads every socket's error queue (at most [`ERRQ_BATCH`] entries
    /// each: a longer queue raises EPOLLERR again) and counts the entries by
    /// kind; returns how many were read.
    pub(super) fn drain_errors(&self, counters: &mut DaemonCounters) -> usize {
        let mut count = |k, _errno| counters.error_report(k);
        let mut n = self.raw.drain_errors(ERRQ_BATCH, &mut count);
        for s in [&self.b4, &self.b6].into_iter().flatten() {
            n += s.drain_errors(ERRQ_BATCH, &mut count);
        }
        for s in [&self.u4, &self.u6].into_iter().flatten() {
            n += s.drain_errors(ERRQ_BATCH, &mut count);
        }
        n
    }

    /// Datagrams the bundle sockets' receive queues dropped so far (summed
    /// over the sockets; see [`UdpBundleSocket::rx_queue_drops`]).
    pub(super) fn rx_queue_drops(&self) -> u64 {
        let mut n = 0;
        for s in [&self.b4, &self.b6].into_iter().flatten() {
            n += s.rx_queue_drops();
        }
        for s in [&self.u4, &self.u6].into_iter().flatten() {
            n += s.rx_queue_drops();
        }
        n
    }

    pub(super) fn receive_fds(&self) -> Vec<i32> {
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
    pub(super) fn send_bundle(
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
    pub(super) fn outq(&self) -> usize {
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

/// Error-queue entries read per socket per call of [`Sockets::drain_errors`].
const ERRQ_BATCH: usize = 64;

/// Whether a failed send may have failed on a pending error an earlier
/// datagram's ICMP report left on the socket (with IP_RECVERR the kernel
/// sets it and a UDP send returns it once, without sending). ENOBUFS, EAGAIN
/// are always about this send.
fn maybe_pending(e: &io::Error) -> bool {
    !matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN))
}

/// Sends one engine output: a bundle to its peer (with the scope of a
/// link-local one), anything else unchanged through the raw sender. A bundle
/// send that fails while error reports are queued is retried once after
/// draining them (they are counted in `counters`): the failure was then an
/// earlier datagram's, not this one's.
pub(super) fn send_out(
    sock: &Sockets,
    peers: &Peers,
    t: &Transmit,
    data: &[u8],
    counters: &mut DaemonCounters,
) -> io::Result<()> {
    match t.kind {
        TransmitKind::Bundle { .. } => {
            let scope = if is_link_local_v6(t.peer) {
                peers.get(&t.peer).map_or(0, Peer::scope)
            } else {
                0
            };
            match sock.send_bundle(t.peer, scope, data, t.dscp, t.ecn) {
                Err(e) if maybe_pending(&e) && sock.drain_errors(counters) > 0 => {
                    counters.send_retries += 1;
                    sock.send_bundle(t.peer, scope, data, t.dscp, t.ecn)
                }
                r => r,
            }
        }
        TransmitKind::Single | TransmitKind::Bypass => sock.raw.send(data),
    }
}
