//! The voice-adaptive gateway pacer (seed 003, VAGP), pure parts: the TCP
//! rate controller driven by the network's voice MOS ([`rate`]), the
//! per-flow and aggregate pacer ([`pacer`]), and the TCP Improvement
//! Module's header parsing, checksum rewriting, flow table and queue-aware
//! advertised window ([`tcp`], [`tcp_flow`]), local recovery and the
//! redundant-retransmission drop ([`tcp_recovery`]), and the module that
//! runs them per packet ([`tim`]).
//!
//! Owns: decisions (rates, release times, window values, rewritten headers).
//! Must not touch: sockets, clocks, qdiscs, the daemon's configuration; the
//! voice quality itself (the Voice Protection Module is
//! `airpack_voice::vpm`: the core has no dependencies, the E-model lives in
//! `airpack-voice`, and the controller only needs the resulting MOS).
//! Daemon integration (`[gateway]` role) is in the `airpack` crate.

pub mod pacer;
pub mod rate;
pub mod search;
#[cfg(test)]
mod search_calls_join_tests;
#[cfg(test)]
mod search_calls_tests;
#[cfg(test)]
mod search_hold_tests;
pub mod search_memory;
#[cfg(test)]
mod search_tests;
pub mod tcp;
pub mod tcp_flow;
pub mod tcp_recovery;
pub mod tim;
