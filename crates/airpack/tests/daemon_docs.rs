//! The operator's guide and the examples are checked against the code: every
//! example parses and validates, the reference table lists exactly the keys
//! the config structs accept, and every default it states is the real one.

use airpack::daemon::config;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn examples_parse_and_validate() {
    let dir = root().join("examples");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|s| s.to_str()) != Some("toml") {
            continue;
        }
        let src = config::Source {
            file: Some(p.clone()),
            ..Default::default()
        };
        let plan = src
            .load()
            .unwrap_or_else(|e| panic!("{}: {e:#}", p.display()));
        assert!(
            airpack::daemon::warnings(&plan).is_empty(),
            "{}: {:?}",
            p.display(),
            airpack::daemon::warnings(&plan)
        );
        n += 1;
    }
    for name in ["hop-by-hop.toml", "end-to-end.toml"] {
        assert!(dir.join(name).exists(), "examples/{name} missing");
    }
    assert!(n >= 2);
}

/// `(key, default)` rows of the reference table.
fn table() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("docs/operator-guide.md")).unwrap();
    let start = text
        .find("## Configuration reference")
        .expect("reference section");
    text[start..]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cols: Vec<&str> = l.split('|').map(str::trim).collect();
            (
                cols[1].trim_matches('`').to_owned(),
                cols[2].trim_matches('`').to_owned(),
            )
        })
        .collect()
}

#[test]
fn reference_table_lists_exactly_the_config_keys() {
    let mut documented: Vec<String> = table().into_iter().map(|(k, _)| k).collect();
    documented.sort();
    let known = config::known_keys();
    let missing: Vec<_> = known.iter().filter(|k| !documented.contains(k)).collect();
    let extra: Vec<_> = documented.iter().filter(|k| !known.contains(k)).collect();
    assert!(missing.is_empty(), "keys not documented: {missing:?}");
    assert!(
        extra.is_empty(),
        "documented keys the config does not have: {extra:?}"
    );
}

#[test]
fn reference_table_defaults_are_the_real_defaults() {
    let defaults = toml::Value::try_from(config::Config::default()).unwrap();
    let mut checked = 0;
    for (key, default) in table() {
        let (section, k) = key.split_once('.').unwrap();
        let actual = defaults.get(section).and_then(|s| s.get(k));
        if default == "—" {
            assert!(
                actual.is_none(),
                "{key}: documented without default but the code has {actual:?}"
            );
            continue;
        }
        let doc: toml::Table = format!("v = {default}")
            .parse()
            .unwrap_or_else(|e| panic!("{key}: {default}: {e}"));
        assert_eq!(
            Some(&doc["v"]),
            actual,
            "{key}: documented default {default}"
        );
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} defaults checked");
}
