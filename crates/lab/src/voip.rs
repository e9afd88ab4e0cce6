//! TODO(voice helper): the `airpack voip` traffic tool.

/// `airpack voip` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct VoipArgs {}

/// Entry point of `airpack voip`.
pub fn main(args: VoipArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("airpack voip: not implemented yet")
}
