//! TODO(daemon helper): the daemon: config, event loop, control socket.

pub mod config;
pub mod control;

/// `airpack run` arguments.
#[derive(clap::Args, Debug)]
pub struct RunArgs {}

/// Runs the daemon until SIGTERM.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("airpack run: not implemented yet")
}
