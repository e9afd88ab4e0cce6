//! The command-line definition of `airpack` (clap) and the small client-side
//! habits borrowed from iproute2 and WireGuard: a daemon instance addressed by
//! name (`airpack stats wlan0` talks to `/run/airpack/wlan0.sock`), `-j` /
//! `--json`, and man pages and shell completions generated from this very
//! definition (`airpack generate man DIR`, `airpack generate completions SHELL`;
//! hidden, for packagers).
//!
//! Owns: argument parsing and dispatch. Must not touch: the daemon, the
//! control protocol or the rendering of answers (`airpack::daemon`).

use airpack::daemon;
use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use std::path::{Path, PathBuf};

#[derive(Parser, Debug)]
#[command(
    name = "airpack",
    version,
    about = "VoIP packet aggregation for wireless meshes"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run the aggregation daemon.
    Run(daemon::RunArgs),
    /// Show a running daemon's statistics.
    Stats(CtlArgs),
    /// Show a running daemon's peers.
    Peers(CtlArgs),
    /// Remove every trace of a stopped or crashed daemon (sysctls, nftables
    /// table, TUN, control socket, state file); for systemd ExecStopPost=.
    Cleanup(daemon::CleanupArgs),
    /// Build an emulated mesh and run VoIP capacity experiments.
    #[cfg(feature = "lab")]
    Lab(airpack_lab::LabArgs),
    /// Send and receive RTP voice calls and report their quality.
    #[cfg(feature = "lab")]
    Voip(airpack_lab::voip::VoipArgs),
    /// Write man pages or print shell completions (for packagers).
    #[command(hide = true)]
    Generate(GenerateArgs),
}

/// `airpack stats` / `airpack peers` arguments.
#[derive(clap::Args, Debug)]
pub struct CtlArgs {
    /// Daemon instance: its control socket is /run/airpack/NAME.sock (start
    /// it with `--control-socket /run/airpack/NAME.sock`). Default: --socket.
    #[arg(value_name = "NAME", value_parser = instance_name)]
    pub name: Option<String>,
    /// Control socket of the daemon.
    #[arg(long, default_value = daemon::control::DEFAULT_SOCKET, conflicts_with = "name")]
    pub socket: PathBuf,
    /// Print the JSON document instead of a table.
    #[arg(short = 'j', long)]
    pub json: bool,
}

impl CtlArgs {
    /// The control socket this command talks to. A name (or the default)
    /// that has no socket under /run but one under /var/run (OpenWrt, where
    /// /var/run is not /run) is found there.
    pub fn socket_path(&self) -> PathBuf {
        let p = match &self.name {
            Some(n) => socket_for(n),
            None => self.socket.clone(),
        };
        let derived = self.name.is_some() || p == Path::new(daemon::control::DEFAULT_SOCKET);
        if derived && !p.exists() {
            if let Ok(rest) = p.strip_prefix("/run") {
                let alt = Path::new("/var/run").join(rest);
                if alt.exists() {
                    return alt;
                }
            }
        }
        p
    }
}

/// The control socket of the instance `name`: next to the default socket.
pub fn socket_for(name: &str) -> PathBuf {
    let dir = Path::new(daemon::control::DEFAULT_SOCKET)
        .parent()
        .unwrap_or(Path::new("/run/airpack"));
    dir.join(format!("{name}.sock"))
}

/// An instance name is a file name: 1-64 bytes of `[A-Za-z0-9_.-]`, not `.`/`..`.
fn instance_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not an instance name (1-64 of A-Z a-z 0-9 _ - .); use --socket PATH for a path"
        ))
    }
}

/// `airpack generate` arguments.
#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    #[command(subcommand)]
    pub what: Generate,
}

#[derive(Subcommand, Debug)]
pub enum Generate {
    /// Write airpack.8 and airpack-SUBCOMMAND.8 into DIR.
    Man { dir: PathBuf },
    /// Print the completion script for SHELL on stdout.
    Completions { shell: clap_complete::Shell },
}

/// Runs the command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Run(a) => daemon::run(a),
        Cmd::Stats(a) => print_query(&a, "stats", daemon::stats::human_stats),
        Cmd::Peers(a) => print_query(&a, "peers", daemon::stats::human_peers),
        Cmd::Cleanup(a) => daemon::cleanup(a),
        #[cfg(feature = "lab")]
        Cmd::Lab(a) => airpack_lab::main(a),
        #[cfg(feature = "lab")]
        Cmd::Voip(a) => airpack_lab::voip::main(a),
        Cmd::Generate(g) => match g.what {
            Generate::Man { dir } => write_man_pages(&dir),
            Generate::Completions { shell } => {
                let mut cmd = Cli::command();
                clap_complete::generate(shell, &mut cmd, "airpack", &mut std::io::stdout());
                Ok(())
            }
        },
    }
}

/// Asks the daemon for `what` and prints the answer as pretty JSON or a table.
fn print_query(
    a: &CtlArgs,
    what: &str,
    human: fn(&serde_json::Value) -> String,
) -> anyhow::Result<()> {
    let v = daemon::control::query(&a.socket_path(), what)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", human(&v));
    }
    Ok(())
}

/// Section 8: system administration commands (the daemon needs root).
fn write_man_pages(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut top = Cli::command();
    top.build(); // gives subcommands their display names ("airpack-stats")
    let mut pages = vec![("airpack".to_owned(), top.clone())];
    let documented = |s: &&clap::Command| !s.is_hide_set() && s.get_name() != "help";
    for sub in top.get_subcommands().filter(documented) {
        pages.push((format!("airpack-{}", sub.get_name()), sub.clone()));
    }
    for (name, cmd) in pages {
        let mut out = Vec::new();
        let man = clap_mangen::Man::new(cmd).title(name.clone()).section("8");
        man.render(&mut out)?;
        let path = dir.join(format!("{name}.8"));
        std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn instance_names_map_to_sockets_next_to_the_default() {
        assert_eq!(
            socket_for("wlan0"),
            PathBuf::from("/run/airpack/wlan0.sock")
        );
        let cli = Cli::try_parse_from(["airpack", "stats", "mesh-1", "-j"]).unwrap();
        let Cmd::Stats(a) = cli.cmd else {
            panic!("not stats")
        };
        assert!(a.json);
        assert_eq!(a.socket_path(), PathBuf::from("/run/airpack/mesh-1.sock"));
        // No name: the --socket default, as before.
        let cli = Cli::try_parse_from(["airpack", "peers"]).unwrap();
        let Cmd::Peers(a) = cli.cmd else {
            panic!("not peers")
        };
        assert!(!a.json);
        assert_eq!(
            a.socket_path(),
            PathBuf::from(daemon::control::DEFAULT_SOCKET)
        );
        let cli = Cli::try_parse_from(["airpack", "peers", "--socket", "/tmp/x.sock", "--json"]);
        let Cmd::Peers(a) = cli.unwrap().cmd else {
            panic!("not peers")
        };
        assert!(a.json);
        assert_eq!(a.socket_path(), PathBuf::from("/tmp/x.sock"));
    }

    #[test]
    fn bad_instance_names_and_name_with_socket_are_refused() {
        for bad in ["", ".", "..", "a/b", "../etc", "x y", &"n".repeat(65)] {
            assert!(
                Cli::try_parse_from(["airpack", "stats", bad]).is_err(),
                "{bad:?} accepted"
            );
        }
        assert!(Cli::try_parse_from(["airpack", "stats", "wlan0", "--socket", "/x"]).is_err());
    }
}
