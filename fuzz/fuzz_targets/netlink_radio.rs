//! Fuzz target: the radio source's netlink parsers (airpack-core netlink:
//! nl80211 family lookup, station and survey dumps (noise, and the channel
//! in use's active/busy time for the medium's utilisation), rtnetlink
//! neighbour dump) on untrusted datagrams. Never panics; the station and neighbour
//! lists never exceed their caps; whatever parses as a station has a MAC.
#![no_main]
use airpack_core::netlink::{neigh, nl80211};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (family, seq) = match data {
        [a, b, c, ..] => (u16::from_ne_bytes([*a, *b]), u32::from(*c)),
        _ => (0x22, 1),
    };
    let body = data.get(3..).unwrap_or(&[]);
    let mut stations = Vec::new();
    let mut left = 0;
    let _ = nl80211::parse_station_reply(body, family, seq, &mut stations, 4, &mut left);
    assert!(stations.len() <= 4);
    let mut noise = None;
    let _ = nl80211::parse_survey_reply(body, family, seq, &mut noise);
    let mut chan = None;
    if let Ok(true) = nl80211::parse_survey_in_use(body, family, seq, &mut chan) {
        // What a complete dump names as the channel in use parsed as such.
        assert_eq!(noise.is_some(), chan.is_some_and(|c| c.noise_dbm.is_some()));
    }
    let _ = nl80211::parse_survey_info(body);
    let _ = nl80211::parse_family_reply(body, seq);
    let _ = nl80211::parse_station(body);
    let mut ns = Vec::new();
    let _ = neigh::parse_reply(body, seq, &mut ns, 4, &mut left);
    assert!(ns.len() <= 4);
    let _ = neigh::parse_neigh(body);
});
