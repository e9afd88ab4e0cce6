//! The AP's lease table through the public API: registration messages are
//! encoded, tagged, opened and applied; the mux's stream table follows;
//! leases expire unless renewed; replays and forgeries change nothing.
//!
//! Owns nothing but these checks.

use airpack_core::auth::Key;
use airpack_core::downlink::lease::{LeaseConfig, LeaseTable};
use airpack_core::downlink::mux::{Mux, MuxConfig};
use airpack_core::downlink::register::{
    self, Body, ErrorCode, Message, Ports, RegError, Run, MAX_MESSAGE,
};
use std::net::{IpAddr, Ipv4Addr};

const S: u64 = 1_000_000;
const STA: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5));

fn key() -> Key {
    Key::from_bytes(*b"downlink-key-01!")
}

/// Encodes a request from the station and opens it at the AP (as on the air).
fn over_the_air(seq: u64, body: Body) -> Message {
    let k = key();
    let mut buf = [0u8; MAX_MESSAGE];
    let n = register::encode(
        &Message {
            key_id: 3,
            seq,
            body,
        },
        &k,
        &mut buf,
    )
    .unwrap();
    register::open(&buf[..n], |id| (id == 3).then_some(&k)).unwrap()
}

fn setup() -> (LeaseTable, Mux) {
    (
        LeaseTable::new(LeaseConfig {
            max_streams: 200,
            max_range: 128,
            ..LeaseConfig::default()
        }),
        Mux::new(MuxConfig::default()),
    )
}

fn runs(b: &Option<Body>) -> Vec<Run> {
    match b {
        Some(Body::RegisterOk(a)) | Some(Body::RenewOk(a)) => a.runs().to_vec(),
        other => panic!("not an answer: {other:?}"),
    }
}

#[test]
fn register_renew_unregister_and_expiry() {
    let (mut t, mut mux) = setup();
    let reg = over_the_air(
        10,
        Body::Register {
            addr: STA,
            ports: Ports::Range(6600, 6700),
            lease_secs: 60,
        },
    );
    let a = t.handle(0, STA, &reg, &mut mux);
    assert_eq!(
        runs(&a),
        vec![Run {
            first_port: 6600,
            count: 101,
            first_sid: 0
        }]
    );
    assert_eq!((mux.streams(), t.streams(), t.active()), (101, 101, 1));
    // Renew just before the end keeps it; without renew it ends at 60 s + 59 s.
    let renew = over_the_air(
        11,
        Body::Renew {
            addr: STA,
            lease_secs: 60,
        },
    );
    assert!(matches!(
        t.handle(59 * S, STA, &renew, &mut mux),
        Some(Body::RenewOk(_))
    ));
    assert_eq!(t.expire(118 * S, &mut mux), 0);
    assert_eq!(mux.streams(), 101);
    assert_eq!(t.poll_timeout(), Some(119 * S));
    assert_eq!(t.expire(119 * S, &mut mux), 1);
    assert_eq!((mux.streams(), t.streams(), t.active()), (0, 0, 0));
    // After expiry, renew is refused with a clear code; register again works.
    let renew = over_the_air(
        12,
        Body::Renew {
            addr: STA,
            lease_secs: 60,
        },
    );
    assert_eq!(
        t.handle(120 * S, STA, &renew, &mut mux),
        Some(Body::Error {
            reply_to: 12,
            code: ErrorCode::NoLease
        })
    );
    let reg = over_the_air(
        13,
        Body::Register {
            addr: STA,
            ports: Ports::Single(6600),
            lease_secs: 9999,
        },
    );
    match t.handle(121 * S, STA, &reg, &mut mux) {
        Some(Body::RegisterOk(a)) => assert_eq!(a.lease_secs, 600, "capped at max_lease_secs"),
        other => panic!("{other:?}"),
    }
    let unreg = over_the_air(14, Body::Unregister { addr: STA });
    assert_eq!(
        t.handle(122 * S, STA, &unreg, &mut mux),
        Some(Body::UnregisterOk { reply_to: 14 })
    );
    assert_eq!(mux.streams(), 0);
    let s = t.stats();
    assert_eq!(
        (s.registered, s.renewed, s.unregistered, s.expired, s.errors),
        (2, 1, 1, 1, 1)
    );
}

#[test]
fn replays_and_forgeries_change_nothing() {
    let (mut t, mut mux) = setup();
    let reg = over_the_air(
        100,
        Body::Register {
            addr: STA,
            ports: Ports::Single(6600),
            lease_secs: 60,
        },
    );
    assert!(t.handle(0, STA, &reg, &mut mux).is_some());
    let unreg = over_the_air(101, Body::Unregister { addr: STA });
    assert!(t.handle(S, STA, &unreg, &mut mux).is_some());
    // The recorded register, sent again after the unregister: no answer, no lease.
    assert_eq!(t.handle(2 * S, STA, &reg, &mut mux), None);
    assert_eq!((t.active(), mux.streams(), t.stats().replays), (0, 0, 1));
    // An older sequence number is refused too.
    let old = over_the_air(
        50,
        Body::Register {
            addr: STA,
            ports: Ports::Single(6600),
            lease_secs: 60,
        },
    );
    assert_eq!(t.handle(3 * S, STA, &old, &mut mux), None);
    // A request for another station's address is not answered.
    let other = over_the_air(
        102,
        Body::Unregister {
            addr: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 6)),
        },
    );
    assert_eq!(t.handle(4 * S, STA, &other, &mut mux), None);
    assert_eq!(t.stats().ignored, 1);
    // Forged bytes never reach the table: a wrong key fails the tag.
    let mut buf = [0u8; MAX_MESSAGE];
    let n = register::encode(
        &Message {
            key_id: 3,
            seq: 200,
            body: Body::Unregister { addr: STA },
        },
        &Key::from_bytes([9; 16]),
        &mut buf,
    )
    .unwrap();
    let k = key();
    assert_eq!(
        register::open(&buf[..n], |_| Some(&k)),
        Err(RegError::BadTag)
    );
}

#[test]
fn bounds_and_error_codes() {
    let (mut t, mut mux) = setup();
    let big = over_the_air(
        1,
        Body::Register {
            addr: STA,
            ports: Ports::Range(1000, 1128),
            lease_secs: 60,
        },
    );
    assert_eq!(
        t.handle(0, STA, &big, &mut mux),
        Some(Body::Error {
            reply_to: 1,
            code: ErrorCode::RangeTooLarge
        })
    );
    let zero = over_the_air(
        2,
        Body::Register {
            addr: STA,
            ports: Ports::Single(1),
            lease_secs: 0,
        },
    );
    assert_eq!(
        t.handle(0, STA, &zero, &mut mux),
        Some(Body::Error {
            reply_to: 2,
            code: ErrorCode::BadRequest
        })
    );
    // 200 stream ids in all: a second station's 128-port range does not fit after a first one's.
    let a = over_the_air(
        3,
        Body::Register {
            addr: STA,
            ports: Ports::Range(1000, 1127),
            lease_secs: 60,
        },
    );
    assert_eq!(runs(&t.handle(0, STA, &a, &mut mux))[0].count, 128);
    let sta2 = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 7));
    let b = over_the_air(
        1,
        Body::Register {
            addr: sta2,
            ports: Ports::Range(1000, 1127),
            lease_secs: 60,
        },
    );
    assert_eq!(
        t.handle(0, sta2, &b, &mut mux),
        Some(Body::Error {
            reply_to: 1,
            code: ErrorCode::TableFull
        })
    );
    assert_eq!(mux.streams(), 128);
    // Re-registering replaces the old ports and ids.
    let c = over_the_air(
        4,
        Body::Register {
            addr: STA,
            ports: Ports::Single(7000),
            lease_secs: 60,
        },
    );
    assert_eq!(
        runs(&t.handle(0, STA, &c, &mut mux)),
        vec![Run {
            first_port: 7000,
            count: 1,
            first_sid: 0
        }]
    );
    assert_eq!(mux.streams(), 1);
}

#[test]
fn auto_streams_join_at_the_next_renew() {
    let (mut t, mut mux) = setup();
    let reg = over_the_air(
        1,
        Body::Register {
            addr: STA,
            ports: Ports::Auto,
            lease_secs: 60,
        },
    );
    assert_eq!(runs(&t.handle(0, STA, &reg, &mut mux)), vec![]);
    assert_eq!(t.observe(STA, 80), None, "outside auto_ports");
    let sid = t.observe(STA, 20_000).unwrap();
    assert_eq!(t.observe(STA, 20_000), None, "already known");
    assert_eq!(
        mux.streams(),
        0,
        "not multiplexed before the station knows its id"
    );
    let renew = over_the_air(
        2,
        Body::Renew {
            addr: STA,
            lease_secs: 60,
        },
    );
    assert_eq!(
        runs(&t.handle(S, STA, &renew, &mut mux)),
        vec![Run {
            first_port: 20_000,
            count: 1,
            first_sid: sid
        }]
    );
    assert_eq!(mux.streams(), 1);
}
