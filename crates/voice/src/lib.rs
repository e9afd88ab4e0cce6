//! # airpack-voice: how good is a call?
//!
//! Owns: the RTP header format ([`rtp`]), RFC 3550 interarrival jitter
//! ([`jitter`]), the ITU-T G.107 E-model with G.113 codec impairments
//! ([`emodel`], [`codec`]), and per-call receive statistics with the
//! "supported call" criterion ([`stats`]), RTCP reports ([`rtcp`]), and the
//! gateway's Voice Protection Module ([`vpm`]).
//!
//! Pure code: packets and timestamps in, numbers out. Must not touch sockets,
//! clocks or files (the traffic tool in `airpack-lab` drives it).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod codec;
pub mod emodel;
pub mod jitter;
pub mod rtcp;
pub mod rtp;
pub mod stats;
pub mod vpm;
