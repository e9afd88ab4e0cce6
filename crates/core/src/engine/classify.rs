//! Traffic classes and the classifier: which packets may wait, which are only
//! bundled while the link is busy anyway, and which are never touched.
//!
//! Pure function of the packet's headers ([`PacketInfo`]), a caller-supplied
//! mark and the peer's maximum bundle size.

use crate::wire::ip::PacketInfo;
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
            _ => Err(format!("unknown class {s:?} (expected bundle, opportunistic or bypass)")),
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
    pub fn classify(&self, info: &PacketInfo, mark: u32, max_size: usize) -> TrafficClass {
        let _ = (info, mark, max_size);
        todo!("engine::classify")
    }
}
