//! The airtime presets against published numbers (pure, no root needed).
//!
//! Published single-hop capacities (calls, 20 ms packets, no aggregation):
//! Matthew Gast's 802.11 capacity table after Cisco's 7920 deployment guide,
//! as checked in the project's reference file.

use airpack_lab::medium::{preset, preset_table_text};

const G729_IP: u32 = 60; // 20 B payload + 12 RTP + 8 UDP + 20 IPv4
const G711_IP: u32 = 200; // 160 B payload + 40

#[test]
fn published_single_hop_capacities() {
    // (preset, G.711 calls, G.729 calls)
    let table = [
        ("b1", 3, 6),
        ("b2", 5, 8),
        ("b5.5", 8, 10),
        ("b11", 10, 11),
        ("b11s", 13, 15),
    ];
    for (name, g711, g729) in table {
        let p = preset(name).unwrap();
        assert_eq!(p.cell_capacity(G711_IP, 20_000.0), g711, "{name} G.711");
        assert_eq!(p.cell_capacity(G729_IP, 20_000.0), g729, "{name} G.729");
    }
}

#[test]
fn reference_worked_example() {
    let p = preset("b2").unwrap();
    assert_eq!(p.data_frame_us(60), 576.0);
    assert_eq!(p.exchange_us(60), 1194.0);
    // ten 60-byte packets in one 600-byte frame: 3354 µs, 335 µs per packet, 3.6x less
    let t10 = p.exchange_us(600);
    assert_eq!(t10, 3354.0);
    let gain = p.exchange_us(60) / (t10 / 10.0);
    assert!((gain - 3.56).abs() < 0.01, "{gain}");
}

#[test]
fn ofdm_symbol_rounding() {
    // 802.11a 6 Mbit/s: 24 data bits per symbol. 60 B IP + 36 = 96 B = 768 bits,
    // + 22 service/tail = 790 bits -> 33 symbols -> 20 + 132 = 152 µs.
    let p = preset("a6").unwrap();
    assert_eq!(p.data_frame_us(60), 152.0);
    // DIFS 34 + 7.5 slots (67.5) + 152 + 16 + 44
    assert_eq!(p.exchange_us(60), 34.0 + 67.5 + 152.0 + 16.0 + 44.0);
    // 54 Mbit/s: 216 bits per symbol: 790/216 -> 4 symbols -> 36 µs
    assert_eq!(preset("a54").unwrap().data_frame_us(60), 36.0);
}

#[test]
fn table_text_lists_every_preset() {
    let t = preset_table_text();
    for n in ["b1", "b2", "b5.5", "b11", "b11s", "a6", "a12", "a24", "a54"] {
        assert!(t.lines().any(|l| l.starts_with(n)), "{n} missing:\n{t}");
    }
}

#[test]
fn topology_files_parse_and_match_presets() {
    use airpack_lab::topology::Topology;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../topologies");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("toml") {
            continue;
        }
        let t = Topology::from_toml(&std::fs::read_to_string(&p).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e:#}", p.display()));
        if let Ok(preset) = Topology::preset(&t.name) {
            assert_eq!(t, preset, "{} differs from the preset", p.display());
        }
        n += 1;
    }
    assert!(n >= 3, "expected topology files in {}", dir.display());
    let g =
        Topology::from_toml(&std::fs::read_to_string(dir.join("grid2x3.toml")).unwrap()).unwrap();
    let nh = g.next_hops();
    let there = g.path(&nh, "G1", "G6").unwrap();
    let mut back = g.path(&nh, "G6", "G1").unwrap();
    back.reverse();
    assert_eq!(there.len(), 4);
    assert_eq!(there, back);
    assert!(g.asymmetric_calls().is_empty());
}
