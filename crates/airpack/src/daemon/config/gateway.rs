//! `[gateway]`: the voice-adaptive gateway pacer role (issue 12, seed 003)
//! in the daemon's configuration file, its checks and its validated form
//! ([`GatewayPlan`]) for the runtime.
//!
//! Owns: the section's keys, defaults and error messages, and the two rule
//! lists `[[gateway.voice]]` (which packets are voice: observed for the
//! Voice Protection Module and put in the priority class) and
//! `[[gateway.tcp]]` (which TCP is paced). Rules have the fields of a
//! `[[class]]` rule without `class` and `mark`, and are checked by the same
//! helpers into the same types (the core's [`Rule`] for the daemon's own
//! matching, the kernel [`Match`] for the classic BPF programs).
//!
//! Must not touch: the other sections, sockets, the kernel. The role may run
//! alone (no `[[peer]]`) or beside the others.

use super::validate::MatchFields;
use super::{valid_ifname, Config, Located, Spec};
use crate::linux::Match;
use airpack_core::engine::{Rule, TrafficClass};
use airpack_core::gateway::rate::{Mode, RateConfig};
use airpack_core::gateway::search::SearchConfig;
use airpack_core::gateway::tcp_flow::FlowConfig;
use airpack_core::gateway::tcp_recovery::RecoveryConfig;
use airpack_core::gateway::tim::TimConfig;
use airpack_voice::vpm::VpmConfig;
use serde::{Deserialize, Serialize};

/// One `[[gateway.voice]]` / `[[gateway.tcp]]` rule; every present field
/// must match (the fields of a `[[class]]` rule, without `class` and `mark`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GatewayRule {
    /// udp | tcp | a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Spec>,
    /// Either port in range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Spec>,
    /// Source port range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_ports: Option<Spec>,
    /// Destination port range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_ports: Option<Spec>,
    /// DSCP value or range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dscp: Option<Spec>,
    /// Packet length range in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub len: Option<Spec>,
    /// 4 or 6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u8>,
}

/// `[gateway]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GatewaySection {
    /// Run the gateway role.
    pub enabled: bool,
    /// Interface facing the mesh (voice observed there, TCP paced out of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// Rate of the interface's root class (Mbit/s): the ceiling of voice and
    /// of traffic that is neither voice nor paced TCP.
    pub link_rate_mbps: f64,
    /// Which rate controller: `search` (default) or `seed` (the seed's
    /// Algorithm 1, one band step per period).
    pub controller: String,
    /// Rate controller period, ms.
    pub period_ms: u64,
    /// `search`: how long a rate must hold before the MOS reflects it (no
    /// second cut within it, small increases at most once per it), ms.
    pub settle_ms: u64,
    /// `search`: how long a rate must hold before a fast increase, ms.
    pub probe_ms: u64,
    /// `search`: fast increase far below the remembered bad rate (0.5 = +50 %).
    pub fast_up: f64,
    /// `search`: until a bad rate is known, the first increases past the
    /// start add at most this (0.25 = +25 %).
    pub first_up: f64,
    /// `search`: the start when calls appear, kbit/s of TCP per active call
    /// (0: `initial_rate_kbps` at most).
    pub start_per_call_kbps: u64,
    /// `search`: within this fraction below the bad rate, small steps.
    pub near: f64,
    /// `search`: the remembered bad rate holds this long, then doubles every
    /// this long, ms.
    pub bad_memory_ms: u64,
    /// TCP rate at start, kbit/s.
    pub initial_rate_kbps: u64,
    /// Lowest TCP rate, kbit/s.
    pub min_rate_kbps: u64,
    /// Highest TCP rate, kbit/s.
    pub max_rate_kbps: u64,
    /// MOS at or above which the rate grows by `r_good`.
    pub q_good: f64,
    /// MOS at or above which (below `q_good`) the rate grows by `r_fair`.
    pub q_fair: f64,
    /// MOS at or above which (below `q_fair`) the rate holds.
    pub q_poor: f64,
    /// MOS at or above which (below `q_poor`) the rate falls by `r_poor`;
    /// below it, by `r_choke`.
    pub q_choke: f64,
    /// Adjustment in the good band (0.05 = +5 %).
    pub r_good: f64,
    /// Adjustment in the fair band.
    pub r_fair: f64,
    /// Adjustment in the poor band (negative).
    pub r_poor: f64,
    /// Adjustment in the choke band (negative).
    pub r_choke: f64,
    /// Sliding window of the per-call loss and of "active call", ms.
    pub mos_window_ms: u64,
    /// Which call's MOS is the network's when the rank rule is off: 0 = the
    /// worst, 0.5 = the median. Setting it turns the rank rule off (unless
    /// `mos_rank_base` is set too: refused). Default: [`default_percentile`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mos_percentile: Option<f64>,
    /// The rank rule: the network MOS is the `k`-th worst call's,
    /// `k = 1 + floor(log_b n)` of `n` calls (`airpack_voice::vpm::rank`);
    /// 0 = off (`mos_percentile`). Default: [`default_rank_base`] (4 for
    /// `search`: the 2nd worst of 4-15 calls, the 3rd of 16-63; off for
    /// `seed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mos_rank_base: Option<u32>,
    /// Playout buffer assumed at the listener, ms (later packets are lost).
    pub playout_ms: f64,
    /// One-way delay outside the mesh added to the E-model delay, ms.
    pub wired_delay_ms: f64,
    /// Most calls tracked.
    pub max_calls: usize,
    /// A call silent this long is forgotten, ms.
    pub call_idle_ms: u64,
    /// Most paced TCP flows with their own class; more share one class.
    pub max_flows: usize,
    /// A paced flow whose class moved no byte this long is forgotten, ms.
    pub flow_idle_ms: u64,
    /// Packets each paced flow's queue holds (kernel pfifo limit).
    pub flow_queue_packets: u32,
    /// Run the TCP Improvement Module: paced TCP and its ACKs pass through
    /// the daemon (steered into `tcp_tun`).
    pub tcp_improvement: bool,
    /// Base name of the TCP Improvement Module's two TUN devices
    /// (`<tcp_tun>i` into the mesh, `<tcp_tun>o` out of it).
    pub tcp_tun: String,
    /// Queue-aware window: below this many queued packets per flow the
    /// window opens to `q_max` (seed 2).
    pub q_min: u32,
    /// Queue-aware window: above this many the window shrinks to `q_min`
    /// (and to 0 while the TCP share is 0) (seed 6).
    pub q_max: u32,
    /// Data segments kept per flow for local recovery.
    pub recovery_segments: usize,
    /// Retransmit from the gateway on the third duplicate ACK.
    pub local_recovery: bool,
    /// Drop the server's retransmissions of data the client acknowledged.
    pub redundant_drop: bool,
    /// Rewrite the advertised window of the client's ACKs.
    pub window_control: bool,
    /// `[[gateway.voice]]`: voice packets (observed, priority class).
    pub voice: Vec<GatewayRule>,
    /// `[[gateway.tcp]]`: TCP that is paced (protocol tcp is implied).
    pub tcp: Vec<GatewayRule>,
}

/// Default voice rule: UDP in the usual RTP/RTCP port range.
pub fn default_voice() -> Vec<GatewayRule> {
    vec![GatewayRule {
        protocol: Some(Spec::Str("udp".into())),
        ports: Some(Spec::Str("16384-32767".into())),
        ..GatewayRule::default()
    }]
}

/// The network MOS's percentile of calls when `mos_percentile` is not set
/// and the rank rule is off: the worst call (the seed's VPM) for either
/// controller. (The search controller reads the rank rule by default,
/// [`default_rank_base`]; before it, the 25th percentile, which on the ns-3
/// air at 1 hop never saw the 3 of 40 calls that failed: docs/gateway.md,
/// "Which call the network MOS reads".)
pub fn default_percentile(_mode: Mode) -> f64 {
    0.0
}

/// The rank rule's base when neither `mos_rank_base` nor `mos_percentile`
/// is set: 4 for `search` (the worst of 1-3 calls, the 2nd worst of 4-15,
/// the 3rd of 16-63, the 4th of 64-255; docs/gateway.md, "Which call the
/// network MOS reads"), off (0) for `seed` (the worst call, the seed's VPM).
pub fn default_rank_base(mode: Mode) -> u32 {
    match mode {
        Mode::Seed => 0,
        Mode::Search => 4,
    }
}

/// Default TCP rule: every TCP flow.
pub fn default_tcp() -> Vec<GatewayRule> {
    vec![GatewayRule {
        protocol: Some(Spec::Str("tcp".into())),
        ..GatewayRule::default()
    }]
}

impl Default for GatewaySection {
    fn default() -> Self {
        let r = RateConfig::default();
        let sc = SearchConfig::default();
        let v = VpmConfig::default();
        GatewaySection {
            enabled: false,
            interface: None,
            link_rate_mbps: 1000.0,
            controller: "search".into(),
            period_ms: 1000,
            settle_ms: sc.settle_us / 1000,
            probe_ms: sc.probe_us / 1000,
            fast_up: sc.fast_up,
            first_up: sc.first_up,
            start_per_call_kbps: sc.start_per_call_bps / 1000,
            near: sc.near,
            bad_memory_ms: sc.bad_memory_us / 1000,
            initial_rate_kbps: r.initial_bps / 1000,
            min_rate_kbps: 64,
            max_rate_kbps: 100_000,
            q_good: r.q_good,
            q_fair: r.q_fair,
            q_poor: r.q_poor,
            q_choke: r.q_choke,
            r_good: r.r_good,
            r_fair: r.r_fair,
            r_poor: r.r_poor,
            r_choke: r.r_choke,
            mos_window_ms: v.window_us / 1000,
            mos_percentile: None,
            mos_rank_base: None,
            playout_ms: v.playout_ms,
            wired_delay_ms: v.wired_delay_ms,
            max_calls: 1024,
            call_idle_ms: v.idle_timeout_us / 1000,
            max_flows: 64,
            flow_idle_ms: 10_000,
            flow_queue_packets: 64,
            tcp_improvement: false,
            tcp_tun: "airpackgw".into(),
            q_min: 2,
            q_max: 6,
            recovery_segments: 64,
            local_recovery: true,
            redundant_drop: true,
            window_control: true,
            voice: default_voice(),
            tcp: default_tcp(),
        }
    }
}

/// The validated `[gateway]`.
#[derive(Clone, Debug)]
pub struct GatewayPlan {
    /// Interface facing the mesh.
    pub interface: String,
    /// Root class rate, bit/s.
    pub link_rate_bps: u64,
    /// The rate controller's settings (rates in bit/s, period in µs).
    pub rate: RateConfig,
    /// The Voice Protection Module's settings.
    pub vpm: VpmConfig,
    /// Voice rules, for the daemon's own matching.
    pub voice_rules: Vec<Rule>,
    /// Voice rules, for the classic BPF programs (all `steer`).
    pub voice_matches: Vec<Match>,
    /// TCP rules (protocol 6 forced), for the daemon's matching of SYNs.
    pub tcp_rules: Vec<Rule>,
    /// TCP rules, for the kernel filter of TCP outside the flow table.
    pub tcp_matches: Vec<Match>,
    /// Most flows with their own class.
    pub max_flows: usize,
    /// Flow idle timeout, µs.
    pub flow_idle_us: u64,
    /// Per-flow queue, packets.
    pub flow_queue_packets: u32,
    /// The TCP Improvement Module, when enabled.
    pub tim: Option<TimPlan>,
}

/// The TCP Improvement Module's settings (`gateway.tcp_improvement = true`).
#[derive(Clone, Debug)]
pub struct TimPlan {
    /// Its TUN device.
    pub tun: String,
    /// The core module's settings (flow slots = `max_flows`).
    pub config: TimConfig,
}

/// Most paced flows with their own class (one HTB class and one filter each).
pub const MAX_FLOWS: usize = 4096;

fn rule(
    at: &Located<'_>,
    section: &str,
    i: usize,
    r: &GatewayRule,
    force_tcp: bool,
) -> anyhow::Result<(Rule, Match)> {
    let e = |key: &str, m: String| at.err(section, i, key, m);
    let f = MatchFields::parse(
        &e,
        r.version,
        r.protocol.as_ref(),
        [&r.ports, &r.src_ports, &r.dst_ports],
        r.dscp.as_ref(),
        r.len.as_ref(),
        force_tcp,
    )?;
    Ok((
        f.rule(TrafficClass::Bundle, None),
        f.steer_match(true, None),
    ))
}

/// `[gateway]` checks; `None` when the role is off.
pub(super) fn check_gateway(
    at: &Located<'_>,
    config: &Config,
) -> anyhow::Result<Option<GatewayPlan>> {
    let g = &config.gateway;
    if !g.enabled {
        return Ok(None);
    }
    let e = |key: &str, m: String| at.err("gateway", 0, key, m);
    let interface = match &g.interface {
        Some(i) if valid_ifname(i) => i.clone(),
        Some(i) => {
            return Err(e(
                "interface",
                format!("{i:?} is not a valid interface name"),
            ))
        }
        None => {
            return Err(e(
                "interface",
                "required: the interface facing the mesh".into(),
            ))
        }
    };
    if interface == config.daemon.tun {
        return Err(e(
            "interface",
            format!("{interface:?} is the TUN device itself"),
        ));
    }
    if !(g.link_rate_mbps.is_finite() && (0.1..=100_000.0).contains(&g.link_rate_mbps)) {
        return Err(e(
            "link_rate_mbps",
            format!("{} must be in 0.1-100000", g.link_rate_mbps),
        ));
    }
    let link_rate_bps = (g.link_rate_mbps * 1e6).round() as u64;
    if !(10..=3_600_000).contains(&g.period_ms) {
        return Err(e(
            "period_ms",
            format!("{} must be in 10-3600000", g.period_ms),
        ));
    }
    let mode = match g.controller.as_str() {
        "search" => Mode::Search,
        "seed" => Mode::Seed,
        o => {
            return Err(e(
                "controller",
                format!("{o:?}: use \"search\" or \"seed\""),
            ))
        }
    };
    for (key, v) in [
        ("settle_ms", g.settle_ms),
        ("probe_ms", g.probe_ms),
        ("bad_memory_ms", g.bad_memory_ms),
    ] {
        if !(10..=3_600_000).contains(&v) {
            return Err(e(key, format!("{v} must be in 10-3600000")));
        }
    }
    if !(g.fast_up.is_finite() && (0.0..=10.0).contains(&g.fast_up)) {
        return Err(e("fast_up", format!("{} must be in 0-10", g.fast_up)));
    }
    if !(g.first_up.is_finite() && (0.0..=10.0).contains(&g.first_up)) {
        return Err(e("first_up", format!("{} must be in 0-10", g.first_up)));
    }
    if g.start_per_call_kbps > 100_000 {
        return Err(e(
            "start_per_call_kbps",
            format!("{} must be at most 100000", g.start_per_call_kbps),
        ));
    }
    if !(g.near.is_finite() && (0.0..0.9).contains(&g.near)) {
        return Err(e("near", format!("{} must be in 0-0.9", g.near)));
    }
    if g.min_rate_kbps == 0 {
        return Err(e(
            "min_rate_kbps",
            "must be at least 1 (a paced class needs a rate)".into(),
        ));
    }
    if g.min_rate_kbps > g.max_rate_kbps {
        return Err(e(
            "min_rate_kbps",
            format!(
                "{} is above max_rate_kbps {}",
                g.min_rate_kbps, g.max_rate_kbps
            ),
        ));
    }
    if g.max_rate_kbps.saturating_mul(1000) > link_rate_bps {
        return Err(e(
            "max_rate_kbps",
            format!(
                "{} kbit/s is above link_rate_mbps {}",
                g.max_rate_kbps, g.link_rate_mbps
            ),
        ));
    }
    if !(g.min_rate_kbps..=g.max_rate_kbps).contains(&g.initial_rate_kbps) {
        return Err(e(
            "initial_rate_kbps",
            format!(
                "{} must be in min_rate_kbps-max_rate_kbps ({}-{})",
                g.initial_rate_kbps, g.min_rate_kbps, g.max_rate_kbps
            ),
        ));
    }
    let rate = RateConfig {
        q_good: g.q_good,
        q_fair: g.q_fair,
        q_poor: g.q_poor,
        q_choke: g.q_choke,
        r_good: g.r_good,
        r_fair: g.r_fair,
        r_hold: 0.0,
        r_poor: g.r_poor,
        r_choke: g.r_choke,
        period_us: g.period_ms * 1000,
        floor_bps: g.min_rate_kbps * 1000,
        ceiling_bps: g.max_rate_kbps * 1000,
        initial_bps: g.initial_rate_kbps * 1000,
        restart_bps: g.min_rate_kbps * 1000,
        mode,
        search: SearchConfig {
            settle_us: g.settle_ms * 1000,
            probe_us: g.probe_ms * 1000,
            fast_up: g.fast_up,
            first_up: g.first_up,
            near: g.near,
            bad_memory_us: g.bad_memory_ms * 1000,
            start_per_call_bps: g.start_per_call_kbps * 1000,
        },
    };
    use airpack_core::gateway::rate::RateConfigError as R;
    match rate.validate() {
        Ok(()) => {}
        Err(R::Thresholds) => {
            return Err(e(
                "q_good",
                format!(
                    "thresholds must be finite and descending: q_good {} > q_fair {} > q_poor {} > q_choke {}",
                    g.q_good, g.q_fair, g.q_poor, g.q_choke
                ),
            ))
        }
        Err(R::Adjustments) => {
            return Err(e(
                "r_good",
                format!(
                    "adjustments must be descending, r_good and r_fair >= 0, r_poor and r_choke in -1..=0: {} {} {} {}",
                    g.r_good, g.r_fair, g.r_poor, g.r_choke
                ),
            ))
        }
        Err(R::Bounds) => return Err(e("period_ms", "invalid period or rate bounds".into())),
        Err(R::Search) => return Err(e("settle_ms", "invalid search settings".into())),
    }
    if !(100..=600_000).contains(&g.mos_window_ms) {
        return Err(e(
            "mos_window_ms",
            format!("{} must be in 100-600000", g.mos_window_ms),
        ));
    }
    let percentile = g.mos_percentile.unwrap_or(default_percentile(mode));
    if !(percentile.is_finite() && (0.0..=1.0).contains(&percentile)) {
        return Err(e(
            "mos_percentile",
            format!("{percentile} must be in 0-1 (0 = the worst call)"),
        ));
    }
    let rank_base = match (g.mos_rank_base, g.mos_percentile) {
        (Some(b), Some(_)) if b != 0 => {
            return Err(e(
                "mos_rank_base",
                format!("{b} and mos_percentile both set: set one (0 = use mos_percentile)"),
            ))
        }
        (Some(b), _) => b,
        (None, Some(_)) => 0,
        (None, None) => default_rank_base(mode),
    };
    if rank_base == 1 || rank_base > 1024 {
        return Err(e(
            "mos_rank_base",
            format!("{rank_base} must be 0 (off) or 2-1024"),
        ));
    }
    for (key, v) in [
        ("playout_ms", g.playout_ms),
        ("wired_delay_ms", g.wired_delay_ms),
    ] {
        if !(v.is_finite() && (0.0..=10_000.0).contains(&v)) {
            return Err(e(key, format!("{v} must be in 0-10000")));
        }
    }
    if !(1..=65_536).contains(&g.max_calls) {
        return Err(e(
            "max_calls",
            format!("{} must be in 1-65536", g.max_calls),
        ));
    }
    if g.call_idle_ms < g.mos_window_ms {
        return Err(e(
            "call_idle_ms",
            format!(
                "{} must be at least mos_window_ms {}",
                g.call_idle_ms, g.mos_window_ms
            ),
        ));
    }
    if !(1..=MAX_FLOWS).contains(&g.max_flows) {
        return Err(e(
            "max_flows",
            format!("{} must be in 1-{MAX_FLOWS}", g.max_flows),
        ));
    }
    if g.flow_idle_ms < 2 * g.period_ms {
        return Err(e(
            "flow_idle_ms",
            format!(
                "{} must be at least two periods ({} ms): idleness is read once per period",
                g.flow_idle_ms,
                2 * g.period_ms
            ),
        ));
    }
    if !(1..=100_000).contains(&g.flow_queue_packets) {
        return Err(e(
            "flow_queue_packets",
            format!("{} must be in 1-100000", g.flow_queue_packets),
        ));
    }
    if !valid_ifname(&g.tcp_tun) || g.tcp_tun.len() > 14 {
        return Err(e(
            "tcp_tun",
            format!(
                "{:?} must be 1-14 characters of [A-Za-z0-9._-] (the devices add i and o)",
                g.tcp_tun
            ),
        ));
    }
    if [format!("{}i", g.tcp_tun), format!("{}o", g.tcp_tun)].contains(&interface) {
        return Err(e(
            "tcp_tun",
            "its devices must differ from gateway.interface".into(),
        ));
    }
    if !(1..=1000).contains(&g.q_min) || !(g.q_min..=1000).contains(&g.q_max) {
        return Err(e(
            "q_max",
            format!(
                "q_min {} and q_max {} must satisfy 1 <= q_min <= q_max <= 1000",
                g.q_min, g.q_max
            ),
        ));
    }
    if !(1..=4096).contains(&g.recovery_segments) {
        return Err(e(
            "recovery_segments",
            format!("{} must be in 1-4096", g.recovery_segments),
        ));
    }
    if g.voice.is_empty() {
        return Err(e("voice", "at least one [[gateway.voice]] rule".into()));
    }
    if g.tcp.is_empty() {
        return Err(e("tcp", "at least one [[gateway.tcp]] rule".into()));
    }
    let mut voice_rules = Vec::new();
    let mut voice_matches = Vec::new();
    for (i, r) in g.voice.iter().enumerate() {
        let (r, m) = rule(at, "gateway.voice", i, r, false)?;
        if r.protocol != Some(17) {
            return Err(at.err(
                "gateway.voice",
                i,
                "protocol",
                "voice rules must say protocol = \"udp\" (RTP and RTCP)",
            ));
        }
        voice_rules.push(r);
        voice_matches.push(m);
    }
    let mut tcp_rules = Vec::new();
    let mut tcp_matches = Vec::new();
    for (i, r) in g.tcp.iter().enumerate() {
        let (r, m) = rule(at, "gateway.tcp", i, r, true)?;
        tcp_rules.push(r);
        tcp_matches.push(m);
    }
    let vpm = VpmConfig {
        max_calls: g.max_calls,
        idle_timeout_us: g.call_idle_ms * 1000,
        window_us: g.mos_window_ms * 1000,
        percentile,
        rank_base,
        playout_ms: g.playout_ms,
        wired_delay_ms: g.wired_delay_ms,
        ..VpmConfig::default()
    };
    Ok(Some(GatewayPlan {
        interface,
        link_rate_bps,
        rate,
        vpm,
        voice_rules,
        voice_matches,
        tcp_rules,
        tcp_matches,
        max_flows: g.max_flows,
        flow_idle_us: g.flow_idle_ms * 1000,
        flow_queue_packets: g.flow_queue_packets,
        tim: g.tcp_improvement.then(|| TimPlan {
            tun: g.tcp_tun.clone(),
            config: TimConfig {
                flows: FlowConfig {
                    max_flows: g.max_flows,
                    idle_timeout_us: g.flow_idle_ms * 1000,
                    q_min: g.q_min,
                    q_max: g.q_max,
                    ..FlowConfig::default()
                },
                recovery: RecoveryConfig {
                    max_flows: g.max_flows,
                    segments: g.recovery_segments,
                    ..RecoveryConfig::default()
                },
                local_recovery: g.local_recovery,
                redundant_drop: g.redundant_drop,
                window_control: g.window_control,
                compensate_hop: true,
            },
        }),
    }))
}

#[cfg(test)]
#[path = "gateway_tests.rs"]
mod tests;
