//! Loading the TOML text: error messages that name the file, line and key,
//! `--set section.key=value` and `--peer` overrides, and the small parsers
//! for the values a rule may hold (ranges, protocols, marks). Hands the
//! parsed [`super::Config`] to `validate.rs`.

use super::*;

/// Maps a byte offset in `src` to a 1-based line number.
pub(super) fn line_of(src: &str, offset: usize) -> usize {
    src[..offset.min(src.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// The dotted key written on a line (`[section]` context + `key =`), if any.
pub(super) fn key_at_line(src: &str, line: usize) -> Option<String> {
    let mut section = String::new();
    for (i, l) in src.lines().enumerate() {
        let t = l.trim();
        if t.starts_with('[') {
            section = t.trim_matches(|c| c == '[' || c == ']').trim().to_owned();
        }
        if i + 1 == line {
            if t.starts_with('[') {
                return Some(section);
            }
            let key = t.split_once('=')?.0.trim().trim_matches('"');
            return Some(if section.is_empty() {
                key.to_owned()
            } else {
                format!("{section}.{key}")
            });
        }
    }
    None
}

/// The line of `key` inside the `index`-th `[section]` / `[[section]]` table.
pub(super) fn find_key_line(src: &str, section: &str, index: usize, key: &str) -> Option<usize> {
    let mut cur = String::new();
    let mut counts: std::collections::HashMap<String, usize> = Default::default();
    let mut cur_index = 0;
    for (i, l) in src.lines().enumerate() {
        let t = l.trim();
        if t.starts_with('[') {
            cur = t.trim_matches(|c| c == '[' || c == ']').trim().to_owned();
            let c = counts.entry(cur.clone()).or_insert(0);
            cur_index = *c;
            *c += 1;
            continue;
        }
        if cur == section && cur_index == index {
            if let Some((k, _)) = t.split_once('=') {
                if k.trim().trim_matches('"') == key {
                    return Some(i + 1);
                }
            }
        }
    }
    None
}

/// Formats a TOML deserialisation error as `FILE:LINE: key `K`: message`.
pub(super) fn toml_error(path: &str, src: &str, e: &toml::de::Error) -> anyhow::Error {
    let msg = e.message().trim().to_owned();
    match e.span() {
        Some(span) => {
            let line = line_of(src, span.start);
            match key_at_line(src, line) {
                Some(k) if !k.is_empty() => anyhow::anyhow!("{path}:{line}: key `{k}`: {msg}"),
                _ => anyhow::anyhow!("{path}:{line}: {msg}"),
            }
        }
        None => anyhow::anyhow!("{path}: {msg}"),
    }
}

/// A validation error located at a key.
pub(super) struct Located<'a> {
    pub(super) path: &'a str,
    pub(super) src: Option<&'a str>,
}

impl Located<'_> {
    pub(super) fn err(
        &self,
        section: &str,
        index: usize,
        key: &str,
        msg: impl fmt::Display,
    ) -> anyhow::Error {
        let dotted = if section.is_empty() {
            key.to_owned()
        } else {
            format!("{section}.{key}")
        };
        let shown = if matches!(section, "class" | "peer") {
            format!("{section}[{index}].{key}")
        } else {
            dotted
        };
        match self.src.and_then(|s| find_key_line(s, section, index, key)) {
            Some(line) => anyhow::anyhow!("{}:{line}: key `{shown}`: {msg}", self.path),
            None => anyhow::anyhow!("{}: key `{shown}`: {msg}", self.path),
        }
    }
}

/// Parses a TOML value given on the command line: a TOML literal when it
/// parses as one (`5000`, `true`, `["a","b"]`, `0x10`), else a plain string.
pub(super) fn parse_override_value(v: &str) -> toml::Value {
    let doc = format!("v = {v}");
    match doc.parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(v.to_owned())),
        Err(_) => toml::Value::String(v.to_owned()),
    }
}

/// Applies one `section.key=value` (or `peer.N.key=value`, `class.N.key=value`) override.
pub fn apply_override(table: &mut toml::Table, assignment: &str) -> anyhow::Result<()> {
    let (path, value) = assignment
        .split_once('=')
        .with_context(|| format!("--set {assignment:?}: expected SECTION.KEY=VALUE"))?;
    let parts: Vec<&str> = path.trim().split('.').collect();
    let value = parse_override_value(value.trim());
    match parts.as_slice() {
        [section, key] if !section.is_empty() && !key.is_empty() => {
            let t = table
                .entry(section.to_string())
                .or_insert_with(|| toml::Value::Table(Default::default()));
            let t = t
                .as_table_mut()
                .with_context(|| format!("--set {path}: `{section}` is not a table"))?;
            t.insert(key.to_string(), value);
            Ok(())
        }
        [section, idx, key] => {
            let i: usize = idx
                .parse()
                .with_context(|| format!("--set {path}: {idx:?} is not an index"))?;
            let arr = table
                .entry(section.to_string())
                .or_insert_with(|| toml::Value::Array(Vec::new()));
            let arr = arr
                .as_array_mut()
                .with_context(|| format!("--set {path}: `{section}` is not an array"))?;
            if i > arr.len() || i > 4096 {
                bail!(
                    "--set {path}: index {i} skips entries ({} exist)",
                    arr.len()
                );
            }
            if i == arr.len() {
                arr.push(toml::Value::Table(Default::default()));
            }
            let t = arr[i]
                .as_table_mut()
                .with_context(|| format!("--set {path}: entry is not a table"))?;
            t.insert(key.to_string(), value);
            Ok(())
        }
        _ => bail!("--set {assignment:?}: expected SECTION.KEY=VALUE or peer.N.KEY=VALUE"),
    }
}

/// Appends a peer given as `ADDR` or `ADDR=CIDR,CIDR` (the `--peer` flag).
pub fn add_peer_override(table: &mut toml::Table, spec: &str) -> anyhow::Result<()> {
    let (addr, ips) = match spec.split_once('=') {
        Some((a, i)) => (a.trim(), Some(i)),
        None => (spec.trim(), None),
    };
    let mut peer = toml::Table::new();
    peer.insert("address".into(), toml::Value::String(addr.to_owned()));
    if let Some(ips) = ips {
        let list = ips
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| toml::Value::String(s.to_owned()))
            .collect();
        peer.insert("allowed_ips".into(), toml::Value::Array(list));
    }
    let arr = table
        .entry("peer".to_owned())
        .or_insert_with(|| toml::Value::Array(Vec::new()));
    arr.as_array_mut()
        .context("`peer` is not an array")?
        .push(toml::Value::Table(peer));
    Ok(())
}

/// Where a configuration comes from: a file (optional) plus overrides.
#[derive(Clone, Debug, Default)]
pub struct Source {
    /// The TOML file, if any.
    pub file: Option<PathBuf>,
    /// `section.key=value` overrides, applied in order.
    pub sets: Vec<String>,
    /// `--peer` additions.
    pub peers: Vec<String>,
}

impl Source {
    /// Reads, parses, overrides and validates.
    pub fn load(&self) -> anyhow::Result<Plan> {
        let (name, text) = match &self.file {
            Some(p) => (
                p.display().to_string(),
                std::fs::read_to_string(p)
                    .with_context(|| format!("reading config {}", p.display()))?,
            ),
            None => ("<no config file>".to_owned(), String::new()),
        };
        parse(&name, &text, &self.sets, &self.peers)
    }
}

/// Parses `text` (named `name` in errors), applies overrides, validates.
pub fn parse(name: &str, text: &str, sets: &[String], peers: &[String]) -> anyhow::Result<Plan> {
    // First the file alone, so errors carry its line numbers.
    let file_cfg: Config = toml::from_str(text).map_err(|e| toml_error(name, text, &e))?;
    let config = if sets.is_empty() && peers.is_empty() {
        file_cfg
    } else {
        let mut table: toml::Table = text.parse().map_err(|e| toml_error(name, text, &e))?;
        for s in sets {
            apply_override(&mut table, s)?;
        }
        for p in peers {
            add_peer_override(&mut table, p)?;
        }
        // Read back through the same deserializer as the file (one copy of
        // every section's serde code in the binary, not a second one for
        // `toml::Value`: docs/performance.md, "Daemon binary size").
        toml::from_str::<Config>(&table.to_string())
            .map_err(|e| anyhow::anyhow!("command-line override: {}", e.message().trim()))?
    };
    // Validation locates keys in the file; keys only set by flags have no line.
    validate(name, Some(text), config)
}

/// Parses a `Spec` range: `"a-b"`, `"a"` or an integer, each within `0..=max`.
pub(super) fn spec_range(s: &Spec, max: u64) -> Result<RangeInclusive<u64>, String> {
    let num = |t: &str| -> Result<u64, String> {
        let t = t.trim();
        let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            u64::from_str_radix(h, 16)
        } else {
            t.parse::<u64>()
        };
        v.map_err(|_| format!("{t:?} is not a number"))
    };
    let (a, b) = match s {
        Spec::Int(i) if *i < 0 => return Err(format!("{i} is negative")),
        Spec::Int(i) => (*i as u64, *i as u64),
        Spec::Str(t) => match t.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let v = num(t)?;
                (v, v)
            }
        },
    };
    if a > b {
        return Err(format!("range {a}-{b} is empty (start > end)"));
    }
    if b > max {
        return Err(format!("{b} is larger than {max}"));
    }
    Ok(a..=b)
}

pub(super) fn spec_protocol(s: &Spec) -> Result<u8, String> {
    match s {
        Spec::Int(i) => u8::try_from(*i).map_err(|_| format!("protocol {i} is not in 0-255")),
        Spec::Str(t) => match t.to_ascii_lowercase().as_str() {
            "udp" => Ok(17),
            "tcp" => Ok(6),
            "icmp" => Ok(1),
            "icmpv6" | "ipv6-icmp" => Ok(58),
            "sctp" => Ok(132),
            "udplite" => Ok(136),
            other => other.parse::<u8>().map_err(|_| {
                format!("unknown protocol {t:?} (udp, tcp, icmp, icmpv6, sctp, udplite or 0-255)")
            }),
        },
    }
}

pub(super) fn spec_mark(s: &Spec) -> Result<(u32, u32), String> {
    let num = |t: &str| -> Result<u32, String> {
        let t = t.trim();
        let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            u32::from_str_radix(h, 16)
        } else {
            t.parse::<u32>()
        };
        v.map_err(|_| format!("{t:?} is not a 32-bit number"))
    };
    match s {
        Spec::Int(i) => u32::try_from(*i)
            .map(|v| (v, u32::MAX))
            .map_err(|_| format!("mark {i} out of range")),
        Spec::Str(t) => match t.split_once('/') {
            Some((v, m)) => {
                let (v, m) = (num(v)?, num(m)?);
                if v & !m != 0 {
                    return Err(format!("mark value {v:#x} has bits outside mask {m:#x}"));
                }
                Ok((v, m))
            }
            None => Ok((num(t)?, u32::MAX)),
        },
    }
}

pub(super) fn valid_ifname(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 15
        && n != "."
        && n != ".."
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}
