//! `[ap]` and `[station]`: the two downlink-multiplexing roles (issue 14,
//! seed 002) in the daemon's configuration file, their checks, and their
//! validated forms ([`ApPlan`], [`StationPlan`]) for the runtime.
//!
//! Owns: these two sections' keys, defaults and error messages. Must not
//! touch: the other sections (checked in the parent module), sockets, the
//! kernel. Either role may be configured alone (no `[[peer]]` needed) or
//! beside the aggregation role.

use super::{spec_range, valid_ifname, Config, Located, Spec, Transport};
use crate::linux::Match;
use airpack_core::auth::Key;
use airpack_core::downlink::airtime::{CellPhy, Rate};
use airpack_core::downlink::lease::LeaseConfig;
use airpack_core::downlink::loss::LossConfig;
use airpack_core::downlink::mux::{Format, MuxConfig, MIN_FRAME};
use airpack_core::downlink::register::Ports;
use airpack_core::downlink::{MAX_FRAME, MAX_STREAM_ID};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Frame layout, as written in the file.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FormatCfg {
    /// airpack's compact layout (IPv4 and IPv6, stream ids, RTP compression).
    #[default]
    Compact,
    /// The seed's layout (IPv4 only), for the seed's stations.
    Seed,
}

impl From<FormatCfg> for Format {
    fn from(f: FormatCfg) -> Format {
        match f {
            FormatCfg::Compact => Format::Compact,
            FormatCfg::Seed => Format::Seed,
        }
    }
}

/// Default multicast group of frames (the seed's).
pub const DEFAULT_GROUP: Ipv4Addr = Ipv4Addr::new(225, 0, 0, 10);
/// Default UDP port of frames (the seed's).
pub const DEFAULT_PORT: u16 = 8888;
/// Default DSCP of the AP's frames: EF (telephony; a WMM AP's AC_VO).
pub const DEFAULT_FRAME_DSCP: u8 = 46;
/// Default UDP port of registration messages at the AP.
pub const DEFAULT_REGISTRATION_PORT: u16 = 8889;
/// `ap.frame_copies` when unset in the compact layout with the airtime
/// rule on: two copies carried 24 G.729 calls in the emulated 802.11b cell
/// where one carried 15 (docs/results.md, "Frame copies").
pub const DEFAULT_COPIES: u8 = 2;

/// `[ap]`: multiplex the downlink RTP of registered stations into one frame
/// per interval, sent to a multicast group on the interfaces facing them.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ApSection {
    /// Run the AP role.
    pub enabled: bool,
    /// Interfaces facing the stations (frames are sent on each of them).
    pub interfaces: Vec<String>,
    /// Multicast group frames are sent to.
    pub group: IpAddr,
    /// UDP port of frames (source and destination).
    pub port: u16,
    /// Send frames to this unicast ADDR:PORT instead of the group (one-station tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unicast: Option<String>,
    /// Frame layout.
    pub format: FormatCfg,
    /// Longest time a packet waits for its frame, ms.
    pub interval_ms: u32,
    /// Largest frame (UDP payload), bytes.
    pub max_frame: usize,
    /// Send a frame holding one packet at once when the medium is idle
    /// (the frame sockets' queue is empty), as the aggregation engine does.
    pub idle_release: bool,
    /// UDP port of the registration server.
    pub registration_port: u16,
    /// Pre-shared key of the cell, 32 hexadecimal digits (required).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Id of `key` in registration messages.
    pub key_id: u16,
    /// Most stations with a lease (and remembered replay windows).
    pub max_stations: usize,
    /// Most streams (registered ports) in total.
    pub max_streams: usize,
    /// Longest lease granted, s.
    pub max_lease_secs: u16,
    /// Most ports one range registration may ask for.
    pub max_range: u16,
    /// UDP destination ports steered to the daemon (registered ports must lie
    /// in it; "auto" registrations pick up streams in it).
    pub media_ports: Spec,
    /// Rate (Mbit/s) of unicast frames to the stations; with
    /// `multicast_rate`, turns on the airtime rule (a frame is sent only
    /// when it takes less airtime than its packets as unicast).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unicast_rate: Option<f64>,
    /// Rate (Mbit/s) the AP sends group-addressed frames at (its multicast
    /// or lowest basic rate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multicast_rate: Option<f64>,
    /// 802.11b PLCP preamble of the cell, "long" or "short" (OFDM rates: ignored).
    pub preamble: PreambleCfg,
    /// Each frame also carries the previous frame's packets when it has
    /// room (compact only): a station that lost that frame recovers them.
    /// `true` / `false`, or a depth 0-4 (the last D frames' packets).
    pub redundancy: RedundancyCfg,
    /// With redundancy: when the previous frame's whole block does not fit,
    /// repeat a rotating window of its packets, as many as fit.
    pub redundancy_partial: bool,
    /// Times each frame is sent, 1-4 (compact only): the copies carry the
    /// same sequence number, a station takes the first it gets; a frame is
    /// lost only when every copy collides (802.11aa's unsolicited retries).
    /// Unset: 2 in the compact layout with the airtime rule on (it sends a
    /// frame only as many times as still cost less than unicast), else 1.
    pub frame_copies: Option<u8>,
    /// Serve a station by unicast while the multicast loss it reports is
    /// above `loss_limit_pct` (airpack_core::downlink::loss).
    pub loss_aware: bool,
    /// Smoothed share of frames a station may miss (after redundancy's
    /// recovery) before its packets go unicast, %.
    pub loss_limit_pct: f64,
    /// It returns to the frame below this, % (hysteresis; < the limit).
    pub loss_clear_pct: f64,
    /// First trial back in the frame after this long on unicast, s
    /// (doubling after each failed trial, up to 8x).
    pub loss_probe_secs: u16,
    /// The loss rule's airtime guard: a station moves to unicast only while
    /// the cell's estimated voice airtime stays within this share of the
    /// channel (needs `unicast_rate` and `multicast_rate`).
    pub loss_airtime_budget: f64,
    /// A newly leased station starts on unicast (if the airtime guard
    /// allows it) and joins the frame after a clean loss report (ignored
    /// without `loss_aware`). On by default: a station still unmeasured
    /// 1 s after its start gets a trial (its packets in the frame and by
    /// unicast) so it can report; `false` starts new stations in the frame.
    pub loss_start_unicast: bool,
    /// DSCP (0-63) of the frames (and SO_PRIORITY 256 + its 802.11 user
    /// priority on the frame and fallback sockets, unless 0): 46 = EF, which
    /// a WMM AP sends on its AC_VO queue (`crate::linux::wmm`).
    pub frame_dscp: u8,
    /// Before each frame (not its further copies) send a guard: an empty
    /// UDP datagram to the frames' group at port 9 (discard), which no
    /// station takes (a unicast destination gets none). On a WMM AP whose
    /// own voice queue waits fewer slots than any station's
    /// (docs/operator-guide.md), a station whose access meets the AP's in
    /// one slot collides with the guard, and the frame that follows the busy
    /// medium goes first: no frame collides.
    pub frame_guard: bool,
    /// Share of its smoothed loss sums a station keeps at each report
    /// (0 ..< 1; about 1 / (1 - keep) reports of memory): higher values
    /// let a short burst move a station less easily.
    pub loss_keep: f64,
    /// Frames of evidence (smoothed expected frames) before the rule
    /// decides for a station (1-100000).
    pub loss_min_frames: u32,
}

/// `ap.redundancy` as written: `false` / `true` (depth 0 / 1, the first
/// version's switch), or a depth (how many previous frames each frame
/// repeats when it has room).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum RedundancyCfg {
    /// Off (`false`) or depth 1 (`true`).
    Flag(bool),
    /// Depth 0..=`compact::MAX_DEPTH`.
    Depth(u8),
}

impl Default for RedundancyCfg {
    fn default() -> Self {
        RedundancyCfg::Flag(false)
    }
}

impl RedundancyCfg {
    /// The depth (0: off).
    pub fn depth(self) -> u8 {
        match self {
            RedundancyCfg::Flag(b) => u8::from(b),
            RedundancyCfg::Depth(d) => d,
        }
    }
}

/// 802.11b PLCP preamble, as written in the file.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PreambleCfg {
    /// 192 µs.
    #[default]
    Long,
    /// 96 µs (not at 1 Mbit/s).
    Short,
}

impl Default for ApSection {
    fn default() -> Self {
        ApSection {
            enabled: false,
            interfaces: Vec::new(),
            group: IpAddr::V4(DEFAULT_GROUP),
            port: DEFAULT_PORT,
            unicast: None,
            format: FormatCfg::Compact,
            interval_ms: 20,
            max_frame: 1440,
            idle_release: true,
            registration_port: DEFAULT_REGISTRATION_PORT,
            key: None,
            key_id: 1,
            max_stations: 256,
            max_streams: 1024,
            max_lease_secs: 600,
            max_range: 128,
            media_ports: Spec::Str("16384-32767".into()),
            unicast_rate: None,
            multicast_rate: None,
            preamble: PreambleCfg::Long,
            redundancy: RedundancyCfg::Flag(false),
            redundancy_partial: false,
            frame_copies: None,
            loss_aware: true,
            loss_limit_pct: 1.0,
            loss_clear_pct: 0.5,
            loss_probe_secs: 30,
            loss_airtime_budget: LossConfig::default().airtime_budget,
            loss_start_unicast: LossConfig::default().start_unicast,
            frame_dscp: DEFAULT_FRAME_DSCP,
            frame_guard: false,
            loss_keep: LossConfig::default().keep,
            loss_min_frames: LossConfig::default().min_frames,
        }
    }
}

/// `[station]`: register media ports with the AP and rebuild this
/// station's packets from the AP's frames.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StationSection {
    /// Run the station role.
    pub enabled: bool,
    /// Interface facing the AP (the group is joined on it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// The AP's address: registrations go to it, frames are accepted only from it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ap: Option<IpAddr>,
    /// Multicast group of frames (a unicast address: frames arrive by unicast).
    pub group: IpAddr,
    /// UDP port of frames.
    pub port: u16,
    /// Frame layout the AP sends.
    pub format: FormatCfg,
    /// The AP's registration port.
    pub registration_port: u16,
    /// Pre-shared key of the cell, 32 hexadecimal digits (required).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Id of `key`.
    pub key_id: u16,
    /// Media ports to register: a port, "first-last", or "auto".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ports: Option<Spec>,
    /// Lease asked for, s.
    pub lease_secs: u16,
    /// Renew the lease every this many seconds (less than `lease_secs`).
    pub renew_secs: u16,
    /// Report the frames received and missed to the AP every this many
    /// seconds (its loss rule, `ap.loss_aware`); 0: never.
    pub report_secs: u16,
}

impl Default for StationSection {
    fn default() -> Self {
        StationSection {
            enabled: false,
            interface: None,
            ap: None,
            group: IpAddr::V4(DEFAULT_GROUP),
            port: DEFAULT_PORT,
            format: FormatCfg::Compact,
            registration_port: DEFAULT_REGISTRATION_PORT,
            key: None,
            key_id: 1,
            ports: None,
            lease_secs: 60,
            renew_secs: 20,
            report_secs: 1,
        }
    }
}

/// Where the AP sends frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// A multicast group (TTL / hop limit 1) on each AP interface.
    Group(SocketAddr),
    /// One unicast address.
    Unicast(SocketAddr),
}

/// The validated `[ap]`.
#[derive(Clone, Debug)]
pub struct ApPlan {
    /// Interfaces facing the stations.
    pub interfaces: Vec<String>,
    /// Frames' destination.
    pub destination: Destination,
    /// UDP source port of frames.
    pub port: u16,
    /// Registration server port.
    pub registration_port: u16,
    /// Key and its id.
    pub key: Key,
    /// Key id.
    pub key_id: u16,
    /// Steered UDP destination ports.
    pub media_ports: (u16, u16),
    /// The multiplexer's configuration.
    pub mux: MuxConfig,
    /// The lease table's configuration.
    pub lease: LeaseConfig,
    /// The loss rule's configuration.
    pub loss: LossConfig,
    /// DSCP of the frames (0-63; 0: unmarked, default priority).
    pub frame_dscp: u8,
    /// A guard datagram before each frame (`ap.frame_guard`).
    pub frame_guard: bool,
}

/// The validated `[station]`.
#[derive(Clone, Debug)]
pub struct StationPlan {
    /// Interface facing the AP.
    pub interface: String,
    /// The AP's address.
    pub ap: IpAddr,
    /// Frames' group (or a unicast address: no join).
    pub group: IpAddr,
    /// Frames' UDP port.
    pub port: u16,
    /// Frame layout.
    pub format: Format,
    /// The AP's registration server.
    pub registration: SocketAddr,
    /// Key.
    pub key: Key,
    /// Key id.
    pub key_id: u16,
    /// Ports registered.
    pub ports: Ports,
    /// Lease asked for, s.
    pub lease_secs: u16,
    /// Renew interval, s.
    pub renew_secs: u16,
    /// Loss report interval, s (0: none).
    pub report_secs: u16,
}

impl ApPlan {
    /// The steering rule that brings `media_ports` (UDP destination ports)
    /// into the daemon; [`super::Plan::steer_spec`] puts it first.
    pub fn steer_rule(&self) -> Match {
        Match {
            steer: true,
            protocol: Some(17),
            ports: None,
            src_ports: None,
            dst_ports: Some(self.media_ports),
            dscp: None,
            len: None,
            version: None,
            mark: None,
        }
    }
}

fn key(at: &Located<'_>, section: &str, k: &Option<String>) -> anyhow::Result<Key> {
    match k {
        Some(k) => Key::from_hex(k).map_err(|e| at.err(section, 0, "key", e.to_string())),
        None => Err(at.err(
            section,
            0,
            "key",
            "is required: registrations are always authenticated (32 hexadecimal digits, the same at the AP and its stations)",
        )),
    }
}

/// Ports of a `[station] ports` value: a port, "first-last" or "auto".
pub fn parse_ports(s: &Spec) -> Result<Ports, String> {
    if matches!(s, Spec::Str(t) if t.trim().eq_ignore_ascii_case("auto")) {
        return Ok(Ports::Auto);
    }
    let r =
        spec_range(s, 65_535).map_err(|m| format!("{m} (a port, \"first-last\" or \"auto\")"))?;
    let (a, b) = (*r.start() as u16, *r.end() as u16);
    if a == 0 {
        return Err("port 0 cannot be registered".into());
    }
    Ok(if a == b {
        Ports::Single(a)
    } else {
        Ports::Range(a, b)
    })
}

/// Checks `[ap]` (when enabled, except the key's syntax).
pub(super) fn check_ap(at: &Located<'_>, config: &Config) -> anyhow::Result<Option<ApPlan>> {
    let s = &config.ap;
    let e = |k: &str, m: String| at.err("ap", 0, k, m);
    if let Some(k) = &s.key {
        Key::from_hex(k).map_err(|err| e("key", err.to_string()))?;
    }
    if !s.enabled {
        return Ok(None);
    }
    let key = key(at, "ap", &s.key)?;
    for i in &s.interfaces {
        if !valid_ifname(i) || *i == config.daemon.tun {
            return Err(e(
                "interfaces",
                format!("{i:?} is not a valid interface facing the stations"),
            ));
        }
    }
    let destination = match &s.unicast {
        Some(u) => {
            let a: SocketAddr = u.parse().map_err(|_| {
                e(
                    "unicast",
                    format!("{u:?} is not ADDR:PORT (e.g. \"10.0.0.5:8888\")"),
                )
            })?;
            if a.ip().is_multicast() || a.ip().is_unspecified() || a.port() == 0 {
                return Err(e(
                    "unicast",
                    format!("{a} is not a unicast address with a port"),
                ));
            }
            Destination::Unicast(a)
        }
        None => {
            if !s.group.is_multicast() {
                return Err(e(
                    "group",
                    format!("{} is not a multicast group (or set ap.unicast)", s.group),
                ));
            }
            if s.interfaces.is_empty() {
                return Err(e(
                    "interfaces",
                    "needs at least one interface facing the stations (frames go to the group on each)".into(),
                ));
            }
            Destination::Group(SocketAddr::new(s.group, s.port))
        }
    };
    if s.port == 0 {
        return Err(e("port", "must be non-zero".into()));
    }
    if s.registration_port == 0 || s.registration_port == s.port {
        return Err(e(
            "registration_port",
            format!("{} must be non-zero and not ap.port", s.registration_port),
        ));
    }
    let d = &config.daemon;
    for (p, what) in [(s.port, "port"), (s.registration_port, "registration_port")] {
        if (d.transport == Transport::Udp && p == d.udp_port)
            || (config.discovery.enabled && p == config.discovery.port)
        {
            return Err(e(
                what,
                format!("{p} is already daemon.udp_port or discovery.port"),
            ));
        }
    }
    if !(1..=1000).contains(&s.interval_ms) {
        return Err(e(
            "interval_ms",
            format!("{} must be in 1-1000", s.interval_ms),
        ));
    }
    if !(MIN_FRAME..=MAX_FRAME).contains(&s.max_frame) {
        return Err(e(
            "max_frame",
            format!("{} must be in {MIN_FRAME}-{MAX_FRAME}", s.max_frame),
        ));
    }
    if !(1..=65_536).contains(&s.max_stations) {
        return Err(e(
            "max_stations",
            format!("{} must be in 1-65536", s.max_stations),
        ));
    }
    let max_sid = usize::from(MAX_STREAM_ID) + 1;
    if !(1..=max_sid).contains(&s.max_streams) {
        return Err(e(
            "max_streams",
            format!("{} must be in 1-{max_sid}", s.max_streams),
        ));
    }
    if s.max_lease_secs == 0 {
        return Err(e("max_lease_secs", "must be in 1-65535".into()));
    }
    if s.max_range == 0 {
        return Err(e("max_range", "must be in 1-65535".into()));
    }
    let media = spec_range(&s.media_ports, 65_535).map_err(|m| e("media_ports", m))?;
    let media_ports = (*media.start() as u16, *media.end() as u16);
    if media_ports.0 == 0 {
        return Err(e("media_ports", "must not include port 0".into()));
    }
    for p in [s.port, s.registration_port] {
        if (media_ports.0..=media_ports.1).contains(&p) {
            return Err(e(
                "media_ports",
                format!(
                    "{}-{} includes the AP's own port {p}",
                    media_ports.0, media_ports.1
                ),
            ));
        }
    }
    let short = s.preamble == PreambleCfg::Short;
    let rate = |k: &str, r: f64| {
        Rate::of(r, short).ok_or_else(|| {
            e(
                k,
                format!("{r} is not an 802.11 rate (1, 2, 5.5, 11; 6, 9, 12, 18, 24, 36, 48, 54)"),
            )
        })
    };
    let airtime = match (s.unicast_rate, s.multicast_rate) {
        (None, None) => None,
        (Some(u), Some(m)) => Some(CellPhy {
            unicast: rate("unicast_rate", u)?,
            multicast: rate("multicast_rate", m)?,
        }),
        (Some(_), None) => {
            return Err(e(
                "multicast_rate",
                "is required with unicast_rate (the airtime rule needs both rates)".into(),
            ))
        }
        (None, Some(_)) => {
            return Err(e(
                "unicast_rate",
                "is required with multicast_rate (the airtime rule needs both rates)".into(),
            ))
        }
    };
    let frame_overhead = match destination {
        Destination::Group(a) | Destination::Unicast(a) if a.is_ipv6() => 48,
        _ => 28,
    };
    let depth = s.redundancy.depth();
    if usize::from(depth) > airpack_core::downlink::compact::MAX_DEPTH {
        return Err(e(
            "redundancy",
            format!(
                "{depth} must be true, false or a depth 0-{}",
                airpack_core::downlink::compact::MAX_DEPTH
            ),
        ));
    }
    if s.redundancy_partial && depth == 0 {
        return Err(e(
            "redundancy_partial",
            "needs ap.redundancy (a depth of at least 1)".into(),
        ));
    }
    if depth > 0 && s.format == FormatCfg::Seed {
        return Err(e(
            "redundancy",
            "needs format = \"compact\" (the seed layout has no repeat block)".into(),
        ));
    }
    // Unset: copies only where the airtime rule can price them (a copy
    // of a large frame at a low multicast rate would lower capacity).
    let copies = s.frame_copies.unwrap_or(match (s.format, airtime) {
        (FormatCfg::Compact, Some(_)) => DEFAULT_COPIES,
        _ => 1,
    });
    if !(1..=airpack_core::downlink::mux::MAX_COPIES).contains(&copies) {
        return Err(e(
            "frame_copies",
            format!(
                "{} must be in 1-{}",
                copies,
                airpack_core::downlink::mux::MAX_COPIES
            ),
        ));
    }
    if copies > 1 && s.format == FormatCfg::Seed {
        return Err(e(
            "frame_copies",
            "needs format = \"compact\" (the seed layout has no sequence number)".into(),
        ));
    }
    let mux = MuxConfig {
        redundancy: depth,
        copies,
        partial_repeat: s.redundancy_partial,
        airtime,
        frame_overhead,
        format: s.format.into(),
        interval: u64::from(s.interval_ms) * 1000,
        max_frame: s.max_frame,
        max_streams: s.max_streams,
        idle_release: s.idle_release,
        // Packets are taken at the egress of the interfaces facing the
        // stations: the kernel has already forwarded them (TTL decremented).
        ttl_decrement: 0,
        ..MuxConfig::default()
    };
    let lease = LeaseConfig {
        max_leases: s.max_stations,
        max_streams: s.max_streams,
        max_lease_secs: s.max_lease_secs,
        max_range: s.max_range,
        auto_ports: media_ports,
        ..LeaseConfig::default()
    };
    let limit = s.loss_limit_pct;
    if !(limit > 0.0 && limit <= 100.0) {
        return Err(e(
            "loss_limit_pct",
            format!("{limit} must be above 0 and at most 100"),
        ));
    }
    if !(s.loss_clear_pct >= 0.0 && s.loss_clear_pct < limit) {
        return Err(e(
            "loss_clear_pct",
            format!(
                "{} must be at least 0 and below loss_limit_pct ({limit})",
                s.loss_clear_pct
            ),
        ));
    }
    if !(1..=3600).contains(&s.loss_probe_secs) {
        return Err(e(
            "loss_probe_secs",
            format!("{} must be in 1-3600", s.loss_probe_secs),
        ));
    }
    if !(s.loss_airtime_budget > 0.0 && s.loss_airtime_budget <= 4.0) {
        return Err(e(
            "loss_airtime_budget",
            format!("{} must be above 0 and at most 4", s.loss_airtime_budget),
        ));
    }
    if s.frame_dscp > 63 {
        return Err(e(
            "frame_dscp",
            format!("{} must be in 0-63 (46 = EF, voice)", s.frame_dscp),
        ));
    }
    if !(s.loss_keep >= 0.0 && s.loss_keep < 1.0) {
        return Err(e(
            "loss_keep",
            format!("{} must be at least 0 and below 1", s.loss_keep),
        ));
    }
    if !(1..=100_000).contains(&s.loss_min_frames) {
        return Err(e(
            "loss_min_frames",
            format!("{} must be in 1-100000", s.loss_min_frames),
        ));
    }
    let probe = u64::from(s.loss_probe_secs) * 1_000_000;
    let loss = LossConfig {
        enabled: s.loss_aware,
        limit: limit / 100.0,
        clear: s.loss_clear_pct / 100.0,
        probe,
        max_probe: probe * 8,
        max_stations: s.max_stations,
        airtime_budget: s.loss_airtime_budget,
        start_unicast: s.loss_start_unicast,
        keep: s.loss_keep,
        min_frames: s.loss_min_frames,
        ..LossConfig::default()
    };
    Ok(Some(ApPlan {
        interfaces: s.interfaces.clone(),
        destination,
        port: s.port,
        registration_port: s.registration_port,
        key,
        key_id: s.key_id,
        media_ports,
        mux,
        lease,
        loss,
        frame_dscp: s.frame_dscp,
        frame_guard: s.frame_guard,
    }))
}

/// Checks `[station]` (when enabled, except the key's syntax).
pub(super) fn check_station(
    at: &Located<'_>,
    config: &Config,
) -> anyhow::Result<Option<StationPlan>> {
    let s = &config.station;
    let e = |k: &str, m: String| at.err("station", 0, k, m);
    if let Some(k) = &s.key {
        Key::from_hex(k).map_err(|err| e("key", err.to_string()))?;
    }
    if !s.enabled {
        return Ok(None);
    }
    let key = key(at, "station", &s.key)?;
    let interface = match &s.interface {
        Some(i) if valid_ifname(i) && *i != config.daemon.tun => i.clone(),
        Some(i) => {
            return Err(e(
                "interface",
                format!("{i:?} is not a valid interface facing the AP"),
            ))
        }
        None => {
            return Err(e(
                "interface",
                "is required (the interface facing the AP)".into(),
            ))
        }
    };
    let ap = match s.ap {
        Some(a) if !(a.is_unspecified() || a.is_multicast() || a.is_loopback()) => a,
        Some(a) => return Err(e("ap", format!("{a} is not the AP's unicast address"))),
        None => return Err(e("ap", "is required (the AP's address)".into())),
    };
    if s.group.is_unspecified() || s.group.is_ipv4() != ap.is_ipv4() {
        return Err(e(
            "group",
            format!(
                "{} must be a group (or address) of the AP's family",
                s.group
            ),
        ));
    }
    if s.port == 0 {
        return Err(e("port", "must be non-zero".into()));
    }
    if s.registration_port == 0 {
        return Err(e("registration_port", "must be non-zero".into()));
    }
    if s.format == FormatCfg::Seed && !ap.is_ipv4() {
        return Err(e(
            "format",
            "\"seed\" frames carry IPv4 only; use \"compact\"".into(),
        ));
    }
    let ports = match &s.ports {
        Some(p) => parse_ports(p).map_err(|m| e("ports", m))?,
        None => {
            return Err(e(
                "ports",
                "is required: a port, \"first-last\" or \"auto\"".into(),
            ))
        }
    };
    if s.lease_secs == 0 {
        return Err(e("lease_secs", "must be in 1-65535".into()));
    }
    if s.renew_secs == 0 || s.renew_secs >= s.lease_secs {
        return Err(e(
            "renew_secs",
            format!(
                "{} must be in 1-{} (less than lease_secs)",
                s.renew_secs,
                s.lease_secs - 1
            ),
        ));
    }
    Ok(Some(StationPlan {
        interface,
        ap,
        group: s.group,
        port: s.port,
        format: s.format.into(),
        registration: SocketAddr::new(ap, s.registration_port),
        key,
        key_id: s.key_id,
        ports,
        lease_secs: s.lease_secs,
        renew_secs: s.renew_secs,
        report_secs: s.report_secs,
    }))
}

#[cfg(test)]
#[path = "downlink_tests.rs"]
mod tests;
