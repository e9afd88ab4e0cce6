//! RTCP in `airpack voip`, as phones send it: per local call endpoint, one
//! UDP socket on the RTP port + 1, a compound SR (while sending) or RR plus
//! SDES CNAME every ~5 s with RFC 3550's randomisation (appendix A.7:
//! uniform in [0.5, 1.5] x the interval, / (e - 3/2); the first report at
//! half the minimum), and a last compound with BYE at the end of the call
//! (half-way through the receive grace, so the peer still listens and every
//! RTP packet of the call has arrived). Receives the peer's RTCP: its SR
//! (echoed as LSR/DLSR in our next report), its report block about our stream
//! (the peer's view of loss and jitter) and the round-trip time from it.
//!
//! Owns: the RTCP sockets' state and the JSON it adds ([`StreamRtcp`],
//! [`PeerView`], [`RtcpCounters`]). Must not touch: the RTCP byte layout and
//! arithmetic (`airpack_voice::rtcp`), the RTP streams' statistics (it only
//! reads the sender's packet count and the receiver's reception state).
//!
//! Clock: NTP timestamps are CLOCK_MONOTONIC plus the CLOCK_REALTIME offset
//! taken at start, so they are wall-clock-like and never step during a run;
//! the RTT only ever compares our own timestamps with themselves.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};

use rand::{rngs::SmallRng, Rng};
use serde::{Deserialize, Serialize};

use airpack_voice::rtcp::{self, Packet, ReceptionStats, SenderInfo, Writer};

/// RTCP session bandwidth fraction (RFC 3550 section 6.2: 5 %).
const RTCP_FRACTION: f64 = 0.05;
/// IPv4 + UDP header bytes counted in the average RTCP size.
const UDP_IP_OVERHEAD: f64 = 28.0;

/// Whether and how often `airpack voip` sends RTCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtcpOptions {
    /// Send and receive RTCP on the RTP port + 1.
    pub enabled: bool,
    /// Minimum report interval (ms); RFC 3550's is 5000.
    pub interval_ms: u64,
}

/// RFC 3550's minimum report interval.
pub const DEFAULT_RTCP_INTERVAL_MS: u64 = 5000;

impl RtcpOptions {
    /// RTCP off (what [`super::RunOptions::default`] uses: callers that pick
    /// arbitrary ports, as tests do, may not own port + 1).
    pub const OFF: RtcpOptions = RtcpOptions {
        enabled: false,
        interval_ms: DEFAULT_RTCP_INTERVAL_MS,
    };
    /// RTCP on at RFC 3550's interval (the `airpack voip` default).
    pub const PHONE: RtcpOptions = RtcpOptions {
        enabled: true,
        interval_ms: DEFAULT_RTCP_INTERVAL_MS,
    };
}

/// What the peer told us about the stream we send (its report blocks about
/// our SSRC), and the round-trip times computed from them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerView {
    /// Report blocks about our stream received.
    pub reports: u64,
    /// Fraction lost in the last report (%).
    pub fraction_lost_pct: f64,
    /// Largest fraction lost of any report (%).
    pub fraction_lost_max_pct: f64,
    /// Cumulative lost in the last report (packets; negative with duplicates).
    pub cumulative_lost: i64,
    /// Extended highest sequence number in the last report.
    pub ext_highest_seq: u32,
    /// Interarrival jitter in the last report (ms).
    pub jitter_ms: f64,
    /// Largest jitter of any report (ms).
    pub jitter_max_ms: f64,
    /// Round-trip times computed (reports that echoed one of our SRs).
    pub rtt_samples: u64,
    /// Last RTT (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_ms: Option<f64>,
    /// Smallest RTT (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_min_ms: Option<f64>,
    /// Mean RTT (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_mean_ms: Option<f64>,
    /// Largest RTT (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_max_ms: Option<f64>,
}

/// RTCP of one local call endpoint (reported with the stream it sends).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamRtcp {
    /// Compound packets sent.
    pub sent: u64,
    /// Of which started with a SR.
    pub sender_reports: u64,
    /// Of which started with a RR.
    pub receiver_reports: u64,
    /// A BYE was sent at the end.
    pub bye_sent: bool,
    /// Valid compounds received from the peer.
    pub received: u64,
    /// SRs received from the peer.
    pub peer_sender_reports: u64,
    /// Packet count in the peer's last SR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_packets: Option<u32>,
    /// The peer said BYE.
    pub peer_bye: bool,
    /// The peer's view of our stream.
    pub peer_view: PeerView,
}

/// Node-level RTCP receive counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RtcpCounters {
    /// Datagrams read from RTCP sockets.
    pub datagrams: u64,
    /// Valid compounds from the expected peer.
    pub accepted: u64,
    /// Not valid RTCP, by parse error name.
    pub invalid: BTreeMap<String, u64>,
    /// Valid RTCP whose first report is not from the peer's SSRC.
    pub wrong_ssrc: u64,
    /// Sends the local stack refused.
    pub send_errors: u64,
}

/// RTCP state of one local call endpoint.
pub(super) struct RtcpCall {
    pub socket: UdpSocket,
    pub peer: SocketAddr,
    /// Index of the RTP receive stream (= RTP socket index) and send stream.
    pub rx: usize,
    pub tx: usize,
    pub our_ssrc: u32,
    pub peer_ssrc: u32,
    pub cname: String,
    /// Our stream's first RTP timestamp and send offset after t0 (µs).
    pub ts0: u32,
    pub offset_us: u64,
    pub next_due_us: u64,
    pub initial: bool,
    pub avg_size: f64,
    pub sent_at_last: u64,
    pub sent_at_before_last: u64,
    pub rng: SmallRng,
    pub report: StreamRtcp,
    rtt_sum_ms: f64,
}

/// Timing shared by every call of a node.
pub(super) struct Session {
    pub interval_ms: u64,
    /// Session bandwidth (octets/s): both directions' RTP with headers.
    pub session_bw: f64,
    /// RTP clock (Hz) and payload bytes per packet.
    pub clock_rate: u32,
    pub payload_len: usize,
    /// Monotonic start of sending, and offset realtime - monotonic (µs).
    pub t0_us: u64,
    pub realtime_offset_us: i64,
    /// When the final report + BYE goes out.
    pub bye_at_us: u64,
}

impl Session {
    pub fn ntp(&self, mono_us: u64) -> u64 {
        rtcp::ntp_from_unix_us(mono_us.saturating_add_signed(self.realtime_offset_us))
    }
}

impl RtcpCall {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        socket: UdpSocket,
        peer: SocketAddr,
        rx: usize,
        tx: usize,
        our_ssrc: u32,
        peer_ssrc: u32,
        cname: String,
        ts0: u32,
        offset_us: u64,
        rng: SmallRng,
    ) -> Self {
        RtcpCall {
            socket,
            peer,
            rx,
            tx,
            our_ssrc,
            peer_ssrc,
            cname,
            ts0,
            offset_us,
            next_due_us: 0,
            initial: true,
            avg_size: 0.0,
            sent_at_last: 0,
            sent_at_before_last: 0,
            rng,
            report: StreamRtcp::default(),
            rtt_sum_ms: 0.0,
        }
    }

    /// Schedule the next report after `now_us`.
    pub fn schedule(&mut self, now_us: u64, s: &Session, we_sent: bool) {
        let senders = if we_sent { 2 } else { 1 };
        let size = if self.avg_size > 0.0 {
            self.avg_size
        } else {
            100.0
        };
        let td = rtcp::deterministic_interval(
            2,
            senders,
            s.session_bw * RTCP_FRACTION,
            we_sent,
            size,
            self.initial,
            s.interval_ms as f64 / 1000.0,
        );
        let t = rtcp::randomized_interval(td, self.rng.gen::<f64>());
        self.next_due_us = now_us + (t * 1e6) as u64;
    }

    /// Send a compound now: SR if we sent RTP since the report before last,
    /// else RR; a block about the peer's stream once it was heard; CNAME;
    /// BYE if `bye`.
    pub fn send(
        &mut self,
        now_us: u64,
        s: &Session,
        sent_packets: u64,
        rx: &mut ReceptionStats,
        bye: bool,
        counters: &mut RtcpCounters,
    ) {
        let we_sent = sent_packets > self.sent_at_before_last;
        let block = rx.report_block(self.peer_ssrc, now_us);
        let blocks = block.as_slice();
        let mut buf = [0u8; 256];
        let mut w = Writer::new(&mut buf);
        let ok = if we_sent {
            // The RTP timestamp of this instant on our stream's timeline:
            // packet k carries ts0 + k * step and is due at t0 + offset + k * interval.
            let since = i128::from(now_us) - i128::from(s.t0_us + self.offset_us);
            let units = since * i128::from(s.clock_rate) / 1_000_000;
            let info = SenderInfo {
                ntp: s.ntp(now_us),
                rtp_ts: self.ts0.wrapping_add(units as u32),
                packets: sent_packets as u32,
                octets: (sent_packets as usize).wrapping_mul(s.payload_len) as u32,
            };
            w.sender_report(self.our_ssrc, &info, blocks)
        } else {
            w.receiver_report(self.our_ssrc, blocks)
        }
        .and_then(|_| w.sdes_cname(self.our_ssrc, self.cname.as_bytes()))
        .and_then(|_| {
            if bye {
                w.bye(&[self.our_ssrc], Some(b"call ended"))
            } else {
                Ok(())
            }
        });
        if ok.is_err() {
            counters.send_errors += 1;
            return;
        }
        let n = w.len();
        if self.socket.send_to(&buf[..n], self.peer).is_err() {
            counters.send_errors += 1;
        } else {
            self.report.sent += 1;
            if we_sent {
                self.report.sender_reports += 1;
            } else {
                self.report.receiver_reports += 1;
            }
            self.report.bye_sent |= bye;
        }
        let size = n as f64 + UDP_IP_OVERHEAD;
        self.avg_size = if self.initial {
            size
        } else {
            self.avg_size + (size - self.avg_size) / 16.0
        };
        self.initial = false;
        self.sent_at_before_last = self.sent_at_last;
        self.sent_at_last = sent_packets;
        if !bye {
            self.schedule(now_us, s, we_sent);
        }
    }

    /// One datagram from the RTCP socket.
    pub fn receive(
        &mut self,
        datagram: &[u8],
        now_us: u64,
        s: &Session,
        rx: &mut ReceptionStats,
        counters: &mut RtcpCounters,
    ) {
        counters.datagrams += 1;
        let c = match rtcp::parse_compound(datagram) {
            Ok(c) => c,
            Err(e) => {
                *counters.invalid.entry(e.name().to_string()).or_insert(0) += 1;
                return;
            }
        };
        let from_peer = match c.packets().next() {
            Some(Packet::SenderReport { ssrc, .. } | Packet::ReceiverReport { ssrc, .. }) => {
                ssrc == self.peer_ssrc
            }
            _ => false,
        };
        if !from_peer {
            counters.wrong_ssrc += 1;
            return;
        }
        counters.accepted += 1;
        self.report.received += 1;
        let arrival_ntp = s.ntp(now_us);
        for p in c.packets() {
            let blocks = match p {
                Packet::SenderReport { ssrc, info, blocks } if ssrc == self.peer_ssrc => {
                    rx.on_sender_report(&info, now_us);
                    self.report.peer_sender_reports += 1;
                    self.report.peer_packets = Some(info.packets);
                    blocks
                }
                Packet::ReceiverReport { ssrc, blocks } if ssrc == self.peer_ssrc => blocks,
                Packet::Bye { mut sources, .. } => {
                    self.report.peer_bye |= sources.any(|x| x == self.peer_ssrc);
                    continue;
                }
                _ => continue,
            };
            for b in blocks.filter(|b| b.ssrc == self.our_ssrc) {
                let v = &mut self.report.peer_view;
                v.reports += 1;
                v.fraction_lost_pct = b.fraction_lost_pct();
                v.fraction_lost_max_pct = v.fraction_lost_max_pct.max(v.fraction_lost_pct);
                v.cumulative_lost = i64::from(b.cumulative_lost);
                v.ext_highest_seq = b.ext_highest_seq;
                v.jitter_ms = f64::from(b.jitter) * 1000.0 / f64::from(s.clock_rate);
                v.jitter_max_ms = v.jitter_max_ms.max(v.jitter_ms);
                if let Some(rtt) = b.rtt_us(arrival_ntp) {
                    let ms = rtt as f64 / 1000.0;
                    v.rtt_samples += 1;
                    self.rtt_sum_ms += ms;
                    v.rtt_ms = Some(ms);
                    v.rtt_min_ms = Some(v.rtt_min_ms.map_or(ms, |m| m.min(ms)));
                    v.rtt_max_ms = Some(v.rtt_max_ms.map_or(ms, |m| m.max(ms)));
                    v.rtt_mean_ms = Some(self.rtt_sum_ms / v.rtt_samples as f64);
                }
            }
        }
    }
}
