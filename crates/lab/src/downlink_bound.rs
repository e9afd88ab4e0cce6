//! Analytic capacity bound of downlink multiplexing at an access point
//! (issue 14, point 10, first part; seed 002): how many calls a cell carries
//! when each call is one station talking to a wired node, without and with
//! the AP multicasting the downlink packets in one frame per interval.
//!
//! Owns: the formula and its table. Must not touch: the timing constants
//! (those are [`crate::medium`]'s presets, reused here), any I/O.
//!
//! Model (`/work/shared/reference/80211-voice-numbers.md`, "Multicast frames
//! and the downlink multiplexing bound"): per packet interval `P`, every call
//! costs one uplink unicast exchange `T(L)` (DIFS, mean backoff, data, SIFS,
//! ACK at the data rate). Without multiplexing the downlink costs the same
//! again: `N = floor(P / 2T(L))`. With it, the downlink of all `N` calls
//! shares multicast frames (no ACK, no retry) at the multicast rate `R_mc`:
//! `T_mc(L) = DIFS + CWmin/2·slot + PLCP + 8·(L+36)/R_mc`, and the capacity is
//! the largest `N` with `N·T(L) + frames(N)·T_mc ≤ P`.
//!
//! Two ways to count the multicast frames:
//! * [`Count::Reference`]: `ceil(N·b / F)` frames, each charged as an IP
//!   packet of `F` bytes (the reference's formula; reproduces its numbers).
//! * [`Count::Packed`]: the frames the mux actually sends: frame header
//!   (2 bytes seed, 4 compact) plus entries, up to `F` bytes of UDP payload
//!   each, every frame charged at its real size plus 28 bytes of UDP/IPv4.
//!
//! DSSS multicast rates (1, 2, 5.5, 11 Mbit/s) use the long preamble (192 µs);
//! 6 and 54 Mbit/s are OFDM. In an 802.11g cell the contention (DIFS, slot,
//! CWmin) is the OFDM preset's (g-only cell, short slot), whatever the
//! multicast frame's modulation. The rule "pick the multicast rate or fall
//! back to unicast" ([`choose`]) takes the basic rate with the most calls and
//! multiplexes only if that beats plain unicast, so capacity never drops.

use crate::medium::{preset, Phy, PhyKind};
use airpack_core::downlink::airtime::{self, Modulation, Rate};

/// Frame payload limit `F` (the mux's default `max_frame`).
pub const FRAME_LIMIT: u32 = 1440;
/// UDP + IPv4 header of the multicast datagram.
pub const UDP_IP: u32 = 28;

/// A voice codec at 20 ms packets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Codec {
    /// Name.
    pub name: &'static str,
    /// Voice bytes per packet.
    pub voice: u32,
}

/// G.729: 20 voice bytes per 20 ms (60-byte IP packets).
pub const G729: Codec = Codec {
    name: "G.729",
    voice: 20,
};
/// G.711: 160 voice bytes per 20 ms (200-byte IP packets).
pub const G711: Codec = Codec {
    name: "G.711",
    voice: 160,
};

impl Codec {
    /// IPv4 packet: 20 IP + 8 UDP + 12 RTP + voice.
    pub fn ip_bytes(&self) -> u32 {
        40 + self.voice
    }
}

/// Downlink frame layout, for the per-packet cost `b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Seed 002: 14-byte custom header + the whole RTP packet (`b = voice + 26`).
    Seed,
    /// Compact, steady state: sid + ctl + len + seq LSB, RTP header
    /// compressed, IPv4 ID 0 (`b = voice + 4`).
    Compact,
}

impl Layout {
    /// Bytes per multiplexed packet.
    pub fn per_packet(&self, c: &Codec) -> u32 {
        match self {
            Layout::Seed => c.voice + 12 + 14,
            Layout::Compact => c.voice + 4,
        }
    }
    /// Bytes of frame header.
    pub fn frame_header(&self) -> u32 {
        match self {
            Layout::Seed => 2,
            Layout::Compact => 4,
        }
    }
}

/// How multicast frames are counted (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// `ceil(N·b/F)` frames of `F` bytes each.
    Reference,
    /// Real frames: header + entries ≤ `F`, + 28 bytes UDP/IP, last one partial.
    Packed,
}

/// The DCF timing of `cell` in the core's terms.
fn contention(cell: &Phy) -> Modulation {
    match cell.kind {
        PhyKind::Ofdm => Modulation::Ofdm,
        PhyKind::DsssLong | PhyKind::DsssShort => Modulation::DsssLong,
    }
}

/// Airtime (µs) of one multicast frame carrying an IP packet of `ip_bytes`
/// in `cell` at `rate`: contention of the cell, PPDU of the rate (DSSS
/// rates with the long preamble), no SIFS/ACK. The formula is the one the
/// AP's multiplexer decides with ([`airpack_core::downlink::airtime`]).
pub fn multicast_us(cell: &Phy, rate: f64, ip_bytes: u32) -> f64 {
    let r = Rate::of(rate, false).unwrap_or(Rate {
        modulation: Modulation::Ofdm,
        mbps: rate,
    });
    airtime::multicast_us(contention(cell), &r, ip_bytes)
}

/// Calls without multiplexing: `floor(P / 2T(L))`.
pub fn calls_unicast(cell: &Phy, codec: &Codec, interval_us: f64) -> u32 {
    cell.cell_capacity(codec.ip_bytes(), interval_us)
}

/// Airtime of one interval's downlink for `n` calls, multiplexed.
pub fn downlink_us(
    cell: &Phy,
    rate: f64,
    codec: &Codec,
    layout: Layout,
    count: Count,
    n: u32,
) -> f64 {
    let b = layout.per_packet(codec);
    match count {
        Count::Reference => {
            let frames = (n * b).div_ceil(FRAME_LIMIT);
            frames as f64 * multicast_us(cell, rate, FRAME_LIMIT)
        }
        Count::Packed => {
            let per_frame = (FRAME_LIMIT - layout.frame_header()) / b;
            let (full, rest) = (n / per_frame, n % per_frame);
            let size = |k: u32| UDP_IP + layout.frame_header() + k * b;
            let mut t = full as f64 * multicast_us(cell, rate, size(per_frame));
            if rest > 0 {
                t += multicast_us(cell, rate, size(rest));
            }
            t
        }
    }
}

/// Calls with multiplexing: the largest `N` with `N·T(L) + downlink(N) ≤ P`.
pub fn calls_multiplexed(
    cell: &Phy,
    rate: f64,
    codec: &Codec,
    layout: Layout,
    count: Count,
    interval_us: f64,
) -> u32 {
    calls_multiplexed_agg(cell, rate, codec, layout, count, 1, interval_us)
}

/// The largest `N` whose interval `fits` (0 if one call does not).
fn most_calls(fits: impl Fn(u32) -> bool) -> u32 {
    let mut n = 0;
    while fits(n + 1) {
        n += 1;
    }
    n
}

/// IP bytes of a hop-by-hop bundle of `k` packets of `codec` (native
/// encoding behind a raw IPv4 outer header: 20 + 2 bytes, 1 length byte
/// per packet up to 127 bytes, 2 beyond; docs/wire-format.md).
pub fn bundle_ip_bytes(codec: &Codec, k: u32) -> u32 {
    let l = codec.ip_bytes();
    20 + 2 + k * (l + if l < 128 { 1 } else { 2 })
}

/// Airtime of one interval's uplink for `n` calls whose stations carry `k`
/// calls each and send their calls' packets of an interval as one bundle:
/// `ceil(n/k)` exchanges of [`bundle_ip_bytes`] (a last station with one
/// call sends its packet alone). `k = 1`: `n` plain exchanges.
pub fn uplink_agg_us(cell: &Phy, codec: &Codec, k: u32, n: u32) -> f64 {
    let k = k.max(1);
    let (full, rest) = (n / k, n % k);
    let one = |j: u32| {
        cell.exchange_us(if j == 1 {
            codec.ip_bytes()
        } else {
            bundle_ip_bytes(codec, j)
        })
    };
    let mut t = full as f64 * one(k);
    if rest > 0 {
        t += one(rest);
    }
    t
}

/// Calls with multiplexing and uplink aggregation (issue 14 point 9): the
/// uplink of [`uplink_agg_us`] instead of `N` exchanges; the downlink as
/// in [`calls_multiplexed`]. `k = 1` is [`calls_multiplexed`].
pub fn calls_multiplexed_agg(
    cell: &Phy,
    rate: f64,
    codec: &Codec,
    layout: Layout,
    count: Count,
    k: u32,
    interval_us: f64,
) -> u32 {
    most_calls(|n| {
        uplink_agg_us(cell, codec, k, n) + downlink_us(cell, rate, codec, layout, count, n)
            <= interval_us
    })
}

/// Calls without multiplexing but with the uplink aggregation of
/// [`uplink_agg_us`]: the downlink stays `N` unicast exchanges (the
/// control of [`calls_multiplexed_agg`]). `k = 1` is [`calls_unicast`].
pub fn calls_unicast_agg(cell: &Phy, codec: &Codec, k: u32, interval_us: f64) -> u32 {
    let down = cell.exchange_us(codec.ip_bytes());
    most_calls(|n| uplink_agg_us(cell, codec, k, n) + n as f64 * down <= interval_us)
}

/// The rule's outcome: the multicast rate to use (`None`: plain unicast) and the calls.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Choice {
    /// Multicast rate in Mbit/s, or `None` for unicast.
    pub rate: Option<f64>,
    /// Calls supported.
    pub calls: u32,
}

/// Picks the multicast rate among `rates` (the cell's basic rates) with the
/// most calls, or unicast when no rate beats it: capacity never drops.
pub fn choose(
    cell: &Phy,
    codec: &Codec,
    layout: Layout,
    count: Count,
    rates: &[f64],
    interval_us: f64,
) -> Choice {
    let mut best = Choice {
        rate: None,
        calls: calls_unicast(cell, codec, interval_us),
    };
    for &r in rates {
        let n = calls_multiplexed(cell, r, codec, layout, count, interval_us);
        if n > best.calls {
            best = Choice {
                rate: Some(r),
                calls: n,
            };
        }
    }
    best
}

/// The table of docs/results.md: 802.11b 11 Mbit/s (long preamble) and
/// 802.11g 54 Mbit/s, multicast at 1/2/6/11 Mbit/s and the data rate,
/// G.729 and G.711, both layouts, both counts; P = 20 ms.
pub fn table_text() -> String {
    let p = 20_000.0;
    let mut s = String::from(
        "cell                codec  layout   unicast  mc@1  mc@2  mc@6  mc@11  mc@data  | packed: mc@1  mc@2  mc@6  mc@11  mc@data  | rule (packed, basic rates 1/2/6/11/data)\n",
    );
    for (name, label) in [("b11", "802.11b 11 long"), ("g54", "802.11g 54")] {
        let cell = preset(name).expect("preset");
        let rates: Vec<f64> = [1.0, 2.0, 6.0, 11.0, cell.rate_mbps]
            .into_iter()
            .filter(|r| cell.kind == PhyKind::Ofdm || *r != 6.0)
            .collect();
        for codec in [G729, G711] {
            for layout in [Layout::Seed, Layout::Compact] {
                let cell_for = |r: f64, c: Count| {
                    if cell.kind != PhyKind::Ofdm && r == 6.0 {
                        "-".to_string()
                    } else {
                        calls_multiplexed(&cell, r, &codec, layout, c, p).to_string()
                    }
                };
                let row = |c: Count| {
                    [1.0, 2.0, 6.0, 11.0, cell.rate_mbps]
                        .iter()
                        .map(|r| format!("{:>5}", cell_for(*r, c)))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                let ch = choose(&cell, &codec, layout, Count::Packed, &rates, p);
                let rule = match ch.rate {
                    Some(r) => format!("multicast at {r} Mbit/s: {} calls", ch.calls),
                    None => format!("unicast: {} calls", ch.calls),
                };
                s.push_str(&format!(
                    "{:<19} {:<6} {:<8} {:>7}  {}  |        {}  | {}\n",
                    label,
                    codec.name,
                    format!("{layout:?}").to_lowercase(),
                    calls_unicast(&cell, &codec, p),
                    row(Count::Reference),
                    row(Count::Packed),
                    rule
                ));
            }
        }
    }
    s.push_str(
        "columns mc@R: calls with downlink multiplexing, multicast at R Mbit/s (mc@data = the cell's data rate; \
         6 Mbit/s only in the OFDM cell); first block: reference count ceil(N·b/F) frames of F = 1440 B; \
         packed: real frames + 28 B UDP/IP.\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b11() -> Phy {
        preset("b11").unwrap()
    }

    /// The worked examples of the reference (802.11b long preamble, 11 Mbit/s data).
    #[test]
    fn reproduces_the_reference_numbers() {
        let c = b11();
        assert_eq!(c.exchange_us(60).round(), 835.0);
        assert_eq!(c.exchange_us(200).round(), 937.0);
        assert_eq!(calls_unicast(&c, &G729, 20_000.0), 11);
        assert_eq!(calls_unicast(&c, &G711, 20_000.0), 10);
        assert_eq!(Layout::Seed.per_packet(&G729), 46);
        assert_eq!(Layout::Seed.per_packet(&G711), 186);
        let n =
            |r, codec| calls_multiplexed(&c, r, &codec, Layout::Seed, Count::Reference, 20_000.0);
        assert_eq!(n(11.0, G729), 22, "G.729, multicast at 11: 2.0x");
        assert_eq!(n(2.0, G729), 16);
        assert_eq!(n(11.0, G711), 16, "G.711, multicast at 11: 1.6x");
        assert_eq!(n(2.0, G711), 7, "G.711 at 2 Mbit/s: fewer than unicast");
    }

    #[test]
    fn the_rule_never_loses_capacity() {
        let c = b11();
        // G.711 with only 1 and 2 Mbit/s basic rates: multiplexing would lose calls.
        let ch = choose(
            &c,
            &G711,
            Layout::Seed,
            Count::Reference,
            &[1.0, 2.0],
            20_000.0,
        );
        assert_eq!(
            ch,
            Choice {
                rate: None,
                calls: 10
            }
        );
        let ch = choose(
            &c,
            &G729,
            Layout::Seed,
            Count::Reference,
            &[1.0, 2.0, 5.5, 11.0],
            20_000.0,
        );
        assert_eq!(
            ch,
            Choice {
                rate: Some(11.0),
                calls: 22
            }
        );
        for cell in ["b11", "g54", "b2"] {
            let cell = preset(cell).unwrap();
            for codec in [G729, G711] {
                for layout in [Layout::Seed, Layout::Compact] {
                    for count in [Count::Reference, Count::Packed] {
                        let ch = choose(
                            &cell,
                            &codec,
                            layout,
                            count,
                            &[1.0, 2.0, 6.0, 11.0],
                            20_000.0,
                        );
                        assert!(ch.calls >= calls_unicast(&cell, &codec, 20_000.0));
                    }
                }
            }
        }
    }

    /// Each call found fits the interval and one more does not (the search is exact).
    #[test]
    fn capacity_is_the_largest_fitting_n() {
        let c = preset("g54").unwrap();
        for r in [1.0, 6.0, 54.0] {
            for count in [Count::Reference, Count::Packed] {
                let n = calls_multiplexed(&c, r, &G729, Layout::Compact, count, 20_000.0);
                let t = |n: u32| {
                    n as f64 * c.exchange_us(60)
                        + downlink_us(&c, r, &G729, Layout::Compact, count, n)
                };
                assert!(t(n) <= 20_000.0 && t(n + 1) > 20_000.0, "rate {r}: n {n}");
            }
        }
    }

    /// The compact layout's smaller per-packet cost never carries fewer calls.
    #[test]
    fn compact_never_below_seed() {
        for cell in ["b11", "g54"] {
            let cell = preset(cell).unwrap();
            for codec in [G729, G711] {
                for r in [1.0, 2.0, 11.0] {
                    let s =
                        calls_multiplexed(&cell, r, &codec, Layout::Seed, Count::Packed, 20_000.0);
                    let k = calls_multiplexed(
                        &cell,
                        r,
                        &codec,
                        Layout::Compact,
                        Count::Packed,
                        20_000.0,
                    );
                    assert!(k >= s, "{} at {r}: compact {k} < seed {s}", codec.name);
                }
            }
        }
    }
    /// Uplink aggregation beside the mux: k = 1 is the mux alone; two
    /// calls per bundle: one exchange of 144 bytes (~1.0 ms) instead of
    /// two of 60 (~1.8 ms): 22 -> 40 G.729 calls on 802.11b 11.
    #[test]
    fn uplink_aggregation_bound() {
        let b11 = preset("b11").unwrap();
        assert_eq!(bundle_ip_bytes(&G729, 2), 20 + 2 + 2 * 61);
        assert_eq!(bundle_ip_bytes(&G711, 2), 20 + 2 + 2 * 202);
        let f = |k| {
            calls_multiplexed_agg(
                &b11,
                11.0,
                &G729,
                Layout::Compact,
                Count::Packed,
                k,
                20_000.0,
            )
        };
        assert_eq!(
            f(1),
            calls_multiplexed(&b11, 11.0, &G729, Layout::Compact, Count::Packed, 20_000.0)
        );
        assert_eq!((f(1), f(2)), (22, 40));
        // without the mux: the uplink's savings alone, 11 -> 15
        let u = |k| calls_unicast_agg(&b11, &G729, k, 20_000.0);
        assert_eq!(u(1), calls_unicast(&b11, &G729, 20_000.0));
        assert_eq!((u(1), u(2)), (11, 15));
    }
}
