//! Link quality and the bundle size it calls for (issue 11 point 4).
//!
//! Owns: the receiving side's estimate of one neighbour's link
//! ([`LinkEstimate`]: EWMA of the hello delivery ratio, ETX with the ratio
//! the neighbour reports for us, EWMA of signal-to-noise when the radio gives
//! it), the bit error rate inferred from them, and the 802.11 airtime model
//! ([`AirModel`]) that maps a bit error rate to the bundle size with the most
//! expected goodput per airtime ([`AirModel::best_size`]). The model and a
//! worked example: `docs/adaptive.md`. Must not touch: neighbour state,
//! sockets, time (samples come in; sizes go out). Float maths, called once
//! per hello per neighbour (about 1/s), never per packet.

/// 802.11 bytes added to each IP packet: 24 MAC header + 4 FCS + 8 LLC/SNAP.
pub const MAC_OVERHEAD: usize = 36;

/// Airtime of one unicast frame exchange as a function of the IP packet
/// length: `T(L) = fixed_us + 8 (L + 36) / rate`, with `fixed_us` = DIFS +
/// mean backoff (CWmin/2 slots) + PLCP preamble and header + SIFS + ACK.
/// Numbers: `shared/reference/80211-voice-numbers.md` (802.11 DCF timing).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AirModel {
    /// Fixed cost of one exchange, µs.
    pub fixed_us: f64,
    /// Data rate, Mbit/s (= bits per µs).
    pub rate_mbps: f64,
    /// Channel bandwidth for Eb/N0 = SNR · bandwidth / rate, MHz.
    pub bandwidth_mhz: f64,
}

impl AirModel {
    /// 802.11b, long preamble (192 µs PLCP at 1 Mbit/s), DIFS 50, SIFS 10,
    /// slot 20, CWmin 31, ACK at the data rate, 22 MHz channel.
    pub fn dot11b_long(rate_mbps: f64) -> AirModel {
        let plcp = 192.0;
        let ack = plcp + 8.0 * 14.0 / rate_mbps;
        AirModel {
            fixed_us: 50.0 + 15.5 * 20.0 + plcp + 10.0 + ack,
            rate_mbps,
            bandwidth_mhz: 22.0,
        }
    }

    /// 802.11a/g OFDM, 20 µs preamble, DIFS 34, SIFS 16, slot 9, CWmin 15,
    /// ACK at `ack_rate_mbps` (24 for data rates ≥ 24, else 6 or 12), 20 MHz.
    /// The 16 service and 6 tail bits count in the fixed part; symbol padding
    /// is averaged out (half a 4 µs symbol per frame).
    pub fn dot11a(rate_mbps: f64, ack_rate_mbps: f64) -> AirModel {
        let ack = 20.0 + 4.0 * ((16.0 + 112.0 + 6.0) / (4.0 * ack_rate_mbps)).ceil();
        AirModel {
            fixed_us: 34.0 + 7.5 * 9.0 + 20.0 + 22.0 / rate_mbps + 2.0 + 16.0 + ack,
            rate_mbps,
            bandwidth_mhz: 20.0,
        }
    }

    /// Airtime of one exchange carrying an IP packet of `len` bytes, µs.
    pub fn airtime_us(&self, len: usize) -> f64 {
        self.fixed_us + 8.0 * (len + MAC_OVERHEAD) as f64 / self.rate_mbps
    }

    /// Probability that a frame carrying `len` IP bytes is damaged at bit
    /// error rate `ber`: `1 - (1 - ber)^(8 (len + 36))`.
    pub fn fer(&self, len: usize, ber: f64) -> f64 {
        1.0 - ((8 * (len + MAC_OVERHEAD)) as f64 * (-ber).ln_1p()).exp()
    }

    /// Expected IP bytes delivered per µs of airtime when every frame
    /// carries `len` bytes (retries or not: each attempt costs `T(len)` and
    /// succeeds with `1 - FER`).
    pub fn goodput(&self, len: usize, ber: f64) -> f64 {
        len as f64 * (1.0 - self.fer(len, ber)) / self.airtime_us(len)
    }

    /// The length in `lo..=hi` with the highest [`AirModel::goodput`]. With
    /// `a = fixed + 8·36/R`, `b = 8/R`, `k = -8 ln(1-ber)`, the maximum of
    /// `L e^(-kL) / (a + bL)` is at `b L² + a L - a/k = 0` (the derivative of
    /// its logarithm, `a/(L(a+bL)) - k`, falls with L, so there is one); the
    /// root is rounded to the better neighbouring integer and clamped.
    pub fn best_size(&self, ber: f64, lo: usize, hi: usize) -> usize {
        let hi = hi.max(lo);
        let k = -8.0 * (-ber).ln_1p();
        if k.is_nan() || k == f64::INFINITY {
            return lo; // every frame is lost: the smallest is least bad
        }
        if k <= 0.0 {
            return hi; // no errors: the largest
        }
        let a = self.fixed_us + 8.0 * MAC_OVERHEAD as f64 / self.rate_mbps;
        let b = 8.0 / self.rate_mbps;
        let root = (-a + (a * a + 4.0 * a * b / k).sqrt()) / (2.0 * b);
        if !root.is_finite() || root >= hi as f64 {
            return hi;
        }
        if root <= lo as f64 {
            return lo;
        }
        let f = root.floor() as usize;
        let c = f + 1;
        if self.goodput(c, ber) > self.goodput(f, ber) {
            c.min(hi)
        } else {
            f.max(lo)
        }
    }

    /// Bit error rate of an idealised DBPSK receiver (802.11b at 1 Mbit/s;
    /// an optimistic bound at higher rates) at `snr_db` over the channel:
    /// `½ exp(-Eb/N0)`, `Eb/N0 = SNR · bandwidth / rate`.
    pub fn ber_from_snr(&self, snr_db: f64) -> f64 {
        let snr = 10f64.powf(snr_db / 10.0);
        0.5 * (-snr * self.bandwidth_mhz / self.rate_mbps).exp()
    }
}

/// Bit error rate that explains a delivery ratio `p` of frames carrying
/// `len` IP bytes: `1 - p^(1 / (8 (len + 36)))`.
pub fn ber_from_delivery(p: f64, len: usize) -> f64 {
    let p = p.clamp(0.0, 1.0);
    if p <= 0.0 {
        return 0.5;
    }
    let bits = (8 * (len + MAC_OVERHEAD)) as f64;
    -(p.ln() / bits).exp_m1()
}

/// Which measurement decided a size (`airpack peers`: `ask_source`,
/// `quality_source`; the rules: `docs/adaptive.md`, "Radio figures").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// No loss seen and no SNR that predicts any: the largest size.
    None,
    /// Our share of the neighbour's hellos.
    Hello,
    /// The radio's signal over its noise floor.
    Snr,
    /// The radio's MAC counters of our frames to the neighbour (retries, failures).
    Mac,
    /// The size the neighbour asked for in its hello (its own measurements).
    Neighbor,
}

impl Source {
    /// Label for the operator.
    pub fn name(self) -> &'static str {
        match self {
            Source::None => "none",
            Source::Hello => "hello",
            Source::Snr => "snr",
            Source::Mac => "mac",
            Source::Neighbor => "neighbor",
        }
    }
}

/// A gap in a neighbour's hello sequence numbers larger than this (or a step
/// back) is taken as a restart: the estimate starts over.
pub const MAX_GAP: u64 = 64;

/// The receiving side's view of one neighbour's link.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkEstimate {
    /// Weight of a new sample in the EWMAs (seed 001: 1/8).
    pub alpha: f64,
    rx: Option<f64>,
    last_seq: Option<u64>,
    snr_db: Option<f64>,
    /// Delivery ratio of our hellos as the neighbour reports it (0..=1).
    fwd: Option<f64>,
}

impl LinkEstimate {
    /// No sample yet; `alpha` in (0, 1].
    pub fn new(alpha: f64) -> LinkEstimate {
        LinkEstimate {
            alpha: alpha.clamp(f64::MIN_POSITIVE, 1.0),
            rx: None,
            last_seq: None,
            snr_db: None,
            fwd: None,
        }
    }

    /// A hello with sequence number `seq` arrived: the hellos missed since
    /// the previous one count as lost samples, this one as received. A
    /// duplicate or reordered number changes nothing; a step back or a gap
    /// over [`MAX_GAP`] restarts the estimate.
    pub fn on_hello(&mut self, seq: u64) {
        let missed = match self.last_seq {
            None => 0,
            Some(last) if seq == last => return,
            Some(last) if seq < last || seq - last > MAX_GAP => {
                self.rx = None;
                0
            }
            Some(last) => seq - last - 1,
        };
        self.last_seq = Some(seq);
        let keep = 1.0 - self.alpha;
        self.rx = Some(match self.rx {
            None => 1.0,
            Some(r) => r * keep.powi(missed as i32) * keep + self.alpha,
        });
    }

    /// The radio reported signal and noise (dBm) for a frame of this neighbour.
    pub fn on_radio(&mut self, signal_dbm: i8, noise_dbm: i8) {
        let s = f64::from(signal_dbm) - f64::from(noise_dbm);
        self.snr_db = Some(match self.snr_db {
            None => s,
            Some(v) => v + self.alpha * (s - v),
        });
    }

    /// The neighbour's hello reported the share of our hellos it received.
    pub fn on_reported(&mut self, rx_ratio: u8) {
        self.fwd = Some(f64::from(rx_ratio) / 255.0);
    }

    /// Smoothed share of the neighbour's hellos we received (1 before any).
    pub fn rx_ratio(&self) -> f64 {
        self.rx.unwrap_or(1.0)
    }

    /// [`LinkEstimate::rx_ratio`] on the wire scale, 0..=255.
    pub fn rx_ratio_u8(&self) -> u8 {
        (self.rx_ratio() * 255.0).round().clamp(0.0, 255.0) as u8
    }

    /// Smoothed signal-to-noise ratio, dB, if the radio reported any.
    pub fn snr_db(&self) -> Option<f64> {
        self.snr_db
    }

    /// Expected transmissions per delivered frame, `1 / (d_f · d_r)` (De
    /// Couto et al.), once the neighbour has reported our ratio; infinite
    /// when either ratio is 0.
    pub fn etx(&self) -> Option<f64> {
        let f = self.fwd?;
        let d = f * self.rx_ratio();
        Some(if d > 0.0 { 1.0 / d } else { f64::INFINITY })
    }

    /// Bit error rate of the neighbour-to-us direction: the worse of what the
    /// hello losses (hellos of `hello_len` IP bytes) and the SNR explain.
    pub fn ber(&self, model: &AirModel, hello_len: usize) -> f64 {
        self.ber_source(model, hello_len).0
    }

    /// [`LinkEstimate::ber`] and which measurement gave it.
    pub fn ber_source(&self, model: &AirModel, hello_len: usize) -> (f64, Source) {
        let from_loss = ber_from_delivery(self.rx_ratio(), hello_len);
        match self.snr_db.map(|s| model.ber_from_snr(s)) {
            Some(b) if b > from_loss => (b, Source::Snr),
            _ if from_loss > 0.0 => (from_loss, Source::Hello),
            _ => (from_loss, Source::None),
        }
    }

    /// The largest bundle (IP bytes) this neighbour should send us.
    pub fn max_bundle(&self, model: &AirModel, hello_len: usize, lo: usize, hi: usize) -> usize {
        model.best_size(self.ber(model, hello_len), lo, hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// The reference's worked example: 802.11b long preamble, 2 Mbit/s,
    /// one 60-byte packet = 1194 µs exchange; a 600-byte frame = 3354 µs.
    #[test]
    fn airtime_matches_the_reference() {
        let m = AirModel::dot11b_long(2.0);
        assert!(close(m.fixed_us, 810.0, 1e-9));
        assert!(close(m.airtime_us(60), 1194.0, 1e-9));
        assert!(close(m.airtime_us(600), 3354.0, 1e-9));
        // ACK times of the reference table: 304 µs at 1, 203 (202.2) at 11.
        assert!(close(
            AirModel::dot11b_long(1.0).fixed_us - 562.0,
            304.0,
            1e-9
        ));
        assert!(close(
            AirModel::dot11b_long(11.0).fixed_us - 562.0,
            202.18,
            0.01
        ));
        // 802.11a ACK: 44 µs at 6 Mbit/s, 28 at 24.
        let a6 = AirModel::dot11a(6.0, 6.0);
        let a24 = AirModel::dot11a(24.0, 24.0);
        assert!(close(
            a6.fixed_us - a24.fixed_us,
            16.0 + 22.0 / 6.0 - 22.0 / 24.0,
            1e-9
        ));
    }

    /// Hand computation (docs/adaptive.md): a = 954 µs, b = 4 µs/byte,
    /// k = 8e-4 at BER 1e-4: L* = (-954 + sqrt(954² + 4·954·4/k)) / 8 =
    /// 439.6 → 440 bytes = 7.3 sixty-byte packets (reference: about 7);
    /// BER 1e-5: 1610.8 → 1611 bytes (26.9 packets, reference 27); BER 1e-3:
    /// k = 8.004e-3, 90.56 → 91 bytes (1.5 packets, reference 2).
    #[test]
    fn best_size_hand_computed() {
        let m = AirModel::dot11b_long(2.0);
        assert_eq!(m.best_size(1e-4, 20, 65_535), 440);
        assert_eq!(m.best_size(1e-5, 20, 65_535), 1611);
        assert_eq!(m.best_size(1e-3, 20, 65_535), 91);
        // Clamped to the range, and no errors means the largest.
        assert_eq!(m.best_size(1e-5, 20, 1500), 1500);
        assert_eq!(m.best_size(1e-3, 128, 1500), 128);
        assert_eq!(m.best_size(0.0, 128, 1500), 1500);
    }

    #[test]
    fn best_size_is_the_scan_maximum() {
        for rate in [1.0, 2.0, 5.5, 11.0] {
            let m = AirModel::dot11b_long(rate);
            for ber in [3e-6, 1e-5, 5e-5, 1e-4, 3e-4, 1e-3] {
                let best = m.best_size(ber, 20, 4000);
                let scan = (20..=4000)
                    .max_by(|&x, &y| m.goodput(x, ber).total_cmp(&m.goodput(y, ber)))
                    .unwrap();
                assert_eq!(best, scan, "rate {rate} ber {ber}");
            }
        }
    }

    /// docs/adaptive.md, worked example from hellos: 11 Mbit/s, a 98-byte
    /// hello (3 IPv4 entries) delivered 90 % of the time: BER 9.83e-5, best
    /// size 752 bytes, where 1500 bytes give 79 % of its goodput; 80 %: 430
    /// (34 %); 50 %: 168; 99 %: above 1500, so 1500.
    #[test]
    fn hello_loss_worked_example_11mbps() {
        let m = AirModel::dot11b_long(11.0);
        assert!(close(m.fixed_us, 764.18, 0.01));
        let ber = ber_from_delivery(0.9, 98);
        assert!(close(ber, 9.828e-5, 1e-8), "{ber}");
        assert_eq!(m.best_size(ber, 128, 1500), 752);
        let share = m.goodput(1500, ber) / m.goodput(752, ber);
        assert!(close(share, 0.787, 0.001), "{share}");
        let ber8 = ber_from_delivery(0.8, 98);
        assert_eq!(m.best_size(ber8, 128, 1500), 430);
        assert!(close(
            m.goodput(1500, ber8) / m.goodput(430, ber8),
            0.344,
            0.001
        ));
        assert_eq!(m.best_size(ber_from_delivery(0.5, 98), 128, 1500), 168);
        assert_eq!(m.best_size(ber_from_delivery(0.99, 98), 128, 1500), 1500);
        assert_eq!(m.best_size(ber_from_delivery(0.99, 98), 128, 65_535), 3302);
    }

    /// A 100-byte hello (136 bytes on air) delivered 90 % of the time:
    /// BER = 1 - 0.9^(1/1088) = 9.684e-5.
    #[test]
    fn ber_from_hello_loss() {
        let ber = ber_from_delivery(0.9, 100);
        assert!(close(ber, 9.684e-5, 1e-8), "{ber}");
        assert_eq!(ber_from_delivery(1.0, 100), 0.0);
        assert_eq!(ber_from_delivery(0.0, 100), 0.5);
    }

    #[test]
    fn estimate_ewma_and_gaps() {
        let mut e = LinkEstimate::new(0.125);
        assert_eq!(e.rx_ratio(), 1.0);
        e.on_hello(10);
        e.on_hello(11);
        assert_eq!(e.rx_ratio(), 1.0);
        // 12 and 13 lost: 1 · 0.875³ + 0.125 = 0.794921875.
        e.on_hello(14);
        assert!(close(e.rx_ratio(), 0.794_921_875, 1e-12));
        assert_eq!(e.rx_ratio_u8(), 203);
        // A duplicate changes nothing; a restart starts over.
        e.on_hello(14);
        assert!(close(e.rx_ratio(), 0.794_921_875, 1e-12));
        e.on_hello(3);
        assert_eq!(e.rx_ratio(), 1.0);
        e.on_hello(3 + MAX_GAP + 1);
        assert_eq!(e.rx_ratio(), 1.0);
        // ETX = 1 / (0.5 · 1).
        assert_eq!(e.etx(), None);
        e.on_reported(255);
        assert_eq!(e.etx(), Some(1.0));
        e.on_reported(0);
        assert_eq!(e.etx(), Some(f64::INFINITY));
    }

    /// SNR: 10 dB at 11 Mbit/s over 22 MHz: Eb/N0 = 20, BER = ½e^-20 =
    /// 1.03e-9 (negligible); 0 dB: Eb/N0 = 2, BER = 0.0677, which dominates
    /// a loss-free hello record.
    #[test]
    fn snr_bounds_the_estimate() {
        let m = AirModel::dot11b_long(11.0);
        assert!(close(m.ber_from_snr(10.0), 0.5 * (-20f64).exp(), 1e-15));
        let mut e = LinkEstimate::new(0.125);
        e.on_hello(1);
        e.on_radio(-60, -70);
        assert_eq!(e.snr_db(), Some(10.0));
        assert_eq!(e.ber(&m, 100), m.ber_from_snr(10.0));
        e.on_radio(-80, -70); // -10 dB sample: 10 + (−10 − 10)/8 = 7.5
        assert_eq!(e.snr_db(), Some(7.5));
        let mut bad = LinkEstimate::new(1.0);
        bad.on_radio(-90, -90);
        assert!(close(bad.ber(&m, 100), 0.5 * (-2f64).exp(), 1e-12));
        assert_eq!(bad.max_bundle(&m, 100, 128, 1500), 128);
    }
}
