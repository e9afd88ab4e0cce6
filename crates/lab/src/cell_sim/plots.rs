//! cell-sim's plots: PNGs of a run's metrics against the number of calls,
//! beside its JSON or redrawn from saved runs (`--replot`).
//!
//! Must not touch: measurements or the JSON's contents (it only reads
//! them); the drawing itself is [`crate::report::plot`]'s.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// `--replot`: draw the rows of saved runs (`files`; only the runs tagged
/// `tags`, comma separated, of docs/results' files) into plots named after
/// `out` (default: the first file).
pub fn replot(files: &[PathBuf], tags: Option<&str>, out: Option<&Path>) -> Result<()> {
    let tags: Option<Vec<String>> =
        tags.map(|t| t.split(',').map(|x| x.trim().to_string()).collect());
    let mut runs = Vec::new();
    for f in files {
        let run: serde_json::Value = serde_json::from_slice(
            &std::fs::read(f).with_context(|| format!("read {}", f.display()))?,
        )
        .with_context(|| format!("{}: not JSON", f.display()))?;
        runs.push(run);
    }
    let mut rows = Vec::new();
    for run in &runs {
        rows.extend(named_rows(run, tags.as_deref())?);
    }
    if rows.is_empty() {
        bail!("--replot: no rows to draw");
    }
    let out = out.unwrap_or(&files[0]);
    for p in write_plots(out, &rows)? {
        println!("{}", p.display());
    }
    Ok(())
}

/// PNG plots beside the JSON (`F.json` -> `F-mos.png`, `F-worst-mos.png`,
/// `F-loss.png`, `F-delay.png`): each metric against the number of calls,
/// a line per named row (see [`named_rows`]), as the lab's report draws
/// them.
pub fn write_plots(out: &Path, rows: &[(String, &serde_json::Value)]) -> Result<Vec<PathBuf>> {
    let metrics = [
        ("mos", "MOS (mean over call directions)", "mos"),
        ("worst-mos", "MOS of the worst call direction", "mos_min"),
        ("loss", "loss % (worst call direction)", "loss_max"),
        ("delay", "one-way delay ms (mean)", "delay_ms"),
    ];
    if let Some(d) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d)?;
    }
    let stem = out.with_extension("");
    let fonts = crate::report::fonts_available();
    let mut written = Vec::new();
    for (file, label, key) in metrics {
        let series: Vec<(&str, Vec<(u32, f64)>)> = rows
            .iter()
            .map(|(n, r)| {
                let pts = r["result"]["points"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                let xy = pts
                    .iter()
                    .filter_map(|p| {
                        let calls = u32::try_from(p["calls"].as_u64()?).ok()?;
                        Some((calls, p[key].as_f64()?))
                    })
                    .collect();
                (n.as_str(), xy)
            })
            .collect();
        let path = PathBuf::from(format!("{}-{file}.png", stem.display()));
        crate::report::plot(&path, label, &series, fonts)
            .with_context(|| format!("plot {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The rows of a run's JSON, each named for a plot's legend: a cell-sim
/// run (`{"rows": [...]}`, as `--out` writes it) by preset, codec and
/// setup; a results file of docs/results (`{"runs": [{"tag", "rows"}]}`)
/// by each run's tag, only the runs in `tags` when given.
pub fn named_rows<'a>(
    run: &'a serde_json::Value,
    tags: Option<&[String]>,
) -> Result<Vec<(String, &'a serde_json::Value)>> {
    use serde_json::Value;
    let name = |r: &Value| {
        let s = |k: &Value| k.as_str().unwrap_or("?").to_string();
        format!(
            "{} {} {}",
            s(&r["preset"]),
            s(&r["codec"]),
            s(&r["result"]["setup"])
        )
    };
    if let Some(rows) = run["rows"].as_array() {
        return Ok(rows.iter().map(|r| (name(r), r)).collect());
    }
    let runs = run["runs"]
        .as_array()
        .context("neither rows nor runs in the JSON")?;
    let mut out = Vec::new();
    for r in runs {
        let tag = r["tag"].as_str().unwrap_or("?");
        if tags.is_some_and(|t| !t.iter().any(|x| x == tag)) {
            continue;
        }
        for row in r["rows"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            out.push((tag.to_string(), row));
        }
    }
    Ok(out)
}
