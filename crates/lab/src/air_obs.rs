//! A node's observability file on the ns-3 air (`NODE.air`, issue 10 point
//! 3): what a real radio exposes through nl80211 survey (channel active,
//! busy, transmit and receive time) and station info (per-neighbour signal,
//! frames, retries, failures), plus the MAC queue's backlog. The ns-3
//! program (`crates/lab/ns3/air_obs.cc`) rewrites one file per node every
//! few tens of milliseconds by rename, so a reader always sees a whole file.
//! Format (docs/lab.md section 2b): a first line `airpack-air 1`, then one
//! `key value` per line, and one `peer MAC NAME key value ...` line per
//! node heard or sent to. Unknown keys are ignored (later versions may add
//! some); a missing or repeated known key, a bad number or a bad MAC is an
//! error.
//!
//! Owns: [`AirObs`], [`parse`] and [`read`]. Pure except [`read`].
//!
//! Must not touch: the program or the daemon; nothing here allocates per
//! field beyond the node and peer names.

use std::fmt;
use std::path::Path;

/// Format version this parser reads (the number after `airpack-air`).
pub const VERSION: u32 = 1;

/// One node's counters. Times are µs of simulated time since the air
/// started; counters are cumulative.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AirObs {
    /// Node name.
    pub node: String,
    /// The node's radio MAC.
    pub mac: [u8; 6],
    /// Simulated time of this snapshot (a reader sees it advance while the
    /// air runs).
    pub time_us: u64,
    /// Time the radio was on (nl80211 survey "channel time").
    pub active_us: u64,
    /// Time the medium was busy for this radio: CCA busy + receiving +
    /// transmitting (survey "channel time busy").
    pub busy_us: u64,
    /// Time transmitting (survey "channel time tx").
    pub tx_us: u64,
    /// Time receiving (survey "channel time rx").
    pub rx_us: u64,
    /// MPDUs waiting in the MAC's queues.
    pub queue_packets: u64,
    /// Bytes of those MPDUs (MAC header and FCS included).
    pub queue_bytes: u64,
    /// MSDUs handed to the MAC by the node.
    pub tx_msdus: u64,
    /// Unicast transmission attempts that failed and were retried.
    pub retries: u64,
    /// Unicast MPDUs dropped after their last attempt failed.
    pub tx_failed: u64,
    /// MSDUs the MAC refused (queue full, or not associated).
    pub queue_drops: u64,
    /// Per other node, in node order.
    pub peers: Vec<PeerObs>,
}

/// What one node knows about one other node (nl80211 station info).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PeerObs {
    /// The peer's radio MAC.
    pub mac: [u8; 6],
    /// The peer's node name.
    pub name: String,
    /// Signal of the last frame received from it (dBm).
    pub signal_dbm: f64,
    /// Exponential average (weight 1/8) of that signal (dBm).
    pub signal_avg_dbm: f64,
    /// Data and management MPDUs received from it without error.
    pub rx_frames: u64,
    /// Unicast MPDUs sent to it and acknowledged.
    pub tx_acked: u64,
    /// Failed attempts toward it that were retried.
    pub tx_retries: u64,
    /// MPDUs toward it dropped after the last attempt.
    pub tx_failed: u64,
}

/// Why a file is not a valid observability file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObsError {
    /// The first line is not `airpack-air VERSION`.
    BadHeader,
    /// A version this parser does not read.
    Version(u32),
    /// Line (1-based) with a key but no value, or a value that is not a number.
    BadValue(usize),
    /// Line with a MAC that is not `xx:xx:xx:xx:xx:xx`.
    BadMac(usize),
    /// Line repeating a key.
    Repeated(usize),
    /// A required key is absent.
    Missing(&'static str),
}

impl fmt::Display for ObsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObsError::BadHeader => write!(f, "not an airpack-air file"),
            ObsError::Version(v) => write!(f, "airpack-air version {v} (this reads {VERSION})"),
            ObsError::BadValue(l) => write!(f, "line {l}: bad value"),
            ObsError::BadMac(l) => write!(f, "line {l}: bad MAC"),
            ObsError::Repeated(l) => write!(f, "line {l}: repeated key"),
            ObsError::Missing(k) => write!(f, "missing key {k}"),
        }
    }
}

impl std::error::Error for ObsError {}

/// Parse `xx:xx:xx:xx:xx:xx`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in m.iter_mut() {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

/// The numeric keys, all required (the slots of `seen` in [`parse`]; then
/// `mac` and `node`).
const NUMERIC: [&str; 11] = [
    "time_us",
    "active_us",
    "busy_us",
    "tx_us",
    "rx_us",
    "queue_packets",
    "queue_bytes",
    "tx_msdus",
    "retries",
    "tx_failed",
    "queue_drops",
];
const MAC_SLOT: usize = NUMERIC.len();
const NODE_SLOT: usize = NUMERIC.len() + 1;

fn parse_peer(line: usize, mut w: std::str::SplitWhitespace<'_>) -> Result<PeerObs, ObsError> {
    let mac = w.next().and_then(parse_mac).ok_or(ObsError::BadMac(line))?;
    let name = w.next().ok_or(ObsError::BadValue(line))?.to_string();
    let mut p = PeerObs {
        mac,
        name,
        ..PeerObs::default()
    };
    let mut seen = 0u8;
    while let Some(k) = w.next() {
        let v = w.next().ok_or(ObsError::BadValue(line))?;
        let bit = match k {
            "signal_dbm" | "signal_avg_dbm" => {
                let x: f64 = v.parse().map_err(|_| ObsError::BadValue(line))?;
                if !x.is_finite() {
                    return Err(ObsError::BadValue(line));
                }
                if k == "signal_dbm" {
                    p.signal_dbm = x;
                    1
                } else {
                    p.signal_avg_dbm = x;
                    2
                }
            }
            "rx_frames" | "tx_acked" | "tx_retries" | "tx_failed" => {
                let x: u64 = v.parse().map_err(|_| ObsError::BadValue(line))?;
                match k {
                    "rx_frames" => p.rx_frames = x,
                    "tx_acked" => p.tx_acked = x,
                    "tx_retries" => p.tx_retries = x,
                    _ => p.tx_failed = x,
                }
                4 << ["rx_frames", "tx_acked", "tx_retries", "tx_failed"]
                    .iter()
                    .position(|x| *x == k)
                    .unwrap_or(0)
            }
            _ => 0, // unknown: a later version's
        };
        if seen & bit != 0 {
            return Err(ObsError::Repeated(line));
        }
        seen |= bit;
    }
    if seen != 0x3f {
        return Err(ObsError::Missing("peer field"));
    }
    Ok(p)
}

/// Parse one observability file.
pub fn parse(text: &str) -> Result<AirObs, ObsError> {
    let mut lines = text.lines().enumerate();
    let (_, head) = lines.next().ok_or(ObsError::BadHeader)?;
    let mut h = head.split_whitespace();
    if h.next() != Some("airpack-air") {
        return Err(ObsError::BadHeader);
    }
    let v: u32 = h
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or(ObsError::BadHeader)?;
    if v != VERSION {
        return Err(ObsError::Version(v));
    }
    let mut o = AirObs::default();
    let mut seen = [false; NODE_SLOT + 1];
    for (i, l) in lines {
        let line = i + 1;
        let mut w = l.split_whitespace();
        let Some(k) = w.next() else { continue };
        if k == "peer" {
            o.peers.push(parse_peer(line, w)?);
            continue;
        }
        let v = w.next().ok_or(ObsError::BadValue(line))?;
        let slot = match k {
            "node" => {
                o.node = v.to_string();
                NODE_SLOT
            }
            "mac" => {
                o.mac = parse_mac(v).ok_or(ObsError::BadMac(line))?;
                MAC_SLOT
            }
            _ => match NUMERIC.iter().position(|s| *s == k) {
                Some(j) => {
                    let x: u64 = v.parse().map_err(|_| ObsError::BadValue(line))?;
                    *[
                        &mut o.time_us,
                        &mut o.active_us,
                        &mut o.busy_us,
                        &mut o.tx_us,
                        &mut o.rx_us,
                        &mut o.queue_packets,
                        &mut o.queue_bytes,
                        &mut o.tx_msdus,
                        &mut o.retries,
                        &mut o.tx_failed,
                        &mut o.queue_drops,
                    ][j] = x;
                    j
                }
                None => continue, // unknown: a later version's
            },
        };
        if seen[slot] {
            return Err(ObsError::Repeated(line));
        }
        seen[slot] = true;
    }
    if !seen[NODE_SLOT] {
        return Err(ObsError::Missing("node"));
    }
    if !seen[MAC_SLOT] {
        return Err(ObsError::Missing("mac"));
    }
    if let Some(j) = (0..NUMERIC.len()).find(|&j| !seen[j]) {
        return Err(ObsError::Missing(NUMERIC[j]));
    }
    Ok(o)
}

/// Read and parse the file at `path`.
pub fn read(path: &Path) -> anyhow::Result<AirObs> {
    let text = std::fs::read_to_string(path)?;
    parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

impl AirObs {
    /// The peer called `name`.
    pub fn peer(&self, name: &str) -> Option<&PeerObs> {
        self.peers.iter().find(|p| p.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SAMPLE: &str = "airpack-air 1\nnode A\nmac 02:00:00:00:00:01\ntime_us 2000000\n\
        active_us 2000000\nbusy_us 350000\ntx_us 120000\nrx_us 200000\nqueue_packets 3\n\
        queue_bytes 288\ntx_msdus 100\nretries 2\ntx_failed 1\nqueue_drops 4\n\
        peer 02:00:00:00:00:02 B signal_dbm -34.0 signal_avg_dbm -35.5 rx_frames 12 tx_acked 97 tx_retries 2 tx_failed 1\n";

    #[test]
    fn parses_the_documented_format() {
        let o = parse(SAMPLE).unwrap();
        assert_eq!(o.node, "A");
        assert_eq!(o.mac, [2, 0, 0, 0, 0, 1]);
        assert_eq!(
            (o.time_us, o.active_us, o.busy_us, o.tx_us, o.rx_us),
            (2_000_000, 2_000_000, 350_000, 120_000, 200_000)
        );
        assert_eq!(
            (
                o.queue_packets,
                o.queue_bytes,
                o.tx_msdus,
                o.retries,
                o.tx_failed,
                o.queue_drops
            ),
            (3, 288, 100, 2, 1, 4)
        );
        let b = o.peer("B").unwrap();
        assert_eq!(b.mac, [2, 0, 0, 0, 0, 2]);
        assert_eq!((b.signal_dbm, b.signal_avg_dbm), (-34.0, -35.5));
        assert_eq!(
            (b.rx_frames, b.tx_acked, b.tx_retries, b.tx_failed),
            (12, 97, 2, 1)
        );
        // later versions may add keys, anywhere
        let more = SAMPLE.replace("retries 2\n", "retries 2\nnav_us 5\n") + "foo bar baz\n";
        assert_eq!(parse(&more).unwrap(), o);
        let more = SAMPLE.replace("tx_failed 1\n", "tx_failed 1 mcs 7\n");
        assert_eq!(parse(&more).unwrap(), o);
    }

    #[test]
    fn rejects_damaged_files() {
        assert_eq!(parse(""), Err(ObsError::BadHeader));
        assert_eq!(parse("airpack-air\n"), Err(ObsError::BadHeader));
        assert_eq!(
            parse(&SAMPLE.replace("airpack-air 1", "airpack-air 2")),
            Err(ObsError::Version(2))
        );
        assert_eq!(
            parse(&SAMPLE.replace("busy_us 350000", "busy_us -1")),
            Err(ObsError::BadValue(6))
        );
        assert_eq!(
            parse(&SAMPLE.replace("busy_us 350000", "busy_us")),
            Err(ObsError::BadValue(6))
        );
        assert_eq!(
            parse(&SAMPLE.replace("busy_us 350000\n", "")),
            Err(ObsError::Missing("busy_us"))
        );
        assert_eq!(
            parse(&SAMPLE.replace("node A\n", "")),
            Err(ObsError::Missing("node"))
        );
        assert_eq!(
            parse(&SAMPLE.replace("tx_us 120000\n", "tx_us 1\ntx_us 2\n")),
            Err(ObsError::Repeated(8))
        );
        assert_eq!(
            parse(&SAMPLE.replace("mac 02:00:00:00:00:01", "mac 02:00:00:00:00")),
            Err(ObsError::BadMac(3))
        );
        assert_eq!(
            parse(&SAMPLE.replace("peer 02:00:00:00:00:02", "peer 02:00:00:00:00:0g")),
            Err(ObsError::BadMac(15))
        );
        assert_eq!(
            parse(&SAMPLE.replace("signal_dbm -34.0", "signal_dbm NaN")),
            Err(ObsError::BadValue(15))
        );
        assert_eq!(
            parse(&SAMPLE.replace(" tx_failed 1\n", "\n")),
            Err(ObsError::Missing("peer field"))
        );
        assert_eq!(
            parse(&SAMPLE.replace("rx_frames 12", "rx_frames 12 rx_frames 13")),
            Err(ObsError::Repeated(15))
        );
        assert_eq!(parse_mac("02:00:00:00:00:01:07"), None);
        assert_eq!(parse_mac("2:00:00:00:00:01"), None);
    }

    proptest! {
        #[test]
        fn hostile_input_never_panics(s in "\\PC{0,400}") {
            let _ = parse(&s);
            let _ = parse(&format!("airpack-air 1\n{s}"));
        }

        #[test]
        fn every_line_of_a_valid_file_matters_or_is_ignored(drop in 0usize..15) {
            // removing one line of the sample: parse error unless the line
            // was the (optional) peer line
            let lines: Vec<&str> = SAMPLE.lines().collect();
            let text: String = lines.iter().enumerate().filter(|(i, _)| *i != drop).map(|(_, l)| format!("{l}\n")).collect();
            let r = parse(&text);
            if drop == 14 {
                prop_assert!(r.unwrap().peers.is_empty());
            } else {
                prop_assert!(r.is_err(), "dropping line {} accepted", drop + 1);
            }
        }
    }
}
