//! Neighbour discovery between airpack daemons on one link (issue 11).
//!
//! Owns: the hello message ([`hello`]), the per-link neighbour table that
//! decides which neighbours run airpack and what they accept ([`table`]),
//! and the link-quality estimate that picks the bundle size each neighbour
//! should send us ([`quality`]). Sans-IO like the rest of the core: the
//! daemon feeds received hellos and the time in, and sends what
//! [`table::Table::poll_hello`] writes; events tell it which peers to set up
//! in the engine. Must not touch: sockets, clocks, randomness (the caller
//! passes a random value for the jitter), the engine itself.

pub mod hello;
pub mod quality;
pub mod radio;
pub mod table;
