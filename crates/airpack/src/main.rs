//! `airpack`: one binary, several subcommands (defined in `cli`).
//!
//! - `run`: the daemon (`airpack::daemon`), driving the sans-IO engine of
//!   `airpack-core` over real Linux networking (`airpack::linux`).
//! - `stats`, `peers`: talk to a running daemon over its control socket
//!   (`airpack stats NAME` for the instance at /run/airpack/NAME.sock).
//! - `cleanup`: remove what a crashed daemon left behind (no config needed).
//! - `lab`, `voip`: the emulated mesh and the VoIP traffic tool (`airpack-lab`),
//!   only with the default `lab` feature; router builds leave it out
//!   (`cargo build -p airpack --release --no-default-features`).

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    match cli::run(cli::Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("airpack: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
