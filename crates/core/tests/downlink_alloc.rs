//! No allocation per packet in the downlink path: after a warm-up, the AP's
//! mux (intercept, compress, frame, poll) and a station's demux (parse,
//! decompress, rebuild, deliver) must not call the allocator at all.
//! Measured with a counting global allocator that counts only on the test's
//! own thread (libtest's other threads may allocate at any time: one run
//! in seven failed before, counting them), so this binary holds only this
//! test.

use airpack_core::downlink::demux::{Demux, DemuxConfig, MAX_REBUILT};
use airpack_core::downlink::mux::{Mux, MuxConfig, Verdict};
use airpack_core::wire::ip;
mod alloc_counter;
use alloc_counter::allocs;
use std::net::{IpAddr, Ipv4Addr};

const STA: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 5);

/// A G.729 packet to 192.168.1.5:(6600 + call), UDP checksum 0 (allowed in IPv4).
fn packet(out: &mut [u8; 60], call: u16, seq: u16) {
    out[..20].copy_from_slice(&[
        0x45, 0xb8, 0, 60, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 51, 100, 1, 192, 168, 1, 5,
    ]);
    let c = ip::checksum(&out[..20]);
    out[10..12].copy_from_slice(&c.to_be_bytes());
    out[20..22].copy_from_slice(&5004u16.to_be_bytes());
    out[22..24].copy_from_slice(&(6600 + call).to_be_bytes());
    out[24..28].copy_from_slice(&[0, 40, 0, 0]);
    out[28..30].copy_from_slice(&[0x80, 18]);
    out[30..32].copy_from_slice(&seq.to_be_bytes());
    out[32..36].copy_from_slice(&(u32::from(seq) * 160).to_be_bytes());
    out[36..40].copy_from_slice(&(0x1000 + u32::from(call)).to_be_bytes());
    out[40..60].fill(seq as u8);
}

#[test]
fn steady_state_does_not_allocate() {
    let calls = 40u16;
    let mut mux = Mux::new(MuxConfig::default());
    let mut demux = Demux::new(DemuxConfig::default());
    for c in 0..calls {
        mux.add_stream(IpAddr::V4(STA), 6600 + c, c).unwrap();
        demux.add_stream(c, IpAddr::V4(STA), 6600 + c);
    }
    mux.set_link_busy(0, true);
    let mut pkt = [0u8; 60];
    let mut frame = vec![0u8; 1440];
    let mut scratch = vec![0u8; MAX_REBUILT];
    let mut delivered = 0u64;
    let mut run = |mux: &mut Mux, demux: &mut Demux, from: u16, to: u16, delivered: &mut u64| {
        for seq in from..to {
            let now = u64::from(seq) * 20_000;
            for c in 0..calls {
                packet(&mut pkt, c, seq);
                assert!(matches!(mux.handle_packet(now, &pkt), Verdict::Queued(_)));
                while let Some(t) = mux.poll_transmit(now, &mut frame) {
                    *delivered += demux
                        .handle_frame(&frame[..t.len], &mut scratch, |p| assert_eq!(p.len(), 60))
                        .unwrap() as u64;
                }
            }
            mux.handle_timeout(now + 20_000);
            while let Some(t) = mux.poll_transmit(now + 20_000, &mut frame) {
                *delivered += demux
                    .handle_frame(&frame[..t.len], &mut scratch, |_| ())
                    .unwrap() as u64;
            }
        }
    };
    run(&mut mux, &mut demux, 1, 20, &mut delivered);
    let before = allocs();
    run(&mut mux, &mut demux, 20, 520, &mut delivered);
    let after = allocs();
    assert_eq!(delivered, 519 * u64::from(calls), "every packet delivered");
    assert!(
        mux.stats().compressed_entries > 15_000,
        "the run really compresses"
    );
    assert_eq!(
        after - before,
        0,
        "{} allocations for 20000 packets",
        after - before
    );
}
