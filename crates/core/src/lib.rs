//! # airpack-core: the sans-IO heart of airpack
//!
//! Owns the wire formats ([`wire`]) and the aggregation engine ([`engine`]).
//! Everything here is pure: bytes and time go in, bytes and deadlines come out.
//!
//! **Must not touch:** sockets, files, clocks, threads, global state or the
//! allocator on the per-packet hot path. Time is always passed in by the caller
//! as [`Micros`]; the daemon (`crates/airpack`), the lab (`crates/lab`) and any
//! simulator drive the very same [`engine::Engine`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auth;
pub mod downlink;
pub mod engine;
pub mod gateway;
pub mod neighbor;
pub mod netlink;
pub mod prefix;
pub mod wire;

pub use engine::{
    Classifier, DropReason, Engine, EngineConfig, LinkMode, PeerConfig, PeerKey, Reason, Rule,
    Stats, TrafficClass, Transmit, TransmitKind, Verdict,
};
pub use wire::{Bundle, BundleWriter, DecodeError, Encoding, RxContext};

/// A point in time, in microseconds since an arbitrary epoch chosen by the driver.
///
/// The engine only compares and subtracts these; it never reads a clock.
pub type Micros = u64;
