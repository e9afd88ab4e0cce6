//! What a reload changed, in words for the log: `aggregation.hold_time_us
//! 2000 -> 3000`, `peer 10.0.0.3 added`, `class rules 2 -> 3`.
//!
//! Owns: comparing two parsed configurations (pure; through their TOML form,
//! so every key is covered without listing them). Must not touch: what a
//! reload applies or keeps (`runtime::reload`).

use super::config::Config;
use toml::Value;

/// The differences between `old` and `new`, one short phrase each, in file
/// order (`[daemon]`, `[aggregation]`, the other tables, classes, peers by
/// address; keys only as set or unset). Empty when
/// nothing changed.
pub fn changes(old: &Config, new: &Config) -> Vec<String> {
    let (o, n) = (as_table(old), as_table(new));
    let mut out = Vec::new();
    // The tables other than the roles below (keys shown as set or unset only).
    for section in ["daemon", "aggregation", "discovery", "medium", "gateway"] {
        leaves(section, o.get(section), n.get(section), &mut out);
    }
    // The downlink roles: keys are secrets, so only say that they changed.
    for section in ["ap", "station"] {
        let mut inner = Vec::new();
        leaves(section, o.get(section), n.get(section), &mut inner);
        let key = format!("{section}.key ");
        out.extend(inner.into_iter().map(|c| {
            if c.starts_with(&key) {
                format!("{section}.key changed")
            } else {
                c
            }
        }));
    }
    let rules = |t: &toml::Table| t.get("class").and_then(Value::as_array).map_or(0, Vec::len);
    if o.get("class") != n.get("class") {
        out.push(format!(
            "class rules {} -> {} (changed)",
            rules(&o),
            rules(&n)
        ));
    }
    let peers = |t: &toml::Table| -> Vec<(String, Value)> {
        let list = t.get("peer").and_then(Value::as_array).cloned();
        list.unwrap_or_default()
            .into_iter()
            .map(|p| (p.get("address").map(show).unwrap_or_default(), p))
            .collect()
    };
    let (op, np) = (peers(&o), peers(&n));
    for (addr, p) in &np {
        match op.iter().find(|(a, _)| a == addr) {
            None => out.push(format!("peer {addr} added")),
            Some((_, q)) if q != p => {
                let mut inner = Vec::new();
                leaves("", Some(q), Some(p), &mut inner);
                out.push(format!("peer {addr}: {}", inner.join(", ")));
            }
            Some(_) => {}
        }
    }
    for (addr, _) in &op {
        if !np.iter().any(|(a, _)| a == addr) {
            out.push(format!("peer {addr} removed"));
        }
    }
    out
}

fn as_table(c: &Config) -> toml::Table {
    // A Config always serializes (it was parsed from TOML); an empty table
    // would only make the log line say less.
    // Through the TOML text, as `run --check` renders it: one serializer for
    // the config structs in the binary, not a second one into `toml::Value`.
    toml::to_string(c)
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or_default()
}

/// Scalar (or whole-array) leaves under `path` that differ.
fn leaves(path: &str, o: Option<&Value>, n: Option<&Value>, out: &mut Vec<String>) {
    if o == n {
        return;
    }
    match (o, n) {
        (Some(Value::Table(a)), Some(Value::Table(b))) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                leaves(&p, a.get(k), b.get(k), out);
            }
        }
        // Keys are secrets: say that they changed, never what they are.
        _ if path == "key" || path.ends_with(".key") => {
            let s = |v: Option<&Value>| if v.is_some() { "(set)" } else { "(unset)" };
            out.push(format!("{path} {} -> {} (secret, not shown)", s(o), s(n)));
        }
        _ => {
            let s = |v: Option<&Value>| v.map_or_else(|| "(unset)".to_owned(), show);
            out.push(format!("{path} {} -> {}", s(o), s(n)));
        }
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Config {
        toml::from_str(text).expect("test config parses")
    }

    #[test]
    fn identical_configurations_have_no_changes() {
        let a = cfg("[aggregation]\nhold_time_us = 2000\n[[peer]]\naddress = \"10.0.0.2\"\n");
        assert!(changes(&a, &a.clone()).is_empty());
    }

    #[test]
    fn never_shows_a_key() {
        let a = cfg("[discovery]\nkey = \"000102030405060708090a0b0c0d0e0f\"\n");
        let b = cfg("[discovery]\nkey = \"ffeeddccbbaa99887766554433221100\"\n");
        let d = changes(&a, &b);
        assert_eq!(d, ["discovery.key (set) -> (set) (secret, not shown)"]);
        let d = changes(&cfg(""), &a);
        assert_eq!(d, ["discovery.key (unset) -> (set) (secret, not shown)"]);
        assert!(!format!("{d:?}").contains("0001"));
    }

    #[test]
    fn names_changed_keys_with_old_and_new_values() {
        let a = cfg("[aggregation]\nhold_time_us = 2000\n");
        let b = cfg("[aggregation]\nhold_time_us = 3000\n[daemon]\nlog = \"debug\"\n");
        assert_eq!(
            changes(&a, &b),
            [
                "daemon.log info -> debug",
                "aggregation.hold_time_us 2000 -> 3000"
            ]
        );
    }

    #[test]
    fn peers_are_matched_by_address_not_position() {
        let a = cfg("[[peer]]\naddress = \"10.0.0.2\"\n[[peer]]\naddress = \"10.0.0.3\"\n");
        let b = cfg(concat!(
            "[[peer]]\naddress = \"10.0.0.3\"\nmax_size = 1200\n",
            "[[peer]]\naddress = \"10.0.0.4\"\n"
        ));
        let c = changes(&a, &b);
        assert_eq!(c.len(), 3, "{c:?}");
        assert!(c[0].starts_with("peer 10.0.0.3: max_size "), "{c:?}");
        assert!(c[0].ends_with("-> 1200"), "{c:?}");
        assert_eq!(c[1], "peer 10.0.0.4 added");
        assert_eq!(c[2], "peer 10.0.0.2 removed");
    }

    #[test]
    fn downlink_keys_are_named_not_shown() {
        let a = cfg("[ap]\nkey = \"000102030405060708090a0b0c0d0e0f\"\ninterval_ms = 20\n");
        let b = cfg("[ap]\nkey = \"ffffffffffffffffffffffffffffffff\"\ninterval_ms = 40\n");
        let c = changes(&a, &b);
        assert_eq!(c, ["ap.interval_ms 20 -> 40", "ap.key changed"]);
        assert!(!c.concat().contains("0001"));
    }

    #[test]
    fn class_rules_are_summarised() {
        let a = cfg("");
        let b = cfg("[[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"1-2\"\n");
        assert_eq!(changes(&a, &b), ["class rules 0 -> 1 (changed)"]);
    }
}
