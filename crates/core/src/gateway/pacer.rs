//! The TCP pacer of the gateway (seed 003, section 4.1, fig. 9): each TCP
//! flow is paced at its fair share of the total rate (evenly spaced
//! packets), and one aggregate pacer at the total rate spaces the packets of
//! all flows, so no two flows' packets leave in a burst either.
//!
//! Owns: release times. Sans-IO: the caller keeps the packets in its own
//! per-flow FIFOs and tells the pacer their lengths ([`Pacer::enqueue`]);
//! [`Pacer::poll_transmit`] says which flow's head packet leaves now and
//! [`Pacer::poll_timeout`] when the next one may. Must not touch: the rate
//! (see [`super::rate`]), packets' bytes, clocks.
//!
//! Spacing: a packet of `len` bytes released at `t` from flow `f` moves the
//! flow's next release to `max(next_f, t) + len * 8 / share` and the
//! aggregate's to `max(next, t) + len * 8 / total` (nanosecond arithmetic,
//! rounded up). An idle pacer earns no credit, so nothing ever leaves faster
//! than the rate over any window, and no burst exceeds one packet. The share
//! is total / flows with a backlog. Memory: `max_flows` FIFOs of
//! `queue_packets` lengths, allocated once.

use std::collections::VecDeque;

use crate::Micros;

/// Why [`Pacer::enqueue`] refused a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacerError {
    /// Flow index not below `max_flows`.
    NoSuchFlow,
    /// The flow's FIFO holds `queue_packets` already (the caller drops).
    QueueFull,
    /// Length 0 or above 65 535.
    BadLength,
}

#[derive(Clone, Debug)]
struct Flow {
    lens: VecDeque<u16>,
    next_ns: u64,
}

/// Per-flow plus aggregate pacer.
#[derive(Clone, Debug)]
pub struct Pacer {
    flows: Vec<Flow>,
    cap: usize,
    total_bps: u64,
    backlogged: usize,
    agg_next_ns: u64,
}

fn spacing_ns(len: usize, bps: u64) -> u64 {
    if bps == 0 {
        return u64::MAX;
    }
    let ns = (len as u128 * 8 * 1_000_000_000).div_ceil(u128::from(bps));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

impl Pacer {
    /// A pacer for flows `0..max_flows`, each with a FIFO of `queue_packets`.
    pub fn new(max_flows: usize, queue_packets: usize, total_bps: u64) -> Self {
        let cap = queue_packets.max(1);
        Pacer {
            flows: (0..max_flows)
                .map(|_| Flow {
                    lens: VecDeque::with_capacity(cap),
                    next_ns: 0,
                })
                .collect(),
            cap,
            total_bps,
            backlogged: 0,
            agg_next_ns: 0,
        }
    }

    /// Set the total rate (bit/s); 0 stops all releases.
    pub fn set_rate(&mut self, total_bps: u64) {
        self.total_bps = total_bps;
    }

    /// Total rate (bit/s).
    pub fn rate_bps(&self) -> u64 {
        self.total_bps
    }

    /// Flows with a backlog.
    pub fn backlogged(&self) -> usize {
        self.backlogged
    }

    /// Each backlogged flow's share (bit/s).
    pub fn share_bps(&self) -> u64 {
        self.total_bps / self.backlogged.max(1) as u64
    }

    /// Packets waiting in `flow` (0 for an unknown flow).
    pub fn queue_len(&self, flow: usize) -> usize {
        self.flows.get(flow).map_or(0, |f| f.lens.len())
    }

    /// A packet of `len` bytes joined the tail of `flow`'s FIFO.
    pub fn enqueue(&mut self, flow: usize, len: usize) -> Result<(), PacerError> {
        let len = u16::try_from(len)
            .ok()
            .filter(|&l| l > 0)
            .ok_or(PacerError::BadLength)?;
        let f = self.flows.get_mut(flow).ok_or(PacerError::NoSuchFlow)?;
        if f.lens.len() >= self.cap {
            return Err(PacerError::QueueFull);
        }
        if f.lens.is_empty() {
            self.backlogged += 1;
        }
        f.lens.push_back(len);
        Ok(())
    }

    /// Forget `flow`'s backlog (the flow ended); returns the packets dropped.
    pub fn clear_flow(&mut self, flow: usize) -> usize {
        let Some(f) = self.flows.get_mut(flow) else {
            return 0;
        };
        let n = f.lens.len();
        if n > 0 {
            self.backlogged -= 1;
        }
        f.lens.clear();
        n
    }

    /// Earliest time a packet may leave (`None`: nothing waits or rate 0).
    pub fn poll_timeout(&self) -> Option<Micros> {
        if self.total_bps == 0 {
            return None;
        }
        let ns = self
            .flows
            .iter()
            .filter(|f| !f.lens.is_empty())
            .map(|f| f.next_ns.max(self.agg_next_ns))
            .min()?;
        Some(ns.div_ceil(1000))
    }

    /// The packet that leaves now, if any: `(flow, len)`; the caller sends
    /// the head of that flow's FIFO. Call again until `None`.
    pub fn poll_transmit(&mut self, now: Micros) -> Option<(usize, usize)> {
        let now_ns = now.saturating_mul(1000);
        if self.total_bps == 0 || self.agg_next_ns > now_ns {
            return None;
        }
        let (i, _) = self
            .flows
            .iter()
            .enumerate()
            .filter(|(_, f)| !f.lens.is_empty() && f.next_ns <= now_ns)
            .min_by_key(|(i, f)| (f.next_ns, *i))?;
        let share = self.share_bps();
        let f = &mut self.flows[i];
        let len = usize::from(f.lens.pop_front()?);
        f.next_ns = f.next_ns.max(now_ns).saturating_add(spacing_ns(len, share));
        if f.lens.is_empty() {
            self.backlogged -= 1;
        }
        self.agg_next_ns = self
            .agg_next_ns
            .max(now_ns)
            .saturating_add(spacing_ns(len, self.total_bps));
        Some((i, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Drive the pacer from its own deadlines until it is empty; returns
    /// (time µs, flow, len) of every release.
    fn drain(p: &mut Pacer, mut now: Micros) -> Vec<(Micros, usize, usize)> {
        let mut out = Vec::new();
        while let Some(t) = p.poll_timeout() {
            now = now.max(t);
            while let Some((f, l)) = p.poll_transmit(now) {
                out.push((now, f, l));
            }
        }
        out
    }

    #[test]
    fn one_flow_is_evenly_spaced_at_the_rate() {
        // 1.2 Mbit/s, 1500-byte packets: one every 10 ms.
        let mut p = Pacer::new(4, 16, 1_200_000);
        for _ in 0..5 {
            p.enqueue(2, 1500).unwrap();
        }
        assert_eq!(p.queue_len(2), 5);
        let r = drain(&mut p, 1_000);
        let times: Vec<Micros> = r.iter().map(|x| x.0).collect();
        assert_eq!(times, vec![1_000, 11_000, 21_000, 31_000, 41_000]);
        assert!(r.iter().all(|&(_, f, l)| f == 2 && l == 1500));
        assert_eq!(p.poll_timeout(), None);
    }

    #[test]
    fn two_flows_share_fairly_and_interleave() {
        let mut p = Pacer::new(2, 64, 1_200_000);
        for _ in 0..10 {
            p.enqueue(0, 1500).unwrap();
            p.enqueue(1, 1500).unwrap();
        }
        assert_eq!((p.backlogged(), p.share_bps()), (2, 600_000));
        let r = drain(&mut p, 0);
        assert_eq!(r.len(), 20);
        // Alternating flows, still one packet per 10 ms in total.
        for (k, w) in r.windows(2).enumerate() {
            assert_ne!(w[0].1, w[1].1, "release {k}");
            assert_eq!(w[1].0 - w[0].0, 10_000);
        }
    }

    #[test]
    fn idle_time_earns_no_burst_and_rate_zero_stops() {
        let mut p = Pacer::new(1, 8, 1_200_000);
        p.enqueue(0, 1500).unwrap();
        assert_eq!(drain(&mut p, 0).len(), 1);
        // A second of silence, then 3 packets: still 10 ms apart.
        for _ in 0..3 {
            p.enqueue(0, 1500).unwrap();
        }
        let t: Vec<Micros> = drain(&mut p, 1_000_000).iter().map(|x| x.0).collect();
        assert_eq!(t, vec![1_000_000, 1_010_000, 1_020_000]);
        p.set_rate(0);
        p.enqueue(0, 100).unwrap();
        assert_eq!(
            (p.poll_timeout(), p.poll_transmit(u64::MAX / 1000)),
            (None, None)
        );
        assert_eq!(p.clear_flow(0), 1);
        assert_eq!(p.backlogged(), 0);
    }

    #[test]
    fn enqueue_limits() {
        let mut p = Pacer::new(1, 2, 1_000_000);
        assert_eq!(p.enqueue(1, 100), Err(PacerError::NoSuchFlow));
        assert_eq!(p.enqueue(0, 0), Err(PacerError::BadLength));
        assert_eq!(p.enqueue(0, 65_536), Err(PacerError::BadLength));
        p.enqueue(0, 100).unwrap();
        p.enqueue(0, 100).unwrap();
        assert_eq!(p.enqueue(0, 100), Err(PacerError::QueueFull));
        assert_eq!(p.clear_flow(7), 0);
    }

    proptest! {
        #[test]
        fn never_faster_than_the_rate_over_any_window(
            rate in 64_000u64..100_000_000,
            arrivals in proptest::collection::vec((0u64..50_000, 0usize..4, 40usize..1500), 1..120),
        ) {
            let mut p = Pacer::new(4, 1000, rate);
            let mut now = 0;
            let mut rel: Vec<(Micros, usize, usize)> = Vec::new();
            let mut sent: Vec<Vec<usize>> = vec![Vec::new(); 4];
            for (gap, flow, len) in arrivals {
                let until = now + gap;
                // Release what is due before the next arrival.
                while let Some(t) = p.poll_timeout().filter(|&t| t <= until) {
                    while let Some((f, l)) = p.poll_transmit(t) {
                        rel.push((t, f, l));
                    }
                }
                now = until;
                p.enqueue(flow, len).unwrap();
                sent[flow].push(len);
            }
            rel.extend(drain(&mut p, now));
            // Everything leaves, FIFO per flow.
            for (f, lens) in sent.iter().enumerate() {
                let got: Vec<usize> = rel.iter().filter(|r| r.1 == f).map(|r| r.2).collect();
                prop_assert_eq!(&got, lens);
            }
            // No two packets at once (no burst beyond one packet), and over
            // any window [t_i, t_j] the bytes are at most rate * (t_j - t_i)
            // plus the last packet.
            for w in rel.windows(2) {
                prop_assert!(w[1].0 > w[0].0, "{:?}", w);
            }
            for i in 0..rel.len() {
                let mut bytes = 0u128;
                for j in i..rel.len() {
                    bytes += rel[j].2 as u128;
                    let allowed = u128::from(rate) * u128::from(rel[j].0 - rel[i].0) / 8_000_000 + rel[j].2 as u128;
                    prop_assert!(bytes <= allowed + 1, "window {}..{}: {} > {}", i, j, bytes, allowed);
                }
            }
        }
    }
}
