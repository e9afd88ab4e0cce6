//! The bounded per-stream estimators the receive statistics feed: the
//! one-way delay histogram ([`DelayHistogram`], log-linear, about 9 KB,
//! relative resolution 1/64) and the two-state loss model that gives the
//! burst ratio ([`LossMarkov`]).
//!
//! Owns: their memory bounds and their math. Must not touch: packets,
//! sequence numbers or playout (the accumulator in [`super`] decides what
//! is recorded), sockets, clocks, files.

/// Log-linear histogram of µs values: exact below 128, then 64 buckets per
/// power of two up to 2^40 µs (larger values land in the last bucket).
#[derive(Clone)]
pub struct DelayHistogram {
    counts: Box<[u32; HIST_BUCKETS]>,
    total: u64,
}

pub(super) const HIST_BUCKETS: usize = 128 + 33 * 64;

impl Default for DelayHistogram {
    fn default() -> Self {
        Self {
            counts: Box::new([0; HIST_BUCKETS]),
            total: 0,
        }
    }
}

impl std::fmt::Debug for DelayHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayHistogram")
            .field("total", &self.total)
            .finish()
    }
}

impl DelayHistogram {
    pub(super) fn index(v: u64) -> usize {
        if v < 128 {
            return v as usize;
        }
        let k = 63 - v.leading_zeros() as usize; // 7..=63
        if k >= 40 {
            return HIST_BUCKETS - 1;
        }
        let shift = k - 6;
        128 + (k - 7) * 64 + ((v >> shift) as usize - 64)
    }

    /// Lowest value and width of a bucket.
    pub(super) fn bounds(i: usize) -> (u64, u64) {
        if i < 128 {
            return (i as u64, 1);
        }
        let k = (i - 128) / 64 + 7;
        let sub = ((i - 128) % 64 + 64) as u64;
        (sub << (k - 6), 1u64 << (k - 6))
    }

    /// Count one value.
    pub fn record(&mut self, v: u64) {
        let c = &mut self.counts[Self::index(v)];
        *c = c.saturating_add(1);
        self.total += 1;
    }

    /// Number of values recorded.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The q-quantile (0 < q <= 1): the middle of the bucket holding the
    /// value of rank ceil(q n). `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let q = if q.is_finite() {
            q.clamp(0.0, 1.0)
        } else {
            1.0
        };
        let rank = ((q * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                let (lo, w) = Self::bounds(i);
                return Some(lo as f64 + (w as f64 - 1.0) / 2.0);
            }
        }
        None
    }
}

/// Two-state (received / lost) Markov loss model fed in sequence order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LossMarkov {
    prev_lost: Option<bool>,
    /// Transitions out of "received", and how many went to "lost".
    from_received: u64,
    received_to_lost: u64,
    /// Transitions out of "lost", and how many went to "received".
    from_lost: u64,
    lost_to_received: u64,
}

/// Largest BurstR reported (a loss that never recovers).
pub const MAX_BURST_R: f64 = 100.0;

impl LossMarkov {
    /// Next packet's state.
    pub fn push(&mut self, lost: bool) {
        if let Some(prev) = self.prev_lost {
            if prev {
                self.from_lost += 1;
                self.lost_to_received += u64::from(!lost);
            } else {
                self.from_received += 1;
                self.received_to_lost += u64::from(lost);
            }
        }
        self.prev_lost = Some(lost);
    }

    /// `n` packets in the same state.
    pub fn push_run(&mut self, lost: bool, n: u64) {
        if n == 0 {
            return;
        }
        self.push(lost);
        if lost {
            self.from_lost += n - 1;
        } else {
            self.from_received += n - 1;
        }
    }

    /// BurstR = 1 / (p + q) with p = P(lost | received before) and
    /// q = P(received | lost before) (ITU-T G.107 annex, G.113); 1 for
    /// random loss, > 1 for bursty loss. 1 when there is no loss.
    pub fn burst_r(&self) -> f64 {
        if self.received_to_lost == 0 && self.from_lost == 0 {
            return 1.0;
        }
        let p = if self.from_received == 0 {
            1.0
        } else {
            self.received_to_lost as f64 / self.from_received as f64
        };
        let q = if self.from_lost == 0 {
            1.0
        } else {
            self.lost_to_received as f64 / self.from_lost as f64
        };
        if p + q <= 0.0 {
            return MAX_BURST_R;
        }
        (1.0 / (p + q)).min(MAX_BURST_R)
    }
}
