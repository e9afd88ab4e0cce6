//! The `/metrics` answer: the stats document (as built for `airpack stats
//! --json`) in the Prometheus text exposition format 0.0.4.
//!
//! Owns: the metric names, types, units and help texts ([`META`], the one
//! table docs/operator-guide.md lists), and the rendering rules: one
//! `# HELP` and one `# TYPE` line per family, every sample of a family
//! together (peers are labels of the same family, not families of their
//! own), counters named `*_total`, maps by reason / errno / kind as labels,
//! histograms as cumulative `_bucket{le=".."}` lines ending with
//! `le="+Inf"`, then `_sum` and `_count`.
//!
//! Must not touch: the counters themselves (it only reads a JSON snapshot,
//! on the render thread, never per packet) or the JSON layout.

use serde_json::Value;
use std::collections::HashMap;
use std::fmt::Write as _;

/// A metric's Prometheus type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (name gets `_total`).
    Counter,
    /// Any value.
    Gauge,
    /// A fixed-bucket histogram (`_bucket`, `_sum`, `_count`).
    Histogram,
}

impl Kind {
    /// The `# TYPE` word.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One documented value of the stats document.
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    /// Its path in the document below `total` (or a peer), `accounting`,
    /// `queued`, `tun`, dot-separated (`daemon.tun_read`).
    pub path: &'static str,
    /// The family name without `airpack_` and `_total` (empty: the path
    /// with dots as underscores).
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// For a map of numbers: the label its keys become (empty: not a map).
    pub label: &'static str,
    /// The `# HELP` text.
    pub help: &'static str,
}

const fn m(path: &'static str, kind: Kind, help: &'static str) -> Meta {
    Meta {
        path,
        name: "",
        kind,
        label: "",
        help,
    }
}

const fn map(path: &'static str, label: &'static str, help: &'static str) -> Meta {
    Meta {
        path,
        name: "",
        kind: Kind::Counter,
        label,
        help,
    }
}

const fn renamed(path: &'static str, name: &'static str, kind: Kind, help: &'static str) -> Meta {
    Meta {
        path,
        name,
        kind,
        label: "",
        help,
    }
}

use Kind::{Counter as C, Gauge as G, Histogram as H};

/// Every value `/metrics` exports. Paths of `total` are also the per-peer
/// values (`airpack_peer_<name>{peer=".."}`), except `daemon.*`.
pub const META: &[Meta] = &[
    // The engine (total and per peer).
    m("packets_in", C, "Packets handed to the engine (all classes)."),
    m("bytes_in", C, "Bytes handed to the engine."),
    m("aggregated_packets", C, "Packets that left inside a bundle."),
    m("aggregated_bytes", C, "Inner bytes of the packets that left inside a bundle."),
    m("bundles", C, "Bundles sent (meta-packets)."),
    m("bundle_wire_bytes", C, "Bundle bytes on the wire, format header and outer header overhead included."),
    m("unaggregated_packets", C, "Bundle- or opportunistic-class packets that left alone, unchanged."),
    m("unaggregated_bytes", C, "Bytes of the packets that left alone."),
    m("bypass_packets", C, "Bypass-class packets forwarded."),
    m("bypass_bytes", C, "Bytes of the bypass-class packets forwarded."),
    m("sent_on_timeout", C, "Transmissions triggered by the hold time expiring."),
    m("sent_on_size", C, "Transmissions triggered by reaching the minimum or maximum size or packet count."),
    m("sent_on_idle", C, "Transmissions triggered by the link being idle."),
    m("sent_on_flush", C, "Transmissions triggered by a flush (stop, reload, peer removal)."),
    m("bundles_received", C, "Bundles received and successfully split."),
    m("packets_received", C, "Inner packets delivered from received bundles."),
    m("send_failed_packets", C, "Packets of transmissions that could not be sent (also counted as sent by class)."),
    renamed("dropped_total", "dropped_all", C, "Packets the engine dropped, all reasons (the sum of airpack_dropped_total)."),
    renamed("decode_errors_total", "decode_errors_all", C, "Received bundles rejected, all reasons."),
    renamed("inner_errors_total", "inner_errors_all", C, "Inner packets of received bundles refused on their own, all reasons."),
    m("aggregation_ratio", G, "Seed 001's aggregation ratio: (aggregated + unaggregated packets) / (bundles + unaggregated packets); 1 when nothing was sent."),
    m("average_aggregation", G, "Aggregated packets per bundle (0 when no bundle was sent)."),
    map("dropped", "reason", "Packets the engine dropped, by reason."),
    map("decode_errors", "reason", "Received bundles rejected before splitting, by reason."),
    map("inner_errors", "reason", "Inner packets of received bundles refused on their own, by reason."),
    m("bundle_packets", H, "Packets per bundle sent."),
    m("hold_time_us", H, "Time each packet that left (bundled or alone) was held, in microseconds."),
    // Per peer only.
    m("configured", G, "1 if the peer is in the current configuration, 0 if only the engine still knows it."),
    // The daemon (total only).
    m("daemon.tun_read", C, "Packets read from the TUN."),
    m("daemon.tun_read_bytes", C, "Bytes read from the TUN."),
    m("daemon.tun_read_errors", C, "TUN read errors other than nothing queued."),
    m("daemon.tun_unparsable", C, "TUN packets whose IP header was too short to find a destination."),
    m("daemon.tun_ignored", C, "TUN packets to link-scoped destinations (the kernel's own IPv6 ND/MLD), dropped."),
    m("daemon.tun_looped", C, "TUN packets whose route leads back into the TUN, dropped."),
    m("daemon.tun_written", C, "Inner packets written into the TUN."),
    map("daemon.tun_write_errors", "errno", "Failed TUN writes, by errno (eagain: TUN queue full)."),
    m("daemon.passthrough", C, "Packets sent unchanged without the engine (no peer on their route)."),
    m("daemon.passthrough_not_peer", C, "Of the passthrough packets, those whose next hop is not a configured peer."),
    m("daemon.bundles_sent", C, "Bundles sent successfully."),
    m("daemon.bundled_packets_sent", C, "Inner packets of the bundles sent successfully."),
    m("daemon.unchanged_sent", C, "Unchanged packets (singles, bypass, passthrough) sent successfully."),
    map("daemon.send_errors", "errno", "Failed sends (one per datagram), by errno."),
    map("daemon.send_failed_packets", "errno", "Packets lost in failed sends, by errno."),
    m("daemon.send_retries", C, "Sends retried once after draining an ICMP error left on the socket."),
    map("daemon.error_reports", "kind", "Error-queue entries read from the daemon's sockets, by origin and type."),
    m("daemon.shutdown_discarded", C, "Packets read from the TUN at stop after the bounded drain, discarded."),
    m("daemon.rx_datagrams", C, "Datagrams read from the bundle sockets."),
    m("daemon.rx_errors", C, "Bundle-socket receive errors (bad outer header, ...)."),
    map("daemon.rx_rejected", "reason", "Received bundles or inner packets rejected by the daemon: unknown_peer, auth_failed, replayed (bundles), spoofed_source (inner packets)."),
    m("daemon.route_changes", C, "Route or link change notifications that invalidated the next-hop cache."),
    m("daemon.link_transitions", C, "Up/down transitions of the configured interfaces."),
    m("daemon.steering_changes", C, "Changes of the set of steered interfaces."),
    m("daemon.steering_errors", C, "Failures to attach, detach or update the steering filter."),
    m("daemon.busy_transitions", C, "Link-busy transitions fed to the engine (link_mode hold-while-busy or adaptive)."),
    m("daemon.reloads", C, "Successful configuration reloads."),
    m("daemon.reload_errors", C, "Rejected configuration reloads (the old configuration was kept)."),
    m("daemon.wakeups", C, "Event-loop wakeups."),
    m("daemon.control_requests", C, "Control and metrics requests answered."),
    m("daemon.timer_late_us", H, "How late the hold-time timer fired after its deadline, in microseconds."),
    // The packet accounting (docs/operator-guide.md, "Where did my packets go").
    m("accounting.balanced", G, "1 if all three accounting identities hold."),
    m("accounting.send.in", C, "Send side: packets read from the TUN."),
    m("accounting.send.out", C, "Send side: packets that left (in bundles or unchanged)."),
    renamed("accounting.send.dropped_total", "accounting_send_dropped_all", C, "Send side: packets dropped, all reasons."),
    m("accounting.send.queued", G, "Send side: packets held in the engine now."),
    m("accounting.send.balanced", G, "1 if send in = out + dropped + queued."),
    map("accounting.send.dropped", "reason", "Send side: packets dropped, by reason."),
    m("accounting.receive.in", C, "Receive side: inner packets found in received bundles."),
    m("accounting.receive.out", C, "Receive side: inner packets written into the TUN."),
    renamed("accounting.receive.dropped_total", "accounting_receive_dropped_all", C, "Receive side: inner packets dropped, all reasons."),
    m("accounting.receive.balanced", G, "1 if receive in = out + dropped."),
    map("accounting.receive.dropped", "reason", "Receive side: inner packets dropped, by reason."),
    m("accounting.receive_datagrams.in", C, "Received datagrams read from the bundle sockets."),
    m("accounting.receive_datagrams.out", C, "Received datagrams split into packets."),
    renamed("accounting.receive_datagrams.dropped_total", "accounting_receive_datagrams_dropped_all", C, "Received datagrams dropped, all reasons."),
    m("accounting.receive_datagrams.balanced", G, "1 if datagrams in = out + dropped."),
    map("accounting.receive_datagrams.dropped", "reason", "Received datagrams dropped, by reason."),
    m("accounting.before_daemon.tun_queue_drops", C, "Packets the kernel's TUN queue dropped before the daemon read them."),
    m("accounting.before_daemon.rx_queue_drops", C, "Datagrams the bundle sockets' receive queues dropped."),
    // The engine's queues now.
    m("queued.packets", G, "Packets held in the engine now."),
    m("queued.bytes", G, "Bytes held in the engine now."),
    // The TUN's kernel counters.
    m("tun.queue_drops", C, "Packets the kernel dropped at the TUN's queue (tx_dropped)."),
    m("tun.read_by_daemon", C, "Packets the daemon read from the TUN (kernel tx_packets)."),
    m("tun.written_by_daemon", C, "Packets the daemon wrote into the TUN (kernel rx_packets)."),
    m("tun.rx_dropped", C, "Packets the kernel dropped after the daemon wrote them (rx_dropped)."),
    // The downlink roles (docs/operator-guide.md, "Downlink multiplexing roles").
    m("ap.stations", G, "AP role: stations with an active lease."),
    m("ap.streams", G, "AP role: registered streams (ports) multiplexed now."),
    m("ap.packets_in", C, "AP role: packets handed to the multiplexer (UDP to the steered media ports)."),
    m("ap.packets", C, "AP role: packets that left multiplexed in a frame (at least one destination took it)."),
    m("ap.packets_pending", G, "AP role: packets waiting in the multiplexer now."),
    m("ap.packets_passed", C, "AP role: packets forwarded unchanged because no station registered their port."),
    map("ap.unicast", "reason", "AP role: packets of registered streams forwarded unchanged, by reason (airtime: a frame would have cost more airtime than unicast)."),
    m("ap.packets_repeated", C, "AP role: packets repeated from the previous frame (ap.redundancy)."),
    m("ap.frames", C, "AP role: frames the multiplexer sent."),
    map("ap.frames_by_reason", "reason", "AP role: frames sent, by what closed them."),
    m("ap.frame_copies", C, "AP role: further copies of frames sent (ap.frame_copies; not in frames)."),
    m("ap.frame_datagrams_sent", C, "AP role: frame datagrams sent (one per frame and destination)."),
    m("ap.frame_send_errors", C, "AP role: frame datagrams the kernel refused."),
    m("ap.guards_sent", C, "AP role: guard datagrams sent before frames (ap.frame_guard)."),
    m("ap.guard_send_errors", C, "AP role: guard datagrams the kernel refused."),
    m("ap.bytes_in", C, "AP role: bytes of the original IP packets that left in frames."),
    m("ap.bytes_out", C, "AP role: bytes of the frames sent (UDP payloads)."),
    m("ap.bytes_saved", G, "AP role: bytes_in minus bytes_out (negative when framing cost more)."),
    map("ap.drops", "reason", "AP role: multiplexed packets lost, by reason."),
    m("ap.airtime.rule", G, "AP role: 1 if the airtime rule is on (ap.unicast_rate and ap.multicast_rate set)."),
    m("ap.airtime.frames_not_sent", C, "AP role: frames not sent because their packets took less airtime as unicast (the packets left unchanged: unicast reason airtime)."),
    m("ap.airtime.copies_priced_out", C, "AP role: further frame copies not sent because with them the frame would have cost as much airtime as its packets as unicast (ap.frame_copies)."),
    m("ap.airtime.frames_us", C, "AP role: airtime of the frames sent (model, microseconds; airtime rule only)."),
    m("ap.airtime.as_unicast_us", C, "AP role: airtime the packets of those frames would have taken as unicast exchanges (microseconds)."),
    m("ap.lease_expiries", C, "AP role: leases ended because the station stopped renewing."),
    m("ap.registrations.received", C, "AP role: registration messages received."),
    m("ap.registrations.answered", C, "AP role: answers sent."),
    m("ap.registrations.registered", C, "AP role: leases granted."),
    m("ap.registrations.renewed", C, "AP role: leases renewed."),
    m("ap.registrations.unregistered", C, "AP role: leases ended by the station."),
    m("ap.registrations.auto_found", C, "AP role: streams found for \"auto\" leases."),
    m("ap.registrations.socket_errors", C, "AP role: registration socket errors."),
    map("ap.registrations.rejected", "reason", "AP role: registration messages refused, by reason."),
    m("ap.loss_rule.enabled", G, "AP role: 1 if the loss rule is on (ap.loss_aware)."),
    m("ap.loss_rule.limit_pct", G, "AP role: the loss rule's limit (ap.loss_limit_pct), percent of frames."),
    m("ap.loss_rule.stations_unicast", G, "AP role: stations served by unicast now because of their multicast loss."),
    m("ap.loss_rule.reports", C, "AP role: stations' loss reports applied."),
    m("ap.loss_rule.reports_rejected", C, "AP role: loss reports refused (no lease, replay, address, table full)."),
    m("ap.loss_rule.blackouts", C, "AP role: loss reports of a station that received no frame while frames were sent."),
    m("ap.loss_rule.to_unicast", C, "AP role: moves of a station to unicast by loss."),
    m("ap.loss_rule.to_multicast", C, "AP role: returns of a station to the frame (clean reports)."),
    m("ap.loss_rule.probes", C, "AP role: trials of a station on unicast back in the frame (ap.loss_probe_secs)."),
    m("ap.loss_rule.held_by_airtime", C, "AP role: moves to unicast refused by the airtime guard."),
    m("ap.loss_rule.shed_by_airtime", C, "AP role: returns to the frame because the estimated load was above the budget."),
    m("ap.loss_rule.start_unicast", G, "AP role: 1 if new stations start on unicast until a clean report (ap.loss_start_unicast)."),
    m("ap.loss_rule.started_unicast", C, "AP role: new stations started on unicast."),
    m("ap.loss_rule.start_held_by_airtime", C, "AP role: new stations the airtime guard started in the frame."),
    m("ap.loss_rule.start_cleared", C, "AP role: new stations moved to the frame by a clean report."),
    m("ap.loss_rule.start_trials", C, "AP role: trials of new stations waiting on unicast (their packets in the frame and by unicast)."),
    m("ap.loss_rule.trial_packets", C, "AP role: packets sent both in a frame and by unicast during trials."),
    m("ap.loss_rule.estimated_load", G, "AP role: the loss rule's estimated voice airtime, share of the channel (0 without ap.unicast_rate)."),
    m("station.registered", G, "Station role: 1 while registered with the AP."),
    m("station.streams", G, "Station role: streams (ports) the AP multiplexes for this station."),
    m("station.frames_received", C, "Station role: frame datagrams read."),
    m("station.frames", C, "Station role: frames accepted."),
    m("station.lost_frames", C, "Station role: frames missing from the AP's sequence (lost on the air)."),
    m("station.packets", C, "Station role: packets extracted and rebuilt."),
    m("station.packets_written", C, "Station role: rebuilt packets written into the TUN."),
    m("station.packets_for_others", C, "Station role: packets for other stations (headers parsed, skipped)."),
    m("station.packets_recovered", C, "Station role: packets rebuilt from a frame's repeat block because their own frame was lost (ap.redundancy)."),
    m("station.frame_copies", C, "Station role: frames repeating the last one's sequence number (the AP's ap.frame_copies), ignored: not drops."),
    m("station.duplicates", C, "Station role: repeated packets skipped because their own frame had arrived."),
    m("station.requests_sent", C, "Station role: registration requests sent."),
    m("station.recovered_frames", C, "Station role: missing frames whose packets arrived in a later frame's repeat block."),
    m("station.loss_reports_sent", C, "Station role: loss reports sent to the AP (station.report_secs)."),
    m("station.answers", C, "Station role: valid answers from the AP."),
    m("station.errors_answered", C, "Station role: error answers from the AP."),
    map("station.drops.frames", "reason", "Station role: frame datagrams dropped, by reason."),
    map("station.drops.packets", "reason", "Station role: extracted packets dropped, by reason."),
    map("station.drops.answers", "reason", "Station role: answers dropped, by reason."),
    m("station.socket_errors", C, "Station role: socket errors."),
    // The daemon's state.
    renamed("uptime_s", "uptime_seconds", G, "Seconds since the daemon started."),
    m("link_busy", G, "1 while the link is busy (link_mode hold-while-busy or adaptive)."),
    renamed("links.up", "link_up", G, "1 if the configured interface is up, 0 if down."),
    renamed("info", "info", G, "Always 1; the labels say the daemon's version, mode and link mode."),
    // The gateway role (`[gateway]`, when enabled).
    m("gateway.network_mos", G, "Gateway: the network's voice MOS (worst or configured percentile of active calls; absent without a call)."),
    m("gateway.calls", G, "Gateway: calls in the Voice Protection Module's table."),
    m("gateway.calls_with_mos", G, "Gateway: calls with a MOS now (judged: at least 1 s of packets in the window)."),
    m("gateway.calls_heard", G, "Gateway: calls heard now (from their first packet until BYE or silence); the rate controller's number of calls."),
    m("gateway.joins_early", C, "Gateway: new calls heard between steps; each brings the rate controller's next step forward (to 60 ms after its first packet, at the earliest half a period after the last step)."),
    m("gateway.tcp_rate_bps", G, "Gateway: total TCP rate the controller allows into the mesh, bit/s."),
    m("gateway.tcp_share_bps", G, "Gateway: each active paced flow's share, bit/s."),
    m("gateway.htb_tcp_rate_bps", G, "Gateway: the TCP aggregate class's rate as the kernel reports it, bit/s."),
    map("gateway.decisions", "band", "Gateway: rate controller steps, by the band the MOS fell in."),
    m("gateway.flows_paced", G, "Gateway: TCP flows with their own paced class now."),
    m("gateway.flows_active", G, "Gateway: paced flows (the shared class counting as one) that moved bytes in the last two periods."),
    map("gateway.flows", "event", "Gateway: paced flows added, closed (FIN/RST) and expired (idle)."),
    map("gateway.observed", "kind", "Gateway: packets observed on the mesh interface, by kind and direction."),
    map("gateway.ignored", "reason", "Gateway: observed packets not used, by reason."),
    map("gateway.dropped", "reason", "Gateway: packets dropped by the pacer's kernel queues, and observation copies the kernel dropped, by reason."),
    m("gateway.tc.updates", C, "Gateway: tc update scripts run."),
    m("gateway.tc.reads", C, "Gateway: tc class counter reads."),
    m("gateway.tc.failures", C, "Gateway: tc scripts or reads that failed."),
    m("gateway.tc.skipped", C, "Gateway: periods whose state was not handed to the tc thread (still busy)."),
    m("gateway.config.period_us", G, "Gateway: the rate controller's period, µs (a reload may change it)."),
    m("gateway.config.floor_bps", G, "Gateway: the lowest TCP rate the controller allows, bit/s."),
    m("gateway.config.ceiling_bps", G, "Gateway: the highest TCP rate the controller allows, bit/s."),
    m("gateway.config.mos_window_us", G, "Gateway: the window of the voice quality estimate, µs."),
    m("gateway.config.mos_percentile", G, "Gateway: which call's MOS is the network's (0 the worst, 0.5 the median)."),
    m("gateway.config.mos_rank_base", G, "Gateway: the rank rule's base b (the network's MOS is the k-th worst call's, k = 1 + floor(log_b calls)); 0: the percentile."),
    m("gateway.config.initial_bps", G, "Gateway: the TCP rate at start, before any call (search controller without a start per call: the most kept when the first call appears), bit/s."),
    m("gateway.config.settle_us", G, "Gateway search controller: how long a rate must hold before the MOS reflects it, µs."),
    m("gateway.config.probe_us", G, "Gateway search controller: how long a rate must hold before a fast increase, µs."),
    m("gateway.config.fast_up", G, "Gateway search controller: the fast increase far below the remembered bad rate (0.5 = +50 %)."),
    m("gateway.config.first_up", G, "Gateway search controller: until a bad rate is known, the most the first increases past the start add (0.25 = +25 %)."),
    m("gateway.config.start_per_call_bps", G, "Gateway search controller: the start when calls appear, bit/s of TCP per active call (0: the initial rate at most)."),
    m("gateway.config.near", G, "Gateway search controller: within this fraction below the remembered bad rate, small steps."),
    m("gateway.config.bad_memory_us", G, "Gateway search controller: the remembered bad rate holds this long, then doubles every this long, µs."),
    m("gateway.controller.good_bps", G, "Gateway search controller: the highest rate known good (absent when none), bit/s."),
    m("gateway.controller.bad_bps", G, "Gateway search controller: the remembered bad rate as seen (absent when none), bit/s."),
    m("gateway.controller.bad_now_bps", G, "Gateway search controller: the remembered bad rate as it counts now (risen after its memory), bit/s."),
    m("gateway.controller.bad_age_ms", G, "Gateway search controller: age of the remembered bad rate, ms."),
    m("gateway.controller.since_change_ms", G, "Gateway search controller: time since the rate last changed, ms."),
    m("gateway.controller.window_peak_bps", G, "Gateway search controller: the highest rate still inside the MOS window, bit/s."),
    m("gateway.controller.calls", G, "Gateway search controller: active calls at its last step."),
    m("gateway.controller.cuts", C, "Gateway search controller: rate cuts."),
    m("gateway.controller.recuts", C, "Gateway search controller: cuts again within two windows of a cut (loss went on after a cut)."),
    m("gateway.controller.held_off", C, "Gateway search controller: bad readings not acted on (a cut still settling, or new calls' first window)."),
    // The gateway's TCP Improvement Module (`gateway.tcp_improvement`).
    map("gateway.tcp_improvement.read", "direction", "Gateway TCP improvement: packets read from its TUNs, into and out of the mesh."),
    map("gateway.tcp_improvement.written", "direction", "Gateway TCP improvement: packets written back (forwarded)."),
    map("gateway.tcp_improvement.dropped", "reason", "Gateway TCP improvement: packets read and not written back, by reason."),
    map("gateway.tcp_improvement.rewritten", "field", "Gateway TCP improvement: packets forwarded with a field rewritten (advertised window, to zero, hop limit)."),
    map("gateway.tcp_improvement.generated", "kind", "Gateway TCP improvement: packets it sent itself (local retransmissions, replayed ACKs, failed writes)."),
    map("gateway.tcp_improvement.not_understood", "reason", "Gateway TCP improvement: packets passed untouched because the parser refused them."),
    map("gateway.tcp_improvement.flows", "event", "Gateway TCP improvement: flows created, ended, expired, refused (table full)."),
    m("gateway.tcp_improvement.flows_tracked", G, "Gateway TCP improvement: flows in its table now."),
    m("gateway.tcp_improvement.buffered_segments", G, "Gateway TCP improvement: data segments held for local recovery now."),
    m("gateway.tcp_improvement.untracked_packets", C, "Gateway TCP improvement: packets of flows not in its table (passed untouched apart from the hop limit)."),
    m("gateway.tcp_improvement.signed_acks_untouched", C, "Gateway TCP improvement: client ACKs left untouched because TCP-MD5 or TCP-AO signs them."),
    m("gateway.tcp_improvement.read_errors", C, "Gateway TCP improvement: TUN read errors other than nothing queued."),
    m("gateway.tcp_improvement.tun_queue_drops", C, "Gateway TCP improvement: packets the kernel dropped before the daemon read them (its TUNs' queues full)."),
    m("gateway.tcp_improvement.memory_bound_bytes", G, "Gateway TCP improvement: the most memory its buffers and flow slots can take, bytes."),
];

/// Values of the stats document's top level or a peer only.
const HEAD_ONLY: &[&str] = &["uptime_s", "link_busy", "links.up", "info"];
const PEER_ONLY: &[&str] = &["configured"];

/// Whether `m` is also exported per peer (`airpack_peer_*`), and in total.
fn scopes(m: &Meta) -> (bool, bool) {
    let engine = !m.path.contains('.') && !HEAD_ONLY.contains(&m.path);
    (!PEER_ONLY.contains(&m.path), engine)
}

/// Every family `/metrics` can export: (name, type, label of a map or "",
/// help), per-peer families included (they also carry `peer`).
pub fn families() -> Vec<(String, &'static str, &'static str, String)> {
    let mut out = Vec::new();
    for m in META {
        let (total, peer) = scopes(m);
        if total {
            out.push((m.family(), m.kind.name(), m.label, m.help.to_owned()));
        }
        if peer {
            let f = m.family().replacen("airpack_", "airpack_peer_", 1);
            out.push((f, m.kind.name(), m.label, format!("Per peer: {}", m.help)));
        }
    }
    out
}

/// The help of an undocumented value (a test fails if any is exported).
pub const UNDOCUMENTED: &str = "undocumented";

fn meta(path: &str) -> Option<&'static Meta> {
    META.iter().find(|m| m.path == path)
}

impl Meta {
    fn family(&self) -> String {
        let base = if self.name.is_empty() {
            self.path.replace('.', "_")
        } else {
            self.name.to_owned()
        };
        match self.kind {
            Kind::Counter => format!("airpack_{base}_total"),
            _ => format!("airpack_{base}"),
        }
    }
}

struct Family {
    kind: Kind,
    help: String,
    lines: String,
}

/// The families of one `/metrics` answer, in the order they first appear.
#[derive(Default)]
pub struct Exposition {
    families: Vec<(String, Family)>,
    index: HashMap<String, usize>,
    /// `scope|path` -> (family index, label of a map or ""): the names and
    /// help of a value are worked out once per answer, not once per peer.
    resolved: HashMap<String, (usize, &'static str)>,
}

/// Writes `{k="v",...}` (nothing for no labels), escaping `\`, `"` and newlines.
fn write_labels(out: &mut String, pairs: &[(&str, &str)]) {
    for (i, (k, v)) in pairs.iter().enumerate() {
        out.push(if i == 0 { '{' } else { ',' });
        out.push_str(k);
        out.push_str("=\"");
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    if !pairs.is_empty() {
        out.push('}');
    }
}

/// A sample value: integers exactly, floats as Prometheus writes them,
/// booleans as 1 / 0; `None` for anything else (null: unknown, skipped).
fn number(v: &Value) -> Option<String> {
    if let Some(u) = v.as_u64() {
        return Some(u.to_string());
    }
    if let Some(i) = v.as_i64() {
        return Some(i.to_string());
    }
    if let Some(b) = v.as_bool() {
        return Some(u8::from(b).to_string());
    }
    let x = v.as_f64()?;
    Some(if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{x}")
    })
}

impl Exposition {
    fn family(&mut self, name: &str, kind: Kind, help: &str) -> usize {
        match self.index.get(name) {
            Some(&i) => i,
            None => {
                self.families.push((
                    name.to_owned(),
                    Family {
                        kind,
                        help: help.to_owned(),
                        lines: String::new(),
                    },
                ));
                self.index.insert(name.to_owned(), self.families.len() - 1);
                self.families.len() - 1
            }
        }
    }

    /// One sample line of family `i`.
    fn sample(&mut self, i: usize, suffix: &str, lab: &[(&str, &str)], v: &str) {
        let (name, f) = &mut self.families[i];
        f.lines.push_str(name);
        f.lines.push_str(suffix);
        write_labels(&mut f.lines, lab);
        f.lines.push(' ');
        f.lines.push_str(v);
        f.lines.push('\n');
    }

    /// Adds `doc`'s `total`, `accounting`, `queued`, `tun`, the downlink
    /// roles (`ap`, `station`) and daemon state (the stats document without
    /// `peers`).
    pub fn add_head(&mut self, doc: &Value) {
        if let (Some(v), Some(mode)) = (doc.get("version"), doc.get("mode")) {
            let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_owned();
            let (version, mode, link) = (s(Some(v)), s(Some(mode)), s(doc.get("link_mode")));
            let mt = meta("info").expect("info is documented");
            let lab = [
                ("version", version.as_str()),
                ("mode", mode.as_str()),
                ("link_mode", link.as_str()),
            ];
            let i = self.family(&mt.family(), mt.kind, mt.help);
            self.sample(i, "", &lab, "1");
        }
        for k in ["uptime_s", "link_busy"] {
            if let Some(v) = doc.get(k) {
                self.value(k, "", &[], v);
            }
        }
        if let Some(Value::Array(links)) = doc.get("links") {
            for l in links {
                let name = l.get("interface").and_then(Value::as_str).unwrap_or("?");
                if let Some(up) = l.get("up") {
                    self.value("links.up", "", &[("interface", name)], up);
                }
            }
        }
        if let Some(t) = doc.get("total") {
            self.walk("", "", &[], t);
        }
        for k in ["accounting", "queued", "tun", "gateway", "ap", "station"] {
            if let Some(v) = doc.get(k) {
                self.walk(k, "", &[], v);
            }
        }
    }

    /// Adds one element of the stats document's `peers`
    /// (`airpack_peer_*{peer=".."}`).
    pub fn add_peer(&mut self, p: &Value) {
        let name = p
            .get("peer")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        // `peer` itself is a string: the walk skips it.
        self.walk("", "peer", &[("peer", &name)], p);
    }

    /// The family of the value at `path` in `scope` ("" or "peer") and the
    /// label of a map ("" if not a map), created on first use.
    fn resolve(&mut self, path: &str, scope: &str, v: &Value) -> (usize, &'static str) {
        let key = format!("{scope}|{path}");
        if let Some(&r) = self.resolved.get(&key) {
            return r;
        }
        let (family, kind, help, label) = match meta(path) {
            Some(mt) => {
                let mut f = mt.family();
                let mut help = mt.help.to_owned();
                if !scope.is_empty() {
                    f = f.replacen("airpack_", &format!("airpack_{scope}_"), 1);
                    help = format!("Per {scope}: {help}");
                }
                (f, mt.kind, help, mt.label)
            }
            None => {
                let base = path.replace('.', "_");
                let f = if scope.is_empty() {
                    format!("airpack_{base}")
                } else {
                    format!("airpack_{scope}_{base}")
                };
                let label = if v.is_object() && !is_histogram(v) {
                    "key"
                } else {
                    ""
                };
                (f, Kind::Gauge, UNDOCUMENTED.to_owned(), label)
            }
        };
        let kind = if is_histogram(v) {
            Kind::Histogram
        } else {
            kind
        };
        let r = (self.family(&family, kind, &help), label);
        self.resolved.insert(key, r);
        r
    }

    /// One value at `path` (a number, a map of numbers or a histogram).
    fn value(&mut self, path: &str, scope: &str, lab: &[(&str, &str)], v: &Value) {
        let (i, label) = self.resolve(path, scope, v);
        if self.families[i].1.kind == Kind::Histogram {
            self.histogram(i, lab, v);
        } else if !label.is_empty() {
            let Some(obj) = v.as_object() else { return };
            for (key, n) in obj {
                if let Some(x) = number(n) {
                    let mut l = lab.to_vec();
                    l.push((label, key));
                    self.sample(i, "", &l, &x);
                }
            }
        } else if let Some(x) = number(v) {
            self.sample(i, "", lab, &x);
        }
    }

    fn walk(&mut self, prefix: &str, scope: &str, lab: &[(&str, &str)], v: &Value) {
        let Some(obj) = v.as_object() else { return };
        for (k, val) in obj {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match val {
                Value::Object(_) if meta(&path).is_none() && !is_histogram(val) => {
                    self.walk(&path, scope, lab, val)
                }
                Value::Object(_) | Value::Number(_) | Value::Bool(_) => {
                    self.value(&path, scope, lab, val)
                }
                _ => {} // strings, nulls (unknown), arrays
            }
        }
    }

    fn histogram(&mut self, i: usize, lab: &[(&str, &str)], h: &Value) {
        let Some(Value::Array(buckets)) = h.get("buckets") else {
            return;
        };
        let mut cum = 0u64;
        let mut saw_inf = false;
        let write = |this: &mut Self, le: &str, n: u64| {
            let mut l = lab.to_vec();
            l.push(("le", le));
            this.sample(i, "_bucket", &l, &n.to_string());
        };
        for b in buckets {
            cum += b.get("count").and_then(Value::as_u64).unwrap_or(0);
            match b.get("le").and_then(number) {
                Some(le) if !b["le"].is_string() => write(self, &le, cum),
                _ => {
                    saw_inf = true;
                    write(self, "+Inf", cum);
                }
            }
        }
        if !saw_inf {
            write(self, "+Inf", cum);
        }
        let sum = h.get("sum").and_then(number).unwrap_or_else(|| "0".into());
        let count = h.get("total").and_then(Value::as_u64).unwrap_or(cum);
        self.sample(i, "_sum", lab, &sum);
        self.sample(i, "_count", lab, &count.to_string());
    }

    /// The exposition text: per family `# HELP`, `# TYPE`, then its samples.
    pub fn finish(self) -> String {
        // Reserved once, and each family freed as it is copied: the peak is
        // about one copy of the text (1000 peers: ~7 MB), not two.
        let len: usize = self
            .families
            .iter()
            .map(|(n, f)| 2 * n.len() + f.help.len() + f.lines.len() + 32)
            .sum();
        let mut out = String::with_capacity(len);
        for (name, f) in self.families {
            let help = f.help.replace('\\', "\\\\").replace('\n', "\\n");
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {}", f.kind.name());
            out.push_str(&f.lines);
        }
        out
    }
}

fn is_histogram(v: &Value) -> bool {
    v.get("buckets").is_some_and(Value::is_array)
}

/// The `/metrics` text of a stats document head (see [`Exposition::add_head`])
/// and its peers.
pub fn render(head: &Value, peers: impl IntoIterator<Item = Value>) -> String {
    let mut e = Exposition::default();
    e.add_head(head);
    for p in peers {
        e.add_peer(&p);
    }
    e.finish()
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
