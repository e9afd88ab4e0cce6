//! Shared by the lab's integration tests (not every test uses every item).
#![allow(dead_code)]

use airpack_lab::{air_ns3, netns};

/// Whether `test` can run on the ns-3 air: root with ip/tc/nft, and Debian's
/// ns-3 (installed here if missing). Prints `SKIP test: why` when not;
/// `needs` says what the test cannot do without ns-3.
pub fn ns3_ready(test: &str, needs: &str) -> bool {
    if let Err(why) = netns::check_privileges() {
        eprintln!("SKIP {test}: {why} (needs root with ip, tc, nft)");
        return false;
    }
    if air_ns3::check_available().is_err() {
        let ok = std::process::Command::new("apt-get")
            .args([
                "install",
                "-y",
                "-qq",
                "--no-install-recommends",
                "libns3-dev",
                "g++",
                "pkg-config",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            eprintln!(
                "SKIP {test}: Debian's libns3-dev/g++ are missing and cannot be installed{needs}"
            );
            return false;
        }
    }
    if let Err(why) = air_ns3::check_available() {
        eprintln!("SKIP {test}: {why}");
        return false;
    }
    true
}

/// The `airpack` binary the lab runs in its namespaces: `AIRPACK_BIN`, or
/// the one beside this test (`<target>/<profile>/deps/TEST-xxxx` ->
/// `<target>/<profile>/airpack`).
pub fn airpack_bin() -> Option<std::path::PathBuf> {
    if let Ok(p) = std::env::var("AIRPACK_BIN") {
        return Some(std::path::PathBuf::from(p)).filter(|p| p.exists());
    }
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("airpack");
    p.exists().then_some(p)
}
