//! # airpack-voice: how good is a call?
//!
//! Owns: the RTP header format, RFC 3550 interarrival jitter, the ITU-T G.107
//! E-model with G.113 codec impairments, codec profiles, and per-call
//! receive statistics with the "supported call" criterion.
//!
//! Pure code: packets and timestamps in, numbers out. Must not touch sockets,
//! clocks or files (the traffic tool in `airpack-lab` drives it).
#![forbid(unsafe_code)]
