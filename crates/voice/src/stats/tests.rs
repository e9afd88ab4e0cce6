//! Unit tests of the receive statistics and the quality assessment.

use super::measures::HIST_BUCKETS;
use super::*;
use crate::codec::{Codec, Profile};

const T0: u64 = 10_000_000;

/// Packet k of a 20 ms stream, sent at T0 + 20k ms, with a network delay.
fn pkt(k: u16, delay_ms: u64) -> RxPacket {
    let send = T0 + 20_000 * u64::from(k);
    RxPacket {
        seq: k.wrapping_add(65000),
        rtp_ts: 160 * u32::from(k),
        marker: k == 0,
        send_us: send,
        recv_us: send + delay_ms * 1000,
    }
}

fn g729() -> Profile {
    Codec::G729.profile(20).unwrap()
}

#[test]
fn clean_stream_is_perfect_and_supported() {
    let mut s = StreamStats::new(8000, 60.0);
    for k in 0..500 {
        assert_eq!(s.on_packet(&pkt(k, 10)), Verdict::OnTime);
    }
    let sum = s.summary();
    assert_eq!(
        (sum.received, sum.late, sum.duplicates, sum.reordered),
        (500, 0, 0, 0)
    );
    assert_eq!(sum.delay_mean_ms, Some(10.0));
    assert_eq!(sum.delay_max_ms, Some(10.0));
    assert_eq!(sum.jitter_ms, 0.0);
    assert_eq!(sum.playout_delay_ms, Some(70.0));
    let q = assess(500, &sum, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
    assert_eq!(q.loss_pct, 0.0);
    assert_eq!(q.mouth_to_ear_ms, 95.0); // 10 + 60 + 20 + 5
    let expect_r = 93.2 - 0.024 * 95.0 - 11.0;
    assert!((q.r - expect_r).abs() < 1e-9);
    assert!(q.mos > 3.9 && q.supported, "{q:?}");
}

#[test]
fn loss_is_sent_minus_unique_received() {
    let mut s = StreamStats::new(8000, 60.0);
    for k in 0..100u16 {
        if k % 10 != 3 {
            s.on_packet(&pkt(k, 5));
        }
    }
    let q = assess(100, &s.summary(), &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
    assert_eq!((q.received, q.loss_pct), (90, 10.0));
    assert!(!q.supported, "10% loss on G.729 must fail: {q:?}");
    // The seeds criterion too (loss >= 4 %).
    let q = assess(
        100,
        &s.summary(),
        &g729(),
        Criterion::Seeds,
        DEFAULT_MIN_MOS,
    );
    assert!(!q.supported);
    // 2 % loss passes the seeds' rule.
    let q = assess(92, &s.summary(), &g729(), Criterion::Seeds, DEFAULT_MIN_MOS);
    assert!(q.loss_pct < 4.0 && q.supported, "{q:?}");
}

#[test]
fn duplicates_and_reordering_are_counted_not_double_counted() {
    let mut s = StreamStats::new(8000, 60.0);
    let order = [0u16, 1, 3, 2, 2, 4, 3, 5, 1];
    let verdicts: Vec<_> = order.iter().map(|&k| s.on_packet(&pkt(k, 5))).collect();
    assert_eq!(verdicts[3], Verdict::OnTime); // 2 after 3: reordered but on time
    assert_eq!(verdicts[4], Verdict::Duplicate);
    assert_eq!(verdicts[6], Verdict::Duplicate);
    assert_eq!(verdicts[8], Verdict::Duplicate);
    let sum = s.summary();
    assert_eq!((sum.received, sum.duplicates, sum.reordered), (6, 3, 1));
    let q = assess(6, &sum, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
    assert_eq!(q.loss_pct, 0.0);
}

#[test]
fn late_packets_behind_the_fixed_playout_deadline() {
    // First packet: 10 ms -> deadline 70 ms. Packets at 70 are on time,
    // 71 and 200 are late.
    let mut s = StreamStats::new(8000, 60.0);
    assert_eq!(s.on_packet(&pkt(0, 10)), Verdict::OnTime);
    assert_eq!(s.on_packet(&pkt(1, 70)), Verdict::OnTime);
    assert_eq!(s.on_packet(&pkt(2, 71)), Verdict::Late);
    assert_eq!(s.on_packet(&pkt(3, 200)), Verdict::Late);
    assert_eq!(s.on_packet(&pkt(4, 5)), Verdict::OnTime);
    let sum = s.summary();
    assert_eq!((sum.received, sum.late), (5, 2));
    let q = assess(5, &sum, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
    assert_eq!(
        (q.loss_pct, q.late_pct, q.effective_loss_pct),
        (0.0, 40.0, 40.0)
    );
    assert!(!q.supported);
    // The seeds' criterion ignores late loss: mean delay 71.2 + jitter.
    let q = assess(5, &sum, &g729(), Criterion::Seeds, DEFAULT_MIN_MOS);
    assert!(q.supported, "{q:?}");
}

#[test]
fn a_marker_bit_resets_the_playout_delay_per_talk_spurt() {
    let mut s = StreamStats::new(8000, 60.0);
    assert_eq!(s.on_packet(&pkt(0, 10)), Verdict::OnTime); // deadline 70
    let mut p = pkt(1, 100);
    p.marker = true; // new talk spurt with 100 ms delay: deadline 160
    assert_eq!(s.on_packet(&p), Verdict::OnTime);
    assert_eq!(s.on_packet(&pkt(2, 150)), Verdict::OnTime);
    assert_eq!(s.on_packet(&pkt(3, 161)), Verdict::Late);
    let sum = s.summary();
    assert_eq!(sum.talk_spurts, 2);
    // on-time playout delays: 70, 160, 160
    assert!((sum.playout_delay_ms.unwrap() - 130.0).abs() < 1e-9);
    // A lost marker packet: a timestamp jump still starts a spurt when
    // the step is known.
    let mut t = StreamStats::new(8000, 60.0).with_timestamp_step(160);
    let mut u = StreamStats::new(8000, 60.0);
    for st in [&mut t, &mut u] {
        assert_eq!(st.on_packet(&pkt(0, 10)), Verdict::OnTime);
        assert_eq!(st.on_packet(&pkt(2, 10)), Verdict::OnTime); // one lost, no silence
    }
    assert_eq!(t.summary().talk_spurts, 1);
    // packet 3 sent after 1 s of silence: seq +1, timestamp +8160
    let mut q = pkt(3, 100);
    q.rtp_ts += 8000;
    q.send_us += 1_000_000;
    q.recv_us += 1_000_000;
    assert_eq!(t.on_packet(&q), Verdict::OnTime);
    assert_eq!(u.on_packet(&q), Verdict::Late);
    assert_eq!((t.summary().talk_spurts, u.summary().talk_spurts), (2, 1));
    // A reordered old packet with a marker does not reset it.
    let mut old = pkt(0, 1);
    old.seq = old.seq.wrapping_sub(5);
    old.marker = true;
    s.on_packet(&old);
    assert_eq!(s.summary().talk_spurts, 2);
}

#[test]
fn sender_lateness_is_not_network_jitter() {
    let mut s = StreamStats::new(8000, 60.0);
    for k in 0..50u16 {
        let mut p = pkt(k, 4);
        if k % 5 == 0 {
            // sent 3 ms behind schedule; same 4 ms network delay
            p.send_us += 3_000;
            p.recv_us += 3_000;
        }
        assert_eq!(s.on_packet(&p), Verdict::OnTime);
    }
    let sum = s.summary();
    assert_eq!(sum.jitter_ms, 0.0);
    assert!(sum.jitter_rtp_ms > 0.3, "{}", sum.jitter_rtp_ms);
}

#[test]
fn burst_ratio_of_random_and_bursty_loss() {
    // No loss: 1.
    let mut s = StreamStats::new(8000, 60.0);
    for k in 0..3000u16 {
        s.on_packet(&pkt(k, 5));
    }
    assert_eq!(s.summary().burst_r, 1.0);

    // Isolated losses every 10th packet: p = 1/9, q = 1 -> BurstR = 0.9
    // (spread more evenly than random); clamped to 1 when used.
    let mut s = StreamStats::new(8000, 60.0);
    for k in 0..3000u16 {
        if k % 10 != 5 {
            s.on_packet(&pkt(k, 5));
        }
    }
    let b = s.summary().burst_r;
    assert!((b - 0.9).abs() < 0.01, "{b}");

    // Same 10 % loss in bursts of 5: p = 1/45, q = 1/5 -> BurstR = 4.5.
    let mut s = StreamStats::new(8000, 60.0);
    for k in 0..3000u16 {
        if k % 50 >= 5 {
            s.on_packet(&pkt(k, 5));
        }
    }
    let sum = s.summary();
    assert!((sum.burst_r - 4.5).abs() < 0.05, "{}", sum.burst_r);
    let random = assess(3000, &sum, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
    let opts = AssessOptions {
        criterion: Criterion::Mos,
        min_mos: DEFAULT_MIN_MOS,
        burst: BurstModel::Measured,
    };
    let bursty = assess_with(3000, &sum, &g729(), &opts);
    assert!((random.loss_pct - bursty.loss_pct).abs() < 1e-12);
    assert_eq!(random.burst_r, 1.0);
    assert!((bursty.burst_r - 4.5).abs() < 0.05);
    assert!(
        bursty.r < random.r - 5.0,
        "bursty {} random {}",
        bursty.r,
        random.r
    );

    // Independent 5 % loss (deterministic LCG): BurstR close to 1.
    let mut s = StreamStats::new(8000, 60.0);
    let mut x: u64 = 12345;
    for k in 0..60000u32 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if (x >> 33) % 100 >= 5 {
            s.on_packet(&pkt(k as u16, 5));
        }
    }
    let b = s.summary().burst_r;
    assert!((b - 1.0).abs() < 0.1, "{b}");
}

#[test]
fn burst_ratio_counts_late_packets_and_long_gaps() {
    // Late packets are effective loss: 5-packet bursts of lateness.
    let mut s = StreamStats::new(8000, 60.0);
    for k in 0..3000u16 {
        let d = if k % 50 >= 45 { 500 } else { 5 };
        s.on_packet(&pkt(k, d));
    }
    let b = s.summary().burst_r;
    // The stream ends inside a late burst: q = 59/299, p = 60/2700.
    assert!(
        (b - 1.0 / (59.0 / 299.0 + 60.0 / 2700.0)).abs() < 1e-9,
        "{b}"
    );
    // A gap longer than the duplicate window is one long loss run.
    let mut s = StreamStats::new(8000, 60.0);
    for k in (0..1000u16).chain(4000..5000) {
        s.on_packet(&pkt(k, 5));
    }
    // p = 1/1999, q = 1/3000 -> BurstR ~ 1200, capped at 100.
    assert_eq!(s.summary().burst_r, MAX_BURST_R);
}

#[test]
fn delay_percentiles_and_max() {
    let mut s = StreamStats::new(8000, 1000.0);
    // delays 1..=100 ms
    for k in 0..100u16 {
        s.on_packet(&pkt(k, u64::from(k) + 1));
    }
    let sum = s.summary();
    assert_eq!(sum.delay_max_ms, Some(100.0));
    assert_eq!(sum.delay_min_ms, Some(1.0));
    assert!((sum.delay_mean_ms.unwrap() - 50.5).abs() < 1e-9);
    let p50 = sum.delay_p50_ms.unwrap();
    assert!((p50 - 50.0).abs() <= 50.0 / 64.0, "{p50}");
    let p95 = sum.delay_p95_ms.unwrap();
    assert!((p95 - 95.0).abs() <= 95.0 / 64.0, "{p95}");
    // jitter: delay grows 1 ms per 20 ms packet: |D| = 8 units each
    // time, J converges towards 8 units = 1 ms.
    assert!(
        sum.jitter_ms > 0.95 && sum.jitter_ms <= 1.0,
        "{}",
        sum.jitter_ms
    );
}

#[test]
fn histogram_buckets_are_contiguous_and_bounded() {
    let mut last = 0;
    for v in (0..1_000_000u64)
        .step_by(7)
        .chain([u64::MAX, 1 << 39, 1 << 40])
    {
        let i = DelayHistogram::index(v);
        assert!(i < HIST_BUCKETS);
        if v < 1 << 40 {
            let (lo, w) = DelayHistogram::bounds(i);
            assert!(lo <= v && v < lo + w, "v {v} i {i} lo {lo} w {w}");
            assert!(w == 1 || (w as f64) / (lo as f64) <= 1.0 / 64.0 + 1e-12);
        }
        if v < 1_000_000 {
            assert!(i >= last);
            last = i;
        }
    }
    let mut h = DelayHistogram::default();
    assert_eq!(h.quantile(0.95), None);
    for v in [5u64, 5, 5, 5, 1000] {
        h.record(v);
    }
    assert_eq!(h.quantile(0.8), Some(5.0));
    let top = h.quantile(1.0).unwrap();
    assert!((top - 1000.0).abs() < 1000.0 / 64.0);
}

#[test]
fn sequence_wrap_and_too_old_packets() {
    let mut s = StreamStats::new(8000, 60.0);
    // pkt() starts at seq 65000 so 600 packets cross 65535 -> 0.
    for k in 0..600u16 {
        assert_ne!(s.on_packet(&pkt(k, 5)), Verdict::Duplicate, "k {k}");
    }
    assert_eq!(s.summary().reordered, 0);
    // jump 2000 ahead: window cleared, then a packet from before the window
    assert_eq!(s.on_packet(&pkt(2600, 5)), Verdict::OnTime);
    assert_eq!(s.on_packet(&pkt(10, 5)), Verdict::TooOld);
    assert_eq!(s.on_packet(&pkt(2600, 5)), Verdict::Duplicate);
    let sum = s.summary();
    assert_eq!(
        (sum.received, sum.too_old, sum.late, sum.duplicates),
        (602, 1, 1, 1)
    );
}

#[test]
fn clock_going_backwards_is_counted_not_fatal() {
    let mut s = StreamStats::new(8000, 60.0);
    let mut p = pkt(0, 0);
    p.recv_us = p.send_us - 5;
    assert_eq!(s.on_packet(&p), Verdict::OnTime);
    assert_eq!(s.summary().negative_delay, 1);
    assert_eq!(s.summary().delay_max_ms, Some(0.0));
}

#[test]
fn nothing_sent_or_received() {
    let empty = StreamStats::new(8000, 60.0).summary();
    assert_eq!(empty.delay_mean_ms, None);
    let q = assess(0, &empty, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
    assert!(!q.supported);
    let q = assess(100, &empty, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
    assert_eq!(q.loss_pct, 100.0);
    assert!(q.mos < 1.5 && !q.supported, "{q:?}");
    let q = assess(100, &empty, &g729(), Criterion::Seeds, DEFAULT_MIN_MOS);
    assert!(!q.supported);
}

#[test]
fn high_delay_fails_both_criteria() {
    let mut s = StreamStats::new(8000, 60.0);
    for k in 0..100 {
        s.on_packet(&pkt(k, 250));
    }
    let sum = s.summary();
    let q = assess(100, &sum, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
    // d = 250 + 60 + 25 = 335 ms: R = 93.2 - (8.04 + 17.347) - 11 < 70
    assert!((q.mouth_to_ear_ms - 335.0).abs() < 1e-9);
    assert!(q.r < 70.0 && !q.supported, "{q:?}");
    assert!(!assess(100, &sum, &g729(), Criterion::Seeds, DEFAULT_MIN_MOS).supported);
}

#[test]
fn delay_spikes_fail_the_seeds_rule_through_the_mean_jitter() {
    // 40 s of heavy delay variation (delay alternating 20 / 160 ms),
    // then 20 s at a constant 20 ms. The final value has forgotten the
    // variation (it decays by 15/16 per packet); the mean has not.
    let mut s = StreamStats::new(8000, 60.0);
    for k in 0..3000u16 {
        let delay = if k < 2000 && k % 2 == 1 { 160 } else { 20 };
        s.on_packet(&pkt(k, delay));
    }
    let sum = s.summary();
    assert!(
        sum.jitter_ms < 1e-3,
        "final value forgot the spikes: {}",
        sum.jitter_ms
    );
    assert!(sum.jitter_mean_ms > 20.0, "{sum:?}");
    assert!(
        sum.jitter_max_ms > sum.jitter_mean_ms && sum.jitter_max_ms < 1000.0,
        "{sum:?}"
    );
    // Same arrival pattern through the RTP-timestamp estimator (punctual sender).
    assert!((sum.jitter_rtp_mean_ms - sum.jitter_mean_ms).abs() < 1e-9);
    assert!((sum.jitter_rtp_max_ms - sum.jitter_max_ms).abs() < 1e-9);
    let q = assess(3000, &sum, &g729(), Criterion::Seeds, DEFAULT_MIN_MOS);
    assert_eq!(
        (q.jitter_mean_ms, q.jitter_max_ms),
        (sum.jitter_mean_ms, sum.jitter_max_ms)
    );
    let d = sum.delay_mean_ms.unwrap();
    assert!(
        d + sum.jitter_ms < 150.0,
        "the final value would have passed"
    );
    assert!(d + sum.jitter_mean_ms >= 150.0 && !q.supported, "{q:?}");
}

proptest::proptest! {
    #[test]
    fn accounting_holds_for_any_arrival_pattern(
        pkts in proptest::collection::vec((0u16..3000, 0u64..400_000, proptest::bool::ANY), 0..400)
    ) {
        let mut s = StreamStats::new(8000, 60.0);
        let mut fresh = 0u64;
        let mut dups = 0u64;
        for (i, &(k, d, m)) in pkts.iter().enumerate() {
            let send = T0 + 20_000 * u64::from(k);
            let p = RxPacket { seq: k, rtp_ts: 160 * u32::from(k), marker: m, send_us: send, recv_us: send + d + i as u64 };
            match s.on_packet(&p) {
                Verdict::Duplicate => dups += 1,
                _ => fresh += 1,
            }
        }
        let sum = s.summary();
        proptest::prop_assert_eq!(sum.received, fresh);
        proptest::prop_assert_eq!(sum.duplicates, dups);
        proptest::prop_assert!(sum.late <= sum.received);
        proptest::prop_assert!(sum.reordered <= sum.received);
        let q = assess(3000, &sum, &g729(), Criterion::Mos, DEFAULT_MIN_MOS);
        proptest::prop_assert!(q.mos >= 1.0 && q.mos <= 4.5);
        proptest::prop_assert!(q.effective_loss_pct <= 100.0 + 1e-9);
    }
}
