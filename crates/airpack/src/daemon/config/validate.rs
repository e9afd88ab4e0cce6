//! Validation: every cross-key rule of the configuration, checked with an
//! error that names the key and line, and the conversion of a valid
//! [`super::Config`] into the [`super::Plan`] (engine and peer configs,
//! classifier rules, steering rules, role plans).

use super::*;

pub fn validate(name: &str, src: Option<&str>, config: Config) -> anyhow::Result<Plan> {
    let at = Located { path: name, src };
    let d = &config.daemon;
    let a = &config.aggregation;

    if !valid_ifname(&d.tun) {
        return Err(at.err(
            "daemon",
            0,
            "tun",
            format!(
                "{:?} is not a valid interface name (1-15 of [A-Za-z0-9-_.])",
                d.tun
            ),
        ));
    }
    if !(576..=65_535).contains(&d.tun_mtu) {
        return Err(at.err(
            "daemon",
            0,
            "tun_mtu",
            format!("{} must be in 576-65535", d.tun_mtu),
        ));
    }
    if !(16..=1_000_000).contains(&d.tun_txqueuelen) {
        return Err(at.err(
            "daemon",
            0,
            "tun_txqueuelen",
            format!("{} must be in 16-1000000", d.tun_txqueuelen),
        ));
    }
    for i in &d.interfaces {
        if !valid_ifname(i) {
            return Err(at.err(
                "daemon",
                0,
                "interfaces",
                format!("{i:?} is not a valid interface name"),
            ));
        }
    }
    if d.control_socket.as_os_str().is_empty() {
        return Err(at.err("daemon", 0, "control_socket", "must not be empty"));
    }
    if d.bypass_mark == 0 {
        return Err(at.err("daemon", 0, "bypass_mark", "must be non-zero"));
    }
    if d.filter_priority == 0 {
        return Err(at.err("daemon", 0, "filter_priority", "must be in 1-65535"));
    }
    if d.interfaces.contains(&d.tun) {
        return Err(at.err(
            "daemon",
            0,
            "interfaces",
            format!("{:?} is the TUN device itself", d.tun),
        ));
    }
    if d.sched_priority > 99 {
        return Err(at.err(
            "daemon",
            0,
            "sched_priority",
            format!(
                "{} must be 0 (normal) or 1-99 (SCHED_FIFO)",
                d.sched_priority
            ),
        ));
    }
    if d.transport == Transport::Udp && d.udp_port == 0 {
        return Err(at.err(
            "daemon",
            0,
            "udp_port",
            "must be non-zero with transport = \"udp\"",
        ));
    }
    let prometheus = match &d.prometheus {
        None => None,
        Some(s) => Some(s.parse::<std::net::SocketAddr>().map_err(|_| {
            at.err(
                "daemon",
                0,
                "prometheus",
                format!("{s:?} is not ADDR:PORT (e.g. \"127.0.0.1:9477\")"),
            )
        })?),
    };

    if matches!(a.protocol, 0 | 1 | 4 | 6 | 17 | 41 | 58 | 255) {
        return Err(at.err(
            "aggregation",
            0,
            "protocol",
            format!(
                "{} is a protocol the kernel or other traffic uses; pick an unused one such as 253",
                a.protocol
            ),
        ));
    }
    check_sizes(
        &at,
        "aggregation",
        0,
        a.min_size,
        a.max_size,
        a.max_packets,
        a.hold_time_us,
        a.queue_limit_bytes,
        a.queue_limit_packets,
    )?;
    if a.max_peers == 0 || a.max_peers > 65_536 {
        return Err(at.err(
            "aggregation",
            0,
            "max_peers",
            format!("{} must be in 1-65536", a.max_peers),
        ));
    }
    if a.bypass_queue_limit == 0 || a.bypass_queue_limit > 65_536 {
        return Err(at.err(
            "aggregation",
            0,
            "bypass_queue_limit",
            format!("{} must be in 1-65536", a.bypass_queue_limit),
        ));
    }
    if a.dynamic_marking {
        return Err(at.err("aggregation", 0, "dynamic_marking", NO_MARKS));
    }

    check_discovery(&at, &config)?;
    // Syntax checked by check_discovery.
    let bundle_key = config
        .discovery
        .key
        .as_deref()
        .and_then(|k| airpack_core::auth::Key::from_hex(k).ok());
    let keyed = bundle_key.is_some();
    check_medium(&at, &config)?;
    let ap = downlink::check_ap(&at, &config)?;
    let station = downlink::check_station(&at, &config)?;
    let gateway = gateway::check_gateway(&at, &config)?;

    // Classes.
    let mut rules = Vec::new();
    let mut steer = Vec::new();
    for (i, c) in config.classes.iter().enumerate() {
        let e = |key: &str, m: String| at.err("class", i, key, m);
        let f = MatchFields::parse(
            &e,
            c.version,
            c.protocol.as_ref(),
            [&c.ports, &c.src_ports, &c.dst_ports],
            c.dscp.as_ref(),
            c.len.as_ref(),
            false,
        )?;
        let mark = c
            .mark
            .as_ref()
            .map(spec_mark)
            .transpose()
            .map_err(|m| e("mark", m))?;
        if mark.is_some() {
            return Err(e("mark", NO_MARKS.into()));
        }
        let class: TrafficClass = c.class.into();
        rules.push(f.rule(class, mark));
        steer.push(f.steer_match(class != TrafficClass::Bypass, mark));
    }

    // Peers.
    let link_mode_cfg = a.link_mode.unwrap_or(LinkModeCfg::default_for(d.mode));
    let link_mode = match link_mode_cfg {
        LinkModeCfg::Fixed => LinkMode::Fixed,
        LinkModeCfg::HoldWhileBusy => LinkMode::HoldWhileBusy,
        LinkModeCfg::Adaptive => LinkMode::Adaptive(airpack_core::engine::AdaptiveHold {
            delay_budget: config.medium.delay_budget_us,
            busy_utilisation: (config.medium.busy_utilisation * 1000.0).round() as u16,
        }),
    };
    let base = PeerConfig {
        encoding: a.encoding.into(),
        accepts_bundles: true,
        hold_time: a.hold_time_us,
        min_size: a.min_size,
        max_size: a.max_size,
        max_packets: a.max_packets,
        outer_overhead: Plan::outer_overhead(d.transport, IpAddr::V4([0, 0, 0, 0].into()), keyed),
        queue_limit_bytes: a.queue_limit_bytes,
        queue_limit_packets: a.queue_limit_packets,
    };
    let mut peers: Vec<PeerPlan> = Vec::new();
    let mut table = Vec::new();
    for (i, p) in config.peers.iter().enumerate() {
        let e = |key: &str, m: String| at.err("peer", i, key, m);
        if p.address.ip.is_unspecified()
            || p.address.ip.is_multicast()
            || p.address.ip.is_loopback()
        {
            return Err(e(
                "address",
                format!(
                    "{} cannot be a peer (unspecified, multicast or loopback)",
                    p.address.ip
                ),
            ));
        }
        if peers.iter().any(|q| q.address == p.address.ip) {
            // Peers are keyed by address (also in the engine): the same
            // link-local address on two interfaces is refused too.
            return Err(e(
                "address",
                format!("{} is configured twice", p.address.ip),
            ));
        }
        if peers.len() >= a.max_peers {
            return Err(e(
                "address",
                format!("more peers than aggregation.max_peers = {}", a.max_peers),
            ));
        }
        let mut allowed = Vec::new();
        for s in &p.allowed_ips {
            let c = Cidr::parse(s).map_err(|m| e("allowed_ips", m))?;
            if let Some((_, other)) = table.iter().find(|(t, _): &&(Cidr, IpAddr)| *t == c) {
                return Err(e(
                    "allowed_ips",
                    format!("{c} is already routed to peer {other}"),
                ));
            }
            allowed.push(c);
            table.push((c, p.address.ip));
        }
        if d.mode == Mode::EndToEnd && allowed.is_empty() {
            return Err(e(
                "allowed_ips",
                format!(
                    "end-to-end mode needs allowed_ips for peer {}",
                    p.address.ip
                ),
            ));
        }
        let mut pc = base.clone();
        if let Some(x) = p.encoding {
            pc.encoding = x.into();
        }
        if let Some(x) = p.hold_time_us {
            pc.hold_time = x;
        }
        if let Some(x) = p.min_size {
            pc.min_size = x;
        }
        if let Some(x) = p.max_size {
            pc.max_size = x;
        }
        if let Some(x) = p.max_packets {
            pc.max_packets = x;
        }
        if let Some(x) = p.queue_limit_bytes {
            pc.queue_limit_bytes = x;
        }
        if let Some(x) = p.queue_limit_packets {
            pc.queue_limit_packets = x;
        }
        pc.outer_overhead = Plan::outer_overhead(d.transport, p.address.ip, keyed);
        check_sizes(
            &at,
            "peer",
            i,
            pc.min_size,
            pc.max_size,
            pc.max_packets,
            pc.hold_time,
            pc.queue_limit_bytes,
            pc.queue_limit_packets,
        )?;
        if pc.max_size <= pc.outer_overhead + 28 {
            return Err(e(
                "max_size",
                format!(
                    "{} leaves no room after the {}-byte outer header",
                    pc.max_size, pc.outer_overhead
                ),
            ));
        }
        peers.push(PeerPlan {
            address: p.address.ip,
            interface: p.address.interface.clone(),
            allowed_ips: allowed,
            config: pc,
        });
    }

    let source_check = d.source_check.unwrap_or(match d.mode {
        Mode::HopByHop => SourceCheck::Route,
        Mode::EndToEnd => SourceCheck::AllowedIps,
    });
    if source_check == SourceCheck::AllowedIps && peers.iter().any(|p| p.allowed_ips.is_empty()) {
        return Err(at.err(
            "daemon",
            0,
            "source_check",
            "\"allowed-ips\" needs allowed_ips on every peer",
        ));
    }

    let mut defaults = base;
    // Peers not configured never get bundles (never blackhole a node without airpack).
    defaults.accepts_bundles = false;
    let engine = EngineConfig {
        max_peers: a.max_peers,
        peer_defaults: defaults,
        link_mode,
        classifier: Classifier {
            rules,
            default: TrafficClass::Bypass,
        },
        dynamic_marking: a.dynamic_marking,
        bypass_queue_limit: a.bypass_queue_limit,
    };
    let mut config = config;
    config.aggregation.link_mode = Some(link_mode_cfg);
    Ok(Plan {
        engine,
        peers,
        allowed_ips: AllowedIps::new(table),
        steer,
        source_check,
        link_mode: link_mode_cfg,
        prometheus,
        ap,
        station,
        gateway,
        bundle_key,
        config,
    })
}

/// `[medium]` checks.
pub(super) fn check_medium(at: &Located<'_>, config: &Config) -> anyhow::Result<()> {
    let m = &config.medium;
    let e = |key: &str, msg: String| at.err("medium", 0, key, msg);
    if !(0.0..=1.0).contains(&m.busy_utilisation) {
        return Err(e(
            "busy_utilisation",
            format!("{} must be in 0-1", m.busy_utilisation),
        ));
    }
    if m.delay_budget_us > 1_000_000 {
        return Err(e(
            "delay_budget_us",
            format!("{} must be at most 1000000", m.delay_budget_us),
        ));
    }
    if !(100..=1_000_000).contains(&m.qdisc_interval_us) {
        return Err(e(
            "qdisc_interval_us",
            format!("{} must be in 100-1000000", m.qdisc_interval_us),
        ));
    }
    if !(100..=1_000_000).contains(&m.file_interval_us) {
        return Err(e(
            "file_interval_us",
            format!("{} must be in 100-1000000", m.file_interval_us),
        ));
    }
    if !(10_000..=10_000_000).contains(&m.survey_interval_us) {
        return Err(e(
            "survey_interval_us",
            format!("{} must be in 10000-10000000", m.survey_interval_us),
        ));
    }
    if m.file.as_deref() == Some("") {
        return Err(e("file", "must not be empty".into()));
    }
    Ok(())
}

/// `[discovery]` checks (only when enabled, except the key's syntax).
pub(super) fn check_discovery(at: &Located<'_>, config: &Config) -> anyhow::Result<()> {
    let d = &config.discovery;
    let e = |key: &str, m: String| at.err("discovery", 0, key, m);
    if let Some(k) = &d.key {
        airpack_core::auth::Key::from_hex(k).map_err(|err| e("key", err.to_string()))?;
    }
    if !d.enabled {
        return Ok(());
    }
    if config.daemon.mode != Mode::HopByHop {
        return Err(e(
            "enabled",
            "discovery needs daemon.mode = \"hop-by-hop\"".into(),
        ));
    }
    if config.daemon.interfaces.is_empty() {
        return Err(e(
            "enabled",
            "discovery needs daemon.interfaces (hellos are sent on each of them)".into(),
        ));
    }
    if d.port == 0
        || (config.daemon.transport == Transport::Udp && d.port == config.daemon.udp_port)
    {
        return Err(e(
            "port",
            format!("{} must be non-zero and not daemon.udp_port", d.port),
        ));
    }
    if d.group_v6.segments()[0] & 0xff0f != 0xff02 {
        return Err(e(
            "group_v6",
            format!(
                "{} is not a link-local multicast group (ff02::/16)",
                d.group_v6
            ),
        ));
    }
    if !d.group_v4.is_multicast() {
        return Err(e(
            "group_v4",
            format!("{} is not a multicast group", d.group_v4),
        ));
    }
    if !(100..=60_000).contains(&d.interval_ms) {
        return Err(e(
            "interval_ms",
            format!("{} must be in 100-60000", d.interval_ms),
        ));
    }
    if !(2..=10).contains(&d.hold_intervals) {
        return Err(e(
            "hold_intervals",
            format!("{} must be in 2-10", d.hold_intervals),
        ));
    }
    if !(1..=255).contains(&d.max_neighbors) {
        return Err(e(
            "max_neighbors",
            format!("{} must be in 1-255", d.max_neighbors),
        ));
    }
    if !(d.rate_mbps >= 0.1 && d.rate_mbps <= 100_000.0) {
        return Err(e(
            "rate_mbps",
            format!("{} must be in 0.1-100000", d.rate_mbps),
        ));
    }
    if !(100..=60_000).contains(&d.radio_interval_ms) {
        return Err(e(
            "radio_interval_ms",
            format!("{} must be in 100-60000", d.radio_interval_ms),
        ));
    }
    if !(-127..=0).contains(&d.noise_dbm) {
        return Err(e(
            "noise_dbm",
            format!("{} must be in -127..0", d.noise_dbm),
        ));
    }
    if d.radio_file.as_deref() == Some("") {
        return Err(e("radio_file", "must not be empty".into()));
    }
    let max = config.aggregation.max_size;
    if !(68..=max).contains(&d.min_size) {
        return Err(e(
            "min_size",
            format!("{} must be in 68-{max} (aggregation.max_size)", d.min_size),
        ));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(super) fn check_sizes(
    at: &Located<'_>,
    section: &str,
    i: usize,
    min_size: usize,
    max_size: usize,
    max_packets: usize,
    hold: u64,
    qb: usize,
    qp: usize,
) -> anyhow::Result<()> {
    if !(68..=65_535).contains(&max_size) {
        return Err(at.err(
            section,
            i,
            "max_size",
            format!("{max_size} must be in 68-65535"),
        ));
    }
    if min_size > max_size {
        return Err(at.err(
            section,
            i,
            "min_size",
            format!("{min_size} is larger than max_size = {max_size}"),
        ));
    }
    if max_packets == 0 || max_packets > airpack_core::wire::MAX_PACKETS_PER_BUNDLE {
        return Err(at.err(
            section,
            i,
            "max_packets",
            format!(
                "{max_packets} must be in 1-{}",
                airpack_core::wire::MAX_PACKETS_PER_BUNDLE
            ),
        ));
    }
    if hold > 1_000_000 {
        return Err(at.err(
            section,
            i,
            "hold_time_us",
            format!("{hold} µs is more than 1 s; voice is useless that late"),
        ));
    }
    if qb < max_size.min(1500) || qb > 16 << 20 {
        return Err(at.err(
            section,
            i,
            "queue_limit_bytes",
            format!(
                "{qb} must be in {}-16777216 (at least one full packet)",
                max_size.min(1500)
            ),
        ));
    }
    if qp == 0 || qp > 65_536 {
        return Err(at.err(
            section,
            i,
            "queue_limit_packets",
            format!("{qp} must be in 1-65536"),
        ));
    }
    Ok(())
}

/// The match fields of a `[[class]]` or `[gateway]` rule, parsed and
/// checked (errors name the key through `e`).
pub(super) struct MatchFields {
    version: Option<u8>,
    protocol: Option<u8>,
    ports: Option<RangeInclusive<u16>>,
    src_ports: Option<RangeInclusive<u16>>,
    dst_ports: Option<RangeInclusive<u16>>,
    dscp: Option<RangeInclusive<u8>>,
    len: Option<RangeInclusive<usize>>,
}

impl MatchFields {
    /// `ports` are `ports`, `src_ports`, `dst_ports`; `tcp_only` makes an
    /// absent protocol TCP and refuses any other (the gateway's paced rules).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn parse(
        e: &dyn Fn(&str, String) -> anyhow::Error,
        version: Option<u8>,
        protocol: Option<&Spec>,
        ports: [&Option<Spec>; 3],
        dscp: Option<&Spec>,
        len: Option<&Spec>,
        tcp_only: bool,
    ) -> anyhow::Result<MatchFields> {
        let version = match version {
            None => None,
            Some(v @ (4 | 6)) => Some(v),
            Some(v) => return Err(e("version", format!("{v} must be 4 or 6"))),
        };
        let mut protocol = protocol
            .map(spec_protocol)
            .transpose()
            .map_err(|m| e("protocol", m))?;
        if tcp_only {
            match protocol {
                None | Some(6) => protocol = Some(6),
                Some(p) => return Err(e("protocol", format!("{p}: only TCP is paced"))),
            }
        }
        let port = |key: &str, s: &Option<Spec>| -> anyhow::Result<Option<RangeInclusive<u16>>> {
            s.as_ref()
                .map(|s| spec_range(s, 65_535).map(|r| *r.start() as u16..=*r.end() as u16))
                .transpose()
                .map_err(|m| e(key, m))
        };
        let [p, sp, dp] = ports;
        let ports = port("ports", p)?;
        let src_ports = port("src_ports", sp)?;
        let dst_ports = port("dst_ports", dp)?;
        if (ports.is_some() || src_ports.is_some() || dst_ports.is_some())
            && !matches!(protocol, Some(6 | 17 | 132 | 136 | 33))
        {
            let key = if ports.is_some() {
                "ports"
            } else if src_ports.is_some() {
                "src_ports"
            } else {
                "dst_ports"
            };
            return Err(e(
                key,
                "port matches need protocol = \"udp\", \"tcp\", \"sctp\" or \"udplite\"".into(),
            ));
        }
        let dscp = dscp
            .map(|s| spec_range(s, 63).map(|r| *r.start() as u8..=*r.end() as u8))
            .transpose()
            .map_err(|m| e("dscp", m))?;
        let len = len
            .map(|s| spec_range(s, 65_535).map(|r| *r.start() as usize..=*r.end() as usize))
            .transpose()
            .map_err(|m| e("len", m))?;
        Ok(MatchFields {
            version,
            protocol,
            ports,
            src_ports,
            dst_ports,
            dscp,
            len,
        })
    }

    /// The engine's classifier rule.
    pub(super) fn rule(&self, class: TrafficClass, mark: Option<(u32, u32)>) -> Rule {
        Rule {
            class,
            version: self.version,
            protocol: self.protocol,
            src_ports: self.src_ports.clone(),
            dst_ports: self.dst_ports.clone(),
            ports: self.ports.clone(),
            dscp: self.dscp.clone(),
            len: self.len.clone(),
            mark,
        }
    }

    /// The kernel steering's match.
    pub(super) fn steer_match(&self, steer: bool, mark: Option<(u32, u32)>) -> Match {
        let pair = |r: &Option<RangeInclusive<u16>>| r.as_ref().map(|r| (*r.start(), *r.end()));
        Match {
            steer,
            protocol: self.protocol,
            ports: pair(&self.ports),
            src_ports: pair(&self.src_ports),
            dst_ports: pair(&self.dst_ports),
            dscp: self.dscp.as_ref().map(|r| (*r.start(), *r.end())),
            len: self
                .len
                .as_ref()
                .map(|r| (*r.start() as u16, *r.end() as u16)),
            version: self.version,
            mark,
        }
    }
}
