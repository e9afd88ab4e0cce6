//! Named network namespaces for tests and experiments.
//!
//! Owns: creating (`ip netns add`), entering (setns on one thread) and
//! deleting namespaces whose names it is given, and running commands
//! (`ip`, `nft`, `tc`) with a clear error carrying their stderr. Tests use a
//! unique prefix per test and process so concurrent runs never collide.
//!
//! Must not touch: the caller's own namespace (only the spawned thread enters
//! the named one) or namespaces it did not create.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

use super::cvt;

/// A named network namespace, deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates namespace `name` (removing a leftover of the same name first)
    /// and brings its loopback up.
    pub fn create(name: &str) -> io::Result<NetNs> {
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad namespace name {name:?}"),
            ));
        }
        let _ = run_cmd(&["ip", "netns", "del", name], None);
        run_cmd(&["ip", "netns", "add", name], None)?;
        let ns = NetNs {
            name: name.to_string(),
        };
        ns.exec(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `f` on a new thread that has entered this namespace, and returns
    /// its result (a panic in `f` is re-raised). Sockets, TUN devices and
    /// child processes created by `f` live in the namespace.
    pub fn run<T: Send + 'static, F: FnOnce() -> T + Send + 'static>(&self, f: F) -> io::Result<T> {
        let name = self.name.clone();
        let handle = std::thread::Builder::new()
            .name(format!("netns-{name}"))
            .spawn(move || {
                enter(&name)?;
                Ok::<T, io::Error>(f())
            })?;
        match handle.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Spawns `f` on a new thread inside this namespace and returns its handle.
    pub fn spawn<T: Send + 'static, F: FnOnce() -> T + Send + 'static>(
        &self,
        f: F,
    ) -> io::Result<std::thread::JoinHandle<io::Result<T>>> {
        let name = self.name.clone();
        std::thread::Builder::new()
            .name(format!("netns-{name}"))
            .spawn(move || {
                enter(&name)?;
                Ok(f())
            })
    }

    /// Runs a command (e.g. `["ip", "addr", "add", ...]`) inside the
    /// namespace (via `ip netns exec`); error with its stderr if it fails.
    pub fn exec(&self, argv: &[&str]) -> io::Result<String> {
        let mut full = vec!["ip", "netns", "exec", self.name.as_str()];
        full.extend_from_slice(argv);
        run_cmd(&full, None)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = run_cmd(&["ip", "netns", "del", &self.name], None);
    }
}

/// Moves the calling thread into the named namespace (from `/run/netns/<name>`).
/// Only the calling thread changes namespace.
pub fn enter(name: &str) -> io::Result<()> {
    let f = File::open(format!("/run/netns/{name}"))?;
    // SAFETY: setns on a namespace fd we hold open; affects only this thread.
    cvt(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) })?;
    Ok(())
}

/// Runs `argv` in the current (thread's) namespace, feeding `stdin` if given,
/// and returns stdout; an error naming the command and carrying its stderr if
/// it cannot start or exits non-zero (ENOENT if the program is missing).
pub fn run_cmd(argv: &[&str], stdin: Option<&str>) -> io::Result<String> {
    let (prog, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run {prog}: {e}")))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "`{}` failed ({}): {}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
