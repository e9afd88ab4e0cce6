//! Unit tests of the call spec, the result formats and the merge.

use super::*;

fn spec_json() -> &'static str {
    r#"{"codec":"g729","interval_ms":20,"vad":true,"seed":1,"duration_s":20.0,
        "start_at_unix_ms": 1763800000000, "playout_ms": 60, "criterion": "mos",
        "calls":[{"id":0,"a":{"node":"A","addr":"10.9.0.1","port":16000},
                       "b":{"node":"D","addr":"10.9.0.4","port":16000}}]}"#
}

#[test]
fn contract_spec_parses_with_defaults() {
    let s: Spec = serde_json::from_str(spec_json()).unwrap();
    assert_eq!(s.codec, Codec::G729);
    assert_eq!(s.playout_ms, 60.0);
    assert_eq!(s.criterion, Criterion::Mos);
    assert_eq!(s.grace_ms, 1000);
    assert_eq!(s.calls[0].b.port, 16000);
    s.validate().unwrap();
    let seeds: Spec = serde_json::from_str(&spec_json().replace("\"mos\"", "\"seeds\"")).unwrap();
    assert_eq!(seeds.criterion, Criterion::Seeds);
}

#[test]
fn invalid_specs_are_rejected_with_a_reason() {
    let base: Spec = serde_json::from_str(spec_json()).unwrap();
    let mut s = base.clone();
    s.interval_ms = 15;
    assert!(s
        .validate()
        .unwrap_err()
        .to_string()
        .contains("10 ms frame"));
    let mut s = base.clone();
    s.duration_s = 0.0;
    assert!(s.validate().unwrap_err().to_string().contains("duration_s"));
    let mut s = base.clone();
    s.calls.push(s.calls[0].clone());
    assert!(s.validate().unwrap_err().to_string().contains("twice"));
    let mut s = base.clone();
    let mut c = s.calls[0].clone();
    c.id = 1;
    s.calls.push(c);
    assert!(s
        .validate()
        .unwrap_err()
        .to_string()
        .contains("used by another"));
    let mut s = base;
    s.playout_ms = f64::NAN;
    assert!(s.validate().is_err());
}

#[test]
fn node_result_json_matches_the_contract() {
    let r = NodeResult {
        node: "A".into(),
        start_late_ms: 0.0,
        streams: vec![
            StreamReport {
                call: 0,
                direction: Direction::AToB,
                sent: Some(5),
                send_errors: Some(0),
                max_send_lag_ms: Some(0.1),
                sends_late_1ms: Some(0),
                received: None,
                rtcp: None,
            },
            StreamReport {
                call: 0,
                direction: Direction::BToA,
                sent: None,
                send_errors: None,
                max_send_lag_ms: None,
                sends_late_1ms: None,
                received: Some(ReceiveSummary::default()),
                rtcp: None,
            },
        ],
        rx: RxCounters::default(),
        rtcp: None,
    };
    let v: serde_json::Value = serde_json::to_value(&r).unwrap();
    assert_eq!(v["node"], "A");
    assert_eq!(v["streams"][0]["direction"], "a_to_b");
    assert_eq!(v["streams"][0]["sent"], 5);
    assert!(v["streams"][0].get("received").is_none());
    assert_eq!(v["streams"][1]["direction"], "b_to_a");
    assert!(v["streams"][1]["received"].is_object());
    let back: NodeResult = serde_json::from_value(v).unwrap();
    assert_eq!(back, r);
}

fn rx(received: u64, delay: f64) -> ReceiveSummary {
    ReceiveSummary {
        received,
        delay_min_ms: Some(delay),
        delay_mean_ms: Some(delay),
        delay_p50_ms: Some(delay),
        delay_p95_ms: Some(delay),
        delay_max_ms: Some(delay),
        playout_ms: 60.0,
        playout_delay_ms: Some(delay + 60.0),
        ..Default::default()
    }
}

fn report(
    node: &str,
    call: u32,
    dir: Direction,
    sent: Option<u64>,
    received: Option<ReceiveSummary>,
) -> NodeResult {
    NodeResult {
        node: node.into(),
        start_late_ms: 0.0,
        streams: vec![StreamReport {
            call,
            direction: dir,
            sent,
            send_errors: None,
            max_send_lag_ms: None,
            sends_late_1ms: None,
            received,
            rtcp: None,
        }],
        rx: RxCounters::default(),
        rtcp: None,
    }
}

#[test]
fn merge_pairs_sender_and_receiver_reports() {
    let spec: Spec = serde_json::from_str(spec_json()).unwrap();
    let results = vec![
        report("A", 0, Direction::AToB, Some(1000), None),
        report("D", 0, Direction::AToB, None, Some(rx(1000, 5.0))),
        report("D", 0, Direction::BToA, Some(1000), None),
        report("A", 0, Direction::BToA, None, Some(rx(900, 5.0))),
    ];
    let calls = merge(&spec, &results);
    assert_eq!(calls.len(), 1);
    let c = &calls[0];
    assert_eq!(
        (c.a_to_b.sent, c.a_to_b.received, c.a_to_b.loss_pct),
        (1000, 1000, 0.0)
    );
    assert!(c.a_to_b.supported);
    assert_eq!(c.b_to_a.loss_pct, 10.0);
    assert!(!c.b_to_a.supported);
    assert!(!c.supported);
    assert!(c.notes.is_empty());
    let s = summarize(&calls);
    assert_eq!((s.calls, s.supported_calls, s.all_supported), (1, 0, false));
    assert!((s.loss_pct - 5.0).abs() < 1e-9);
    // The 10 % one way is not hidden by the mean over both directions.
    assert_eq!(
        (s.loss_a_to_b_pct, s.loss_b_to_a_pct, s.loss_max_pct),
        (0.0, 10.0, 10.0)
    );
    assert_eq!(s.delay_ms, Some(5.0));
    assert_eq!(s.delay_p50_ms, Some(5.0));
    assert_eq!(median(vec![3.0, 1.0, 2.0, 10.0]), Some(2.5));
    assert_eq!(median(vec![]), None);
}

#[test]
fn summary_reports_mean_and_max_jitter_not_only_the_final_value() {
    let spec: Spec = serde_json::from_str(spec_json()).unwrap();
    let mut spiky = rx(1000, 5.0);
    (spiky.jitter_ms, spiky.jitter_mean_ms, spiky.jitter_max_ms) = (0.5, 23.0, 87.0);
    let mut calm = rx(1000, 5.0);
    (calm.jitter_ms, calm.jitter_mean_ms, calm.jitter_max_ms) = (0.5, 1.0, 2.0);
    let results = vec![
        report("A", 0, Direction::AToB, Some(1000), None),
        report("D", 0, Direction::AToB, None, Some(spiky)),
        report("D", 0, Direction::BToA, Some(1000), None),
        report("A", 0, Direction::BToA, None, Some(calm)),
    ];
    let calls = merge(&spec, &results);
    assert_eq!(
        (
            calls[0].a_to_b.jitter_mean_ms,
            calls[0].a_to_b.jitter_max_ms
        ),
        (23.0, 87.0)
    );
    let s = summarize(&calls);
    assert_eq!(
        (s.jitter_ms, s.jitter_mean_ms, s.jitter_max_ms),
        (0.5, 12.0, 87.0)
    );
}

#[test]
fn merge_uses_measured_burst_ratio_only_when_asked() {
    let mut spec: Spec = serde_json::from_str(spec_json()).unwrap();
    assert_eq!(spec.burst, BurstModel::Random);
    let mut lossy = rx(980, 5.0);
    lossy.burst_r = 4.0;
    let results = vec![
        report("A", 0, Direction::AToB, Some(1000), None),
        report("D", 0, Direction::AToB, None, Some(lossy)),
    ];
    let random = merge(&spec, &results);
    spec = serde_json::from_str(
        &spec_json().replace("\"criterion\"", "\"burst\": \"measured\", \"criterion\""),
    )
    .unwrap();
    assert_eq!(spec.burst, BurstModel::Measured);
    let measured = merge(&spec, &results);
    assert_eq!(random[0].a_to_b.burst_r, 1.0);
    assert_eq!(measured[0].a_to_b.burst_r, 4.0);
    assert!(measured[0].a_to_b.mos < random[0].a_to_b.mos);
}

#[test]
fn merge_notes_missing_reports() {
    let spec: Spec = serde_json::from_str(spec_json()).unwrap();
    let calls = merge(&spec, &[report("A", 0, Direction::AToB, Some(10), None)]);
    let c = &calls[0];
    assert!(!c.supported);
    assert_eq!(c.a_to_b.received, 0);
    assert!(
        c.notes
            .iter()
            .any(|n| n.contains("no receiver report from node D")),
        "{:?}",
        c.notes
    );
    assert!(
        c.notes
            .iter()
            .any(|n| n.contains("no sender report from node D")),
        "{:?}",
        c.notes
    );
}

#[test]
fn merge_accepts_a_silent_direction_but_not_a_missing_one() {
    let spec: Spec = serde_json::from_str(spec_json()).unwrap();
    let rx = |n: u64| ReceiveSummary {
        received: n,
        ..Default::default()
    };
    // D sent nothing (silent) and A received nothing: nothing to judge.
    let silent = merge(
        &spec,
        &[
            report("A", 0, Direction::BToA, None, Some(rx(0))),
            report("D", 0, Direction::BToA, Some(0), None),
        ],
    );
    assert!(silent[0].b_to_a.supported, "{:?}", silent[0]);
    assert!(
        silent[0].notes.iter().any(|n| n.contains("silent")),
        "{:?}",
        silent[0].notes
    );
    // No sender report at all is not silence.
    let missing = merge(&spec, &[report("A", 0, Direction::BToA, None, Some(rx(0)))]);
    assert!(!missing[0].b_to_a.supported);
}

#[test]
fn ssrcs_differ_per_direction_and_call() {
    let mut seen = std::collections::HashSet::new();
    for call in 0..500 {
        for dir in [Direction::AToB, Direction::BToA] {
            assert!(seen.insert(ssrc_of(7, call, dir)));
        }
    }
}
