//! 802.11 airtime of one frame, for the multiplexer's rule "never lower
//! capacity" (issue 14, point 10): a multiplexed frame is sent as one
//! group-addressed frame (no ACK, no retry) at the multicast rate, while
//! the packets it carries would otherwise each be one unicast exchange
//! (data frame, SIFS, ACK) at the unicast rate. [`CellPhy::frame_pays`]
//! compares the two.
//!
//! Owns: the airtime formulas (DCF timing, PLCP, DSSS and OFDM PPDU
//! lengths). Must not touch: frames, queues, clocks, the lab's emulated
//! medium (which reuses [`multicast_us`] and [`unicast_us`] for its
//! analytic bound).
//!
//! Model (`docs/wire-format.md` cites it; the numbers are the reference's
//! "802.11 DCF timing"): for an IP packet of `L` bytes at rate `R`,
//!
//! ```text
//! unicast:   T(L)    = DIFS + CWmin/2·slot + PPDU(L + 36) + SIFS + PPDU_ACK(14)
//! multicast: T_mc(L) = DIFS + CWmin/2·slot + PPDU_mc(L + 36)
//! ```
//!
//! 36 bytes are the MAC header, FCS and LLC/SNAP. DSSS PPDU: 192 µs (long)
//! or 96 µs (short preamble) of PLCP, then the bits at the rate, rounded up
//! to a whole µs. OFDM: 20 µs, then 4 µs symbols of 16 + 8·bytes + 6 bits.
//! The contention (DIFS, slot, CWmin) is the cell's, from the unicast
//! rate's modulation; the ACK goes at the unicast rate (as the published
//! capacity tables assume). Retries and collisions are not modelled: both
//! sides of the comparison are first attempts.

/// Bytes 802.11 adds to an IP packet: 24 MAC header + 4 FCS + 8 LLC/SNAP.
pub const MAC_OVERHEAD_BYTES: u32 = 36;
/// Bytes of an ACK frame.
pub const ACK_BYTES: u32 = 14;

/// How a frame is modulated (decides PLCP length and, for the cell, the
/// DCF timing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Modulation {
    /// 802.11b DSSS/CCK, long PLCP preamble (192 µs).
    DsssLong,
    /// 802.11b, short PLCP preamble (96 µs; not at 1 Mbit/s).
    DsssShort,
    /// 802.11a/g OFDM (a g-only cell: short slot).
    Ofdm,
}

impl Modulation {
    /// Slot time, µs.
    pub fn slot_us(self) -> f64 {
        match self {
            Modulation::DsssLong | Modulation::DsssShort => 20.0,
            Modulation::Ofdm => 9.0,
        }
    }
    /// SIFS, µs.
    pub fn sifs_us(self) -> f64 {
        match self {
            Modulation::DsssLong | Modulation::DsssShort => 10.0,
            Modulation::Ofdm => 16.0,
        }
    }
    /// DIFS = SIFS + 2 slots, µs.
    pub fn difs_us(self) -> f64 {
        self.sifs_us() + 2.0 * self.slot_us()
    }
    /// CWmin, slots.
    pub fn cw_min(self) -> u32 {
        match self {
            Modulation::DsssLong | Modulation::DsssShort => 31,
            Modulation::Ofdm => 15,
        }
    }
    /// Mean backoff of a first attempt (CWmin/2 slots), µs.
    pub fn mean_backoff_us(self) -> f64 {
        f64::from(self.cw_min()) / 2.0 * self.slot_us()
    }
}

/// A modulation and a rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// Modulation.
    pub modulation: Modulation,
    /// Mbit/s.
    pub mbps: f64,
}

/// DSSS/CCK rates (802.11b), Mbit/s.
pub const DSSS_RATES: [f64; 4] = [1.0, 2.0, 5.5, 11.0];
/// OFDM rates (802.11a/g), Mbit/s.
pub const OFDM_RATES: [f64; 8] = [6.0, 9.0, 12.0, 18.0, 24.0, 36.0, 48.0, 54.0];

impl Rate {
    /// The rate `mbps` of 802.11b (with the long or short preamble; 1 Mbit/s
    /// always long) or 802.11a/g; `None` for a rate neither defines.
    pub fn of(mbps: f64, short_preamble: bool) -> Option<Rate> {
        let modulation = if DSSS_RATES.contains(&mbps) {
            if short_preamble && mbps != 1.0 {
                Modulation::DsssShort
            } else {
                Modulation::DsssLong
            }
        } else if OFDM_RATES.contains(&mbps) {
            Modulation::Ofdm
        } else {
            return None;
        };
        Some(Rate { modulation, mbps })
    }

    /// Duration of a PPDU carrying `mpdu_bytes` (PLCP + payload), µs.
    pub fn ppdu_us(&self, mpdu_bytes: u32) -> f64 {
        let bits = 8.0 * f64::from(mpdu_bytes);
        match self.modulation {
            Modulation::DsssLong => 192.0 + (bits / self.mbps).ceil(),
            Modulation::DsssShort => 96.0 + (bits / self.mbps).ceil(),
            Modulation::Ofdm => {
                let ndbps = 4.0 * self.mbps;
                20.0 + 4.0 * ((16.0 + bits + 6.0) / ndbps).ceil()
            }
        }
    }
}

/// Airtime of one unicast exchange (DIFS, mean backoff, data, SIFS, ACK)
/// carrying an IP packet of `ip_bytes` at `rate`, in a cell whose DCF
/// timing is `cell`'s, µs.
pub fn unicast_us(cell: Modulation, rate: &Rate, ip_bytes: u32) -> f64 {
    cell.difs_us()
        + cell.mean_backoff_us()
        + rate.ppdu_us(ip_bytes + MAC_OVERHEAD_BYTES)
        + cell.sifs_us()
        + rate.ppdu_us(ACK_BYTES)
}

/// Airtime of one group-addressed frame (no SIFS, no ACK) carrying an IP
/// packet of `ip_bytes` at `rate`, in a cell whose DCF timing is `cell`'s, µs.
pub fn multicast_us(cell: Modulation, rate: &Rate, ip_bytes: u32) -> f64 {
    cell.difs_us() + cell.mean_backoff_us() + rate.ppdu_us(ip_bytes + MAC_OVERHEAD_BYTES)
}

/// The PHY facts of the cell the multiplexer sends into (from the AP's
/// configuration).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CellPhy {
    /// Rate of unicast frames to the stations (and of their ACKs).
    pub unicast: Rate,
    /// Rate of group-addressed frames (the AP's multicast / basic rate).
    pub multicast: Rate,
}

impl CellPhy {
    /// The cell's DCF timing: the unicast rate's modulation.
    pub fn contention(&self) -> Modulation {
        match self.unicast.modulation {
            Modulation::Ofdm => Modulation::Ofdm,
            _ => Modulation::DsssLong,
        }
    }
    /// [`unicast_us`] in this cell.
    pub fn unicast_us(&self, ip_bytes: u32) -> f64 {
        unicast_us(self.contention(), &self.unicast, ip_bytes)
    }
    /// [`multicast_us`] in this cell.
    pub fn multicast_us(&self, ip_bytes: u32) -> f64 {
        multicast_us(self.contention(), &self.multicast, ip_bytes)
    }
    /// Whether one multicast frame of `frame_ip_bytes` (the frame's UDP
    /// payload plus its UDP/IP header) takes less airtime than `unicast_us`,
    /// the sum of [`CellPhy::unicast_us`] over the packets it carries.
    pub fn frame_pays(&self, frame_ip_bytes: u32, unicast_us: f64) -> bool {
        self.multicast_us(frame_ip_bytes) < unicast_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b11(mc: f64) -> CellPhy {
        CellPhy {
            unicast: Rate::of(11.0, false).unwrap(),
            multicast: Rate::of(mc, false).unwrap(),
        }
    }

    /// The reference's worked numbers (802.11b long preamble).
    #[test]
    fn reference_exchanges() {
        let c = b11(11.0);
        assert_eq!(c.unicast_us(60).round(), 835.0);
        assert_eq!(c.unicast_us(200).round(), 937.0);
        let b2 = Rate::of(2.0, false).unwrap();
        // 2 Mbit/s: a 60-byte packet is 576 µs of data frame, 1194 µs in all.
        assert_eq!(b2.ppdu_us(60 + MAC_OVERHEAD_BYTES), 576.0);
        assert_eq!(unicast_us(Modulation::DsssLong, &b2, 60).round(), 1194.0);
        // ACKs: 304 µs at 1, 248 at 2, 203 at 11 Mbit/s (long); 107 at 11 short.
        for (r, short, ack) in [
            (1.0, false, 304.0),
            (2.0, false, 248.0),
            (11.0, false, 203.0),
            (11.0, true, 107.0),
        ] {
            let t = Rate::of(r, short).unwrap().ppdu_us(ACK_BYTES);
            assert_eq!(t.round(), ack, "{r}");
        }
        // OFDM ACK: 44 µs at 6, 28 at 24 Mbit/s.
        assert_eq!(Rate::of(6.0, false).unwrap().ppdu_us(ACK_BYTES), 44.0);
        assert_eq!(Rate::of(24.0, false).unwrap().ppdu_us(ACK_BYTES), 28.0);
        assert!(Rate::of(7.0, false).is_none());
        assert_eq!(
            Rate::of(1.0, true).unwrap().modulation,
            Modulation::DsssLong
        );
    }

    /// The reference's capacity bound, from these functions: the largest
    /// N with N·T(L) + ceil(N·b/F)·T_mc(F) ≤ 20 ms (F = 1440, b = seed
    /// layout bytes per packet).
    fn calls(cell: &CellPhy, voice: u32, multiplexed: bool) -> u32 {
        let up = cell.unicast_us(40 + voice);
        let b = 14 + 12 + voice;
        let mut n = 0;
        loop {
            let m = n + 1;
            let down = if multiplexed {
                f64::from((m * b).div_ceil(1440)) * cell.multicast_us(1440)
            } else {
                f64::from(m) * up
            };
            if f64::from(m) * up + down > 20_000.0 {
                return n;
            }
            n = m;
        }
    }

    /// b11: G.729 11 -> 22 calls with multicast at 11 Mbit/s (16 at 2);
    /// G.711 10 -> 16 at 11 Mbit/s, but 7 at 2 Mbit/s: below unicast.
    #[test]
    fn reference_capacity_bound() {
        let (mc11, mc2) = (b11(11.0), b11(2.0));
        assert_eq!(calls(&mc11, 20, false), 11);
        assert_eq!(calls(&mc11, 160, false), 10);
        assert_eq!(calls(&mc11, 20, true), 22);
        assert_eq!(calls(&mc2, 20, true), 16);
        assert_eq!(calls(&mc11, 160, true), 16);
        assert_eq!(calls(&mc2, 160, true), 7);
    }

    /// One frame of `n` seed-layout packets of `voice` bytes (2-byte count,
    /// 28 bytes UDP/IPv4) against their unicast exchanges: (frame µs,
    /// unicast µs, pays).
    fn frame(cell: &CellPhy, voice: u32, n: u32) -> (f64, f64, bool) {
        let ip = 28 + 2 + n * (14 + 12 + voice);
        let uni = f64::from(n) * cell.unicast_us(40 + voice);
        (cell.multicast_us(ip), uni, cell.frame_pays(ip, uni))
    }

    /// The per-frame rule on the same cell, numbers worked by hand
    /// (contention 50 + 310 µs, PLCP 192 µs, bits rounded up to a µs).
    #[test]
    fn per_frame_rule_g729_g711_at_11_and_2() {
        let (mc11, mc2) = (b11(11.0), b11(2.0));
        // G.729 at 11: even one packet pays (76-byte frame: 634 < 835 µs).
        assert_eq!(frame(&mc11, 20, 1), (634.0, 835.0, true));
        // G.711 at 11: one packet 736 < 937 µs.
        assert_eq!(frame(&mc11, 160, 1), (736.0, 937.0, true));
        // G.729 at 2: one packet alone does not pay (1000 > 835 µs), two do
        // (1184 < 1670 µs).
        assert_eq!(frame(&mc2, 20, 1), (1000.0, 835.0, false));
        assert_eq!(frame(&mc2, 20, 2), (1184.0, 1670.0, true));
        // G.711 at 2: 744 µs of bits per packet against 937 µs of a whole
        // unicast exchange, so only a well-filled frame pays: 3 packets
        // (3048 > 2811 µs) fall back, a full 1440-byte frame of 7 pays
        // (6024 < 6559 µs).
        assert_eq!(frame(&mc2, 160, 1), (1560.0, 937.0, false));
        assert_eq!(frame(&mc2, 160, 3), (3048.0, 2811.0, false));
        assert_eq!(frame(&mc2, 160, 7), (6024.0, 6559.0, true));
    }

    /// At equal rates a multicast frame always costs less than the unicast
    /// exchange of the same bytes (no SIFS, no ACK).
    #[test]
    fn multicast_without_ack_is_cheaper_at_equal_rate() {
        for r in [1.0, 2.0, 5.5, 11.0, 6.0, 54.0] {
            let rate = Rate::of(r, false).unwrap();
            let c = CellPhy {
                unicast: rate,
                multicast: rate,
            };
            for l in [60, 200, 1500] {
                assert!(c.multicast_us(l) < c.unicast_us(l));
            }
        }
    }
}
