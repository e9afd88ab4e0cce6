//! RFC 3550 interarrival jitter (section 6.4.1, algorithm of appendix A.8).
//!
//! Owns: the estimator only. Must not touch: clocks (arrival times come from
//! the caller in µs), sockets, other statistics.
//!
//! ```text
//! D(i,j) = (Rj - Ri) - (Sj - Si)      in RTP timestamp units
//! J      = J + (|D(i-1,i)| - J) / 16
//! ```
//!
//! computed over packets in arrival order, as RFC 3550 specifies. Arrival
//! times (µs) are converted to timestamp units with the RTP clock rate; RTP
//! timestamp differences are taken modulo 2^32 (wrap-safe).
//!
//! Besides the current value J (what an RTCP report carries, i.e. the value
//! at the end of a call), the estimator keeps the mean and the maximum of J
//! over the call: after every packet but the first, J is updated and then
//! added to the mean and compared with the maximum. So with N packets the
//! mean is over the N-1 values J(2)..J(N). This is Wireshark's "Mean Jitter"
//! and "Max Jitter" (`tshark -z rtp,streams`, ui/tap-rtp-analysis.c), except
//! that Wireshark leaves packets with the RTP marker bit out of its mean and
//! maximum (they still update J); with constant bit rate only the first
//! packet carries the marker, so the two agree.

/// Running jitter estimate for one RTP stream.
#[derive(Clone, Debug)]
pub struct JitterEstimator {
    clock_rate: u32,
    last: Option<(u64, u32)>,
    last_send: Option<(u64, u64)>,
    jitter: f64,
    /// Number of updates (packets after the first) and the sum and maximum
    /// of J after each.
    updates: u64,
    sum: f64,
    max: f64,
}

impl JitterEstimator {
    /// New estimator for an RTP clock rate in Hz (8000 for the voice codecs).
    pub fn new(clock_rate: u32) -> Self {
        Self {
            clock_rate: clock_rate.max(1),
            last: None,
            last_send: None,
            jitter: 0.0,
            updates: 0,
            sum: 0.0,
            max: 0.0,
        }
    }

    /// Account for one packet: its RTP timestamp and its arrival time (µs).
    pub fn update(&mut self, rtp_timestamp: u32, arrival_us: u64) {
        if let Some((last_arrival, last_ts)) = self.last {
            let dr_us = arrival_us as f64 - last_arrival as f64;
            let dr = dr_us * f64::from(self.clock_rate) / 1e6;
            let ds = f64::from(rtp_timestamp.wrapping_sub(last_ts) as i32);
            self.step((dr - ds).abs());
        }
        self.last = Some((arrival_us, rtp_timestamp));
    }

    /// Account for one packet by its send time instead of its RTP timestamp
    /// (both µs, same clock): the same estimator with S = actual send time,
    /// so a sender that sends late does not show up as network jitter.
    /// Use one kind of update per estimator.
    pub fn update_send_time(&mut self, send_us: u64, arrival_us: u64) {
        if let Some((last_arrival, last_send)) = self.last_send {
            let d_us =
                (arrival_us as f64 - last_arrival as f64) - (send_us as f64 - last_send as f64);
            self.step(d_us.abs() * f64::from(self.clock_rate) / 1e6);
        }
        self.last_send = Some((arrival_us, send_us));
    }

    /// One RFC 3550 step with |D| in timestamp units; tracks mean and max.
    fn step(&mut self, d: f64) {
        self.jitter += (d - self.jitter) / 16.0;
        self.updates += 1;
        self.sum += self.jitter;
        self.max = self.max.max(self.jitter);
    }

    /// Current estimate in RTP timestamp units (what an RTCP report carries).
    pub fn jitter_timestamp_units(&self) -> f64 {
        self.jitter
    }

    /// Current estimate in milliseconds.
    pub fn jitter_ms(&self) -> f64 {
        self.units_to_ms(self.jitter)
    }

    /// Mean of the estimate over the call (ms): the average of J after each
    /// packet but the first; 0 with fewer than two packets.
    pub fn mean_ms(&self) -> f64 {
        if self.updates == 0 {
            return 0.0;
        }
        self.units_to_ms(self.sum / self.updates as f64)
    }

    /// Largest value the estimate took over the call (ms).
    pub fn max_ms(&self) -> f64 {
        self.units_to_ms(self.max)
    }

    fn units_to_ms(&self, units: f64) -> f64 {
        units * 1000.0 / f64::from(self.clock_rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_delay_gives_zero_jitter() {
        let mut j = JitterEstimator::new(8000);
        for k in 0..100u32 {
            j.update(1000 + 160 * k, 5_000_000 + 20_000 * u64::from(k));
        }
        assert_eq!(j.jitter_timestamp_units(), 0.0);
    }

    #[test]
    fn hand_computed_sequence() {
        // 20 ms packets (160 units at 8 kHz) arriving at 0, 20, 45, 60, 80 ms.
        // D = 0, +40, -40, 0 units.
        // J: 0 -> 40/16 = 2.5 -> 2.5 + (40-2.5)/16 = 4.84375
        //    -> 4.84375 - 4.84375/16 = 4.541015625 units = 0.567626953125 ms
        let mut j = JitterEstimator::new(8000);
        let arrivals_ms = [0u64, 20, 45, 60, 80];
        let expect = [0.0, 0.0, 2.5, 4.84375, 4.541015625];
        for (k, (&a, &e)) in arrivals_ms.iter().zip(expect.iter()).enumerate() {
            j.update(160 * k as u32, a * 1000);
            assert!(
                (j.jitter_timestamp_units() - e).abs() < 1e-9,
                "packet {k}: {}",
                j.jitter_timestamp_units()
            );
        }
        assert!((j.jitter_ms() - 0.567626953125).abs() < 1e-12);
        // Mean and max over the four updates (J after packets 2..5).
        let mean_units = (0.0 + 2.5 + 4.84375 + 4.541015625) / 4.0;
        assert!(
            (j.mean_ms() - mean_units / 8.0).abs() < 1e-12,
            "{}",
            j.mean_ms()
        );
        assert!((j.max_ms() - 4.84375 / 8.0).abs() < 1e-12);
    }

    #[test]
    fn a_spike_shows_in_mean_and_max_long_after_the_final_value_forgot_it() {
        // 20 ms CBR, constant 10 ms delay, except one 1 s delay spike for
        // packets 100..150 (a queue that built up, then drained at once).
        let mut j = JitterEstimator::new(8000);
        let mut spike_max = 0.0f64;
        for k in 0..1000u64 {
            let send = 20_000 * k;
            let delay = if (100..150).contains(&k) {
                1_000_000 - 20_000 * (k - 100)
            } else {
                10_000
            };
            j.update_send_time(send, send + delay);
            if k == 151 {
                spike_max = j.max_ms();
            }
        }
        // Entering the spike: |D| = 990 ms -> J = 990/16 ms; that is the max.
        assert!((spike_max - 990.0 / 16.0).abs() < 1.0, "{spike_max}");
        assert_eq!(j.max_ms(), spike_max, "nothing after the spike is larger");
        // 850 quiet packets later the final value has decayed to nothing...
        assert!(j.jitter_ms() < 1e-6, "{}", j.jitter_ms());
        // ...but the mean still carries it.
        assert!(j.mean_ms() > 1.0, "{}", j.mean_ms());
        assert_eq!(JitterEstimator::new(8000).mean_ms(), 0.0);
    }

    #[test]
    fn silence_gap_with_constant_delay_is_not_jitter_and_wrap_is_safe() {
        // RTP timestamps keep counting through a 1 s silence and across 2^32.
        let mut j = JitterEstimator::new(8000);
        let ts0 = u32::MAX - 200;
        j.update(ts0, 1_000_000);
        j.update(ts0.wrapping_add(160), 1_020_000);
        j.update(ts0.wrapping_add(160 + 8000), 2_020_000);
        assert_eq!(j.jitter_timestamp_units(), 0.0);
        // one packet 8 ms late: |D| = 64 units -> J = 4
        j.update(ts0.wrapping_add(320 + 8000), 2_048_000);
        assert!((j.jitter_timestamp_units() - 4.0).abs() < 1e-9);
        assert!((j.jitter_ms() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn send_time_variant_ignores_sender_lateness() {
        // The sender sends packet 2 5 ms late; the network delay is constant.
        let mut by_ts = JitterEstimator::new(8000);
        let mut by_send = JitterEstimator::new(8000);
        let sends = [0u64, 20_000, 45_000, 60_000];
        for (k, &s) in sends.iter().enumerate() {
            by_ts.update(160 * k as u32, s + 3_000);
            by_send.update_send_time(s, s + 3_000);
        }
        assert_eq!(by_send.jitter_timestamp_units(), 0.0);
        assert!(by_ts.jitter_timestamp_units() > 4.0);
        // Same hand-computed sequence as above through the send-time path.
        let mut j = JitterEstimator::new(8000);
        for (k, a) in [0u64, 20, 45, 60, 80].iter().enumerate() {
            j.update_send_time(20_000 * k as u64, a * 1000);
        }
        assert!((j.jitter_timestamp_units() - 4.541015625).abs() < 1e-9);
    }

    #[test]
    fn alternating_delays_converge_to_the_step() {
        // Delay alternates 0 / 10 ms: |D| is always 80 units; J -> 80.
        let mut j = JitterEstimator::new(8000);
        for k in 0..400u64 {
            let extra = if k % 2 == 0 { 0 } else { 10_000 };
            j.update((160 * k) as u32, 20_000 * k + extra);
        }
        assert!((j.jitter_timestamp_units() - 80.0).abs() < 1e-6);
        assert!((j.jitter_ms() - 10.0).abs() < 1e-6);
    }
}
