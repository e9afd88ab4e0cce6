//! TODO(daemon helper): control socket client and server.

/// `airpack stats` arguments.
#[derive(clap::Args, Debug)]
pub struct StatsArgs {}

/// `airpack peers` arguments.
#[derive(clap::Args, Debug)]
pub struct PeersArgs {}

/// Prints statistics of a running daemon.
pub fn stats(args: StatsArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("airpack stats: not implemented yet")
}

/// Prints peers of a running daemon.
pub fn peers(args: PeersArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("airpack peers: not implemented yet")
}
