//! Codec profiles: payload size per packet interval, RTP payload type and
//! clock, and the ITU-T G.113 impairment values the E-model needs.
//!
//! Owns: the codec table only. Must not touch: the E-model formulas
//! ([`crate::emodel`]) or packet formats ([`crate::rtp`]).
//!
//! Sources: ITU-T G.113 (Ie, Bpl as used in VoIP studies), RFC 3551 (payload
//! types, 8 kHz RTP clock), the codec recommendations G.711, G.729 Annex A and
//! G.723.1 (frame length, look-ahead).

use serde::{Deserialize, Serialize};

/// A voice codec the traffic tool can emulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// G.729 Annex A, 8 kbit/s: 10-byte frames every 10 ms, 5 ms look-ahead.
    #[serde(alias = "g729a")]
    G729,
    /// G.711 µ-law (PCMU) with packet loss concealment, 64 kbit/s.
    #[serde(alias = "pcmu")]
    G711,
    /// G.711 µ-law without packet loss concealment (Bpl = 4.3).
    #[serde(rename = "g711-noplc")]
    G711NoPlc,
    /// G.723.1 at 6.3 kbit/s: 24-byte frames every 30 ms, 7.5 ms look-ahead.
    #[serde(alias = "g723.1", alias = "g7231")]
    G723,
}

/// Error for an unsupported packet interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadInterval {
    /// The codec asked for.
    pub codec: Codec,
    /// The interval asked for, in ms.
    pub interval_ms: u32,
}

impl std::fmt::Display for BadInterval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.codec.params();
        write!(
            f,
            "{}: packet interval {} ms is not a positive multiple of the {} ms frame (max {} ms)",
            p.name, self.interval_ms, p.frame_ms, MAX_INTERVAL_MS
        )
    }
}

impl std::error::Error for BadInterval {}

/// Largest packet interval accepted (ms).
pub const MAX_INTERVAL_MS: u32 = 120;

/// Static properties of one codec.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CodecParams {
    /// Human name.
    pub name: &'static str,
    /// RTP payload type (RFC 3551 static assignment).
    pub payload_type: u8,
    /// RTP timestamp clock (Hz).
    pub clock_rate: u32,
    /// Frame length (ms); a packet carries a whole number of frames.
    pub frame_ms: u32,
    /// Bytes per frame.
    pub frame_bytes: u32,
    /// Encoder look-ahead (ms) added to the mouth-to-ear delay.
    pub lookahead_ms: f64,
    /// G.113 equipment impairment factor Ie.
    pub ie: f64,
    /// G.113 packet-loss robustness factor Bpl.
    pub bpl: f64,
}

impl Codec {
    /// The codec's static parameters.
    pub const fn params(self) -> CodecParams {
        match self {
            Codec::G729 => CodecParams {
                name: "G.729A",
                payload_type: 18,
                clock_rate: 8000,
                frame_ms: 10,
                frame_bytes: 10,
                lookahead_ms: 5.0,
                ie: 11.0,
                bpl: 19.0,
            },
            Codec::G711 => CodecParams {
                name: "G.711 (PLC)",
                payload_type: 0,
                clock_rate: 8000,
                frame_ms: 10,
                frame_bytes: 80,
                lookahead_ms: 0.0,
                ie: 0.0,
                bpl: 25.1,
            },
            Codec::G711NoPlc => CodecParams {
                name: "G.711 (no PLC)",
                payload_type: 0,
                clock_rate: 8000,
                frame_ms: 10,
                frame_bytes: 80,
                lookahead_ms: 0.0,
                ie: 0.0,
                bpl: 4.3,
            },
            Codec::G723 => CodecParams {
                name: "G.723.1 6.3k",
                payload_type: 4,
                clock_rate: 8000,
                frame_ms: 30,
                frame_bytes: 24,
                lookahead_ms: 7.5,
                ie: 15.0,
                bpl: 16.1,
            },
        }
    }

    /// Profile for a packet interval (ms): a positive multiple of the frame
    /// length, at most [`MAX_INTERVAL_MS`].
    pub fn profile(self, interval_ms: u32) -> Result<Profile, BadInterval> {
        let p = self.params();
        if interval_ms == 0 || interval_ms % p.frame_ms != 0 || interval_ms > MAX_INTERVAL_MS {
            return Err(BadInterval {
                codec: self,
                interval_ms,
            });
        }
        Ok(Profile {
            codec: self,
            interval_ms,
        })
    }
}

/// A codec at a given packet interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    codec: Codec,
    interval_ms: u32,
}

impl Profile {
    /// The codec.
    pub fn codec(&self) -> Codec {
        self.codec
    }
    /// Static codec parameters.
    pub fn params(&self) -> CodecParams {
        self.codec.params()
    }
    /// Packet interval (ms).
    pub fn interval_ms(&self) -> u32 {
        self.interval_ms
    }
    /// Packet interval (µs).
    pub fn interval_us(&self) -> u64 {
        u64::from(self.interval_ms) * 1000
    }
    /// Frames per packet.
    pub fn frames_per_packet(&self) -> u32 {
        self.interval_ms / self.params().frame_ms
    }
    /// Codec payload bytes per packet (20 for G.729 at 20 ms, 160 for G.711).
    pub fn payload_bytes(&self) -> usize {
        (self.frames_per_packet() * self.params().frame_bytes) as usize
    }
    /// RTP timestamp increment per packet (samples at the RTP clock).
    pub fn timestamp_step(&self) -> u32 {
        self.params().clock_rate / 1000 * self.interval_ms
    }
    /// Delay the codec adds to the mouth-to-ear delay (ms): packetization
    /// (the whole interval is buffered before sending) plus look-ahead.
    /// G.729A at 20 ms: 20 + 5 = 25 ms.
    pub fn codec_delay_ms(&self) -> f64 {
        f64::from(self.interval_ms) + self.params().lookahead_ms
    }
    /// Packets per second.
    pub fn packets_per_second(&self) -> f64 {
        1000.0 / f64::from(self.interval_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_sizes_match_the_brief() {
        assert_eq!(Codec::G729.profile(20).unwrap().payload_bytes(), 20);
        assert_eq!(Codec::G711.profile(20).unwrap().payload_bytes(), 160);
        assert_eq!(Codec::G711.profile(30).unwrap().payload_bytes(), 240);
        assert_eq!(Codec::G729.profile(40).unwrap().payload_bytes(), 40);
        assert_eq!(Codec::G723.profile(30).unwrap().payload_bytes(), 24);
        assert_eq!(Codec::G729.profile(20).unwrap().timestamp_step(), 160);
    }

    #[test]
    fn intervals_are_validated() {
        assert!(Codec::G729.profile(0).is_err());
        assert!(Codec::G729.profile(15).is_err());
        assert!(Codec::G723.profile(20).is_err());
        assert!(Codec::G711.profile(130).is_err());
        let e = Codec::G723.profile(20).unwrap_err();
        assert!(e.to_string().contains("30 ms frame"), "{e}");
    }

    #[test]
    fn codec_delay_includes_packetization_and_lookahead() {
        assert_eq!(Codec::G729.profile(20).unwrap().codec_delay_ms(), 25.0);
        assert_eq!(Codec::G711.profile(20).unwrap().codec_delay_ms(), 20.0);
        assert_eq!(Codec::G723.profile(30).unwrap().codec_delay_ms(), 37.5);
    }

    #[test]
    fn codec_names_parse_from_json() {
        let c: Codec = serde_json_like("g729a");
        assert_eq!(c, Codec::G729);
        assert_eq!(serde_json_like("pcmu"), Codec::G711);
        assert_eq!(serde_json_like("g711-noplc"), Codec::G711NoPlc);
        assert_eq!(serde_json_like("g723.1"), Codec::G723);
    }

    /// Deserialize a bare enum name through serde's value deserializer.
    fn serde_json_like(s: &str) -> Codec {
        use serde::de::IntoDeserializer;
        let d: serde::de::value::StrDeserializer<'_, serde::de::value::Error> =
            s.into_deserializer();
        Codec::deserialize(d).unwrap()
    }
}
