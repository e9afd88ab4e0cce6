//! Fuzz target: `ip::inspect` on untrusted bytes. Whatever it accepts is
//! consistent with the bytes, and a valid IPv4 header re-emits identically.
#![no_main]
use airpack_core::wire::ip;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(info) = ip::inspect(data) else { return };
    assert_eq!(info.len, data.len());
    assert_eq!(info.version, data[0] >> 4);
    if info.src_port.is_some() {
        assert!(info.dst_port.is_some());
        assert!(matches!(info.protocol, 6 | 17 | 132 | 136));
    }
    if info.tcp_flags.is_some() {
        assert_eq!(info.protocol, 6);
    }
    if info.version == 4 {
        assert_eq!(ip::checksum(&data[..usize::from(data[0] & 0x0f) * 4]), 0);
        assert_eq!(info.dscp, data[1] >> 2);
        // A plain header (IHL 5, no flags, ECN 0) is exactly what emit_ipv4_header writes.
        if data[0] == 0x45 && data[6] == 0 && data[7] == 0 && data[1] & 3 == 0 {
            let (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) = (info.src, info.dst) else {
                panic!("v4 addresses")
            };
            let mut h = [0u8; 20];
            let ident = u16::from_be_bytes([data[4], data[5]]);
            ip::emit_ipv4_header(
                &mut h,
                s,
                d,
                data[9],
                info.dscp,
                data[8],
                ident,
                data.len() - 20,
            );
            // 0x0000 and 0xffff are the two ones'-complement zeros: a header
            // whose other words sum to 0xffff validates with either checksum
            // (RFC 1624 section 3), and emit writes 0x0000.
            let mut want = [0u8; 20];
            want.copy_from_slice(&data[..20]);
            if want[10..12] == [0xff, 0xff] && h[10..12] == [0, 0] {
                want[10..12].copy_from_slice(&[0, 0]);
            }
            assert_eq!(h, want);
        }
    } else {
        assert_eq!(info.version, 6);
        assert_eq!(
            usize::from(u16::from_be_bytes([data[4], data[5]])) + 40,
            data.len()
        );
    }
});
