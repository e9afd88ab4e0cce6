//! Tests of the TCP header parser and window rewrite.

use super::*;
use proptest::prelude::*;

/// IPv4 (v4 = true) or IPv6 packet with a TCP header carrying `opts`
/// (padded to 4 bytes with EOL) and `payload`; checksums filled in.
pub(crate) fn segment(
    v4: bool,
    seq: u32,
    ack: u32,
    fl: u16,
    window: u16,
    opts: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let mut o = opts.to_vec();
    while o.len() % 4 != 0 {
        o.push(0);
    }
    let tcp_len = 20 + o.len() + payload.len();
    let mut p = Vec::new();
    if v4 {
        let total = (20 + tcp_len) as u16;
        p.extend_from_slice(&[
            0x45,
            0x02,
            (total >> 8) as u8,
            total as u8,
            0x12,
            0x34,
            0x40,
            0,
            64,
            6,
            0,
            0,
        ]);
        p.extend_from_slice(&[192, 0, 2, 10, 10, 0, 0, 7]);
        let c = crate::wire::ip::checksum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
    } else {
        p.extend_from_slice(&[0x60, 0x00, 0x00, 0x00]);
        p.extend_from_slice(&(tcp_len as u16).to_be_bytes());
        p.extend_from_slice(&[6, 64]);
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    }
    p.extend_from_slice(&443u16.to_be_bytes());
    p.extend_from_slice(&50_000u16.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ack.to_be_bytes());
    let off_flags = (((20 + o.len()) as u16 / 4) << 12) | fl;
    p.extend_from_slice(&off_flags.to_be_bytes());
    p.extend_from_slice(&window.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]);
    p.extend_from_slice(&o);
    p.extend_from_slice(payload);
    // The checksum, computed here independently of the crate's code.
    let hl = if v4 { 20 } else { 40 };
    let mut words: Vec<u8> = Vec::new();
    if v4 {
        words.extend_from_slice(&p[12..20]);
        words.extend_from_slice(&[0, 6]);
        words.extend_from_slice(&(tcp_len as u16).to_be_bytes());
    } else {
        words.extend_from_slice(&p[8..40]);
        words.extend_from_slice(&(tcp_len as u32).to_be_bytes());
        words.extend_from_slice(&[0, 0, 0, 6]);
    }
    words.extend_from_slice(&p[hl..]);
    let mut sum: u32 = words
        .chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0)))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let c = !(sum as u16);
    let at = hl + 16;
    p[at..at + 2].copy_from_slice(&c.to_be_bytes());
    p
}

/// MSS 1460, SACK-permitted, timestamps, NOP, window scale 7: a Linux SYN.
const SYN_OPTS: [u8; 20] = [
    2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
];

#[test]
fn linux_syn_options_parse() {
    for v4 in [true, false] {
        let p = segment(
            v4,
            1000,
            0,
            flags::SYN | flags::ECE | flags::CWR,
            64_240,
            &SYN_OPTS,
            &[],
        );
        let s = parse(&p).unwrap();
        assert_eq!(
            (s.ip_version, s.src_port, s.dst_port, s.seq, s.window),
            (if v4 { 4 } else { 6 }, 443, 50_000, 1000, 64_240)
        );
        assert!(s.has(flags::SYN) && s.has(flags::ECE) && s.has(flags::CWR) && !s.has(flags::ACK));
        assert_eq!((s.header_len, s.payload_len, s.seq_len()), (40, 0, 1));
        let o = s.options;
        assert_eq!(
            (o.mss, o.wscale, o.sack_permitted, o.timestamps, o.unknown),
            (Some(1460), Some(7), true, Some((1, 0)), 0)
        );
        assert_eq!(
            full_checksum(&p),
            Some(s.checksum),
            "the builder's checksum verifies"
        );
    }
}

#[test]
fn sack_blocks_unknown_options_and_clamped_scale() {
    // NOP NOP SACK(2 blocks); unknown kind 30 (MPTCP) length 4; WS 15 -> 14.
    let opts = [
        1, 1, 5, 18, 0, 0, 0, 10, 0, 0, 0, 20, 0xff, 0xff, 0xff, 0xf0, 0, 0, 0, 5, 30, 4, 0xaa,
        0xbb, 3, 3, 15,
    ];
    let p = segment(true, 1, 2, flags::ACK, 100, &opts, b"data");
    let s = parse(&p).unwrap();
    let o = s.options;
    assert_eq!(o.sack_len, 2);
    assert_eq!(
        &o.sack[..2],
        &[(10, 20), (0xffff_fff0, 5)],
        "a block across the wrap"
    );
    assert_eq!(
        (o.unknown, o.wscale, s.payload_len),
        (1, Some(MAX_WSCALE), 4)
    );
}

#[test]
fn malformed_options_are_rejected() {
    let cases: [(&[u8], u8); 8] = [
        (&[2, 3, 5, 0], 2),                          // MSS length 3
        (&[3, 2, 0, 0], 3),                          // WS length 2
        (&[4, 3, 0, 0], 4),                          // SACK-permitted length 3
        (&[5, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 5), // SACK length not 2 + 8n
        (&[8, 9, 0, 0, 0, 0, 0, 0, 0, 0], 8),        // TS length 9
        (&[30, 1, 0, 0], 30),                        // any option: length below 2
        (&[30, 9, 0, 0], 30),                        // length past the header
        (&[1, 1, 1, 30], 30),                        // kind without its length byte
    ];
    for (opts, kind) in cases {
        let p = segment(true, 1, 2, flags::ACK, 100, opts, &[]);
        assert_eq!(parse(&p), Err(TcpError::BadOption(kind)), "{opts:?}");
    }
    // EOL ends the list: what follows is padding, not parsed.
    let p = segment(true, 1, 2, flags::ACK, 100, &[0, 2, 3, 0], &[]);
    assert_eq!(parse(&p).unwrap().options, TcpOptions::default());
    // SACK with 5 blocks does not fit: length 42.
    assert_eq!(parse_options(&[5, 42]), Err(TcpError::BadOption(5)));
}

#[test]
fn ip_and_header_faults() {
    let good = segment(true, 1, 2, flags::ACK, 100, &[], b"xy");
    assert!(parse(&good).is_ok());
    assert_eq!(parse(&[]), Err(TcpError::BadIp));
    assert_eq!(
        parse(&good[..good.len() - 1]),
        Err(TcpError::BadIp),
        "total length != slice"
    );
    let mut x = good.clone();
    x[11] ^= 1;
    assert_eq!(parse(&x), Err(TcpError::BadIpChecksum));
    let fix = |x: &mut Vec<u8>| {
        x[10] = 0;
        x[11] = 0;
        let c = crate::wire::ip::checksum(&x[..20]);
        x[10..12].copy_from_slice(&c.to_be_bytes());
    };
    let mut x = good.clone();
    x[6] |= 0x20; // MF
    fix(&mut x);
    assert_eq!(parse(&x), Err(TcpError::Fragment));
    let mut x = good.clone();
    x[9] = 17;
    fix(&mut x);
    assert_eq!(parse(&x), Err(TcpError::NotTcp));
    let mut x = good.clone();
    x[32] = 0x40; // data offset 4
    assert_eq!(parse(&x), Err(TcpError::BadDataOffset));
    x[32] = 0xf0; // 60 bytes > 22
    assert_eq!(parse(&x), Err(TcpError::BadDataOffset));
    // IPv4 packet with 19 bytes of TCP.
    let mut short = good[..39].to_vec();
    short[3] = 39;
    fix(&mut short);
    assert_eq!(parse(&short), Err(TcpError::Truncated));
}

#[test]
fn ipv6_extension_headers_are_walked_or_refused() {
    let base = segment(false, 1, 2, flags::ACK, 100, &[], b"z");
    let with_ext = |nh: u8| {
        let mut p = base[..40].to_vec();
        p[6] = nh;
        let plen = (base.len() - 40 + 8) as u16;
        p[4..6].copy_from_slice(&plen.to_be_bytes());
        p.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]); // next = TCP, 8 bytes (PadN)
        p.extend_from_slice(&base[40..]);
        p
    };
    for nh in [0u8, 43, 60] {
        let p = with_ext(nh);
        let s = parse(&p).unwrap();
        assert_eq!((s.tcp_offset, s.payload_len), (48, 1), "next header {nh}");
        assert_eq!(
            full_checksum(&p),
            Some(s.checksum),
            "the pseudo header does not cover extensions"
        );
    }
    assert_eq!(parse(&with_ext(44)), Err(TcpError::Fragment));
    assert_eq!(parse(&with_ext(51)), Err(TcpError::UnsupportedExtension));
    assert_eq!(parse(&with_ext(17)), Err(TcpError::NotTcp));
}

#[test]
fn rfc1624_example_and_window_rewrite() {
    // RFC 1624 section 4: HC 0xdd2f, m 0x5555 -> m' 0x3285 gives 0x0000.
    assert_eq!(checksum_adjust(0xdd2f, 0x5555, 0x3285), 0x0000);
    let mut p = segment(
        true,
        7,
        9,
        flags::ACK,
        65_535,
        &[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
        b"abc",
    );
    let s = parse(&p).unwrap();
    assert_eq!(set_window(&mut p, &s, 12), Some(65_535));
    let s2 = parse(&p).unwrap();
    assert_eq!(s2.window, 12);
    assert_eq!(full_checksum(&p), Some(s2.checksum));
}

proptest! {
    #[test]
    fn incremental_checksum_equals_full_recompute(
        v4 in any::<bool>(), seq in any::<u32>(), ack in any::<u32>(), fl in 0u16..0x200, w in any::<u16>(), nw in any::<u16>(),
        payload in proptest::collection::vec(any::<u8>(), 0..64), odd in any::<bool>(),
    ) {
        let payload = if odd && !payload.is_empty() { &payload[1..] } else { &payload[..] };
        let mut p = segment(v4, seq, ack, fl, w, &SYN_OPTS, payload);
        let s = parse(&p).unwrap();
        prop_assert_eq!(set_window(&mut p, &s, nw), Some(w));
        let s2 = parse(&p).unwrap();
        prop_assert_eq!(s2.window, nw);
        prop_assert_eq!(full_checksum(&p), Some(s2.checksum));
    }

    #[test]
    fn parse_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..120)) {
        let _ = parse(&buf);
        let _ = parse_options(&buf);
    }

    #[test]
    fn mutated_segments_never_panic(at in 0usize..80, val in any::<u8>(), v4 in any::<bool>()) {
        let mut p = segment(v4, 1, 2, flags::SYN, 100, &SYN_OPTS, b"hello");
        let i = at % p.len();
        p[i] = val;
        if let Ok(s) = parse(&p) {
            prop_assert!(s.tcp_offset + s.header_len + s.payload_len == p.len());
        }
    }
}
