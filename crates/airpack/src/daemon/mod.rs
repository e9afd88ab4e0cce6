//! The airpack daemon (`airpack run`): configuration, the event loop that
//! drives `airpack_core::Engine` over real Linux networking, the control
//! socket and the statistics export.
//!
//! - [`config`]: TOML schema, flags, validation, conversion (pure).
//! - [`config_diff`]: what a reload changed, for its log line (pure).
//! - [`runtime`]: the single-threaded epoll loop (TUN, sockets, timers, signals).
//! - [`control`]: control socket / metrics server and the `stats` / `peers` clients.
//! - [`stats`]: daemon counters and JSON / Prometheus / table rendering.
//!
//! Owns policy glue only. Must not touch packet formats or queueing policy
//! (`airpack-core`) nor kernel plumbing details (`crate::linux`).

pub mod accounting;
pub mod config;
pub mod config_diff;
pub mod control;
pub mod metrics;
pub mod runtime;
pub mod stats;
mod sys;

use std::path::PathBuf;

/// `airpack run` arguments. Every config key can be set with
/// `--set SECTION.KEY=VALUE` (repeatable; `peer.N.KEY` / `class.N.KEY` for
/// array entries); the common ones also have their own flag. Flags override
/// the file.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct RunArgs {
    /// The TOML configuration file (optional: defaults plus flags otherwise).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Override any key: `--set aggregation.hold_time_us=2000`, `--set peer.0.max_size=1200`.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    pub set: Vec<String>,
    /// Add a peer: `ADDR` or `ADDR=CIDR,CIDR` (allowed_ips).
    #[arg(long = "peer", value_name = "ADDR[=CIDR,...]")]
    pub peer: Vec<String>,
    /// daemon.mode: hop-by-hop | end-to-end.
    #[arg(long)]
    pub mode: Option<String>,
    /// daemon.tun: TUN device name.
    #[arg(long)]
    pub tun: Option<String>,
    /// daemon.control_socket.
    #[arg(long, value_name = "PATH")]
    pub control_socket: Option<PathBuf>,
    /// daemon.log: error|warn|info|debug|trace.
    #[arg(long)]
    pub log: Option<String>,
    /// daemon.prometheus: ADDR:PORT of the /metrics endpoint.
    #[arg(long, value_name = "ADDR:PORT")]
    pub prometheus: Option<String>,
    /// daemon.interfaces (repeatable; replaces the file's list).
    #[arg(long = "interface", value_name = "IFNAME")]
    pub interface: Vec<String>,
    /// daemon.transport: ip | udp.
    #[arg(long)]
    pub transport: Option<String>,
    /// aggregation.encoding: native | kau | simplemux.
    #[arg(long)]
    pub encoding: Option<String>,
    /// aggregation.hold_time_us.
    #[arg(long, value_name = "US")]
    pub hold_time_us: Option<u64>,
    /// aggregation.link_mode: fixed | hold-while-busy | adaptive (default:
    /// adaptive hop-by-hop, fixed end-to-end).
    #[arg(long)]
    pub link_mode: Option<String>,
    /// aggregation.min_size (bytes).
    #[arg(long)]
    pub min_size: Option<usize>,
    /// aggregation.max_size (bytes).
    #[arg(long)]
    pub max_size: Option<usize>,
    /// Validate the configuration, print the effective TOML and exit.
    #[arg(long)]
    pub check: bool,
}

fn quote(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

impl RunArgs {
    /// The configuration source: file plus overrides (direct flags become `--set`s).
    pub fn source(&self) -> config::Source {
        let mut sets = Vec::new();
        let mut s = |k: &str, v: String| sets.push(format!("{k}={v}"));
        if let Some(v) = &self.mode {
            s("daemon.mode", quote(v));
        }
        if let Some(v) = &self.tun {
            s("daemon.tun", quote(v));
        }
        if let Some(v) = &self.control_socket {
            s("daemon.control_socket", quote(&v.display().to_string()));
        }
        if let Some(v) = &self.log {
            s("daemon.log", quote(v));
        }
        if let Some(v) = &self.prometheus {
            s("daemon.prometheus", quote(v));
        }
        if !self.interface.is_empty() {
            let list: Vec<String> = self.interface.iter().map(|i| quote(i)).collect();
            s("daemon.interfaces", format!("[{}]", list.join(",")));
        }
        if let Some(v) = &self.transport {
            s("daemon.transport", quote(v));
        }
        if let Some(v) = &self.encoding {
            s("aggregation.encoding", quote(v));
        }
        if let Some(v) = self.hold_time_us {
            s("aggregation.hold_time_us", v.to_string());
        }
        if let Some(v) = &self.link_mode {
            s("aggregation.link_mode", quote(v));
        }
        if let Some(v) = self.min_size {
            s("aggregation.min_size", v.to_string());
        }
        if let Some(v) = self.max_size {
            s("aggregation.max_size", v.to_string());
        }
        sets.extend(self.set.iter().cloned());
        config::Source {
            file: self.config.clone(),
            sets,
            peers: self.peer.clone(),
        }
    }
}

fn init_logging(level: config::LogLevel) {
    use tracing_subscriber::{filter::Targets, layer::SubscriberExt, util::SubscriberInitExt};
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = log_filter(rust_log.as_deref(), level);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(filter)
        .try_init();
    if let Some(v) = rust_log.filter(|v| !v.trim().is_empty()) {
        if v.parse::<Targets>().is_err() {
            tracing::warn!(
                "RUST_LOG={v:?} not understood (a level or target=level directives); logging at daemon.log = {}",
                level.as_str()
            );
        }
    }
}

/// The log filter: `RUST_LOG` when set and valid (`level` or
/// `target=level` directives, comma-separated, as `tracing_subscriber`'s
/// `Targets` reads them), else `daemon.log`.
fn log_filter(
    rust_log: Option<&str>,
    level: config::LogLevel,
) -> tracing_subscriber::filter::Targets {
    use tracing_subscriber::filter::Targets;
    rust_log
        .filter(|s| !s.trim().is_empty())
        .and_then(|s| s.parse::<Targets>().ok())
        .unwrap_or_else(|| level.as_str().parse().unwrap_or_default())
}

/// Runs the daemon until SIGTERM/SIGINT (exit 0 after flushing), reloading on SIGHUP.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let source = args.source();
    let plan = source.load()?;
    if args.check {
        print!("{}", config::render(&plan.config));
        return Ok(());
    }
    // Block the signals before anything could spawn a thread.
    let signals = crate::linux::Signals::new()?;
    init_logging(plan.config.daemon.log);
    for w in warnings(&plan) {
        tracing::warn!("{w}");
    }
    runtime::Daemon::start(source, plan, signals)?.run()
}

/// `airpack cleanup` arguments.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct CleanupArgs {
    /// The runtime directory: where the control sockets and their `.state`
    /// files are (default /run/airpack).
    #[arg(long, value_name = "DIR", default_value = crate::linux::state::DEFAULT_RUNTIME_DIR)]
    pub runtime_dir: PathBuf,
}

/// Removes every trace a dead daemon left, without its configuration: for
/// each `*.state` file in the runtime directory its nftables table, TUN
/// device (if persistent), sysctls (restored), control socket and the state
/// file; then the table `inet airpack` and the directory if it is empty. For
/// systemd's `ExecStopPost=`; idempotent, exit 0 when there is nothing to do.
/// Runs in the caller's network namespace (the daemon's).
pub fn cleanup(args: CleanupArgs) -> anyhow::Result<()> {
    let done = crate::linux::state::cleanup_dir(&args.runtime_dir)?;
    if done.is_empty() {
        println!("airpack cleanup: nothing to do");
    }
    for d in done {
        println!("airpack cleanup: {d}");
    }
    Ok(())
}

/// Configuration that is valid but probably not what the operator wants.
pub fn warnings(plan: &config::Plan) -> Vec<String> {
    let mut w = Vec::new();
    // The downlink roles (issue 14) need neither classes nor peers.
    let downlink = plan.ap.is_some() || plan.station.is_some();
    if !plan.steer.iter().any(|m| m.steer) && !downlink {
        w.push("no [[class]] of class bundle or opportunistic: nothing will be steered into the daemon".into());
    }
    if plan.peers.is_empty() && !plan.config.discovery.enabled && !downlink {
        w.push("no [[peer]]: every packet leaves unbundled".into());
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_become_overrides() {
        let a = RunArgs {
            mode: Some("end-to-end".into()),
            hold_time_us: Some(1234),
            link_mode: Some("hold-while-busy".into()),
            interface: vec!["veth0".into(), "wlan0".into()],
            control_socket: Some("/tmp/x.sock".into()),
            peer: vec!["10.0.0.2=10.1.0.0/24".into()],
            ..Default::default()
        };
        let plan = a.source().load().unwrap();
        let c = &plan.config;
        assert_eq!(c.daemon.mode, config::Mode::EndToEnd);
        assert_eq!(c.aggregation.hold_time_us, 1234);
        assert_eq!(
            c.aggregation.link_mode,
            Some(config::LinkModeCfg::HoldWhileBusy)
        );
        assert_eq!(plan.link_mode, config::LinkModeCfg::HoldWhileBusy);
        assert_eq!(c.daemon.interfaces, vec!["veth0", "wlan0"]);
        assert_eq!(c.daemon.control_socket, PathBuf::from("/tmp/x.sock"));
        assert_eq!(plan.peers.len(), 1);
        assert!(warnings(&plan).iter().any(|w| w.contains("class")));
        let bad = RunArgs {
            link_mode: Some("sometimes".into()),
            ..Default::default()
        };
        assert!(bad.source().load().is_err());
    }

    #[test]
    fn rust_log_overrides_the_configured_level() {
        use tracing::Level;
        let info = log_filter(None, config::LogLevel::Info);
        assert!(info.would_enable("airpack::daemon", &Level::INFO));
        assert!(!info.would_enable("airpack::daemon", &Level::DEBUG));
        // Empty or unparsable RUST_LOG: the configured level.
        for bad in ["", "  ", "airpack=loud"] {
            let f = log_filter(Some(bad), config::LogLevel::Warn);
            assert!(f.would_enable("x", &Level::WARN), "{bad:?}");
            assert!(!f.would_enable("x", &Level::INFO), "{bad:?}");
        }
        // Per-target directives, as with EnvFilter's plain ones.
        let f = log_filter(
            Some("warn,airpack::daemon::runtime=trace"),
            config::LogLevel::Error,
        );
        assert!(f.would_enable("airpack::daemon::runtime::ap", &Level::TRACE));
        assert!(f.would_enable("airpack::linux", &Level::WARN));
        assert!(!f.would_enable("airpack::linux", &Level::INFO));
    }
}
