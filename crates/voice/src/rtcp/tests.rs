//! Unit and property tests of the RTCP module (hand-made packets).

use super::*;
use proptest::prelude::*;

/// RR (one block) + SDES CNAME "a@b", built byte by byte from RFC 3550
/// figures 3 and 4 (no code shared with the writer).
fn hand_rr() -> Vec<u8> {
    let mut v = vec![
        0x81, 201, 0x00, 0x07, // V=2 P=0 RC=1, RR, length 7 words -> 32 bytes
        0x11, 0x22, 0x33, 0x44, // reporter SSRC
        0xaa, 0xbb, 0xcc, 0xdd, // source SSRC
        0x40, 0xff, 0xff, 0xfe, // fraction 64/256, cumulative -2
        0x00, 0x01, 0x00, 0x05, // ext highest seq: 1 cycle, seq 5
        0x00, 0x00, 0x01, 0x00, // jitter 256
        0x12, 0x34, 0x56, 0x78, // LSR
        0x00, 0x01, 0x80, 0x00, // DLSR 1.5 s
    ];
    v.extend_from_slice(&[
        0x81, 202, 0x00, 0x03, // SDES SC=1, length 3 words -> 16 bytes
        0x11, 0x22, 0x33, 0x44, // SSRC
        0x01, 0x03, b'a', b'@', b'b', // CNAME "a@b"
        0x00, 0x00, 0x00, // terminator, then nulls to the 32-bit boundary
    ]);
    v
}

#[test]
fn hand_made_rr_with_sdes_parses_field_by_field() {
    let b = hand_rr();
    assert_eq!(b.len(), 32 + 16);
    let c = parse_compound(&b).unwrap();
    assert_eq!(c.len(), 2);
    let mut ps = c.packets();
    match ps.next().unwrap() {
        Packet::ReceiverReport { ssrc, mut blocks } => {
            assert_eq!(ssrc, 0x1122_3344);
            assert_eq!(blocks.len(), 1);
            let rb = blocks.next().unwrap();
            assert_eq!(
                rb,
                ReportBlock {
                    ssrc: 0xaabb_ccdd,
                    fraction_lost: 64,
                    cumulative_lost: -2,
                    ext_highest_seq: 0x0001_0005,
                    jitter: 256,
                    lsr: 0x1234_5678,
                    dlsr: 0x0001_8000,
                }
            );
            assert_eq!(rb.fraction_lost_pct(), 25.0);
            assert!(blocks.next().is_none());
        }
        p => panic!("{p:?}"),
    }
    assert!(matches!(ps.next(), Some(Packet::Sdes(_))));
    assert!(ps.next().is_none());
    assert_eq!(c.cname_of(0x1122_3344), Some(&b"a@b"[..]));
    assert_eq!(c.cname_of(1), None);
}

#[test]
fn writer_produces_the_hand_made_bytes() {
    let mut buf = [0u8; 64];
    let mut w = Writer::new(&mut buf);
    let rb = ReportBlock {
        ssrc: 0xaabb_ccdd,
        fraction_lost: 64,
        cumulative_lost: -2,
        ext_highest_seq: 0x0001_0005,
        jitter: 256,
        lsr: 0x1234_5678,
        dlsr: 0x0001_8000,
    };
    w.receiver_report(0x1122_3344, &[rb]).unwrap();
    w.sdes_cname(0x1122_3344, b"a@b").unwrap();
    assert_eq!(w.bytes(), &hand_rr()[..]);
}

fn sr_compound(blocks: &[ReportBlock], cname: &[u8], bye: bool) -> Vec<u8> {
    let mut buf = [0u8; 1500];
    let mut w = Writer::new(&mut buf);
    let info = SenderInfo {
        ntp: 0xe6b1_2345_8000_0000,
        rtp_ts: 160_000,
        packets: 500,
        octets: 10_000,
    };
    w.sender_report(0xdead_beef, &info, blocks).unwrap();
    w.sdes_cname(0xdead_beef, cname).unwrap();
    if bye {
        w.bye(&[0xdead_beef], Some(b"done")).unwrap();
    }
    w.bytes().to_vec()
}

#[test]
fn sender_report_round_trips_with_bye() {
    let b = sr_compound(
        &[ReportBlock {
            ssrc: 7,
            jitter: 3,
            ..Default::default()
        }],
        b"node@host",
        true,
    );
    let c = parse_compound(&b).unwrap();
    let v: Vec<Packet<'_>> = c.packets().collect();
    assert_eq!(v.len(), 3);
    let Packet::SenderReport { ssrc, info, blocks } = v[0] else {
        panic!("{:?}", v[0])
    };
    assert_eq!(
        (ssrc, info.rtp_ts, info.packets, info.octets),
        (0xdead_beef, 160_000, 500, 10_000)
    );
    assert_eq!(info.ntp, 0xe6b1_2345_8000_0000);
    assert_eq!(
        blocks.collect::<Vec<_>>(),
        vec![ReportBlock {
            ssrc: 7,
            jitter: 3,
            ..Default::default()
        }]
    );
    let Packet::Bye { sources, reason } = v[2] else {
        panic!()
    };
    assert_eq!(sources.collect::<Vec<_>>(), vec![0xdead_beef]);
    assert_eq!(reason, Some(&b"done"[..]));
}

#[test]
fn every_structural_fault_has_its_own_error() {
    let good = hand_rr();
    assert_eq!(parse_compound(&[]), Err(RtcpError::Truncated));
    assert_eq!(parse_compound(&good[..3]), Err(RtcpError::Truncated));
    // Version 1 in the first and in the second packet.
    let mut x = good.clone();
    x[0] = 0x41;
    assert_eq!(parse_compound(&x), Err(RtcpError::BadVersion));
    let mut x = good.clone();
    x[32] = 0x41;
    assert_eq!(parse_compound(&x), Err(RtcpError::BadVersion));
    // Length runs past the end; lengths that leave 1..3 stray bytes.
    assert_eq!(parse_compound(&good[..40]), Err(RtcpError::LengthPastEnd));
    let mut x = good.clone();
    x.push(0x80);
    assert_eq!(parse_compound(&x), Err(RtcpError::Truncated));
    // First packet not SR/RR.
    let sdes_first: Vec<u8> = good[32..].iter().chain(&good[..32]).copied().collect();
    assert_eq!(parse_compound(&sdes_first), Err(RtcpError::FirstNotReport));
    // Report count larger than the length allows.
    let mut x = good.clone();
    x[0] = 0x82;
    assert_eq!(parse_compound(&x), Err(RtcpError::BadReportCount));
    // Padding on the first of two packets; bad padding counts on the last.
    let mut x = good.clone();
    x[0] |= 0x20;
    assert_eq!(parse_compound(&x), Err(RtcpError::PaddingNotLast));
    let mut x = good.clone();
    x[32] |= 0x20;
    *x.last_mut().unwrap() = 0;
    assert_eq!(parse_compound(&x), Err(RtcpError::BadPadding));
    *x.last_mut().unwrap() = 13; // body is 12 bytes
    assert_eq!(parse_compound(&x), Err(RtcpError::BadPadding));
    // Valid padding that eats the SDES item: CNAME lost -> bad SDES.
    *x.last_mut().unwrap() = 4;
    assert_eq!(parse_compound(&x), Err(RtcpError::BadSdes));
    // SDES item length past the chunk; non-zero pad after the terminator.
    let mut x = good.clone();
    x[41] = 9;
    assert_eq!(parse_compound(&x), Err(RtcpError::BadSdes));
    let mut x = good.clone();
    x[47] = 1;
    assert_eq!(parse_compound(&x), Err(RtcpError::BadSdes));
    // SDES with a chunk count of 2 but one chunk.
    let mut x = good.clone();
    x[32] = 0x82;
    assert_eq!(parse_compound(&x), Err(RtcpError::BadSdes));
    // An RR alone: no CNAME.
    let mut x = good[..32].to_vec();
    assert_eq!(parse_compound(&x), Err(RtcpError::NoCname));
    // SDES with a NAME (2) item only: still no CNAME.
    x = good.clone();
    x[40] = 2;
    assert_eq!(parse_compound(&x), Err(RtcpError::NoCname));
}

#[test]
fn bye_and_app_lengths_are_checked_and_unknown_types_skipped() {
    let base = hand_rr();
    let with = |tail: &[u8]| -> Vec<u8> { base.iter().chain(tail).copied().collect() };
    // BYE with SC=2 but one SSRC.
    assert_eq!(
        parse_compound(&with(&[0x82, 203, 0, 1, 0, 0, 0, 1])),
        Err(RtcpError::BadBye)
    );
    // BYE reason length past the packet.
    assert_eq!(
        parse_compound(&with(&[0x81, 203, 0, 2, 0, 0, 0, 1, 9, b'x', 0, 0])),
        Err(RtcpError::BadBye)
    );
    // APP shorter than SSRC + name.
    assert_eq!(
        parse_compound(&with(&[0x80, 204, 0, 1, 0, 0, 0, 1])),
        Err(RtcpError::BadApp)
    );
    // A valid APP and an unknown type 207 (XR) of 8 bytes body.
    let ok = with(&[
        0x85, 204, 0, 2, 0, 0, 0, 9, b'T', b'E', b'S', b'T', 0x8f, 207, 0, 2, 1, 2, 3, 4, 5, 6, 7,
        8,
    ]);
    let c = parse_compound(&ok).unwrap();
    let v: Vec<_> = c.packets().collect();
    assert_eq!(v.len(), 4);
    assert_eq!(
        v[2],
        Packet::App {
            subtype: 5,
            ssrc: 9,
            name: *b"TEST",
            data: &[]
        }
    );
    assert_eq!(
        v[3],
        Packet::Other {
            packet_type: 207,
            count: 15,
            body: &[1, 2, 3, 4, 5, 6, 7, 8]
        }
    );
    // Padding on the last packet is removed from its body.
    let mut padded = with(&[0xa0, 207, 0, 2, 1, 2, 3, 4, 0, 0, 0, 4]);
    let c = parse_compound(&padded).unwrap();
    assert_eq!(
        c.packets().last(),
        Some(Packet::Other {
            packet_type: 207,
            count: 0,
            body: &[1, 2, 3, 4]
        })
    );
    padded.truncate(padded.len() - 1);
    assert!(parse_compound(&padded).is_err());
}

#[test]
fn writer_limits() {
    let mut small = [0u8; 27];
    let mut w = Writer::new(&mut small);
    assert_eq!(
        w.sender_report(1, &SenderInfo::default(), &[]),
        Err(WriteError::NoRoom)
    );
    assert!(w.is_empty(), "a failed write keeps nothing");
    let mut buf = [0u8; 2048];
    let mut w = Writer::new(&mut buf);
    assert_eq!(
        w.receiver_report(1, &[ReportBlock::default(); 32]),
        Err(WriteError::TooMany)
    );
    assert_eq!(w.sdes_cname(1, &[b'x'; 256]), Err(WriteError::TooLong));
    assert_eq!(w.bye(&[1], Some(&[b'x'; 256])), Err(WriteError::TooLong));
    w.receiver_report(1, &[ReportBlock::default(); 31]).unwrap();
    assert_eq!(w.len(), 8 + 31 * 24);
    // The cumulative count is clamped to 24 bits.
    let mut b2 = [0u8; 64];
    let mut w = Writer::new(&mut b2);
    w.receiver_report(
        1,
        &[ReportBlock {
            cumulative_lost: 1 << 30,
            ..Default::default()
        }],
    )
    .unwrap();
    w.sdes_cname(1, b"").unwrap();
    let n = w.len();
    let c = parse_compound(&b2[..n]).unwrap();
    let Some(Packet::ReceiverReport { mut blocks, .. }) = c.packets().next() else {
        panic!()
    };
    assert_eq!(blocks.next().unwrap().cumulative_lost, CUMULATIVE_LOST_MAX);
}

#[test]
fn rtt_from_lsr_and_dlsr() {
    // RFC 3550 figure 2: SR sent at NTP 0xb705:2000 (mid32), DLSR 5.25 s,
    // RR arrives at 0xb710:8000 -> RTT 0x0006:2000 = 6.125 s.
    let a = 0xb710_8000u32;
    let lsr = 0xb705_2000u32;
    let dlsr = 0x0005_4000u32;
    assert_eq!(rtt_us(a, lsr, dlsr), Some(6_125_000));
    assert_eq!(rtt_us(a, 0, dlsr), None, "no SR seen");
    assert_eq!(rtt_us(lsr, lsr, 1), None, "negative");
    // Across the wrap of the compact clock.
    assert_eq!(
        rtt_us(0x0000_1000, 0xffff_f000, 0),
        Some(compact_to_us(0x2000))
    );
    assert_eq!(us_to_compact(1_500_000), 0x0001_8000);
    assert_eq!(compact_to_us(0x0001_8000), 1_500_000);
    assert_eq!(us_to_compact(u64::MAX), u32::MAX);
    // NTP conversion: Unix epoch + 0.5 s.
    let ntp = ntp_from_unix_us(500_000);
    assert_eq!(ntp >> 32, NTP_UNIX_OFFSET_S);
    assert_eq!(ntp as u32, 0x8000_0000);
    assert_eq!(ntp_mid32(0x1122_3344_5566_7788), 0x3344_5566);
}

#[test]
fn reception_stats_follow_appendix_a() {
    let mut r = ReceptionStats::new(8000);
    // Probation: the first packet is not counted, the second starts the count.
    assert!(!r.on_rtp(100, 0, 0));
    assert!(r.on_rtp(101, 160, 20_000));
    assert_eq!((r.received(), r.expected()), (1, 1));
    // 102..=110 with 105 and 106 lost.
    for s in 102..=110u16 {
        if s != 105 && s != 106 {
            assert!(r.on_rtp(s, 160 * u32::from(s - 100), 20_000 * u64::from(s - 100)));
        }
    }
    assert_eq!(
        (r.received(), r.expected(), r.cumulative_lost()),
        (8, 10, 2)
    );
    let b = r.report_block(42, 1_000_000).unwrap();
    assert_eq!((b.ssrc, b.cumulative_lost, b.ext_highest_seq), (42, 2, 110));
    assert_eq!(b.fraction_lost, 51, "(2 << 8) / 10");
    assert_eq!(
        (b.jitter, b.lsr, b.dlsr),
        (0, 0, 0),
        "punctual arrivals, no SR"
    );
    // Next interval: nothing lost.
    for s in 111..=120u16 {
        r.on_rtp(s, 160 * u32::from(s - 100), 20_000 * u64::from(s - 100));
    }
    let b = r.report_block(42, 2_000_000).unwrap();
    assert_eq!((b.fraction_lost, b.cumulative_lost), (0, 2));
    // A duplicate makes the cumulative count go down (it may go negative).
    r.on_rtp(120, 160 * 20, 400_000);
    assert_eq!(r.cumulative_lost(), 1);
    // After a SR, LSR is echoed and DLSR measures the time since.
    let info = SenderInfo {
        ntp: 0x0000_1234_5678_0000,
        ..Default::default()
    };
    r.on_sender_report(&info, 3_000_000);
    let b = r.report_block(42, 4_500_000).unwrap();
    assert_eq!((b.lsr, b.dlsr), (0x1234_5678, 0x0001_8000));
}

#[test]
fn reception_stats_wrap_and_restart() {
    let mut r = ReceptionStats::new(8000);
    for (k, s) in (65_530u16..=65_535).chain(0..10).enumerate() {
        r.on_rtp(s, 160 * k as u32, 20_000 * k as u64);
    }
    // One cycle, max seq 9; base is the second packet (65531).
    assert_eq!(r.extended_max(), 65_536 + 9);
    assert_eq!(r.expected(), 15);
    assert_eq!(r.cumulative_lost(), 0);
    // A jump of 30000: ignored once, accepted (restart) when the next follows.
    assert!(!r.on_rtp(30_000, 0, 1_000_000));
    assert!(r.on_rtp(30_001, 160, 1_020_000));
    assert_eq!((r.expected(), r.received()), (1, 1));
}

#[test]
fn jitter_matches_the_rfc_estimator() {
    let mut r = ReceptionStats::new(8000);
    let mut j = crate::jitter::JitterEstimator::new(8000);
    // Arrivals disturbed by a fixed pattern.
    for k in 0..200u32 {
        let arr = 1_000_000 + 20_000 * u64::from(k) + u64::from((k * 7919) % 13) * 1000;
        if r.on_rtp(k as u16, 160 * k, arr) {
            j.update(160 * k, arr);
        }
    }
    assert!(
        (r.jitter_units() - j.jitter_timestamp_units()).abs() < 1.0,
        "{} {}",
        r.jitter_units(),
        j.jitter_timestamp_units()
    );
    assert!(r.jitter_units() > 8.0);
}

#[test]
fn interval_follows_appendix_a7() {
    // Two members, both sending G.729 (24 kbit/s with headers each way):
    // 5 % of 48 kbit/s = 300 octets/s; as a sender 25 % of it, n = senders.
    let t = deterministic_interval(2, 2, 300.0, true, 100.0, false, 5.0);
    assert_eq!(
        t, 5.0,
        "2 senders of 2 members: no split; 100 * 2 / 300 s is below Tmin"
    );
    assert_eq!(
        deterministic_interval(2, 2, 300.0, true, 100.0, true, 5.0),
        2.5
    );
    // A large conference: the bandwidth share dominates.
    let t = deterministic_interval(1000, 10, 300.0, false, 100.0, false, 5.0);
    assert!((t - 100.0 * 990.0 / 225.0).abs() < 1e-9, "{t}");
    // Randomisation: [0.5, 1.5] / (e - 1.5).
    let c = std::f64::consts::E - 1.5;
    assert!((randomized_interval(5.0, 0.0) - 2.5 / c).abs() < 1e-12);
    assert!((randomized_interval(5.0, 1.0) - 7.5 / c).abs() < 1e-12);
    assert!((randomized_interval(5.0, f64::NAN) - 5.0 / c).abs() < 1e-12);
}

proptest! {
    #[test]
    fn parse_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(c) = parse_compound(&buf) {
            // Everything handed out lies inside the input.
            prop_assert!(c.len() >= 2);
            for p in c.packets() {
                if let Packet::Sdes(chunks) = p {
                    for ch in chunks {
                        for (_, text) in ch.items {
                            prop_assert!(text.len() <= 255);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn mutated_valid_compounds_never_panic(
        blocks in proptest::collection::vec((any::<u32>(), any::<u8>(), -100_000i32..100_000, any::<u32>()), 0..4),
        at in 0usize..200, val in any::<u8>(), cut in 0usize..200,
    ) {
        let bl: Vec<ReportBlock> = blocks.iter().map(|&(s, f, c, e)| ReportBlock {
            ssrc: s, fraction_lost: f, cumulative_lost: c, ext_highest_seq: e, jitter: e / 3, lsr: s ^ e, dlsr: e / 7,
        }).collect();
        let mut b = sr_compound(&bl, b"caller@example", true);
        let c = parse_compound(&b).unwrap();
        let Some(Packet::SenderReport { blocks: got, .. }) = c.packets().next() else { panic!() };
        prop_assert_eq!(got.collect::<Vec<_>>(), bl);
        let i = at % b.len();
        b[i] = val;
        let _ = parse_compound(&b).map(|c| c.packets().count());
        let _ = parse_compound(&b[..cut.min(b.len())]).map(|c| c.packets().count());
    }
}
