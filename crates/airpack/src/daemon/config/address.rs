//! Parsed and validated forms of the configuration: peer addresses (with
//! their interface scope), CIDR prefixes, allowed source prefixes, and the
//! [`Plan`] that `airpack run` executes. Pure data; built by `validate.rs`.

use super::*;
use airpack_core::prefix::PrefixTable;

/// A peer address as written: `10.0.0.2`, `fd00::2`, or a link-local IPv6
/// address with its interface, `fe80::2%wlan0` (the interface is required
/// for fe80::/10 and refused for any other address).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddress {
    /// The address.
    pub ip: IpAddr,
    /// The interface a link-local address is reached through.
    pub interface: Option<String>,
}

/// Whether `ip` is an IPv6 unicast link-local address (fe80::/10), the only
/// kind of peer address that needs an interface.
pub fn is_link_local_v6(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(a) if (a.segments()[0] & 0xffc0) == 0xfe80)
}

impl std::str::FromStr for PeerAddress {
    type Err = String;

    fn from_str(s: &str) -> Result<PeerAddress, String> {
        let (a, iface) = match s.split_once('%') {
            Some((a, i)) => (a, Some(i)),
            None => (s, None),
        };
        let ip: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address (ADDR or fe80::X%IFNAME)"))?;
        let interface = match iface {
            None => None,
            Some(i) => {
                if i.is_empty()
                    || i.len() > 15
                    || i.bytes()
                        .any(|b| b == b'/' || b == b'%' || b.is_ascii_whitespace() || b == 0)
                {
                    return Err(format!(
                        "{s:?}: bad interface name {i:?} (1 to 15 bytes, no '/', '%' or spaces)"
                    ));
                }
                Some(i.to_owned())
            }
        };
        match (is_link_local_v6(ip), &interface) {
            (true, None) => Err(format!(
                "{s:?} is link-local: name its interface, e.g. \"{ip}%wlan0\""
            )),
            (false, Some(_)) => Err(format!(
                "{s:?}: an %interface only applies to link-local IPv6 addresses (fe80::/10)"
            )),
            _ => Ok(PeerAddress { ip, interface }),
        }
    }
}

impl fmt::Display for PeerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.interface {
            Some(i) => write!(f, "{}%{i}", self.ip),
            None => write!(f, "{}", self.ip),
        }
    }
}

impl<'de> Deserialize<'de> for PeerAddress {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for PeerAddress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// An IP prefix (`10.1.0.0/24`, `fd00::/64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// Network address (host bits zero).
    pub addr: IpAddr,
    /// Prefix length.
    pub prefix: u8,
}

impl Cidr {
    /// Parses `ADDR/LEN` or a bare address (= host prefix). Host bits must be zero.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or prefix"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p
                .trim()
                .parse::<u8>()
                .map_err(|_| format!("{s:?}: bad prefix length"))?,
            None => max,
        };
        if prefix > max {
            return Err(format!("{s:?}: prefix length {prefix} > {max}"));
        }
        let c = Cidr { addr, prefix };
        if c.network() != addr {
            return Err(format!(
                "{s:?} has host bits set (did you mean {}/{prefix}?)",
                c.network()
            ));
        }
        Ok(c)
    }

    fn bits(addr: IpAddr) -> u128 {
        match addr {
            IpAddr::V4(a) => u32::from(a) as u128,
            IpAddr::V6(a) => u128::from(a),
        }
    }

    fn mask(&self) -> u128 {
        let width = if self.addr.is_ipv4() { 32 } else { 128 };
        if self.prefix == 0 {
            0
        } else {
            let ones = u128::MAX << (128 - self.prefix as u32);
            ones >> (128 - width)
        }
    }

    fn network(&self) -> IpAddr {
        let n = Self::bits(self.addr) & self.mask();
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4((n as u32).into()),
            IpAddr::V6(_) => IpAddr::V6(n.into()),
        }
    }

    /// Whether `ip` (same family) is inside the prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        if ip.is_ipv4() != self.addr.is_ipv4() {
            return false;
        }
        Self::bits(ip) & self.mask() == Self::bits(self.addr)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Longest-prefix match table over the peers' `allowed_ips` (end-to-end):
/// a trie for lookups ([`PrefixTable`]), the list for reports and routes.
#[derive(Clone, Debug, Default)]
pub struct AllowedIps {
    entries: Vec<(Cidr, IpAddr)>,
    trie: PrefixTable<IpAddr>,
}

impl AllowedIps {
    /// Builds the table; entries with longer prefixes win. Validation has
    /// refused a prefix claimed by two peers, so equal prefixes do not occur.
    pub fn new(mut entries: Vec<(Cidr, IpAddr)>) -> Self {
        entries.sort_by_key(|e| std::cmp::Reverse(e.0.prefix));
        let mut trie = PrefixTable::new();
        for (c, p) in &entries {
            trie.insert(c.addr, c.prefix, *p)
                .expect("validated prefix lengths, at most a few thousand prefixes");
        }
        AllowedIps { entries, trie }
    }
    /// The endpoint for `dst`, if any prefix contains it.
    pub fn lookup(&self, dst: IpAddr) -> Option<IpAddr> {
        self.trie.lookup(dst)
    }
    /// Every prefix with its endpoint, longest prefixes first.
    pub fn entries(&self) -> impl Iterator<Item = (Cidr, IpAddr)> + '_ {
        self.entries.iter().copied()
    }
    /// Number of prefixes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A configured peer, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerPlan {
    /// Its address.
    pub address: IpAddr,
    /// The interface of a link-local IPv6 address (`fe80::2%wlan0`).
    pub interface: Option<String>,
    /// Its prefixes (end-to-end).
    pub allowed_ips: Vec<Cidr>,
    /// Engine parameters for it (accepts_bundles = true).
    pub config: PeerConfig,
}

/// The validated configuration, in the forms the daemon uses.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The configuration as written (after overrides), with the effective
    /// `aggregation.link_mode` filled in.
    pub config: Config,
    /// The engine configuration (defaults for on-demand peers do not accept bundles).
    pub engine: EngineConfig,
    /// Configured peers.
    pub peers: Vec<PeerPlan>,
    /// End-to-end routing table.
    pub allowed_ips: AllowedIps,
    /// Steering rules in kernel form, in class order (bypass rules stop the chain).
    pub steer: Vec<Match>,
    /// Effective source check.
    pub source_check: SourceCheck,
    /// Effective link mode (`aggregation.link_mode`, else its mode's default;
    /// also written back into `config` so `--check` shows it).
    pub link_mode: LinkModeCfg,
    /// Prometheus address, parsed.
    pub prometheus: Option<std::net::SocketAddr>,
    /// `[ap]`, validated (None: role off).
    pub ap: Option<downlink::ApPlan>,
    /// `[station]`, validated (None: role off).
    pub station: Option<downlink::StationPlan>,
    /// `[gateway]`, validated (None: role off).
    pub gateway: Option<gateway::GatewayPlan>,
    /// The mesh key (`discovery.key`): when set, bundles carry an
    /// authentication trailer (`airpack_core::wire::sealed`) and unsealed
    /// or replayed bundles are refused.
    pub bundle_key: Option<airpack_core::auth::Key>,
}

impl Plan {
    /// Bytes a bundle payload carries beyond its encoding for a peer of this
    /// family: the outer header in front, and with a mesh key (`keyed`) the
    /// authentication trailer behind.
    pub fn outer_overhead(transport: Transport, peer: IpAddr, keyed: bool) -> usize {
        let ip = if peer.is_ipv4() { 20 } else { 40 };
        let trailer = if keyed {
            airpack_core::wire::sealed::TRAILER_LEN
        } else {
            0
        };
        trailer
            + match transport {
                Transport::Ip => ip,
                Transport::Udp => ip + 8,
            }
    }

    /// The largest `max_size` over defaults and peers (buffer sizing).
    pub fn largest_max_size(&self) -> usize {
        self.peers
            .iter()
            .map(|p| p.config.max_size)
            .chain([self.engine.peer_defaults.max_size])
            .max()
            .unwrap_or(1500)
    }

    /// The kernel steering spec.
    pub fn steer_spec(&self) -> SteerSpec {
        let d = &self.config.daemon;
        let mut spec = SteerSpec {
            tun: d.tun.clone(),
            bypass_mark: d.bypass_mark,
            priority: d.filter_priority,
            matches: self.steer.clone(),
            steer_from_tun: d.mode == Mode::HopByHop,
            interfaces: d.interfaces.clone(),
            state: Some(crate::linux::state::Files::for_socket(&d.control_socket)),
        };
        if let Some(ap) = &self.ap {
            // The AP's media ports first (no class rule bypasses them), on
            // the interfaces facing the stations too.
            spec.matches.insert(0, ap.steer_rule());
            for i in &ap.interfaces {
                if !spec.interfaces.contains(i) {
                    spec.interfaces.push(i.clone());
                }
            }
        }
        spec
    }

    /// The configured peer with this address.
    pub fn peer(&self, addr: IpAddr) -> Option<&PeerPlan> {
        self.peers.iter().find(|p| p.address == addr)
    }
}
