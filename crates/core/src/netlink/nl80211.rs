//! nl80211 over generic netlink: the family lookup, the station dump
//! (`NL80211_CMD_GET_STATION` with `NLM_F_DUMP`: per-station signal and MAC
//! counters) and the survey dump (`NL80211_CMD_GET_SURVEY`: the noise floor
//! and the active/busy time of the channel in use, [`ChannelSurvey`]).
//!
//! Owns: request builders and strict reply parsers (numbers from
//! `<linux/nl80211.h>` and `<linux/genetlink.h>`). A station without a MAC
//! or without station info is an error; attributes this reader does not use
//! are skipped (the kernel adds new ones), but a used one of the wrong size
//! is an error. Must not touch: sockets (the daemon's `linux::radio` sends
//! and receives).

use super::{
    attr_u16, attr_u32, attr_u64, attr_u8, attrs, begin, finish, messages, push_attr, Message,
    NlError, NLMSG_DONE, NLMSG_ERROR, NLM_F_DUMP, NLM_F_REQUEST,
};

/// `GENL_ID_CTRL`: the generic netlink controller's message type.
pub const GENL_ID_CTRL: u16 = 16;
/// `CTRL_CMD_GETFAMILY`.
pub const CTRL_CMD_GETFAMILY: u8 = 3;
/// `CTRL_CMD_NEWFAMILY` (the answer).
pub const CTRL_CMD_NEWFAMILY: u8 = 1;
/// `CTRL_ATTR_FAMILY_ID` (u16).
pub const CTRL_ATTR_FAMILY_ID: u16 = 1;
/// `CTRL_ATTR_FAMILY_NAME` (string).
pub const CTRL_ATTR_FAMILY_NAME: u16 = 2;
/// Length of `struct genlmsghdr` (cmd, version, reserved u16).
pub const GENL_HDRLEN: usize = 4;

/// `NL80211_CMD_GET_STATION`.
pub const CMD_GET_STATION: u8 = 17;
/// `NL80211_CMD_NEW_STATION` (each station of the dump).
pub const CMD_NEW_STATION: u8 = 19;
/// `NL80211_CMD_GET_SURVEY`.
pub const CMD_GET_SURVEY: u8 = 50;
/// `NL80211_CMD_NEW_SURVEY_RESULTS` (each channel of the dump).
pub const CMD_NEW_SURVEY_RESULTS: u8 = 51;
/// `NL80211_ATTR_IFINDEX` (u32).
pub const ATTR_IFINDEX: u16 = 3;
/// `NL80211_ATTR_MAC` (6 bytes).
pub const ATTR_MAC: u16 = 6;
/// `NL80211_ATTR_STA_INFO` (nested `NL80211_STA_INFO_*`).
pub const ATTR_STA_INFO: u16 = 21;
/// `NL80211_ATTR_SURVEY_INFO` (nested `NL80211_SURVEY_INFO_*`).
pub const ATTR_SURVEY_INFO: u16 = 84;
/// `NL80211_STA_INFO_TX_BYTES` (u32).
pub const STA_INFO_TX_BYTES: u16 = 3;
/// `NL80211_STA_INFO_SIGNAL` (u8 holding an s8, dBm).
pub const STA_INFO_SIGNAL: u16 = 7;
/// `NL80211_STA_INFO_RX_PACKETS` (u32).
pub const STA_INFO_RX_PACKETS: u16 = 9;
/// `NL80211_STA_INFO_TX_PACKETS` (u32).
pub const STA_INFO_TX_PACKETS: u16 = 10;
/// `NL80211_STA_INFO_TX_RETRIES` (u32).
pub const STA_INFO_TX_RETRIES: u16 = 11;
/// `NL80211_STA_INFO_TX_FAILED` (u32).
pub const STA_INFO_TX_FAILED: u16 = 12;
/// `NL80211_STA_INFO_SIGNAL_AVG` (u8 holding an s8, dBm).
pub const STA_INFO_SIGNAL_AVG: u16 = 13;
/// `NL80211_STA_INFO_TX_BYTES64` (u64).
pub const STA_INFO_TX_BYTES64: u16 = 24;
/// `NL80211_SURVEY_INFO_NOISE` (u8 holding an s8, dBm).
pub const SURVEY_INFO_NOISE: u16 = 2;
/// `NL80211_SURVEY_INFO_IN_USE` (flag).
pub const SURVEY_INFO_IN_USE: u16 = 3;
/// `NL80211_SURVEY_INFO_FREQUENCY` (u32, MHz).
pub const SURVEY_INFO_FREQUENCY: u16 = 1;
/// `NL80211_SURVEY_INFO_TIME` (u64, ms the radio was on the channel). The
/// legacy name `NL80211_SURVEY_INFO_CHANNEL_TIME` is a `#define` of the same
/// number in `<linux/nl80211.h>`, so there is no second number to accept.
pub const SURVEY_INFO_TIME: u16 = 4;
/// `NL80211_SURVEY_INFO_TIME_BUSY` (u64, ms the primary channel was sensed
/// busy: CCA, receiving, transmitting); legacy `..._CHANNEL_TIME_BUSY`, same number.
pub const SURVEY_INFO_TIME_BUSY: u16 = 5;

/// What the station dump says about one station (absent attributes are `None`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Station {
    /// Its MAC address.
    pub mac: [u8; 6],
    /// Signal of the last frame received from it, dBm.
    pub signal_dbm: Option<i8>,
    /// Average signal of its frames, dBm.
    pub signal_avg_dbm: Option<i8>,
    /// Frames (MSDUs) sent to it (acknowledged or not).
    pub tx_packets: Option<u32>,
    /// Frames received from it.
    pub rx_packets: Option<u32>,
    /// Retried transmission attempts to it.
    pub tx_retries: Option<u32>,
    /// Frames to it given up after the retry limit.
    pub tx_failed: Option<u32>,
    /// Bytes sent to it (`TX_BYTES64` when present, else `TX_BYTES`).
    pub tx_bytes: Option<u64>,
}

/// One channel of a survey dump (absent attributes are `None`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelSurvey {
    /// Centre frequency, MHz.
    pub frequency_mhz: Option<u32>,
    /// Noise floor, dBm.
    pub noise_dbm: Option<i8>,
    /// Cumulative time on the channel, ms (`SURVEY_INFO_TIME`).
    pub active_ms: Option<u64>,
    /// Cumulative busy time, ms (`SURVEY_INFO_TIME_BUSY`); `None`: the
    /// driver does not report it.
    pub busy_ms: Option<u64>,
}

fn genl_request(out: &mut Vec<u8>, ty: u16, flags: u16, seq: u32, cmd: u8, version: u8) {
    begin(out, ty, flags, seq);
    out.extend_from_slice(&[cmd, version, 0, 0]);
}

/// Asks the controller for the nl80211 family's id.
pub fn family_request(out: &mut Vec<u8>, seq: u32) {
    genl_request(out, GENL_ID_CTRL, NLM_F_REQUEST, seq, CTRL_CMD_GETFAMILY, 1);
    push_attr(out, CTRL_ATTR_FAMILY_NAME, b"nl80211\0");
    finish(out);
}

/// Dumps the stations of interface `ifindex` (`family`: nl80211's id).
pub fn station_dump_request(out: &mut Vec<u8>, family: u16, seq: u32, ifindex: u32) {
    genl_request(
        out,
        family,
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        CMD_GET_STATION,
        0,
    );
    push_attr(out, ATTR_IFINDEX, &ifindex.to_ne_bytes());
    finish(out);
}

/// Dumps the channel survey of interface `ifindex`.
pub fn survey_dump_request(out: &mut Vec<u8>, family: u16, seq: u32, ifindex: u32) {
    genl_request(
        out,
        family,
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        CMD_GET_SURVEY,
        0,
    );
    push_attr(out, ATTR_IFINDEX, &ifindex.to_ne_bytes());
    finish(out);
}

/// The generic netlink command and attributes of a message of type `family`.
fn genl_body<'a>(m: &Message<'a>) -> Result<(u8, &'a [u8]), NlError> {
    if m.payload.len() < GENL_HDRLEN {
        return Err(NlError::Length);
    }
    Ok((m.payload[0], &m.payload[GENL_HDRLEN..]))
}

/// What one message of a reply means for the walk.
enum Step<'a> {
    Done,
    Skip,
    Body(u8, &'a [u8]),
}

fn step<'a>(m: &Message<'a>, family: u16, seq: u32) -> Result<Step<'a>, NlError> {
    if m.seq != seq {
        return Ok(Step::Skip); // a late answer to an earlier request
    }
    match m.ty {
        NLMSG_DONE => Ok(Step::Done),
        NLMSG_ERROR => match m.error_code()? {
            0 => Ok(Step::Done),
            e => Err(NlError::Errno(e)),
        },
        t if t == family => {
            let (cmd, body) = genl_body(m)?;
            Ok(Step::Body(cmd, body))
        }
        _ => Err(NlError::UnexpectedType),
    }
}

/// Parses the controller's answer to [`family_request`] with sequence
/// `seq`: `Some(id)` once found. `Err(Errno(2))` (ENOENT): no nl80211 in this
/// kernel (cfg80211 not loaded).
pub fn parse_family_reply(buf: &[u8], seq: u32) -> Result<Option<u16>, NlError> {
    for m in messages(buf) {
        match step(&m?, GENL_ID_CTRL, seq)? {
            Step::Skip => {}
            Step::Done => return Ok(None),
            Step::Body(cmd, body) => {
                if cmd != CTRL_CMD_NEWFAMILY {
                    return Err(NlError::UnexpectedType);
                }
                for a in attrs(body) {
                    let (t, v) = a?;
                    if t == CTRL_ATTR_FAMILY_ID {
                        return attr_u16(v).map(Some);
                    }
                }
                return Err(NlError::Missing);
            }
        }
    }
    Ok(None)
}

fn signal(v: &[u8]) -> Result<i8, NlError> {
    attr_u8(v).map(|b| b as i8)
}

/// One `NL80211_CMD_NEW_STATION` message's attributes.
pub fn parse_station(body: &[u8]) -> Result<Station, NlError> {
    let mut mac = None;
    let mut info = None;
    for a in attrs(body) {
        match a? {
            (ATTR_MAC, v) => mac = Some(<[u8; 6]>::try_from(v).map_err(|_| NlError::BadValue)?),
            (ATTR_STA_INFO, v) => info = Some(v),
            _ => {}
        }
    }
    let mut s = Station {
        mac: mac.ok_or(NlError::Missing)?,
        ..Station::default()
    };
    let mut bytes32 = None;
    for a in attrs(info.ok_or(NlError::Missing)?) {
        let (t, v) = a?;
        match t {
            STA_INFO_SIGNAL => s.signal_dbm = Some(signal(v)?),
            STA_INFO_SIGNAL_AVG => s.signal_avg_dbm = Some(signal(v)?),
            STA_INFO_TX_PACKETS => s.tx_packets = Some(attr_u32(v)?),
            STA_INFO_RX_PACKETS => s.rx_packets = Some(attr_u32(v)?),
            STA_INFO_TX_RETRIES => s.tx_retries = Some(attr_u32(v)?),
            STA_INFO_TX_FAILED => s.tx_failed = Some(attr_u32(v)?),
            STA_INFO_TX_BYTES => bytes32 = Some(u64::from(attr_u32(v)?)),
            STA_INFO_TX_BYTES64 => s.tx_bytes = Some(attr_u64(v)?),
            _ => {}
        }
    }
    s.tx_bytes = s.tx_bytes.or(bytes32);
    Ok(s)
}

/// Parses one datagram of the answer to [`station_dump_request`] (type
/// `family`, sequence `seq`): appends the stations to `out` while it holds
/// fewer than `cap` (more are counted in `left_out`) and returns whether
/// the dump is complete. `Err(Errno(19))` (ENODEV) or `Errno(95)`
/// (EOPNOTSUPP): the interface is not a wireless one.
pub fn parse_station_reply(
    buf: &[u8],
    family: u16,
    seq: u32,
    out: &mut Vec<Station>,
    cap: usize,
    left_out: &mut u64,
) -> Result<bool, NlError> {
    for m in messages(buf) {
        match step(&m?, family, seq)? {
            Step::Skip => {}
            Step::Done => return Ok(true),
            Step::Body(CMD_NEW_STATION, body) => {
                let s = parse_station(body)?;
                if out.len() < cap {
                    out.push(s);
                } else {
                    *left_out += 1;
                }
            }
            Step::Body(..) => return Err(NlError::UnexpectedType),
        }
    }
    Ok(false)
}

/// One `NL80211_ATTR_SURVEY_INFO` nest: whether the channel is the one in
/// use, and its figures. Strict: a used attribute of the wrong size (or an
/// `IN_USE` flag with a value) is an error; unknown ones are skipped.
pub fn parse_survey_info(v: &[u8]) -> Result<(bool, ChannelSurvey), NlError> {
    let mut c = ChannelSurvey::default();
    let mut in_use = false;
    for s in attrs(v) {
        match s? {
            (SURVEY_INFO_FREQUENCY, v) => c.frequency_mhz = Some(attr_u32(v)?),
            (SURVEY_INFO_NOISE, v) => c.noise_dbm = Some(signal(v)?),
            (SURVEY_INFO_IN_USE, []) => in_use = true,
            (SURVEY_INFO_IN_USE, _) => return Err(NlError::BadValue),
            (SURVEY_INFO_TIME, v) => c.active_ms = Some(attr_u64(v)?),
            (SURVEY_INFO_TIME_BUSY, v) => c.busy_ms = Some(attr_u64(v)?),
            _ => {}
        }
    }
    Ok((in_use, c))
}

/// Parses one datagram of the answer to [`survey_dump_request`] (type
/// `family`, sequence `seq`): the channel flagged `IN_USE` goes to `in_use`
/// (the first one, if a driver flagged several; channels not in use are
/// skipped, but every one is parsed strictly). Returns whether the dump is
/// complete; a complete dump that leaves `in_use` at `None` had no channel
/// in use (an interface that is down, or not associated/joined).
pub fn parse_survey_in_use(
    buf: &[u8],
    family: u16,
    seq: u32,
    in_use: &mut Option<ChannelSurvey>,
) -> Result<bool, NlError> {
    for m in messages(buf) {
        match step(&m?, family, seq)? {
            Step::Skip => {}
            Step::Done => return Ok(true),
            Step::Body(CMD_NEW_SURVEY_RESULTS, body) => {
                for a in attrs(body) {
                    let (t, v) = a?;
                    if t != ATTR_SURVEY_INFO {
                        continue;
                    }
                    let (used, c) = parse_survey_info(v)?;
                    if used && in_use.is_none() {
                        *in_use = Some(c);
                    }
                }
            }
            Step::Body(..) => return Err(NlError::UnexpectedType),
        }
    }
    Ok(false)
}

/// Parses one datagram of the answer to [`survey_dump_request`]: the noise
/// floor of the channel in use goes to `noise` (a channel without noise or
/// not in use is skipped). Returns whether the dump is complete.
pub fn parse_survey_reply(
    buf: &[u8],
    family: u16,
    seq: u32,
    noise: &mut Option<i8>,
) -> Result<bool, NlError> {
    let mut c = None;
    let done = parse_survey_in_use(buf, family, seq, &mut c)?;
    if let Some(n) = c.and_then(|c| c.noise_dbm) {
        *noise = Some(n);
    }
    Ok(done)
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    /// A station dump answer for one station, written out byte by byte from
    /// the documented layout (little-endian host): nlmsghdr (len 104, type
    /// 0x22 = nl80211's id here, flags NLM_F_MULTI, seq 9, pid 0), genlmsghdr
    /// (cmd 19 NEW_STATION, version 1), ATTR_IFINDEX 4, ATTR_MAC
    /// 02:00:00:00:00:04, ATTR_STA_INFO { SIGNAL -61, SIGNAL_AVG -63,
    /// TX_PACKETS 1000, RX_PACKETS 900, TX_RETRIES 250, TX_FAILED 3,
    /// TX_BYTES64 120000, INACTIVE_TIME 10 (unused) }.
    const STATION: [u8; 132] = [
        112, 0, 0, 0, 0x22, 0, 2, 0, 9, 0, 0, 0, 0, 0, 0, 0, // nlmsghdr
        19, 1, 0, 0, // genlmsghdr
        8, 0, 3, 0, 4, 0, 0, 0, // IFINDEX = 4
        10, 0, 6, 0, 2, 0, 0, 0, 0, 4, 0, 0, // MAC + 2 bytes padding
        72, 0, 21, 0x80, // STA_INFO, nested flag, 68 bytes of contents
        5, 0, 7, 0, 0xc3, 0, 0, 0, // SIGNAL = -61 (0xc3)
        5, 0, 13, 0, 0xc1, 0, 0, 0, // SIGNAL_AVG = -63
        8, 0, 10, 0, 0xe8, 3, 0, 0, // TX_PACKETS = 1000
        8, 0, 9, 0, 0x84, 3, 0, 0, // RX_PACKETS = 900
        8, 0, 11, 0, 250, 0, 0, 0, // TX_RETRIES = 250
        8, 0, 12, 0, 3, 0, 0, 0, // TX_FAILED = 3
        12, 0, 24, 0, 0xc0, 0xd4, 1, 0, 0, 0, 0, 0, // TX_BYTES64 = 120000
        8, 0, 1, 0, 10, 0, 0, 0, // INACTIVE_TIME (ignored)
        // ... and the dump's end: NLMSG_DONE
        20, 0, 0, 0, 3, 0, 2, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    #[test]
    fn golden_station_dump() {
        assert_eq!(u16::from_le_bytes([STATION[40], STATION[41]]), 72);
        let mut out = Vec::new();
        let mut left = 0;
        let done = parse_station_reply(&STATION, 0x22, 9, &mut out, 8, &mut left).unwrap();
        assert!(done);
        assert_eq!(
            out,
            vec![Station {
                mac: [2, 0, 0, 0, 0, 4],
                signal_dbm: Some(-61),
                signal_avg_dbm: Some(-63),
                tx_packets: Some(1000),
                rx_packets: Some(900),
                tx_retries: Some(250),
                tx_failed: Some(3),
                tx_bytes: Some(120_000),
            }]
        );
        // Another request's answer is skipped; a full table counts the rest.
        let mut out2 = Vec::new();
        assert!(!parse_station_reply(&STATION, 0x22, 8, &mut out2, 8, &mut left).unwrap());
        assert!(out2.is_empty());
        assert!(parse_station_reply(&STATION, 0x22, 9, &mut out2, 0, &mut left).unwrap());
        assert_eq!((out2.len(), left), (0, 1));
    }

    #[test]
    fn every_truncation_and_corruption_is_refused() {
        let mut out = Vec::new();
        let mut left = 0;
        for cut in 1..112 {
            out.clear();
            let r = parse_station_reply(&STATION[..cut], 0x22, 9, &mut out, 8, &mut left);
            assert!(r.is_err(), "cut {cut}: {r:?}");
        }
        // The nested length one byte too long, a 5-byte MAC, a 2-byte counter.
        let mut b = STATION;
        b[40] = 73;
        assert!(parse_station_reply(&b, 0x22, 9, &mut out, 8, &mut left).is_err());
        let mut b = STATION;
        b[28] = 9;
        assert_eq!(
            parse_station_reply(&b, 0x22, 9, &mut out, 8, &mut left),
            Err(NlError::BadValue)
        );
        let mut b = STATION;
        b[60] = 6;
        assert!(parse_station_reply(&b, 0x22, 9, &mut out, 8, &mut left).is_err());
        // Wrong command, wrong message type.
        let mut b = STATION;
        b[16] = 20;
        assert_eq!(
            parse_station_reply(&b, 0x22, 9, &mut out, 8, &mut left),
            Err(NlError::UnexpectedType)
        );
        assert_eq!(
            parse_station_reply(&STATION, 0x23, 9, &mut out, 8, &mut left),
            Err(NlError::UnexpectedType)
        );
    }

    /// The kernel's answer for an interface without a wireless device:
    /// NLMSG_ERROR with -ENODEV (19) and the request echoed.
    #[test]
    fn not_wireless_is_an_errno() {
        let mut req = Vec::new();
        station_dump_request(&mut req, 0x22, 5, 7);
        assert_eq!(
            req,
            [
                28, 0, 0, 0, 0x22, 0, 1, 3, 5, 0, 0, 0, 0, 0, 0, 0, 17, 0, 0, 0, 8, 0, 3, 0, 7, 0,
                0, 0
            ]
        );
        let mut err = vec![36, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0];
        err.extend_from_slice(&(-19i32).to_le_bytes());
        err.extend_from_slice(&req[..16]);
        let mut out = Vec::new();
        let mut left = 0;
        assert_eq!(
            parse_station_reply(&err, 0x22, 5, &mut out, 8, &mut left),
            Err(NlError::Errno(19))
        );
    }

    #[test]
    fn family_lookup_golden() {
        let mut req = Vec::new();
        family_request(&mut req, 1);
        assert_eq!(
            req,
            [
                32, 0, 0, 0, 16, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 1, 0, 0, 12, 0, 2, 0, b'n',
                b'l', b'8', b'0', b'2', b'1', b'1', 0
            ]
        );
        // CTRL_CMD_NEWFAMILY: FAMILY_NAME "nl80211", FAMILY_ID 0x22.
        let reply = [
            40, 0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 12, 0, 2, 0, b'n', b'l',
            b'8', b'0', b'2', b'1', b'1', 0, 6, 0, 1, 0, 0x22, 0, 0, 0,
        ];
        assert_eq!(parse_family_reply(&reply, 1), Ok(Some(0x22)));
        let mut no_id = reply;
        no_id[34] = 7; // another attribute type: the id is missing
        assert_eq!(parse_family_reply(&no_id, 1), Err(NlError::Missing));
        let mut enoent = vec![36, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0];
        enoent.extend_from_slice(&(-2i32).to_le_bytes());
        enoent.extend_from_slice(&req[..16]);
        assert_eq!(parse_family_reply(&enoent, 1), Err(NlError::Errno(2)));
    }

    #[test]
    fn survey_noise_of_the_channel_in_use() {
        // Two channels: 2412 MHz noise -92 (not in use), 2437 MHz noise -95 in use.
        let chan = |freq: u32, noise: i8, in_use: bool| {
            let mut info = Vec::new();
            push_attr(&mut info, 1, &freq.to_ne_bytes());
            push_attr(&mut info, SURVEY_INFO_NOISE, &[noise as u8]);
            if in_use {
                push_attr(&mut info, SURVEY_INFO_IN_USE, &[]);
            }
            let mut m = Vec::new();
            genl_request(&mut m, 0x22, 2, 3, CMD_NEW_SURVEY_RESULTS, 1);
            push_attr(&mut m, ATTR_IFINDEX, &4u32.to_ne_bytes());
            push_attr(&mut m, ATTR_SURVEY_INFO | 0x8000, &info);
            finish(&mut m);
            m
        };
        let mut buf = chan(2412, -92, false);
        buf.extend_from_slice(&chan(2437, -95, true));
        let mut noise = None;
        assert_eq!(parse_survey_reply(&buf, 0x22, 3, &mut noise), Ok(false));
        assert_eq!(noise, Some(-95));
        let mut bad = chan(2437, -95, true);
        bad[40] = 2; // the noise attribute's length under its header
        assert!(parse_survey_reply(&bad, 0x22, 3, &mut noise).is_err());
    }

    /// A survey dump answer, written out byte by byte (little-endian host,
    /// nl80211's id 0x22, sequence 7): channel 2412 MHz not in use (TIME 500,
    /// TIME_BUSY 400), then 2437 MHz in use (NOISE -95, IN_USE, a PAD
    /// attribute as `nla_put_u64_64bit` may insert, TIME 123456 ms,
    /// TIME_BUSY 30864 ms, TIME_TX 1000 ms unused), then NLMSG_DONE.
    const SURVEY: [u8; 176] = [
        // 2412 MHz, not in use: 64 bytes.
        64, 0, 0, 0, 0x22, 0, 2, 0, 7, 0, 0, 0, 0, 0, 0, 0, // nlmsghdr
        51, 1, 0, 0, // genlmsghdr: NEW_SURVEY_RESULTS
        8, 0, 3, 0, 4, 0, 0, 0, // IFINDEX = 4
        36, 0, 84, 0x80, // SURVEY_INFO, nested, 32 bytes of contents
        8, 0, 1, 0, 0x6c, 0x09, 0, 0, // FREQUENCY = 2412
        12, 0, 4, 0, 0xf4, 1, 0, 0, 0, 0, 0, 0, // TIME = 500
        12, 0, 5, 0, 0x90, 1, 0, 0, 0, 0, 0, 0, // TIME_BUSY = 400
        // 2437 MHz, in use: 92 bytes (starts at 64).
        92, 0, 0, 0, 0x22, 0, 2, 0, 7, 0, 0, 0, 0, 0, 0, 0, // nlmsghdr
        51, 1, 0, 0, // genlmsghdr
        8, 0, 3, 0, 4, 0, 0, 0, // IFINDEX = 4
        64, 0, 84, 0x80, // SURVEY_INFO, nested, 60 bytes of contents
        8, 0, 1, 0, 0x85, 0x09, 0, 0, // FREQUENCY = 2437
        5, 0, 2, 0, 0xa1, 0, 0, 0, // NOISE = -95
        4, 0, 3, 0, // IN_USE (offset 112)
        4, 0, 10, 0, // PAD
        12, 0, 4, 0, 0x40, 0xe2, 1, 0, 0, 0, 0, 0, // TIME = 123456
        12, 0, 5, 0, 0x90, 0x78, 0, 0, 0, 0, 0, 0, // TIME_BUSY = 30864 (offset 132)
        12, 0, 8, 0, 0xe8, 3, 0, 0, 0, 0, 0, 0, // TIME_TX (ignored)
        // NLMSG_DONE (starts at 156).
        20, 0, 0, 0, 3, 0, 2, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    fn in_use(buf: &[u8]) -> Result<(bool, Option<ChannelSurvey>), NlError> {
        let mut c = None;
        parse_survey_in_use(buf, 0x22, 7, &mut c).map(|done| (done, c))
    }

    #[test]
    fn golden_survey_times_of_the_channel_in_use() {
        let want = ChannelSurvey {
            frequency_mhz: Some(2437),
            noise_dbm: Some(-95),
            active_ms: Some(123_456),
            busy_ms: Some(30_864),
        };
        assert_eq!(in_use(&SURVEY), Ok((true, Some(want))));
        let mut noise = None;
        assert_eq!(parse_survey_reply(&SURVEY, 0x22, 7, &mut noise), Ok(true));
        assert_eq!(noise, Some(-95));
        // The first datagram alone: a channel not in use, dump not complete.
        assert_eq!(in_use(&SURVEY[..64]), Ok((false, None)));
        // Another request's answer is skipped.
        let mut c = None;
        assert_eq!(parse_survey_in_use(&SURVEY, 0x22, 6, &mut c), Ok(false));
        assert_eq!(c, None);
    }

    #[test]
    fn survey_without_in_use_or_busy_time() {
        // IN_USE renumbered to an unknown attribute: no channel in use.
        let mut b = SURVEY;
        b[114] = 0x30;
        assert_eq!(in_use(&b), Ok((true, None)));
        // TIME_BUSY renumbered to TIME_SCAN (9, unused): the driver reports
        // no busy time; the active time is still there.
        let mut b = SURVEY;
        b[134] = 9;
        let (done, c) = in_use(&b).unwrap();
        assert!(done);
        let c = c.unwrap();
        assert_eq!((c.active_ms, c.busy_ms), (Some(123_456), None));
    }

    #[test]
    fn survey_truncations_and_bad_sizes_are_refused() {
        for cut in 1..SURVEY.len() {
            let r = in_use(&SURVEY[..cut]);
            match cut {
                64 | 156 => assert!(matches!(r, Ok((false, _))), "cut {cut}: {r:?}"),
                _ => assert!(r.is_err(), "cut {cut}: {r:?}"),
            }
        }
        // The nest one byte longer than its message.
        let mut b = SURVEY;
        b[64 + 28] = 65;
        assert!(in_use(&b).is_err());
        // A 4-byte TIME, a 9-byte TIME_BUSY, an IN_USE flag with a value.
        for (ty, len) in [
            (SURVEY_INFO_TIME, 4),
            (SURVEY_INFO_TIME_BUSY, 9),
            (SURVEY_INFO_IN_USE, 1),
        ] {
            let mut info = Vec::new();
            push_attr(&mut info, SURVEY_INFO_IN_USE, &[]);
            push_attr(&mut info, ty, &[1u8; 9][..len]);
            let mut m = Vec::new();
            genl_request(&mut m, 0x22, 2, 7, CMD_NEW_SURVEY_RESULTS, 1);
            push_attr(&mut m, ATTR_SURVEY_INFO | 0x8000, &info);
            finish(&mut m);
            assert_eq!(
                in_use(&m),
                Err(NlError::BadValue),
                "attribute {ty} of {len} bytes"
            );
        }
        // An error answer (the interface is not a wireless one).
        let mut req = Vec::new();
        survey_dump_request(&mut req, 0x22, 7, 9);
        let mut err = vec![36, 0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0];
        err.extend_from_slice(&(-95i32).to_le_bytes());
        err.extend_from_slice(&req[..16]);
        assert_eq!(in_use(&err), Err(NlError::Errno(95)));
    }
}
