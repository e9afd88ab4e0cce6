//! Network namespaces and the commands run inside them.
//!
//! Owns: naming (`ap-<pid>-<name>`, unique per lab process so concurrent runs
//! never collide), creation and deletion of namespaces, cleanup of leftovers
//! of crashed runs (namespaces whose owning pid is gone), and thin wrappers
//! around `ip`, `tc`, `nft` and `sysctl` that turn a failing command into an
//! error carrying its stderr.
//!
//! Must not touch: what is built inside the namespaces (that is
//! [`crate::topology`]) or any address outside them.

use anyhow::{bail, Context, Result};
use std::io::Write;
use std::process::{Command, Stdio};

/// Prefix of every namespace the lab creates.
pub const NS_PREFIX: &str = "ap-";

/// The namespace prefix of this process: `ap-<pid>-`.
pub fn own_prefix() -> String {
    format!("{NS_PREFIX}{}-", std::process::id())
}

/// Run a command; error with its stderr if it fails. Returns stdout.
pub fn run(prog: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {prog} (is it installed?)"))?;
    if !out.status.success() {
        bail!(
            "`{prog} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Run a command feeding `input` on stdin.
pub fn run_stdin(prog: &str, args: &[&str], input: &str) -> Result<String> {
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {prog} (is it installed?)"))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(input.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "`{prog} {}` failed: {}\ninput:\n{input}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One network namespace, deleted on drop unless [`Netns::leak`] is called.
#[derive(Debug)]
pub struct Netns {
    name: String,
    owned: bool,
}

impl Netns {
    /// Create a namespace named `name` (full name, e.g. `ap-123-A`), with
    /// loopback up. A leftover namespace of the same name is deleted first.
    pub fn create(name: &str) -> Result<Netns> {
        if name.len() > 60 || !name.starts_with(NS_PREFIX) {
            bail!("bad namespace name {name:?}");
        }
        if list()?.iter().any(|n| n == name) {
            let _ = run("ip", &["netns", "del", name]);
        }
        run("ip", &["netns", "add", name])?;
        let ns = Netns {
            name: name.to_string(),
            owned: true,
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n <ns> ARGS`.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        let mut v = vec!["-n", &self.name];
        v.extend_from_slice(args);
        run("ip", &v)
    }

    /// `tc -n <ns> ARGS`.
    pub fn tc(&self, args: &[&str]) -> Result<String> {
        let mut v = vec!["-n", &self.name];
        v.extend_from_slice(args);
        run("tc", &v)
    }

    /// `ip netns exec <ns> PROG ARGS`.
    pub fn exec(&self, prog: &str, args: &[&str]) -> Result<String> {
        let mut v = vec!["netns", "exec", &self.name, prog];
        v.extend_from_slice(args);
        run("ip", &v)
    }

    /// Load an nftables ruleset (`nft -f -`) inside the namespace.
    pub fn nft(&self, ruleset: &str) -> Result<()> {
        run_stdin(
            "ip",
            &["netns", "exec", &self.name, "nft", "-f", "-"],
            ruleset,
        )
        .map(|_| ())
    }

    /// Set sysctls (`key=value`) inside the namespace.
    pub fn sysctl(&self, kv: &[&str]) -> Result<()> {
        let mut v = vec!["-q", "-w"];
        v.extend_from_slice(kv);
        self.exec("sysctl", &v).map(|_| ())
    }

    /// A [`Command`] running `prog` inside the namespace.
    pub fn command(&self, prog: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(prog);
        c
    }

    /// Run `f` on a new thread that has entered this namespace (sockets it
    /// creates live in the namespace and keep working from any thread).
    pub fn run_in<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> Result<R> {
        let path = format!("/run/netns/{}", self.name);
        let file = std::fs::File::open(&path).with_context(|| format!("open {path}"))?;
        std::thread::spawn(move || -> Result<R> {
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).context("setns")?;
            Ok(f())
        })
        .join()
        .map_err(|_| anyhow::anyhow!("thread in namespace panicked"))?
    }

    /// Keep the namespace after drop (debugging).
    pub fn leak(&mut self) {
        self.owned = false;
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if self.owned {
            let _ = run("ip", &["netns", "del", &self.name]);
        }
    }
}

/// Names of all network namespaces (`ip netns list`).
pub fn list() -> Result<Vec<String>> {
    let out = run("ip", &["netns", "list"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// The pid encoded in a lab namespace name `ap-<pid>-...`.
pub fn owner_pid(name: &str) -> Option<u32> {
    name.strip_prefix(NS_PREFIX)?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// Delete lab namespaces: those of dead owners (leftovers of crashed runs),
/// or every lab namespace if `all`. Returns the deleted names.
pub fn clean(all: bool) -> Result<Vec<String>> {
    let mut gone = Vec::new();
    for n in list()? {
        let Some(pid) = owner_pid(&n) else { continue };
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        if all || !alive {
            // processes a crashed run left inside (its daemons, voip tools)
            if let Ok(pids) = run("ip", &["netns", "pids", &n]) {
                for pid in pids
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
            run("ip", &["netns", "del", &n])?;
            gone.push(n);
        }
    }
    Ok(gone)
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: nix::libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Catch SIGINT and SIGTERM: long waits check [`interrupted`] and return an
/// error, so every namespace and child process is torn down on the way out.
pub fn catch_interrupts() {
    let act = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(on_signal),
        nix::sys::signal::SaFlags::empty(),
        nix::sys::signal::SigSet::empty(),
    );
    for sig in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGTERM,
    ] {
        // SAFETY: the handler only stores into an atomic.
        let _ = unsafe { nix::sys::signal::sigaction(sig, &act) };
    }
}

/// True once SIGINT or SIGTERM arrived (after [`catch_interrupts`]).
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Whether we can build namespaces here: root and `ip`, `tc`, `nft` present.
/// `Err` carries a human reason (for SKIP messages).
pub fn check_privileges() -> std::result::Result<(), String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Err("not root".into());
    }
    for (t, arg) in [
        ("ip", "-V"),
        ("tc", "-V"),
        ("nft", "--version"),
        ("sysctl", "--version"),
    ] {
        let ok = Command::new(t)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            return Err(format!("`{t}` not available"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_parses() {
        assert_eq!(owner_pid("ap-1234-A"), Some(1234));
        assert_eq!(owner_pid("ap-1234-air"), Some(1234));
        assert_eq!(owner_pid("apx-1-A"), None);
        assert_eq!(owner_pid("ap-x-A"), None);
        assert!(own_prefix().starts_with("ap-"));
    }
}
