//! Named network namespaces for tests and experiments.
//!
//! Owns: creating (`ip netns add`), entering (setns on one thread) and
//! deleting namespaces whose names it is given, and running commands
//! (`ip`, `nft`, `tc`) with a clear error carrying their stderr and a bounded
//! run time (killed after a timeout). Tests use a
//! unique prefix per test and process so concurrent runs never collide.
//!
//! Must not touch: the caller's own namespace (only the spawned thread enters
//! the named one) or namespaces it did not create.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// How long [`run_cmd`] lets a command run before killing it.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `argv` in the current (thread's) namespace, feeding `stdin` if given,
/// and returns stdout; an error naming the command and carrying its stderr if
/// it cannot start or exits non-zero (ENOENT if the program is missing), or
/// TimedOut (the child killed) after [`CMD_TIMEOUT`].
pub fn run_cmd(argv: &[&str], stdin: Option<&str>) -> io::Result<String> {
    run_cmd_timeout(argv, stdin, CMD_TIMEOUT)
}

/// [`run_cmd`] with a chosen timeout: the child is killed (SIGKILL) and
/// reaped once `timeout` has passed. Its pipes are served by helper threads,
/// so a child that writes much or reads nothing cannot stall the caller.
pub fn run_cmd_timeout(
    argv: &[&str],
    stdin: Option<&str>,
    timeout: Duration,
) -> io::Result<String> {
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
    let feeder = match (stdin, child.stdin.take()) {
        (Some(input), Some(mut pipe)) => {
            let input = input.to_owned();
            Some(std::thread::spawn(move || pipe.write_all(input.as_bytes())))
        }
        _ => None,
    };
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut v);
            }
            v
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_micros(200);
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "`{}` did not finish within {timeout:?}; killed",
                    argv.join(" ")
                ),
            ));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    };
    // The child exited: its pipes close, the threads end.
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if let Some(f) = feeder {
        f.join()
            .unwrap_or_else(|_| Err(io::Error::other("stdin writer panicked")))?;
    }
    if !status.success() {
        return Err(io::Error::other(format!(
            "`{}` failed ({}): {}",
            argv.join(" "),
            status,
            String::from_utf8_lossy(&stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_bounded_in_time() {
        assert_eq!(run_cmd(&["echo", "hi"], None).unwrap(), "hi\n");
        assert_eq!(run_cmd(&["cat"], Some("in")).unwrap(), "in");
        let e = run_cmd(&["sh", "-c", "echo no >&2; exit 3"], None).unwrap_err();
        assert!(e.to_string().contains("no"), "{e}");
        let t0 = Instant::now();
        let e = run_cmd_timeout(&["sleep", "10"], None, Duration::from_millis(100)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        // A child that ignores its stdin and writes much is still bounded.
        let big = "x".repeat(1 << 20);
        let e = run_cmd_timeout(
            &["sh", "-c", "yes | head -c 2000000; sleep 10"],
            Some(&big),
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }
}
