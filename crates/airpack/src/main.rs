//! `airpack`: one binary, several subcommands.
//!
//! - `run`: the daemon (`airpack::daemon`), driving the sans-IO engine of
//!   `airpack-core` over real Linux networking (`airpack::linux`).
//! - `stats`, `peers`: talk to a running daemon over its control socket.
//! - `cleanup`: remove what a crashed daemon left behind (no config needed).
//! - `lab`, `voip`: the emulated mesh and the VoIP traffic tool (`airpack-lab`).

use airpack::daemon;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "airpack",
    version,
    about = "VoIP packet aggregation for wireless meshes"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the aggregation daemon.
    Run(daemon::RunArgs),
    /// Show a running daemon's statistics.
    Stats(daemon::control::StatsArgs),
    /// Show a running daemon's peers.
    Peers(daemon::control::PeersArgs),
    /// Remove every trace of a stopped or crashed daemon (sysctls, nftables
    /// table, TUN, control socket, state file); for systemd ExecStopPost=.
    Cleanup(daemon::CleanupArgs),
    /// Build an emulated mesh and run VoIP capacity experiments.
    Lab(airpack_lab::LabArgs),
    /// Send and receive RTP voice calls and report their quality.
    Voip(airpack_lab::voip::VoipArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Run(a) => daemon::run(a),
        Cmd::Stats(a) => daemon::control::stats(a),
        Cmd::Peers(a) => daemon::control::peers(a),
        Cmd::Cleanup(a) => daemon::cleanup(a),
        Cmd::Lab(a) => airpack_lab::main(a),
        Cmd::Voip(a) => airpack_lab::voip::main(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("airpack: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
