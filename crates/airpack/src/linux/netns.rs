//! Named network namespaces for tests and experiments.
//!
//! Owns: creating (`ip netns add`), entering (setns on one thread) and
//! deleting namespaces whose names it is given. Tests use a unique prefix per
//! test binary and process so concurrent runs never collide.
//!
//! Must not touch: the caller's own namespace (only the spawned thread enters
//! the named one) or namespaces it did not create.

use std::io;

/// A named network namespace, deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates namespace `name` (removing a leftover of the same name first)
    /// and brings its loopback up.
    pub fn create(name: &str) -> io::Result<NetNs> {
        let _ = name;
        todo!()
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `f` on a new thread that has entered this namespace, and returns its result.
    /// Sockets, TUN devices and child processes created by `f` live in the namespace.
    pub fn run<T: Send + 'static, F: FnOnce() -> T + Send + 'static>(&self, f: F) -> io::Result<T> {
        let _ = f;
        todo!()
    }

    /// Runs a command (e.g. `["ip", "addr", "add", ...]`) inside the namespace; error if it fails.
    pub fn exec(&self, argv: &[&str]) -> io::Result<String> {
        let _ = argv;
        todo!()
    }
}

/// Moves the calling thread into the named namespace (from `/run/netns/<name>`).
/// Only the calling thread changes namespace.
pub fn enter(name: &str) -> io::Result<()> {
    let _ = name;
    todo!()
}

/// Runs `argv` in the current (thread's) namespace, returning stdout; an
/// error carrying stderr if it exits non-zero.
pub fn run_cmd(argv: &[&str], stdin: Option<&str>) -> io::Result<String> {
    let _ = (argv, stdin);
    todo!()
}
