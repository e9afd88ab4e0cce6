//! 802.11 airtime model (pure): per-frame timing from the standard and its
//! translation into a qdisc size table.
//!
//! Owns: the PHY presets (802.11b long/short preamble, 802.11a/g OFDM), the
//! airtime of one DCF frame exchange carrying an IP packet
//! (`T(L) = DIFS + CWmin/2·slot + T_PLCP + 8·(L+36)/R + SIFS + T_ACK`, no
//! collisions, mean backoff), the single-hop capacity formula
//! `N = floor(P / (2·T))`, and the conversion of the per-frame overhead into a
//! `stab overhead` byte count for an HTB shaping at the PHY rate.
//!
//! Must not touch: namespaces, qdiscs or any I/O (see [`crate::topology`]).
//! Sources: IEEE 802.11-2020 clauses 15 (DSSS), 16 (HR/DSSS), 17 (OFDM);
//! numbers checked in `/work/shared/reference/80211-voice-numbers.md`.

use serde::Serialize;

/// Bytes 802.11 adds around an IP packet: 24 MAC header + 4 FCS + 8 LLC/SNAP.
pub const MAC_OVERHEAD_BYTES: u32 = 36;
/// Bytes of an 802.11 ACK frame.
pub const ACK_BYTES: u32 = 14;
/// Bytes the Linux qdisc already counts per frame on an Ethernet-like device
/// (the 14-byte Ethernet header).
pub const ETH_HEADER_BYTES: u32 = 14;

/// Physical layer family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PhyKind {
    /// 802.11b DSSS/CCK with the long (192 µs) PLCP preamble+header.
    DsssLong,
    /// 802.11b with the short (96 µs) PLCP preamble+header.
    DsssShort,
    /// 802.11a (and 802.11g ERP-OFDM with short slot) OFDM.
    Ofdm,
}

/// One PHY preset: a kind and a data rate (the ACK is sent at the same rate,
/// as in the published capacity tables this model reproduces).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Phy {
    /// Short name used on the command line (`b2`, `a54`, ...).
    pub name: &'static str,
    /// Family (timing constants).
    pub kind: PhyKind,
    /// Data rate in Mbit/s.
    pub rate_mbps: f64,
}

/// All presets, slowest first within a family.
pub const PRESETS: &[Phy] = &[
    Phy {
        name: "b1",
        kind: PhyKind::DsssLong,
        rate_mbps: 1.0,
    },
    Phy {
        name: "b2",
        kind: PhyKind::DsssLong,
        rate_mbps: 2.0,
    },
    Phy {
        name: "b5.5",
        kind: PhyKind::DsssLong,
        rate_mbps: 5.5,
    },
    Phy {
        name: "b11",
        kind: PhyKind::DsssLong,
        rate_mbps: 11.0,
    },
    Phy {
        name: "b11s",
        kind: PhyKind::DsssShort,
        rate_mbps: 11.0,
    },
    Phy {
        name: "a6",
        kind: PhyKind::Ofdm,
        rate_mbps: 6.0,
    },
    Phy {
        name: "a12",
        kind: PhyKind::Ofdm,
        rate_mbps: 12.0,
    },
    Phy {
        name: "a24",
        kind: PhyKind::Ofdm,
        rate_mbps: 24.0,
    },
    Phy {
        name: "a54",
        kind: PhyKind::Ofdm,
        rate_mbps: 54.0,
    },
];

/// Look a preset up by name (`b2`, `a54`, ...); also accepts `g6`.. as an
/// alias of `a6`.. (802.11g ERP-OFDM, short slot).
pub fn preset(name: &str) -> Option<Phy> {
    let n = name.trim().to_ascii_lowercase();
    let n = n.strip_prefix("g").map(|r| format!("a{r}")).unwrap_or(n);
    PRESETS.iter().copied().find(|p| p.name == n)
}

impl Phy {
    /// Slot time in µs.
    pub fn slot_us(&self) -> f64 {
        match self.kind {
            PhyKind::DsssLong | PhyKind::DsssShort => 20.0,
            PhyKind::Ofdm => 9.0,
        }
    }
    /// SIFS in µs.
    pub fn sifs_us(&self) -> f64 {
        match self.kind {
            PhyKind::DsssLong | PhyKind::DsssShort => 10.0,
            PhyKind::Ofdm => 16.0,
        }
    }
    /// DIFS = SIFS + 2·slot, in µs.
    pub fn difs_us(&self) -> f64 {
        self.sifs_us() + 2.0 * self.slot_us()
    }
    /// CWmin (slots).
    pub fn cw_min(&self) -> u32 {
        match self.kind {
            PhyKind::DsssLong | PhyKind::DsssShort => 31,
            PhyKind::Ofdm => 15,
        }
    }
    /// Mean backoff of a first transmission attempt: CWmin/2 slots, in µs.
    pub fn mean_backoff_us(&self) -> f64 {
        self.cw_min() as f64 / 2.0 * self.slot_us()
    }

    /// Duration in µs of a PPDU carrying `mpdu_bytes` bytes (PLCP + payload).
    /// DSSS: preamble+header then the payload rounded up to whole µs (the
    /// LENGTH field counts µs). OFDM: 20 µs preamble+SIGNAL, then 4 µs symbols
    /// carrying 16 service + 8·L + 6 tail bits, rounded up to whole symbols.
    pub fn ppdu_us(&self, mpdu_bytes: u32) -> f64 {
        let bits = 8.0 * mpdu_bytes as f64;
        match self.kind {
            PhyKind::DsssLong => 192.0 + (bits / self.rate_mbps).ceil(),
            PhyKind::DsssShort => 96.0 + (bits / self.rate_mbps).ceil(),
            PhyKind::Ofdm => {
                let ndbps = 4.0 * self.rate_mbps; // data bits per 4 µs symbol
                20.0 + 4.0 * ((16.0 + bits + 6.0) / ndbps).ceil()
            }
        }
    }

    /// Duration of the data frame carrying an IP packet of `ip_bytes` bytes.
    pub fn data_frame_us(&self, ip_bytes: u32) -> f64 {
        self.ppdu_us(ip_bytes + MAC_OVERHEAD_BYTES)
    }

    /// Duration of the ACK frame.
    pub fn ack_us(&self) -> f64 {
        self.ppdu_us(ACK_BYTES)
    }

    /// Airtime of one whole exchange (DIFS, mean backoff, data, SIFS, ACK)
    /// for an IP packet of `ip_bytes` bytes.
    pub fn exchange_us(&self, ip_bytes: u32) -> f64 {
        self.difs_us()
            + self.mean_backoff_us()
            + self.data_frame_us(ip_bytes)
            + self.sifs_us()
            + self.ack_us()
    }

    /// Same without the backoff (a frame sent on an idle medium).
    pub fn exchange_no_backoff_us(&self, ip_bytes: u32) -> f64 {
        self.exchange_us(ip_bytes) - self.mean_backoff_us()
    }

    /// Airtime per frame that does not depend on the payload (µs): DIFS,
    /// mean backoff, PLCP, SIFS, ACK (the MAC bytes are counted separately).
    pub fn fixed_overhead_us(&self) -> f64 {
        let plcp = match self.kind {
            PhyKind::DsssLong => 192.0,
            PhyKind::DsssShort => 96.0,
            // preamble + SIGNAL + service/tail bits (22 bits) + half a symbol
            // of mean padding, in time at the data rate.
            PhyKind::Ofdm => 20.0 + 22.0 / self.rate_mbps + 2.0,
        };
        self.difs_us() + self.mean_backoff_us() + plcp + self.sifs_us() + self.ack_us()
    }

    /// Single-hop cell capacity in calls with packets of `ip_bytes` bytes every
    /// `interval_us` µs in both directions and no aggregation:
    /// `N = floor(P / (2·T))`.
    pub fn cell_capacity(&self, ip_bytes: u32, interval_us: f64) -> u32 {
        (interval_us / (2.0 * self.exchange_us(ip_bytes))).floor() as u32
    }

    /// The HTB rate in bit/s (the PHY rate).
    pub fn rate_bps(&self) -> u64 {
        (self.rate_mbps * 1e6).round() as u64
    }

    /// `stab overhead` in bytes for an HTB at [`Phy::rate_bps`] on an
    /// Ethernet-like device: a packet the qdisc sees as `len` bytes (IP + 14
    /// Ethernet) is charged `len + overhead` bytes, which takes
    /// `8·(len + overhead)/R` = [`Phy::exchange_us`] of the IP packet. So
    /// `overhead = fixed_us·R/8 + 36 − 14`, rounded to the nearest byte (the
    /// OFDM symbol rounding is replaced by its mean).
    pub fn stab_overhead_bytes(&self) -> u32 {
        let fixed_bytes = self.fixed_overhead_us() * self.rate_mbps / 8.0;
        (fixed_bytes + MAC_OVERHEAD_BYTES as f64 - ETH_HEADER_BYTES as f64).round() as u32
    }

    /// Airtime the emulated medium charges for an IP packet of `ip_bytes`.
    pub fn emulated_exchange_us(&self, ip_bytes: u32) -> f64 {
        8.0 * (ip_bytes + ETH_HEADER_BYTES + self.stab_overhead_bytes()) as f64 / self.rate_mbps
    }
}

/// One row of `airpack lab presets`.
#[derive(Debug, Clone, Serialize)]
pub struct PresetRow {
    /// Preset.
    pub phy: Phy,
    /// Airtime of a 60-byte packet (G.729, 20 ms) exchange, µs.
    pub t60_us: f64,
    /// Airtime of a 200-byte packet (G.711, 20 ms) exchange, µs.
    pub t200_us: f64,
    /// Single-hop capacity, G.711 calls.
    pub cap_g711: u32,
    /// Single-hop capacity, G.729 calls.
    pub cap_g729: u32,
    /// Size-table overhead for the emulation, bytes.
    pub stab_overhead: u32,
}

/// The preset table.
pub fn preset_table() -> Vec<PresetRow> {
    PRESETS
        .iter()
        .map(|p| PresetRow {
            phy: *p,
            t60_us: p.exchange_us(60),
            t200_us: p.exchange_us(200),
            cap_g711: p.cell_capacity(200, 20_000.0),
            cap_g729: p.cell_capacity(60, 20_000.0),
            stab_overhead: p.stab_overhead_bytes(),
        })
        .collect()
}

/// The preset table as text.
pub fn preset_table_text() -> String {
    let mut s = String::from(
        "preset  PHY                     T(60 B) µs  T(200 B) µs  calls G.711  calls G.729  stab overhead B\n",
    );
    for r in preset_table() {
        let fam = match r.phy.kind {
            PhyKind::DsssLong => "802.11b long preamble",
            PhyKind::DsssShort => "802.11b short preamble",
            PhyKind::Ofdm => "802.11a/g OFDM",
        };
        s.push_str(&format!(
            "{:<7} {:<23} {:>10.0}  {:>11.0}  {:>11}  {:>11}  {:>15}\n",
            r.phy.name,
            format!("{fam} {} Mb/s", r.phy.rate_mbps),
            r.t60_us,
            r.t200_us,
            r.cap_g711,
            r.cap_g729,
            r.stab_overhead
        ));
    }
    s.push_str("T(L) = DIFS + CWmin/2·slot + PLCP + 8·(L+36)/R + SIFS + ACK; calls = floor(20 ms / (2·T)).\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_example_b2() {
        let p = preset("b2").unwrap();
        assert_eq!(p.data_frame_us(60), 576.0);
        assert_eq!(p.exchange_us(60), 1194.0);
        assert_eq!(p.exchange_no_backoff_us(60), 884.0);
        assert_eq!(p.exchange_us(600), 3354.0);
    }

    #[test]
    fn ack_durations() {
        assert_eq!(preset("b1").unwrap().ack_us(), 304.0);
        assert_eq!(preset("b2").unwrap().ack_us(), 248.0);
        assert_eq!(preset("b11").unwrap().ack_us(), 203.0);
        assert_eq!(preset("b11s").unwrap().ack_us(), 107.0);
        assert_eq!(preset("a6").unwrap().ack_us(), 44.0);
        assert_eq!(preset("a24").unwrap().ack_us(), 28.0);
    }

    #[test]
    fn stab_overhead_reproduces_airtime() {
        for p in PRESETS {
            for l in [60u32, 200, 600, 1500] {
                let exact = p.exchange_us(l);
                let emu = p.emulated_exchange_us(l);
                // DSSS: within half a byte of rounding; OFDM: within one symbol.
                let tol = match p.kind {
                    PhyKind::Ofdm => 4.0,
                    _ => 8.0 * 0.5 / p.rate_mbps + 1.0,
                };
                assert!(
                    (exact - emu).abs() <= tol,
                    "{} L={l}: {exact} vs {emu}",
                    p.name
                );
            }
        }
        assert_eq!(preset("b2").unwrap().stab_overhead_bytes(), 225);
    }

    #[test]
    fn g_alias() {
        assert_eq!(preset("g54").unwrap().name, "a54");
        assert!(preset("x3").is_none());
    }
}
