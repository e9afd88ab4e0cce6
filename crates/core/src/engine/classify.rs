//! Traffic classes and the classifier: which packets may wait, which are only
//! bundled while the link is busy anyway, and which are never touched.
//!
//! Owns: the rule language and the classes. Pure function of the packet's
//! headers ([`PacketInfo`]), a caller-supplied mark and the peer's maximum
//! bundle size.
//!
//! Must not touch: queues, time, encodings (whether a peer's encoding can
//! carry a packet is checked by the engine) or packet bytes.

use crate::wire::ip::{tcp_flags, PacketInfo};
use core::ops::RangeInclusive;

/// What the engine may do with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TrafficClass {
    /// May wait up to the peer's hold time to be bundled.
    Bundle,
    /// Never waits on its own: leaves at once when the link is idle, joins the
    /// bundle being filled when the link is busy (seed 004's non-concatenate class).
    Opportunistic,
    /// Never touched: forwarded unchanged, served fairly with bundled output.
    #[default]
    Bypass,
}

impl TrafficClass {
    /// Name used in configuration and statistics.
    pub fn name(self) -> &'static str {
        match self {
            TrafficClass::Bundle => "bundle",
            TrafficClass::Opportunistic => "opportunistic",
            TrafficClass::Bypass => "bypass",
        }
    }
}

impl core::str::FromStr for TrafficClass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bundle" => Ok(TrafficClass::Bundle),
            "opportunistic" => Ok(TrafficClass::Opportunistic),
            "bypass" => Ok(TrafficClass::Bypass),
            _ => Err(format!(
                "unknown class {s:?} (expected bundle, opportunistic or bypass)"
            )),
        }
    }
}

/// One classifier rule; every `Some` field must match. First matching rule wins.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Rule {
    /// Class given to matching packets.
    pub class: TrafficClass,
    /// IP version (4 or 6).
    pub version: Option<u8>,
    /// IP protocol / next header (17 = UDP, 6 = TCP, ...).
    pub protocol: Option<u8>,
    /// Source port range.
    pub src_ports: Option<RangeInclusive<u16>>,
    /// Destination port range.
    pub dst_ports: Option<RangeInclusive<u16>>,
    /// Either port in range (source or destination), for bidirectional flows.
    pub ports: Option<RangeInclusive<u16>>,
    /// DSCP values, inclusive range.
    pub dscp: Option<RangeInclusive<u8>>,
    /// Packet length range in bytes.
    pub len: Option<RangeInclusive<usize>>,
    /// `(value, mask)`: matches when `mark & mask == value`.
    pub mark: Option<(u32, u32)>,
}

/// An ordered rule list with a default class.
///
/// Regardless of rules, these are always [`TrafficClass::Bypass`]: TCP SYN, FIN
/// or RST; IP fragments; packets larger than half the peer's maximum bundle size.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Classifier {
    /// Rules, first match wins.
    pub rules: Vec<Rule>,
    /// Class for packets no rule matches (bypass unless configured).
    pub default: TrafficClass,
}

impl Classifier {
    /// Classifies one packet.
    #[inline]
    pub fn classify(&self, info: &PacketInfo, mark: u32, max_size: usize) -> TrafficClass {
        if info.fragment || info.len > max_size / 2 {
            return TrafficClass::Bypass;
        }
        if info.protocol == TCP {
            // Connection set-up and tear-down never wait; a TCP packet whose
            // flags could not be read is treated the same way.
            match info.tcp_flags {
                Some(f) if f & (tcp_flags::SYN | tcp_flags::FIN | tcp_flags::RST) == 0 => {}
                _ => return TrafficClass::Bypass,
            }
        }
        for rule in &self.rules {
            if rule.matches(info, mark) {
                return rule.class;
            }
        }
        self.default
    }
}

const TCP: u8 = 6;
const UDP: u8 = 17;

/// An inclusive range as `(low, high - low)`, so that membership is one
/// subtraction and one unsigned comparison. Only non-empty ranges are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span<T> {
    lo: T,
    span: T,
}

macro_rules! span_impl {
    ($t:ty) => {
        impl Span<$t> {
            const ALL: Self = Span {
                lo: 0,
                span: <$t>::MAX,
            };
            /// The values `r.contains` accepts, by the same bounds
            /// ([`core::ops::RangeBounds::contains`]); `None` when it accepts none.
            fn of(r: &RangeInclusive<$t>) -> Option<Self> {
                use core::ops::{Bound, RangeBounds};
                let lo = match r.start_bound() {
                    Bound::Included(&s) => s,
                    Bound::Excluded(&s) => s.checked_add(1)?,
                    Bound::Unbounded => 0,
                };
                let hi = match r.end_bound() {
                    Bound::Included(&e) => e,
                    Bound::Excluded(&e) => e.checked_sub(1)?,
                    Bound::Unbounded => <$t>::MAX,
                };
                (lo <= hi).then(|| Span { lo, span: hi - lo })
            }
            /// A condition that may be absent (absent: every value).
            fn of_opt(r: &Option<RangeInclusive<$t>>) -> Option<Self> {
                r.as_ref().map_or(Some(Self::ALL), Self::of)
            }
            #[inline(always)]
            fn has(self, x: $t) -> bool {
                x.wrapping_sub(self.lo) <= self.span
            }
        }
    };
}
span_impl!(u8);
span_impl!(u16);
span_impl!(usize);

/// One rule as the UDP/IPv4 fast path evaluates it: every condition a range
/// (an absent one is the full range), version and protocol already decided.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Udp4Rule {
    class: TrafficClass,
    /// The port condition (`either`) is the only one: every other range is
    /// full and the mark mask is 0.
    ports_only: bool,
    src: Span<u16>,
    dst: Span<u16>,
    either: Span<u16>,
    dscp: Span<u8>,
    len: Span<usize>,
    mark_value: u32,
    mark_mask: u32,
}

/// A [`Classifier`] compiled for the engine's fast path: packets that are
/// unfragmented UDP over IPv4 with both ports present. Rules that cannot match
/// such a packet (another version or protocol, an empty range, a mark value
/// with bits outside its mask) are left out, which does not change which rule
/// matches first; the rest are range comparisons.
///
/// For such a packet, [`Udp4Rules::classify`] returns what
/// [`Classifier::classify`] returns for its [`PacketInfo`] (tested below and
/// in the engine's fast-path tests).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct Udp4Rules {
    rules: Vec<Udp4Rule>,
    default: TrafficClass,
    /// When every rule is ports-only (the usual "voice is these UDP ports"
    /// configuration), the whole classification by table lookups.
    by_port: Option<Box<PortTable>>,
}

/// Ports-only rules as tables: a packet's class is that of the first rule
/// whose port range holds its source or its destination port, i.e. of the
/// lower of the two ports' first-rule indexes.
#[derive(Clone, PartialEq, Eq)]
struct PortTable {
    /// For each port, the index of the first rule whose range holds it
    /// (`NONE`: no rule), indexed by the port's two bytes as they are in the
    /// packet read as a native integer (`port.to_be()`), so that the lookup
    /// needs no byte swap.
    first: [u8; 65536],
    /// The class of each rule index; `class[NONE]` is the default.
    class: [TrafficClass; 256],
}

impl PortTable {
    const NONE: u8 = u8::MAX;

    /// The table of `rules`, if they are all ports-only and fewer than `NONE`.
    fn new(rules: &[Udp4Rule], default: TrafficClass) -> Option<Box<Self>> {
        if rules.len() >= usize::from(Self::NONE) || !rules.iter().all(|r| r.ports_only) {
            return None;
        }
        let mut t = Box::new(PortTable {
            first: [Self::NONE; 65536],
            class: [default; 256],
        });
        // Later rules first, so an earlier rule overwrites them.
        for (k, r) in rules.iter().enumerate().rev() {
            if r.either == Span::<u16>::ALL {
                t.first.fill(k as u8);
            } else {
                for p in r.either.lo..=r.either.lo + r.either.span {
                    t.first[usize::from(p.to_be())] = k as u8;
                }
            }
            t.class[k] = r.class;
        }
        Some(t)
    }
}

impl core::fmt::Debug for PortTable {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PortTable").finish_non_exhaustive()
    }
}

impl Udp4Rules {
    /// Compiles `c` (allocates: only at engine creation and reconfiguration).
    pub(crate) fn new(c: &Classifier) -> Self {
        let compile = |r: &Rule| -> Option<Udp4Rule> {
            if r.version.is_some_and(|v| v != 4) || r.protocol.is_some_and(|p| p != UDP) {
                return None;
            }
            let (mark_value, mark_mask) = r.mark.unwrap_or((0, 0));
            if mark_value & !mark_mask != 0 {
                return None;
            }
            let mut rule = Udp4Rule {
                class: r.class,
                ports_only: false,
                src: Span::<u16>::of_opt(&r.src_ports)?,
                dst: Span::<u16>::of_opt(&r.dst_ports)?,
                either: Span::<u16>::of_opt(&r.ports)?,
                dscp: Span::<u8>::of_opt(&r.dscp)?,
                len: Span::<usize>::of_opt(&r.len)?,
                mark_value,
                mark_mask,
            };
            rule.ports_only = (rule.src, rule.dst, rule.dscp, rule.len, rule.mark_mask)
                == (
                    Span::<u16>::ALL,
                    Span::<u16>::ALL,
                    Span::<u8>::ALL,
                    Span::<usize>::ALL,
                    0,
                );
            Some(rule)
        };
        let rules: Vec<Udp4Rule> = c.rules.iter().filter_map(compile).collect();
        Udp4Rules {
            by_port: PortTable::new(&rules, c.default),
            rules,
            default: c.default,
        }
    }

    /// [`Classifier::classify`] for an unfragmented UDP/IPv4 packet of `len`
    /// bytes with ports `src_port`, `dst_port` and DSCP `dscp`.
    #[inline(always)]
    pub(crate) fn classify(
        &self,
        dscp: u8,
        src_port: u16,
        dst_port: u16,
        len: usize,
        mark: u32,
        max_size: usize,
    ) -> TrafficClass {
        if len > max_size / 2 {
            return TrafficClass::Bypass;
        }
        if let Some(t) = &self.by_port {
            let k =
                t.first[usize::from(src_port.to_be())].min(t.first[usize::from(dst_port.to_be())]);
            return t.class[usize::from(k)];
        }
        for r in &self.rules {
            if (r.either.has(src_port) || r.either.has(dst_port))
                && (r.ports_only
                    || (r.src.has(src_port)
                        && r.dst.has(dst_port)
                        && r.dscp.has(dscp)
                        && r.len.has(len)
                        && mark & r.mark_mask == r.mark_value))
            {
                return r.class;
            }
        }
        self.default
    }
}

impl Rule {
    /// Whether every `Some` field of the rule matches. A port condition never
    /// matches a packet without ports (non-UDP/TCP, or a later fragment).
    #[inline]
    pub fn matches(&self, info: &PacketInfo, mark: u32) -> bool {
        fn port_in(r: &Option<RangeInclusive<u16>>, p: Option<u16>) -> bool {
            match (r, p) {
                (None, _) => true,
                (Some(r), Some(p)) => r.contains(&p),
                (Some(_), None) => false,
            }
        }
        if self.version.is_some_and(|v| v != info.version) {
            return false;
        }
        if self.protocol.is_some_and(|p| p != info.protocol) {
            return false;
        }
        if !port_in(&self.src_ports, info.src_port) || !port_in(&self.dst_ports, info.dst_port) {
            return false;
        }
        if let Some(r) = &self.ports {
            let hit = info.src_port.is_some_and(|p| r.contains(&p))
                || info.dst_port.is_some_and(|p| r.contains(&p));
            if !hit {
                return false;
            }
        }
        if self.dscp.as_ref().is_some_and(|r| !r.contains(&info.dscp)) {
            return false;
        }
        if self.len.as_ref().is_some_and(|r| !r.contains(&info.len)) {
            return false;
        }
        if self.mark.is_some_and(|(value, mask)| mark & mask != value) {
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{IpAddr, Ipv4Addr};

    fn udp(len: usize, sport: u16, dport: u16, dscp: u8) -> PacketInfo {
        PacketInfo {
            version: 4,
            protocol: 17,
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            dscp,
            len,
            fragment: false,
            src_port: Some(sport),
            dst_port: Some(dport),
            tcp_flags: None,
        }
    }

    fn voice_rules() -> Classifier {
        Classifier {
            rules: vec![
                Rule {
                    class: TrafficClass::Bundle,
                    protocol: Some(17),
                    ports: Some(16384..=32767),
                    ..Rule::default()
                },
                Rule {
                    class: TrafficClass::Opportunistic,
                    dscp: Some(46..=46),
                    ..Rule::default()
                },
                Rule {
                    class: TrafficClass::Bundle,
                    mark: Some((3, 3)),
                    ..Rule::default()
                },
            ],
            default: TrafficClass::Bypass,
        }
    }

    #[test]
    fn first_matching_rule_wins_and_default_applies() {
        let c = voice_rules();
        assert_eq!(
            c.classify(&udp(60, 16384, 5000, 46), 0, 1500),
            TrafficClass::Bundle
        );
        assert_eq!(
            c.classify(&udp(60, 5000, 32767, 0), 0, 1500),
            TrafficClass::Bundle
        );
        assert_eq!(
            c.classify(&udp(60, 5000, 5001, 46), 0, 1500),
            TrafficClass::Opportunistic
        );
        assert_eq!(
            c.classify(&udp(60, 5000, 5001, 0), 0, 1500),
            TrafficClass::Bypass
        );
        assert_eq!(
            c.classify(&udp(60, 5000, 5001, 0), 7, 1500),
            TrafficClass::Bundle
        );
        assert_eq!(
            c.classify(&udp(60, 5000, 5001, 0), 6, 1500),
            TrafficClass::Bypass
        );
        let all = Classifier {
            rules: vec![],
            default: TrafficClass::Opportunistic,
        };
        assert_eq!(
            all.classify(&udp(60, 1, 2, 0), 0, 1500),
            TrafficClass::Opportunistic
        );
    }

    #[test]
    fn udp4_rules_agree_with_classify() {
        // Random rule lists (every field, empty and exhausted ranges, marks
        // with bits outside the mask, other versions and protocols) against
        // random UDP/IPv4 packets: the compiled classifier picks the same class.
        let mut x: u32 = 0x1357_9bdf;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let class = |r: u32| {
            [
                TrafficClass::Bundle,
                TrafficClass::Opportunistic,
                TrafficClass::Bypass,
            ][r as usize % 3]
        };
        let mut tables = 0;
        for _ in 0..3_000 {
            let range16 = |r: &mut dyn FnMut() -> u32| -> Option<RangeInclusive<u16>> {
                match r() % 5 {
                    0 | 1 => None,
                    2 => {
                        let a = 16380 + (r() % 10) as u16;
                        Some(a..=a + (r() % 4) as u16)
                    }
                    3 => Some((r() % 8) as u16 + 16380..=16380),
                    _ => {
                        let mut e = 16384u16..=16386;
                        for _ in 0..r() % 4 {
                            e.next();
                        }
                        Some(e)
                    }
                }
            };
            let mut rules = Vec::new();
            for _ in 0..rnd() % 4 {
                let mut rule = Rule {
                    class: class(rnd()),
                    ..Rule::default()
                };
                if rnd() % 4 == 0 {
                    rule.version = Some([4, 6, 5][rnd() as usize % 3]);
                }
                if rnd() % 2 == 0 {
                    rule.protocol = Some([17, 6, 1][rnd() as usize % 3]);
                }
                rule.src_ports = range16(&mut rnd);
                rule.dst_ports = range16(&mut rnd);
                rule.ports = range16(&mut rnd);
                if rnd() % 4 == 0 {
                    let a = (rnd() % 64) as u8;
                    rule.dscp = Some(
                        a..=a
                            .saturating_add((rnd() % 8) as u8)
                            .saturating_sub((rnd() % 4) as u8),
                    );
                }
                if rnd() % 4 == 0 {
                    let a = 40 + (rnd() % 40) as usize;
                    rule.len = Some(a..=a + (rnd() % 40) as usize);
                }
                if rnd() % 4 == 0 {
                    rule.mark = Some((rnd() % 8, rnd() % 8));
                }
                rules.push(rule);
            }
            if rnd() % 2 == 0 {
                // Ports-only rules (the port-table path).
                for r in &mut rules {
                    (r.src_ports, r.dst_ports, r.dscp, r.len, r.mark) =
                        (None, None, None, None, None);
                    r.version = r.version.filter(|&v| v == 4);
                    r.protocol = r.protocol.filter(|&p| p == 17);
                }
            }
            let c = Classifier {
                rules,
                default: class(rnd()),
            };
            let fast = Udp4Rules::new(&c);
            tables += usize::from(fast.by_port.is_some());
            for _ in 0..30 {
                let len = 28 + (rnd() % 100) as usize;
                let (sp, dp) = (16378 + (rnd() % 12) as u16, 16378 + (rnd() % 12) as u16);
                let dscp = (rnd() % 64) as u8;
                let mark = rnd() % 8;
                let max_size = 100 + (rnd() % 200) as usize;
                let info = udp(len, sp, dp, dscp);
                assert_eq!(
                    fast.classify(dscp, sp, dp, len, mark, max_size),
                    c.classify(&info, mark, max_size),
                    "{c:?} {info:?} mark {mark} max {max_size}"
                );
            }
        }
        // Both the table and the rule loop were exercised.
        assert!(
            (1_000..2_900).contains(&tables),
            "{tables} of 3000 lists by table"
        );
    }

    #[test]
    fn forced_bypass_overrides_rules() {
        let all = Classifier {
            rules: vec![],
            default: TrafficClass::Bundle,
        };
        // larger than half the maximum
        assert_eq!(
            all.classify(&udp(750, 1, 2, 0), 0, 1500),
            TrafficClass::Bundle
        );
        assert_eq!(
            all.classify(&udp(751, 1, 2, 0), 0, 1500),
            TrafficClass::Bypass
        );
        // fragments
        let mut frag = udp(100, 1, 2, 0);
        frag.fragment = true;
        assert_eq!(all.classify(&frag, 0, 1500), TrafficClass::Bypass);
        // TCP control flags, and TCP without readable flags
        let mut tcp = udp(60, 1, 2, 0);
        tcp.protocol = 6;
        for (flags, class) in [
            (Some(0x10), TrafficClass::Bundle), // ACK
            (Some(0x18), TrafficClass::Bundle), // PSH|ACK
            (Some(tcp_flags::SYN), TrafficClass::Bypass),
            (Some(tcp_flags::SYN | 0x10), TrafficClass::Bypass),
            (Some(tcp_flags::FIN | 0x10), TrafficClass::Bypass),
            (Some(tcp_flags::RST), TrafficClass::Bypass),
            (None, TrafficClass::Bypass),
        ] {
            tcp.tcp_flags = flags;
            assert_eq!(all.classify(&tcp, 0, 1500), class, "flags {flags:?}");
        }
    }

    #[test]
    fn each_rule_field_filters() {
        let p = udp(100, 1000, 2000, 10);
        let m = |r: Rule| r.matches(&p, 0xF0);
        assert!(m(Rule::default()));
        assert!(m(Rule {
            version: Some(4),
            ..Rule::default()
        }));
        assert!(!m(Rule {
            version: Some(6),
            ..Rule::default()
        }));
        assert!(!m(Rule {
            protocol: Some(6),
            ..Rule::default()
        }));
        assert!(m(Rule {
            src_ports: Some(1000..=1000),
            ..Rule::default()
        }));
        assert!(!m(Rule {
            src_ports: Some(2000..=2000),
            ..Rule::default()
        }));
        assert!(m(Rule {
            dst_ports: Some(1500..=2500),
            ..Rule::default()
        }));
        assert!(!m(Rule {
            dst_ports: Some(0..=1999),
            ..Rule::default()
        }));
        assert!(m(Rule {
            ports: Some(2000..=2000),
            ..Rule::default()
        }));
        assert!(!m(Rule {
            ports: Some(3000..=4000),
            ..Rule::default()
        }));
        assert!(m(Rule {
            dscp: Some(8..=10),
            ..Rule::default()
        }));
        assert!(!m(Rule {
            dscp: Some(46..=46),
            ..Rule::default()
        }));
        assert!(m(Rule {
            len: Some(0..=100),
            ..Rule::default()
        }));
        assert!(!m(Rule {
            len: Some(101..=200),
            ..Rule::default()
        }));
        assert!(m(Rule {
            mark: Some((0x30, 0x30)),
            ..Rule::default()
        }));
        assert!(!m(Rule {
            mark: Some((0x3, 0x3)),
            ..Rule::default()
        }));
        let mut noports = p;
        noports.src_port = None;
        noports.dst_port = None;
        assert!(!Rule {
            ports: Some(0..=65535),
            ..Rule::default()
        }
        .matches(&noports, 0));
        assert!(!Rule {
            dst_ports: Some(0..=65535),
            ..Rule::default()
        }
        .matches(&noports, 0));
    }
}
