//! The ns-3 air (issue 10): every node's `radio0` is a tap device whose
//! descriptor is handed to one real-time ns-3 process
//! (`crates/lab/ns3/air.cc`) holding one adhoc 802.11 node per lab node.
//!
//! Owns: building that program with g++ against Debian's `libns3-dev`
//! ([`binary`]), opening the taps inside the nodes' namespaces ([`open_tap`]),
//! the program's config ([`crate::air_ns3_conf`], re-exported), running it
//! ([`Ns3Air`]: start, live counters, stop with its JSON report) and the
//! node half of a [`crate::topology::Mesh`] on this air ([`build_nodes`]).
//!
//! Must not touch: the tc air ([`crate::topology`] builds it and the nodes'
//! addresses, routes and filters, which are the same for both airs), the
//! daemons and voip tools in the namespaces.

pub use crate::air_ns3_conf::*;
use crate::netns::Netns;
use crate::topology::{mac_str, MediumOpts, MeshNode, Topology, RADIO};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The program's sources (`air.cc`, `air_io.cc`, `air_obs.cc`, `air_ber.cc`, `air_cell.cc`, `air_edca.cc`, `air_agg.cc`, `air.h`),
/// in the repository.
pub const SOURCE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/ns3");

/// The program's translation units, compiled together.
const UNITS: &[&str] = &[
    "air.cc",
    "air_io.cc",
    "air_obs.cc",
    "air_ber.cc",
    "air_cell.cc",
    "air_edca.cc",
    "air_agg.cc",
];

/// ns-3 modules the program links.
const MODULES: &[&str] = &[
    "ns3-core",
    "ns3-network",
    "ns3-wifi",
    "ns3-mobility",
    "ns3-propagation",
    "ns3-fd-net-device",
    "ns3-point-to-point",
];

/// A faster malloc for the program, linked when Debian's `libjemalloc2` is
/// installed (by path: the runtime package has no `.so` link). ns-3
/// allocates several objects per event; with jemalloc the pure simulation
/// runs about 8 % fewer instructions, with the same results (docs/lab.md,
/// 2b, "Cost per event").
const MALLOC: &str = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";

/// Whether ns-3 and g++ are installed (Err: a human reason, for SKIP).
pub fn check_available() -> std::result::Result<(), String> {
    for (t, a) in [("g++", "--version"), ("pkg-config", "--version")] {
        let ok = Command::new(t)
            .arg(a)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            return Err(format!(
                "`{t}` not installed (scripts/setup.sh installs it)"
            ));
        }
    }
    let ok = Command::new("pkg-config")
        .args(["--exists", "ns3-wifi", "ns3-fd-net-device"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        return Err("Debian's libns3-dev is not installed (scripts/setup.sh installs it)".into());
    }
    Ok(())
}

/// The built program: `$AIRPACK_NS3_AIR` if set, else
/// `<workspace>/target/ns3/airpack-ns3-air`, compiled with g++ when missing
/// or older than a file of [`SOURCE_DIR`] (takes 30-90 s).
pub fn binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("AIRPACK_NS3_AIR") {
        return Ok(PathBuf::from(p));
    }
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ns3/airpack-ns3-air");
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let fresh = || -> Result<bool> {
        let newest_source = std::fs::read_dir(SOURCE_DIR)
            .context("read crates/lab/ns3")?
            .filter_map(|e| e.ok())
            .filter_map(|e| mtime(&e.path()))
            .max();
        Ok(matches!((mtime(&out), newest_source), (Some(b), Some(s)) if b >= s))
    };
    if fresh()? {
        return Ok(out);
    }
    if let Err(why) = check_available() {
        bail!("cannot build the ns-3 air: {why}; or run on the tc air (--air tc)");
    }
    std::fs::create_dir_all(out.parent().expect("has a parent"))?;
    // One build at a time, across threads (tests run in parallel) and
    // processes: whoever waited finds the program built by the other.
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let lock = std::fs::File::create(out.with_extension("lock"))?;
    let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .context("lock the ns-3 air's build")?;
    if fresh()? {
        return Ok(out);
    }
    let libs = crate::netns::run("pkg-config", &[&["--libs"], MODULES].concat())?;
    // Debian's .pc files name libgsl.so by absolute path although only the
    // runtime library (libgsl.so.27) is installed: drop missing paths.
    let libs: Vec<&str> = libs
        .split_whitespace()
        .filter(|w| !w.starts_with('/') || Path::new(w).exists())
        .collect();
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    let units: Vec<String> = UNITS.iter().map(|u| format!("{SOURCE_DIR}/{u}")).collect();
    let mut args = vec!["-O2", "-std=c++17"];
    args.extend(units.iter().map(String::as_str));
    let tmp_s = tmp.to_string_lossy().into_owned();
    args.extend(["-o", &tmp_s]);
    if Path::new(MALLOC).exists() {
        // before libc, and kept although no object names it
        args.extend(["-Wl,--no-as-needed", MALLOC]);
    }
    args.extend(libs);
    eprintln!("lab: building the ns-3 air ({})", out.display());
    crate::netns::run("g++", &args).context("compile crates/lab/ns3/*.cc")?;
    std::fs::rename(&tmp, &out)?;
    Ok(out)
}

/// Create the tap device `name` inside `ns` (IFF_TAP | IFF_NO_PI) and return
/// its descriptor (the device lives as long as a descriptor is open).
pub fn open_tap(ns: &Netns, name: &str) -> Result<OwnedFd> {
    let name = name.to_string();
    ns.run_in(move || -> Result<OwnedFd> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")
            .context("open /dev/net/tun")?;
        #[repr(C)]
        struct IfReq {
            name: [u8; 16],
            flags: i16,
            _pad: [u8; 22],
        }
        let mut req = IfReq {
            name: [0; 16],
            flags: 0x0002 | 0x1000,
            _pad: [0; 22],
        }; // IFF_TAP | IFF_NO_PI
        req.name[..name.len().min(15)].copy_from_slice(&name.as_bytes()[..name.len().min(15)]);
        const TUNSETIFF: u64 = 0x4004_54ca;
        // SAFETY: TUNSETIFF reads and writes one struct ifreq we own.
        let r = unsafe { nix::libc::ioctl(f.as_raw_fd(), TUNSETIFF as _, &mut req) };
        if r < 0 {
            bail!("TUNSETIFF {name}: {}", std::io::Error::last_os_error());
        }
        Ok(OwnedFd::from(f))
    })?
}

/// A running ns-3 air process (stopped on drop).
#[derive(Debug)]
pub struct Ns3Air {
    child: Option<Child>,
    stats: PathBuf,
    dir: PathBuf,
}

/// SCHED_RR priority of the ns-3 process: above the lab's daemons and voip
/// senders (10), since the air is the clock every frame waits for.
pub const RT_PRIO: &str = "20";

impl Ns3Air {
    /// Start the program on `config` (written to `dir/air.conf`), passing
    /// `fds` to it, and wait until it runs (its stats file appears).
    pub fn start(config: &str, fds: &[OwnedFd], dir: &Path) -> Result<Ns3Air> {
        let bin = binary()?;
        std::fs::create_dir_all(dir)?;
        let conf = dir.join("air.conf");
        std::fs::write(&conf, config)?;
        let stats = dir.join("air.stats.json");
        let _ = std::fs::remove_file(&stats);
        let mut cmd = if crate::experiment::realtime() {
            let mut c = Command::new("chrt");
            c.args(["-r", RT_PRIO]).arg(&bin);
            c
        } else {
            Command::new(&bin)
        };
        let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
        // SAFETY: only async-signal-safe fcntl calls between fork and exec.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                for &fd in &raw {
                    if nix::libc::fcntl(fd, nix::libc::F_SETFD, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = cmd
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("air.out.json"))?)
            .stderr(std::fs::File::create(dir.join("air.log"))?)
            .spawn()
            .with_context(|| format!("spawn {}", bin.display()))?;
        let mut air = Ns3Air {
            child: Some(child),
            stats,
            dir: dir.to_path_buf(),
        };
        let t = Instant::now();
        while !air.stats.exists() {
            if let Some(c) = air.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    bail!("the ns-3 air exited ({st}) at start: {}", air.log());
                }
            }
            if t.elapsed() > Duration::from_secs(20) {
                bail!("the ns-3 air did not start within 20 s: {}", air.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(air)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("air.log"))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// The observability file of node `name` (format: docs/lab.md section
    /// 2b, parsed by [`crate::air_obs`]).
    pub fn obs_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.air"))
    }

    /// The live per-node counters (rewritten by the program every 200 ms).
    pub fn counters(&self) -> Result<Value> {
        let s = std::fs::read_to_string(&self.stats).context("read the ns-3 air's stats")?;
        serde_json::from_str(&s).context("parse the ns-3 air's stats")
    }

    /// Counter `key` per node name, from [`Ns3Air::counters`].
    pub fn per_node(&self, key: &str) -> Result<std::collections::BTreeMap<String, u64>> {
        let v = self.counters()?;
        let mut m = std::collections::BTreeMap::new();
        for n in v["nodes"].as_array().context("stats: nodes")? {
            m.insert(
                n["name"].as_str().unwrap_or("").to_string(),
                n[key].as_u64().unwrap_or(0),
            );
        }
        Ok(m)
    }

    /// The program's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Err if the program has exited (it should run until [`Ns3Air::stop`]):
    /// its exit status and the tail of its stderr. The taps vanish with it,
    /// so this is the cause when a daemon or sender reports `No such device`.
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                self.child = None;
                let log = self.log();
                let tail: Vec<&str> = log
                    .lines()
                    .rev()
                    .take(10)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                bail!(
                    "the ns-3 air died during the point ({st}):\n{}",
                    tail.join("\n")
                );
            }
        }
        Ok(())
    }

    /// Stop the program (SIGTERM; SIGKILL after [`STOP_GRACE_S`]) and return
    /// its report (lag, events, CPU, counters).
    pub fn stop(&mut self) -> Result<Value> {
        let Some(mut child) = self.child.take() else {
            bail!("already stopped")
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let t = Instant::now();
        let st = loop {
            if let Some(st) = child.try_wait()? {
                break st;
            }
            if t.elapsed() > Duration::from_secs(STOP_GRACE_S) {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{IGNORED_SIGTERM} for {STOP_GRACE_S} s: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if !st.success() {
            bail!("the ns-3 air failed ({st}): {}", self.log());
        }
        let out = std::fs::read_to_string(self.dir.join("air.out.json"))?;
        serde_json::from_str(out.trim()).with_context(|| format!("the ns-3 air's report: {out:?}"))
    }
}

/// How long [`Ns3Air::stop`] waits for the program to exit after SIGTERM
/// (it stops within a millisecond of simulated time, then writes its
/// report; on a machine loaded to 15-18 runnable threads 5 s once passed).
pub const STOP_GRACE_S: u64 = 20;

/// Start of the error of an air that did not exit after SIGTERM (its
/// point is measured again: the report, not the measurement, was lost).
pub const IGNORED_SIGTERM: &str = "the ns-3 air ignored SIGTERM";

/// The real-time discipline of the air during one point (stored in the
/// point's JSON; see [`crate::experiment::Point::air`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AirStats {
    /// Median lag of the real-time scheduler behind the wall clock (ms).
    pub lag_p50_ms: f64,
    /// 99th percentile of that lag (ms): above [`MAX_LAG_P99_MS`] the point
    /// is re-measured.
    pub lag_p99_ms: f64,
    /// Largest lag (ms).
    pub lag_max_ms: f64,
    /// Simulator events per wall-clock second.
    pub events_per_s: f64,
    /// CPU of the ns-3 process, % of one core.
    pub cpu_pct: f64,
}

/// A point whose air lagged more than this (p99, ms) is not a measurement of
/// the air: it is re-measured (as points with lagging senders are).
pub const MAX_LAG_P99_MS: f64 = 1.0;

impl AirStats {
    /// From the program's report ([`Ns3Air::stop`]).
    pub fn from_report(r: &Value) -> AirStats {
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        AirStats {
            lag_p50_ms: f("lag_p50_ms"),
            lag_p99_ms: f("lag_p99_ms"),
            lag_max_ms: f("lag_max_ms"),
            events_per_s: f("events_per_s"),
            cpu_pct: f("cpu_pct"),
        }
    }
    /// Whether the air kept up (p99 lag within [`MAX_LAG_P99_MS`]).
    pub fn kept_up(&self) -> bool {
        self.lag_p99_ms <= MAX_LAG_P99_MS
    }
}

/// Marker in the error of an air that aborted on its real-time hard limit
/// (the machine stalled it): such a point is re-measured, not failed.
pub const HARD_LIMIT_ABORT: &str = "Hard real-time limit exceeded";

/// One line summarising a report's real-time discipline.
pub fn lag_line(r: &Value) -> String {
    format!(
        "ns-3 air: real-time lag p99 {} ms, max {} ms; {:.0} events/s; CPU {:.0} % of one core",
        r["lag_p99_ms"],
        r["lag_max_ms"],
        r["events_per_s"].as_f64().unwrap_or(0.0),
        r["cpu_pct"].as_f64().unwrap_or(0.0)
    )
}

impl Drop for Ns3Air {
    /// Stops the program if still running (printing its lag line, or why it
    /// failed) and removes its scratch directory.
    fn drop(&mut self) {
        if self.child.is_some() {
            match self.stop() {
                Ok(r) => eprintln!("lab: {}", lag_line(&r)),
                Err(e) => eprintln!("lab: {e:#}"),
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Run the program in pure simulation (no taps) for `duration_s` simulated
/// seconds with CBR `flows`, and return its report.
pub fn simulate(
    topo: &Topology,
    opts: &MediumOpts,
    flows: &[SimFlow],
    duration_s: f64,
    dir: &Path,
) -> Result<Value> {
    check(topo, opts)?;
    let bin = binary()?;
    std::fs::create_dir_all(dir)?;
    let conf = dir.join("sim.conf");
    std::fs::write(
        &conf,
        config_text(
            topo,
            opts,
            &TapFds::default(),
            flows,
            duration_s,
            &Outputs::default(),
        ),
    )?;
    let out = crate::netns::run(&bin.to_string_lossy(), &[&conf.to_string_lossy()])?;
    serde_json::from_str(out.trim()).context("the ns-3 simulation's report")
}

/// Where the air's run directories go: `/dev/shm` (tmpfs) when present, so
/// the files rewritten every few ms never wait for a loaded disk, else the
/// temporary directory.
pub fn run_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Interval (ms) at which the program rewrites the nodes' observability
/// files, unless `AIRPACK_NS3_OBS_MS` says otherwise.
pub const OBS_MS: u32 = 20;

/// The nodes of a [`Mesh`](crate::topology::Mesh) on the ns-3 air: one
/// namespace per node with a tap `radio0` carrying the node's MAC (and a tap
/// `wiredK` per wired link of the node), and the ns-3 process holding their
/// descriptors. `hub` is an empty namespace (the tc air's collision domain
/// is not used). The caller configures addresses, routes and filters.
pub fn build_nodes(
    topo: &Topology,
    opts: &MediumOpts,
    prefix: &str,
) -> Result<(Vec<MeshNode>, Ns3Air)> {
    check(topo, opts)?;
    binary()?; // build before any namespace exists
    let mut nodes = Vec::with_capacity(topo.nodes.len());
    let mut fds = Vec::new();
    let mut raw = TapFds::default();
    for (i, name) in topo.nodes.iter().enumerate() {
        let ns = Netns::create(&format!("{prefix}{name}"))?;
        let fd = open_tap(&ns, RADIO)?;
        let mac = Topology::mac_of(i);
        ns.ip(&["link", "set", RADIO, "address", &mac_str(mac)])?;
        raw.radio.push(fd.as_raw_fd());
        fds.push(fd);
        nodes.push(MeshNode {
            name: name.clone(),
            ns,
            addr: Topology::addr_of(i),
            mac,
            classid: String::new(),
        });
    }
    for (k, w) in topo.wired.iter().enumerate() {
        let mut ends = [-1; 2];
        for (side, end) in [&w.a, &w.b].into_iter().enumerate() {
            let node = nodes.iter().find(|n| n.name == *end).expect("validated");
            let (dev, _, _) = topo
                .wired_ifaces(end)
                .into_iter()
                .find(|(_, _, j)| *j == k)
                .expect("own link");
            let fd = open_tap(&node.ns, &dev)?;
            node.ns.ip(&[
                "link",
                "set",
                &dev,
                "address",
                &mac_str(Topology::wired_mac(k, side == 1)),
            ])?;
            ends[side] = fd.as_raw_fd();
            fds.push(fd);
        }
        raw.wired.push(ends);
    }
    let dir = run_base().join(format!("{prefix}ns3"));
    let obs_ms = std::env::var("AIRPACK_NS3_OBS_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(OBS_MS);
    let stats = dir.join("air.stats.json");
    let out = Outputs {
        stats: Some(&stats),
        obs: Some((&dir, obs_ms)),
    };
    let air = Ns3Air::start(&config_text(topo, opts, &raw, &[], 0.0, &out), &fds, &dir)?;
    // the program holds its own copies; ours close here
    drop(fds);
    Ok((nodes, air))
}
