//! The daemon's own counters and the rendering of all statistics: the JSON
//! answered on the control socket (`airpack stats --json`, `airpack peers
//! --json`) and the human tables the client prints (the Prometheus text is
//! [`super::metrics`]'s).
//!
//! Owns: [`DaemonCounters`] (I/O events the engine cannot see: TUN reads and
//! writes, send errors by errno, received bundles rejected before decoding)
//! and the JSON layout fixed by the daemon contract. The packet accounting
//! built from these counters is [`super::accounting`]'s.
//!
//! Must not touch: sockets or the engine's state (it only reads snapshots).
//! Rendering allocates, but only per control request, never per packet.

use crate::linux::errqueue::ErrorReport;
use crate::linux::ErrorKind;
use airpack_core::engine::{Counters, DropReason, Histogram, Stats};
use airpack_core::DecodeError;
use serde_json::{json, Map, Value};

/// Number of [`ErrorKind`] variants (size of per-errno arrays).
pub const ERR_KINDS: usize = ErrorKind::ALL.len();
/// Number of [`ErrorReport`] variants.
pub const REPORT_KINDS: usize = ErrorReport::COUNT;

/// Bucket bounds (µs) of the timer lateness histogram.
pub const TIMER_LATE_BOUNDS_US: &[u64] = &[
    0, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1_000, 2_000, 5_000, 10_000,
];

/// I/O-side counters kept by the event loop (plain integers; no allocation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonCounters {
    /// How late the hold-time timer fired after its deadline (µs): the daemon's
    /// overshoot of the configured hold time.
    pub timer_late_us: Histogram,
    /// Packets read from the TUN.
    pub tun_read: u64,
    /// Bytes read from the TUN.
    pub tun_read_bytes: u64,
    /// TUN read errors other than "nothing queued".
    pub tun_read_errors: u64,
    /// TUN packets whose IP header was too short to find a destination.
    pub tun_unparsable: u64,
    /// TUN packets to link-scoped destinations (the kernel's own IPv6 ND/MLD on the TUN), dropped.
    pub tun_ignored: u64,
    /// TUN packets whose normal route leads back into the TUN (would loop), dropped.
    pub tun_looped: u64,
    /// Inner packets written into the TUN.
    pub tun_written: u64,
    /// TUN writes that failed, by errno (`eagain` = TUN queue full).
    pub tun_write_errors: [u64; ERR_KINDS],
    /// Packets sent unchanged without the engine: no peer (no route / not in any
    /// allowed_ips) or the next hop is not a configured peer.
    pub passthrough: u64,
    /// Of those, packets whose next hop was not a configured peer.
    pub passthrough_not_peer: u64,
    /// Bundles sent successfully.
    pub bundles_sent: u64,
    /// Inner packets of the bundles sent successfully.
    pub bundled_packets_sent: u64,
    /// Unchanged packets (engine singles and bypass, passthrough) sent successfully.
    pub unchanged_sent: u64,
    /// Sends that failed, by errno (one per failed datagram).
    pub send_errors: [u64; ERR_KINDS],
    /// Packets lost in failed sends, by errno: a failed bundle counts its
    /// inner packets, a failed unchanged packet one.
    pub send_failed_packets: [u64; ERR_KINDS],
    /// Sends retried once because they failed with a pending error that an
    /// earlier datagram's ICMP report left on the socket (drained first).
    pub send_retries: u64,
    /// Error-queue entries read from the daemon's sockets, by origin/type
    /// (ICMP errors about datagrams that left; local errors).
    pub error_reports: [u64; REPORT_KINDS],
    /// Packets read from the TUN at stop, after the bounded drain, and
    /// discarded (they would be lost when the TUN closes anyway).
    pub shutdown_discarded: u64,
    /// Datagrams read from the bundle sockets.
    pub rx_datagrams: u64,
    /// Received bundles from an address that is not a configured peer.
    pub rx_unknown_peer: u64,
    /// Inner packets whose source address that peer may not send.
    pub rx_spoofed_source: u64,
    /// Received bundles without a valid authentication tag (a mesh key is set).
    pub rx_auth_failed: u64,
    /// Received bundles with a valid tag seen before (replays).
    pub rx_replayed: u64,
    /// Bundle-socket receive errors (bad outer header, ...).
    pub rx_errors: u64,
    /// Route/link change notifications that invalidated the next-hop cache.
    pub route_changes: u64,
    /// Interface up/down transitions seen on the configured interfaces.
    pub link_transitions: u64,
    /// Times the set of steered interfaces changed (attached or detached).
    pub steering_changes: u64,
    /// Failures to attach, detach or update the steering filter.
    pub steering_errors: u64,
    /// Link-busy transitions fed to the engine (hold-while-busy).
    pub busy_transitions: u64,
    /// Successful configuration reloads (SIGHUP).
    pub reloads: u64,
    /// Rejected configuration reloads (bad new config: old one kept).
    pub reload_errors: u64,
    /// Event-loop wakeups.
    pub wakeups: u64,
    /// Control and metrics requests answered.
    pub control_requests: u64,
}

impl Default for DaemonCounters {
    fn default() -> Self {
        DaemonCounters {
            timer_late_us: Histogram::new(TIMER_LATE_BOUNDS_US),
            tun_read: 0,
            tun_read_bytes: 0,
            tun_read_errors: 0,
            tun_unparsable: 0,
            tun_ignored: 0,
            tun_looped: 0,
            tun_written: 0,
            tun_write_errors: [0; ERR_KINDS],
            passthrough: 0,
            passthrough_not_peer: 0,
            bundles_sent: 0,
            bundled_packets_sent: 0,
            unchanged_sent: 0,
            send_errors: [0; ERR_KINDS],
            send_failed_packets: [0; ERR_KINDS],
            send_retries: 0,
            error_reports: [0; REPORT_KINDS],
            shutdown_discarded: 0,
            rx_datagrams: 0,
            rx_unknown_peer: 0,
            rx_spoofed_source: 0,
            rx_auth_failed: 0,
            rx_replayed: 0,
            rx_errors: 0,
            route_changes: 0,
            link_transitions: 0,
            steering_changes: 0,
            steering_errors: 0,
            busy_transitions: 0,
            reloads: 0,
            reload_errors: 0,
            wakeups: 0,
            control_requests: 0,
        }
    }
}

/// The value below which a fraction `q` of a histogram's samples fall (the
/// bucket's upper bound; `None` when empty or in the overflow bucket).
pub fn quantile(h: &Histogram, q: f64) -> Option<u64> {
    if h.total == 0 {
        return None;
    }
    let want = (h.total as f64 * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, c) in h.counts.iter().enumerate() {
        seen += c;
        if seen >= want {
            return h.bounds.get(i).copied();
        }
    }
    None
}

impl DaemonCounters {
    /// Counts a failed send of one datagram holding `packets` packets.
    pub fn send_error(&mut self, e: &std::io::Error, packets: u64) {
        let k = ErrorKind::of(e).index();
        self.send_errors[k] += 1;
        self.send_failed_packets[k] += packets;
    }
    /// Counts one error-queue entry.
    pub fn error_report(&mut self, r: ErrorReport) {
        self.error_reports[r.index()] += 1;
    }
    /// Counts a failed TUN write.
    pub fn tun_write_error(&mut self, e: &std::io::Error) {
        self.tun_write_errors[ErrorKind::of(e).index()] += 1;
    }
}

fn by_errno(a: &[u64; ERR_KINDS]) -> Value {
    let mut m = Map::new();
    for k in ErrorKind::ALL {
        m.insert(k.name().into(), a[k.index()].into());
    }
    Value::Object(m)
}

fn reports_json(a: &[u64; REPORT_KINDS]) -> Value {
    let mut m = Map::new();
    for k in ErrorReport::ALL {
        m.insert(k.name().into(), a[k.index()].into());
    }
    Value::Object(m)
}

/// The daemon counters as the `daemon` object of the stats JSON.
pub fn daemon_json(c: &DaemonCounters) -> Value {
    json!({
        "tun_read": c.tun_read,
        "tun_read_bytes": c.tun_read_bytes,
        "tun_read_errors": c.tun_read_errors,
        "tun_unparsable": c.tun_unparsable,
        "tun_ignored": c.tun_ignored,
        "tun_looped": c.tun_looped,
        "tun_written": c.tun_written,
        "tun_write_errors": by_errno(&c.tun_write_errors),
        "passthrough": c.passthrough,
        "passthrough_not_peer": c.passthrough_not_peer,
        "bundles_sent": c.bundles_sent,
        "bundled_packets_sent": c.bundled_packets_sent,
        "unchanged_sent": c.unchanged_sent,
        "send_errors": by_errno(&c.send_errors),
        "send_failed_packets": by_errno(&c.send_failed_packets),
        "send_retries": c.send_retries,
        "error_reports": reports_json(&c.error_reports),
        "shutdown_discarded": c.shutdown_discarded,
        "rx_datagrams": c.rx_datagrams,
        "rx_errors": c.rx_errors,
        "rx_rejected": {
            "unknown_peer": c.rx_unknown_peer,
            "spoofed_source": c.rx_spoofed_source,
            "auth_failed": c.rx_auth_failed,
            "replayed": c.rx_replayed,
        },
        "route_changes": c.route_changes,
        "link_transitions": c.link_transitions,
        "steering_changes": c.steering_changes,
        "steering_errors": c.steering_errors,
        "busy_transitions": c.busy_transitions,
        "reloads": c.reloads,
        "reload_errors": c.reload_errors,
        "wakeups": c.wakeups,
        "control_requests": c.control_requests,
        "timer_late_us": {
            "total": c.timer_late_us.total,
            "sum": c.timer_late_us.sum,
            "mean": c.timer_late_us.mean(),
            "p50": quantile(&c.timer_late_us, 0.5),
            "p99": quantile(&c.timer_late_us, 0.99),
            "buckets": histogram_json(&c.timer_late_us)["buckets"].clone(),
        },
    })
}

fn histogram_json(h: &Histogram) -> Value {
    let buckets: Vec<Value> = h
        .bounds
        .iter()
        .map(|b| Value::from(*b))
        .chain([Value::from("inf")])
        .zip(&h.counts)
        .map(|(le, n)| json!({"le": le, "count": n}))
        .collect();
    json!({"total": h.total, "sum": h.sum, "mean": h.mean(), "buckets": buckets})
}

/// Every [`Counters`] field by name, plus ratios and per-reason maps.
pub fn counters_json(c: &Counters) -> Map<String, Value> {
    let mut m = Map::new();
    let fields: [(&str, u64); 20] = [
        ("packets_in", c.packets_in),
        ("bytes_in", c.bytes_in),
        ("aggregated_packets", c.aggregated_packets),
        ("aggregated_bytes", c.aggregated_bytes),
        ("bundles", c.bundles),
        ("bundle_wire_bytes", c.bundle_wire_bytes),
        ("unaggregated_packets", c.unaggregated_packets),
        ("unaggregated_bytes", c.unaggregated_bytes),
        ("bypass_packets", c.bypass_packets),
        ("bypass_bytes", c.bypass_bytes),
        ("sent_on_timeout", c.sent_on_timeout),
        ("sent_on_size", c.sent_on_size),
        ("sent_on_idle", c.sent_on_idle),
        ("sent_on_flush", c.sent_on_flush),
        ("bundles_received", c.bundles_received),
        ("packets_received", c.packets_received),
        ("send_failed_packets", c.send_failed_packets),
        ("dropped_total", c.dropped_total()),
        ("decode_errors_total", c.decode_errors.iter().sum()),
        ("inner_errors_total", c.inner_errors.iter().sum()),
    ];
    for (k, v) in fields {
        m.insert(k.into(), v.into());
    }
    m.insert("aggregation_ratio".into(), c.aggregation_ratio().into());
    m.insert("average_aggregation".into(), c.average_aggregation().into());
    let mut d = Map::new();
    for r in DropReason::ALL {
        d.insert(r.reason().into(), c.dropped[r.index()].into());
    }
    m.insert("dropped".into(), Value::Object(d));
    let mut d = Map::new();
    for r in DecodeError::ALL {
        d.insert(r.reason().into(), c.decode_errors[r.index()].into());
    }
    m.insert("decode_errors".into(), Value::Object(d));
    let mut d = Map::new();
    for r in DecodeError::ALL {
        d.insert(r.reason().into(), c.inner_errors[r.index()].into());
    }
    m.insert("inner_errors".into(), Value::Object(d));
    m
}

/// Counters and histograms of one [`Stats`].
pub fn stats_json(s: &Stats) -> Map<String, Value> {
    let mut m = counters_json(&s.counters);
    m.insert("bundle_packets".into(), histogram_json(&s.bundle_packets));
    m.insert("hold_time_us".into(), histogram_json(&s.hold_time_us));
    m
}

/// Writes `head` (a JSON object) with one more key, `"peers"`, whose array
/// items `peer(0)`, `peer(1)`, ... are built and serialized one at a time: a
/// document with many peers never exists as one tree (for 1000 peers the
/// stats tree peaks near 60 MB while its compact text is ~1.5 MB).
pub fn write_with_peers(
    out: &mut Vec<u8>,
    head: &Map<String, Value>,
    peers: usize,
    mut peer: impl FnMut(usize) -> Value,
) {
    out.extend_from_slice(b"{\"peers\":[");
    for i in 0..peers {
        if i > 0 {
            out.push(b',');
        }
        // Writing into a Vec cannot fail; a Value always serializes.
        let _ = serde_json::to_writer(&mut *out, &peer(i));
    }
    out.push(b']');
    for (k, v) in head {
        out.push(b',');
        let _ = serde_json::to_writer(&mut *out, k);
        out.push(b':');
        let _ = serde_json::to_writer(&mut *out, v);
    }
    out.push(b'}');
}

/// Prometheus text exposition of a whole stats JSON document (head and
/// `peers`); see [`super::metrics`].
pub fn prometheus(doc: &Value) -> String {
    let peers = match doc.get("peers") {
        Some(Value::Array(p)) => p.clone(),
        _ => Vec::new(),
    };
    super::metrics::render(doc, peers)
}

/// What a new user most needs to know when nothing is being bundled: a line
/// for `airpack stats`, from the document's `total`, or `None` when packets
/// are being bundled.
///
/// Only packets that match a `[[class]]` (protocol, ports, dscp, len) and go
/// toward a peer are steered into the daemon, so "nothing read from the TUN"
/// means no outgoing packet matched any class since the daemon started.
/// Packets that matched but never left in a bundle are broken down by where
/// they went instead.
pub fn match_note(doc: &Value) -> Option<String> {
    let total = doc.get("total")?;
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let d = total.get("daemon");
    let steered = n(d.and_then(|d| d.get("tun_read")))
        .saturating_sub(n(d.and_then(|d| d.get("tun_ignored"))))
        .saturating_sub(n(d.and_then(|d| d.get("tun_unparsable"))))
        .max(n(total.get("packets_in")));
    if steered == 0 {
        return Some(
            "note: nothing matched: no outgoing packet has matched a [[class]] since the daemon \
             started (none was steered to it). Compare the classes' protocol, ports, dscp and len \
             with the traffic (`airpack voip` marks DSCP 46, EF, unless given --dscp), and check \
             `interfaces` and that the traffic is routed toward a [[peer]]."
                .into(),
        );
    }
    if n(total.get("aggregated_packets")) > 0 {
        return None;
    }
    Some(format!(
        "note: {steered} packets matched a class but none left in a bundle: {} sent alone \
         (nothing to bundle with before the hold time; with link_mode hold-while-busy or \
         adaptive, the default hop-by-hop, an idle link; with adaptive, also one flow per \
         next hop: set link_mode = \"fixed\" to hold every packet), {} \
         bypass class, {} passthrough (no peer on their route, or the next hop is not a \
         [[peer]]), {} dropped",
        n(total.get("unaggregated_packets")),
        n(total.get("bypass_packets")),
        n(d.and_then(|d| d.get("passthrough"))),
        n(total.get("dropped_total")),
    ))
}

/// A human table of a stats JSON document (what `airpack stats` prints).
pub fn human_stats(doc: &Value) -> String {
    let mut out = String::new();
    let get = |v: &Value, k: &str| v.get(k).cloned().unwrap_or(Value::Null);
    let total = get(doc, "total");
    let empty = Vec::new();
    let peers = doc.get("peers").and_then(Value::as_array).unwrap_or(&empty);
    out.push_str(&format!(
        "airpack {} | mode {} | uptime {:.1} s | queued {} packets / {} bytes\n\n",
        doc.get("version").and_then(Value::as_str).unwrap_or("?"),
        doc.get("mode").and_then(Value::as_str).unwrap_or("?"),
        doc.get("uptime_s").and_then(Value::as_f64).unwrap_or(0.0),
        doc.pointer("/queued/packets")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        doc.pointer("/queued/bytes")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    ));
    let rows = [
        "packets_in",
        "aggregated_packets",
        "bundles",
        "unaggregated_packets",
        "bypass_packets",
        "aggregation_ratio",
        "average_aggregation",
        "sent_on_timeout",
        "sent_on_size",
        "sent_on_idle",
        "sent_on_flush",
        "bundles_received",
        "packets_received",
        "send_failed_packets",
        "dropped_total",
        "decode_errors_total",
    ];
    let cols: Vec<(String, &Value)> = std::iter::once(("total".to_owned(), &total))
        .chain(peers.iter().map(|p| {
            (
                p.get("peer")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned(),
                p,
            )
        }))
        .collect();
    let fmt = |v: Option<&Value>| match v {
        Some(Value::Number(n)) if n.is_f64() => format!("{:.2}", n.as_f64().unwrap_or(0.0)),
        Some(Value::Number(n)) => n.to_string(),
        _ => "-".into(),
    };
    out.push_str(&format!("{:<22}", ""));
    for (name, _) in &cols {
        out.push_str(&format!("{name:>16}"));
    }
    out.push('\n');
    for r in rows {
        out.push_str(&format!("{r:<22}"));
        for (_, c) in &cols {
            out.push_str(&format!("{:>16}", fmt(c.get(r))));
        }
        out.push('\n');
    }
    let nonzero = |v: Option<&Value>| -> String {
        let Some(Value::Object(m)) = v else {
            return String::new();
        };
        let parts: Vec<String> = m
            .iter()
            .filter(|(_, n)| n.as_u64().unwrap_or(0) > 0)
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(" ")
        }
    };
    out.push_str(&format!(
        "\ndropped:        {}\n",
        nonzero(total.get("dropped"))
    ));
    out.push_str(&format!(
        "decode errors:  {}\n",
        nonzero(total.get("decode_errors"))
    ));
    if let Some(d) = total.get("daemon") {
        out.push_str(&format!(
            "tun:            read={} written={} write_errors: {}\n",
            fmt(d.get("tun_read")),
            fmt(d.get("tun_written")),
            nonzero(d.get("tun_write_errors"))
        ));
        out.push_str(&format!(
            "sent:           bundles={} unchanged={} passthrough={} errors: {}\n",
            fmt(d.get("bundles_sent")),
            fmt(d.get("unchanged_sent")),
            fmt(d.get("passthrough")),
            nonzero(d.get("send_errors"))
        ));
        out.push_str(&format!(
            "received:       datagrams={} rejected: {}\n",
            fmt(d.get("rx_datagrams")),
            nonzero(d.get("rx_rejected"))
        ));
        out.push_str(&format!(
            "error reports:  {}\n",
            nonzero(d.get("error_reports"))
        ));
    }
    if let Some(a) = doc.get("accounting") {
        let side = |k: &str, queued: bool| -> String {
            let s = &a[k];
            let q = if queued {
                format!(" + queued {}", fmt(s.get("queued")))
            } else {
                String::new()
            };
            format!(
                "in {} = out {} + dropped {}{q}: {} (dropped: {})",
                fmt(s.get("in")),
                fmt(s.get("out")),
                fmt(s.get("dropped_total")),
                if s["balanced"].as_bool() == Some(true) {
                    "balanced"
                } else {
                    "NOT BALANCED"
                },
                nonzero(s.get("dropped")),
            )
        };
        out.push_str("\naccounting (packets; datagrams for bundles):\n");
        out.push_str(&format!("  send:      {}\n", side("send", true)));
        out.push_str(&format!("  receive:   {}\n", side("receive", false)));
        out.push_str(&format!(
            "  bundles:   {}\n",
            side("receive_datagrams", false)
        ));
        out.push_str(&format!(
            "  before the daemon: tun_queue_drops={} rx_queue_drops={}\n",
            fmt(a.pointer("/before_daemon/tun_queue_drops")),
            fmt(a.pointer("/before_daemon/rx_queue_drops")),
        ));
    }
    if let Some(g) = doc.get("gateway") {
        out.push_str(&gateway_lines(g));
    }
    out.push_str(&downlink_human(doc));
    // A node running only a downlink role steers no [[class]] traffic: the
    // aggregation note would only confuse.
    let downlink_only =
        (doc.get("ap").is_some() || doc.get("station").is_some()) && peers.is_empty();
    if let Some(note) = match_note(doc).filter(|_| !downlink_only) {
        out.push('\n');
        out.push_str(&note);
        out.push('\n');
    }
    out
}

/// The gateway role's lines of `airpack stats` (`[gateway]`).
fn gateway_lines(g: &Value) -> String {
    let n = |p: &str| g.pointer(p).map_or("-".to_owned(), |v| v.to_string());
    let map = |p: &str| -> String {
        match g.pointer(p) {
            Some(Value::Object(m)) => m
                .iter()
                .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
            _ => String::new(),
        }
    };
    let mos = g
        .get("network_mos")
        .and_then(Value::as_f64)
        .map_or("none".to_owned(), |m| format!("{m:.2}"));
    format!(
        "\ngateway ({}):\n  network MOS {mos} over {} calls ({} tracked) | TCP rate {} bit/s (kernel {}), share {} | last band {}\n  decisions: {}\n  flows: paced {} active {} | {}\n  dropped: {}\n  ignored: {}\n",
        g.get("interface").and_then(Value::as_str).unwrap_or("?"),
        n("/calls_with_mos"),
        n("/calls"),
        n("/tcp_rate_bps"),
        n("/htb_tcp_rate_bps"),
        n("/tcp_share_bps"),
        g.get("last_band").and_then(Value::as_str).unwrap_or("-"),
        map("/decisions"),
        n("/flows_paced"),
        n("/flows_active"),
        map("/flows"),
        map("/dropped"),
        map("/ignored"),
    )
}

/// The `ap` and `station` lines of `airpack stats` (empty when neither role runs).
pub fn downlink_human(doc: &Value) -> String {
    let mut out = String::new();
    let n = |v: &Value, p: &str| {
        v.pointer(p)
            .map(|x| x.to_string().trim_matches('"').to_owned())
            .unwrap_or_else(|| "-".into())
    };
    let nonzero = |v: Option<&Value>| -> String {
        let parts: Vec<String> = v
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter(|(_, x)| x.as_u64().unwrap_or(0) > 0)
                    .map(|(k, x)| format!("{k}={x}"))
                    .collect()
            })
            .unwrap_or_default();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(" ")
        }
    };
    if let Some(a) = doc.get("ap") {
        out.push_str(&format!(
            "\nap:             stations={} streams={} frames={} packets in={} multiplexed={} pending={} passed={} bytes saved={}\n",
            n(a, "/stations"),
            n(a, "/streams"),
            n(a, "/frames"),
            n(a, "/packets_in"),
            n(a, "/packets"),
            n(a, "/packets_pending"),
            n(a, "/packets_passed"),
            n(a, "/bytes_saved"),
        ));
        out.push_str(&format!(
            "  unicast:      {}\n  drops:        {}\n  leases:       registered={} renewed={} unregistered={} expired={}\n  rejected:     {}\n",
            nonzero(a.get("unicast")),
            nonzero(a.get("drops")),
            n(a, "/registrations/registered"),
            n(a, "/registrations/renewed"),
            n(a, "/registrations/unregistered"),
            n(a, "/lease_expiries"),
            nonzero(a.pointer("/registrations/rejected")),
        ));
        if a.get("loss_rule").is_some() {
            out.push_str(&format!(
                "  loss_rule:    on unicast={} reports={} (rejected {}) to unicast={} back={} trials={} held by airtime={}\n",
                n(a, "/loss_rule/stations_unicast"),
                n(a, "/loss_rule/reports"),
                n(a, "/loss_rule/reports_rejected"),
                n(a, "/loss_rule/to_unicast"),
                n(a, "/loss_rule/to_multicast"),
                n(a, "/loss_rule/probes"),
                n(a, "/loss_rule/held_by_airtime"),
            ));
            out.push_str(&format!(
                "  loss_start:   started on unicast={} trials={} cleared={} trial packets={}\n",
                n(a, "/loss_rule/started_unicast"),
                n(a, "/loss_rule/start_trials"),
                n(a, "/loss_rule/start_cleared"),
                n(a, "/loss_rule/trial_packets"),
            ));
        }
    }
    if let Some(s) = doc.get("station") {
        out.push_str(&format!(
            "\nstation:        ap={} registered={} streams={} frames={} (lost {}) packets={} written={} for others={}\n",
            n(s, "/ap"),
            n(s, "/registered"),
            n(s, "/streams"),
            n(s, "/frames"),
            n(s, "/lost_frames"),
            n(s, "/packets"),
            n(s, "/packets_written"),
            n(s, "/packets_for_others"),
        ));
        out.push_str(&format!(
            "  frame drops:  {}\n  packet drops: {}\n",
            nonzero(s.pointer("/drops/frames")),
            nonzero(s.pointer("/drops/packets")),
        ));
    }
    out
}

/// A human table of a peers JSON document (what `airpack peers` prints).
pub fn human_peers(doc: &Value) -> String {
    let mut out = format!(
        "{:<28} {:<10} {:<8} {:>8} {:>6} {:>10} {:>10} {:>8}  allowed_ips\n",
        "peer", "encoding", "bundles?", "hold_us", "max", "packets_in", "bundles", "ratio"
    );
    let empty = Vec::new();
    for p in doc.get("peers").and_then(Value::as_array).unwrap_or(&empty) {
        let s = |k: &str| {
            p.get(k)
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| v.to_string())
                })
                .unwrap_or_default()
        };
        let ips: Vec<String> = p
            .get("allowed_ips")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        out.push_str(&format!(
            "{:<28} {:<10} {:<8} {:>8} {:>6} {:>10} {:>10} {:>8.2}  {}\n",
            s("peer"),
            s("encoding"),
            s("accepts_bundles"),
            s("hold_time_us"),
            s("max_size"),
            s("packets_in"),
            s("bundles"),
            p.get("aggregation_ratio")
                .and_then(Value::as_f64)
                .unwrap_or(1.0),
            ips.join(",")
        ));
    }
    if let Some(list) = doc.get("stations").and_then(Value::as_array) {
        out.push_str(&format!(
            "\n{:<28} {:>8} {:>6} {:>10}  ports (stream ids)\n",
            "station (ap role)", "streams", "auto", "lease_s"
        ));
        for st in list {
            let runs: Vec<String> = st
                .get("runs")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|r| {
                            format!(
                                "{} ({}{})",
                                r["ports"].as_str().unwrap_or("?"),
                                r["first_stream_id"],
                                if r["multiplexed"] == true {
                                    ""
                                } else {
                                    ", waiting"
                                }
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            out.push_str(&format!(
                "{:<28} {:>8} {:>6} {:>10.1}  {}\n",
                st["station"].as_str().unwrap_or("?"),
                st["streams"],
                st["auto"],
                st["lease_left_s"].as_f64().unwrap_or(0.0),
                runs.join(" ")
            ));
        }
    }
    if let Some(st) = doc.get("station") {
        let ports: Vec<String> = st
            .get("streams")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|p| format!("{} ({})", p["port"], p["stream_id"]))
                    .collect()
            })
            .unwrap_or_default();
        out.push_str(&format!(
            "\nstation role: ap {} as {}, registered {}, ports (stream ids): {}\n",
            st["ap"].as_str().unwrap_or("?"),
            st["address"].as_str().unwrap_or("?"),
            st["registered"],
            if ports.is_empty() {
                "none".into()
            } else {
                ports.join(" ")
            }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Value {
        let mut c = Counters {
            packets_in: 100,
            aggregated_packets: 90,
            bundles: 9,
            unaggregated_packets: 10,
            ..Default::default()
        };
        c.dropped[DropReason::QueueBytes.index()] = 3;
        c.decode_errors[DecodeError::Truncated.index()] = 2;
        let mut total = counters_json(&c);
        let mut d = DaemonCounters {
            rx_spoofed_source: 4,
            ..Default::default()
        };
        d.send_error(&std::io::Error::from_raw_os_error(libc::ENOBUFS), 1);
        total.insert("daemon".into(), daemon_json(&d));
        let mut peer = counters_json(&c);
        peer.insert("peer".into(), "10.0.0.2".into());
        json!({"version": "0.1.0", "mode": "hop-by-hop", "uptime_s": 1.5,
               "queued": {"packets": 1, "bytes": 60}, "total": total, "peers": [peer]})
    }

    #[test]
    fn streamed_document_equals_the_tree() {
        let doc = sample();
        let mut head = doc.as_object().unwrap().clone();
        let peers = match head.remove("peers") {
            Some(Value::Array(p)) => p,
            _ => panic!("sample has peers"),
        };
        assert!(!peers.is_empty());
        let mut out = Vec::new();
        write_with_peers(&mut out, &head, peers.len(), |i| peers[i].clone());
        let back: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, doc);
        let mut out = Vec::new();
        write_with_peers(&mut out, &head, 0, |_| unreachable!());
        let back: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(back["peers"], json!([]));
        assert_eq!(back["total"], doc["total"]);
    }

    #[test]
    fn json_has_contract_fields() {
        let v = sample();
        let t = &v["total"];
        for k in [
            "packets_in",
            "bytes_in",
            "aggregated_packets",
            "aggregated_bytes",
            "bundles",
            "bundle_wire_bytes",
            "unaggregated_packets",
            "unaggregated_bytes",
            "bypass_packets",
            "bypass_bytes",
            "sent_on_timeout",
            "sent_on_size",
            "sent_on_idle",
            "sent_on_flush",
            "bundles_received",
            "packets_received",
        ] {
            assert!(t[k].is_u64(), "total.{k} missing");
        }
        // (90 + 10) / (9 + 10)
        assert!((t["aggregation_ratio"].as_f64().unwrap() - 100.0 / 19.0).abs() < 1e-9);
        assert_eq!(t["average_aggregation"].as_f64().unwrap(), 10.0);
        assert_eq!(t["dropped"]["queue_bytes"], 3);
        assert_eq!(t["decode_errors"]["truncated"], 2);
        assert_eq!(t["daemon"]["rx_rejected"]["spoofed_source"], 4);
        assert_eq!(t["daemon"]["send_errors"]["enobufs"], 1);
        assert_eq!(t["daemon"]["tun_read"], 0);
        assert_eq!(v["peers"][0]["peer"], "10.0.0.2");
    }

    #[test]
    fn timer_lateness_quantiles() {
        let mut h = Histogram::new(TIMER_LATE_BOUNDS_US);
        assert_eq!(quantile(&h, 0.5), None);
        for v in [3, 4, 8, 40, 40, 40, 40, 40, 40, 900] {
            h.record(v);
        }
        assert_eq!(quantile(&h, 0.5), Some(50));
        assert_eq!(quantile(&h, 0.1), Some(5));
        assert_eq!(quantile(&h, 0.99), Some(1000));
        h.record(50_000);
        assert_eq!(quantile(&h, 1.0), None, "overflow bucket has no bound");
    }

    #[test]
    fn prometheus_text() {
        let text = prometheus(&sample());
        for want in [
            "airpack_packets_in_total 100\n",
            "airpack_dropped_total{reason=\"queue_bytes\"} 3\n",
            "airpack_daemon_rx_rejected_total{reason=\"spoofed_source\"} 4\n",
            "airpack_daemon_send_errors_total{errno=\"enobufs\"} 1\n",
            "airpack_peer_packets_in_total{peer=\"10.0.0.2\"} 100\n",
            "airpack_queued_packets 1\n",
            "# TYPE airpack_packets_in_total counter\n",
            "# TYPE airpack_queued_packets gauge\n",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        // Every line is a comment, `name{labels} value` or `name value`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (name, val) = line.rsplit_once(' ').unwrap();
            assert!(name.starts_with("airpack_"), "{line}");
            assert!(val.parse::<f64>().is_ok() || val == "+Inf", "{line}");
        }
    }

    #[test]
    fn human_tables() {
        let v = sample();
        let s = human_stats(&v);
        assert!(s.contains("10.0.0.2"), "{s}");
        assert!(s.contains("queue_bytes=3"), "{s}");
        assert!(s.contains("spoofed_source=4"), "{s}");
        let p = human_peers(
            &json!({"peers": [{"peer": "10.0.0.2", "encoding": "native", "allowed_ips": ["10.1.0.0/24"]}]}),
        );
        assert!(p.contains("10.0.0.2") && p.contains("10.1.0.0/24"), "{p}");
    }

    /// A stats document whose `total` has these engine and daemon counters.
    fn doc_with(c: &Counters, d: &DaemonCounters) -> Value {
        let mut total = counters_json(c);
        total.insert("daemon".into(), daemon_json(d));
        json!({"version": "0.1.0", "mode": "hop-by-hop", "total": total, "peers": []})
    }

    #[test]
    fn stats_say_when_nothing_matched_a_class() {
        // Fresh daemon, nothing steered (the kernel's own ND on the TUN does not count).
        let d = DaemonCounters {
            tun_read: 2,
            tun_ignored: 2,
            ..Default::default()
        };
        let doc = doc_with(&Counters::default(), &d);
        let text = human_stats(&doc);
        assert!(text.contains("note: nothing matched"), "{text}");
        assert!(text.contains("DSCP 46"), "{text}");
        // Matched, but every packet went out alone or past the engine.
        let c = Counters {
            packets_in: 7,
            unaggregated_packets: 5,
            bypass_packets: 2,
            ..Default::default()
        };
        let d = DaemonCounters {
            tun_read: 10,
            passthrough: 3,
            ..Default::default()
        };
        let note = match_note(&doc_with(&c, &d)).unwrap();
        assert!(
            note.contains("10 packets matched")
                && note.contains("5 sent alone")
                && note.contains("2 bypass")
                && note.contains("3 passthrough"),
            "{note}"
        );
        // Bundling: no note.
        let c = Counters {
            packets_in: 10,
            aggregated_packets: 10,
            bundles: 2,
            ..Default::default()
        };
        let d = DaemonCounters {
            tun_read: 10,
            ..Default::default()
        };
        assert_eq!(match_note(&doc_with(&c, &d)), None);
        assert!(!human_stats(&doc_with(&c, &d)).contains("note:"));
        assert_eq!(match_note(&sample()), None);
    }
}
