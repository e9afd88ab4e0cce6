//! # airpack-lab: measure every claim
//!
//! Owns: the emulated 802.11 medium and topologies built from network
//! namespaces ([`medium`], [`topology`], [`netns`]), the VoIP traffic tool
//! ([`voip`]: real RTP calls, one process per node), and the capacity
//! experiments and their reports ([`experiment`], [`report`]).
//!
//! Must not touch: aggregation logic (it runs the real `airpack` daemon) or
//! voice-quality math (that is `airpack-voice`).

pub mod experiment;
pub mod medium;
pub mod netns;
pub mod report;
pub mod topology;
pub mod voip;

/// `airpack lab` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct LabArgs {}

/// Entry point of `airpack lab`.
pub fn main(args: LabArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("airpack lab: not implemented yet")
}
