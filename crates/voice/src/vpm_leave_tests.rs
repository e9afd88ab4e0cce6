//! Tests of which calls the VPM judges when calls leave and join (issue 12
//! point 8): RTCP BYE, the silence limit and its VAD/RTCP exemptions, and the
//! minimum of packets in a call's window. Simulated time, hand-built packets.

use super::tests::{key, DOWN, UP};
use super::*;
use crate::rtcp::{ReportBlock, Writer};
use crate::rtp::RtpHeader;

/// G.729 packet interval (µs).
const T: u64 = 20_000;

fn rtp_m(ssrc: u32, seq: u16, marker: bool) -> Vec<u8> {
    let mut out = [0u8; 64];
    let h = RtpHeader {
        marker,
        payload_type: 18,
        sequence: seq,
        timestamp: 160 * u32::from(seq),
        ssrc,
    };
    let n = rtp::write(&h, &[0u8; 20], &mut out).unwrap();
    out[..n].to_vec()
}

/// Upstream packets `from..to` (sequence = index) at `t0 + i * T`, the first
/// with the marker bit (as every sender's first packet), `lost(i)` skipped.
fn talk(
    v: &mut Vpm,
    k: CallKey,
    ssrc: u32,
    t0: u64,
    from: u16,
    to: u16,
    lost: impl Fn(u16) -> bool,
) {
    for i in from..to {
        if !lost(i) {
            v.on_rtp_upstream(k, &rtp_m(ssrc, i, i == 0), t0 + T * u64::from(i));
        }
    }
}

/// A compound RR (+ CNAME) from `from`, with a BYE of `bye` if given.
fn rr_bye(from: u32, about: u32, bye: Option<u32>) -> Vec<u8> {
    let mut buf = [0u8; 128];
    let mut w = Writer::new(&mut buf);
    let b = ReportBlock {
        ssrc: about,
        ..Default::default()
    };
    w.receiver_report(from, &[b]).unwrap();
    w.sdes_cname(from, b"phone").unwrap();
    if let Some(s) = bye {
        w.bye(&[s], Some(b"call ended")).unwrap();
    }
    w.bytes().to_vec()
}

#[test]
fn an_upstream_bye_takes_the_call_out_of_the_reading_at_once() {
    let mut v = Vpm::new(VpmConfig::default());
    // Call 1 clean, call 2 with 10 % loss: the worst is call 2.
    talk(&mut v, key(1), UP, 0, 0, 200, |_| false);
    talk(&mut v, key(2), UP, 0, 0, 200, |i| i % 10 == 5);
    let now = 200 * T;
    let clean = v.call_quality(&key(1), now).unwrap().mos;
    assert!(v.network_mos(now).unwrap() < clean);
    assert_eq!(v.active_calls(now), 2);
    // A BYE from another source, or not strictly valid RTCP, changes nothing.
    v.on_rtcp_upstream(key(2), &rr_bye(UP, DOWN, Some(0xbad)), now);
    let mut broken = rr_bye(UP, DOWN, Some(UP));
    let n = broken.len();
    broken[n - 12] = 200; // the BYE's reason length runs past the packet
    v.on_rtcp_upstream(key(2), &broken, now);
    assert_eq!(v.active_calls(now), 2);
    assert_eq!((v.counters().byes, v.counters().bad_rtcp), (0, 1));
    // The call's own BYE: out now, not when its 4 s window has emptied.
    v.on_rtcp_upstream(key(2), &rr_bye(UP, DOWN, Some(UP)), now + 1);
    assert_eq!(v.active_calls(now + 1), 1);
    assert_eq!(v.network_mos(now + 1), Some(clean));
    assert!(v.call_quality(&key(2), now + 1).is_none());
    assert_eq!(v.counters().byes, 1);
    // Late RTP of the ended source is counted and ignored; the call is still
    // in the table until the idle timeout.
    talk(&mut v, key(2), UP, 0, 200, 210, |_| false);
    assert_eq!(v.counters().rtp_after_bye, 10);
    assert_eq!((v.calls(), v.active_calls(210 * T)), (2, 1));
    // A new source on the flow is a new call, judged once it has 1 s of packets.
    let t1 = 300 * T;
    // (The first packet of a source is its probation, RFC 3550 A.1.)
    talk(&mut v, key(2), 0x3333, t1, 0, 40, |_| false);
    assert!(
        v.call_quality(&key(2), t1 + 40 * T).is_none(),
        "0.8 s of packets: not judged yet"
    );
    talk(&mut v, key(2), 0x3333, t1, 40, 60, |_| false);
    assert!(v.call_quality(&key(2), t1 + 60 * T).is_some());
}

#[test]
fn a_downstream_bye_of_the_calls_downstream_source_ends_it() {
    let mut v = Vpm::new(VpmConfig::default());
    talk(&mut v, key(1), UP, 0, 0, 100, |_| false);
    let now = 100 * T;
    // Before the downstream SSRC is known a downstream BYE names nobody.
    v.on_rtcp_downstream(key(1), &rr_bye(DOWN, UP, Some(DOWN)), now);
    assert_eq!(v.active_calls(now), 1);
    v.on_rtp_downstream(key(1), &rtp_m(DOWN, 0, true), now);
    v.on_rtcp_downstream(key(1), &rr_bye(0xbad, UP, Some(0xbad)), now);
    assert_eq!(v.active_calls(now), 1);
    v.on_rtcp_downstream(key(1), &rr_bye(DOWN, UP, Some(DOWN)), now);
    assert_eq!(v.active_calls(now), 0);
    assert_eq!(v.network_mos(now), None);
    assert_eq!(v.counters().byes, 1);
}

#[test]
fn a_call_without_bye_leaves_after_the_silence_limit() {
    let cfg = VpmConfig::default();
    let mut v = Vpm::new(cfg);
    talk(&mut v, key(1), UP, 0, 0, 200, |_| false);
    talk(&mut v, key(2), UP, 0, 0, 400, |_| false);
    let stop = 199 * T;
    assert_eq!(
        v.active_calls(stop + cfg.silence_us),
        2,
        "at the limit: still in"
    );
    assert_eq!(v.active_calls(stop + cfg.silence_us + 1), 1, "past it: out");
    // 0 turns the silence rule off: the call stays while its window holds
    // enough packets.
    let mut off = Vpm::new(VpmConfig {
        silence_us: 0,
        ..cfg
    });
    talk(&mut off, key(1), UP, 0, 0, 200, |_| false);
    assert_eq!(off.active_calls(stop + 2_000_000), 1);
}

#[test]
fn a_pausing_call_is_not_silent_vad_or_rtcp_since_its_last_rtp() {
    let cfg = VpmConfig::default();
    let mut v = Vpm::new(cfg);
    // VAD: a talk spurt (marker) after the first packet, then a 2 s pause.
    talk(&mut v, key(1), UP, 0, 0, 100, |_| false);
    v.on_rtp_upstream(key(1), &rtp_m(UP, 100, true), 100 * T);
    // CBR call whose phone reports after its last packet (alive, not talking).
    talk(&mut v, key(2), UP, 0, 0, 101, |_| false);
    v.on_rtcp_upstream(key(2), &rr_bye(UP, DOWN, None), 101 * T);
    // CBR call whose last report came before its last packet: silent.
    v.on_rtcp_upstream(key(3), &rr_bye(UP, DOWN, None), 0);
    talk(&mut v, key(3), UP, 0, 0, 101, |_| false);
    let now = 100 * T + 2_000_000;
    assert!(v.call_quality(&key(1), now).is_some());
    assert!(v.call_quality(&key(2), now).is_some());
    assert!(v.call_quality(&key(3), now).is_none());
    // An RTCP report from another source does not keep a call in.
    v.on_rtcp_upstream(key(3), &rr_bye(0xbad, DOWN, None), now);
    assert!(v.call_quality(&key(3), now).is_none());
}

#[test]
fn a_leaving_calls_last_few_packets_are_not_a_mos() {
    // The case: a stopped call (here a VAD one, so the silence rule
    // does not take it out) with one loss among its last packets. With the
    // old rule it read the loss over a shrinking remainder of its window
    // (here 1 loss in 25 packets: 4 %, below the clean call's MOS); now it
    // leaves the reading once fewer than 1 s of packets are left.
    let cfg = VpmConfig::default(); // 4 s window, 8 buckets of 0.5 s
    let mut v = Vpm::new(cfg);
    talk(&mut v, key(1), UP, 0, 0, 400, |_| false);
    v.on_rtp_upstream(key(1), &rtp_m(UP, 400, true), 400 * T);
    talk(&mut v, key(1), UP, 0, 401, 425, |i| i == 420);
    let stop = 424 * T;
    // 3.52 s after the stop (at 12 s) only the last 0.5 s bucket (from 8 s:
    // packets 400-424) is in the window.
    let now = 12_000_000;
    assert_eq!(now - stop, 3_520_000);
    assert!(v.call_quality(&key(1), now).is_none());
    let lenient = VpmConfig {
        min_judged_us: 0,
        ..cfg
    };
    let mut old = Vpm::new(lenient);
    talk(&mut old, key(1), UP, 0, 0, 400, |_| false);
    old.on_rtp_upstream(key(1), &rtp_m(UP, 400, true), 400 * T);
    talk(&mut old, key(1), UP, 0, 401, 425, |i| i == 420);
    let q = old.call_quality(&key(1), now).unwrap();
    assert!((q.up_loss_pct - 4.0).abs() < 1e-9, "{q:?}");
    // While its window still holds 1 s of packets it is judged.
    assert!(v.call_quality(&key(1), stop + 2_500_000).is_some());
}

#[test]
fn a_call_is_heard_at_its_first_packet_and_judged_after_min_judged() {
    let cfg = VpmConfig::default();
    let mut v = Vpm::new(cfg);
    assert_eq!(v.heard_calls(0), 0);
    // Call 1 talking for 6 s; call 2 joins at 4 s.
    talk(&mut v, key(1), UP, 0, 0, 201, |_| false);
    let t0 = 200 * T;
    assert_eq!((v.heard_calls(t0), v.active_calls(t0)), (1, 1));
    v.on_rtp_upstream(key(2), &rtp_m(UP, 0, true), t0);
    assert_eq!(
        (v.heard_calls(t0), v.active_calls(t0)),
        (2, 1),
        "heard at its first packet, not judged"
    );
    // Under 1 s of packets: heard, still not judged; past it: judged (the
    // first packet is the source's probation, RFC 3550 A.1).
    talk(&mut v, key(2), UP, t0, 1, 49, |_| false);
    let t = t0 + 48 * T;
    assert_eq!((v.heard_calls(t), v.active_calls(t)), (2, 1));
    talk(&mut v, key(1), UP, 0, 201, 300, |_| false);
    talk(&mut v, key(2), UP, t0, 49, 52, |_| false);
    let t = t0 + 51 * T;
    assert_eq!((v.heard_calls(t), v.active_calls(t)), (2, 2));
    // Downstream RTP alone does not make a call heard.
    v.on_rtp_downstream(key(3), &rtp_m(DOWN, 0, true), t);
    assert_eq!(v.heard_calls(t), 2);
    // `started` counts each call's first packet once (the daemon's early
    // step on a join), and a new source on a known flow as a new call.
    assert_eq!(v.counters().started, 2);
    v.on_rtp_upstream(key(2), &rtp_m(UP ^ 1, 60, true), t + T);
    assert_eq!(v.counters().started, 3, "a new SSRC on call 2's flow");
}

#[test]
fn a_byed_silent_or_idle_call_is_no_longer_heard_a_pausing_one_is() {
    let cfg = VpmConfig::default();
    let mut v = Vpm::new(cfg);
    // 1: says BYE; 2: stops without one (CBR: silent); 3: a VAD talker
    // pausing; all three after 2 s of packets.
    talk(&mut v, key(1), UP, 0, 0, 100, |_| false);
    talk(&mut v, key(2), UP, 0, 0, 100, |_| false);
    talk(&mut v, key(3), UP, 0, 0, 100, |_| false);
    v.on_rtp_upstream(key(3), &rtp_m(UP, 100, true), 100 * T);
    let stop = 100 * T;
    assert_eq!(v.heard_calls(stop), 3);
    v.on_rtcp_upstream(key(1), &rr_bye(UP, DOWN, Some(UP)), stop);
    assert_eq!(v.heard_calls(stop), 2, "BYE: out at once");
    // Late RTP of the ended source does not bring it back.
    v.on_rtp_upstream(key(1), &rtp_m(UP, 100, false), stop + T);
    assert_eq!(v.heard_calls(stop + T), 2);
    assert_eq!(v.heard_calls(99 * T + cfg.silence_us), 2, "at the limit");
    assert_eq!(
        v.heard_calls(99 * T + cfg.silence_us + 1),
        1,
        "silent past the limit: out"
    );
    // The VAD talker's pause: heard past its window (no longer judged)...
    let later = stop + 6_000_000;
    assert_eq!((v.heard_calls(later), v.active_calls(later)), (1, 0));
    // ...until the idle timeout.
    assert_eq!(v.heard_calls(stop + cfg.idle_timeout_us), 1);
    assert_eq!(v.heard_calls(stop + cfg.idle_timeout_us + 1), 0);
}
