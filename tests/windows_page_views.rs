//! The shipped `page-views` topology in the test driver: its sample input
//! (event times in the values, out of order within the grace, a few views
//! minutes late) gives exactly the golden output
//! `tests/golden/page_views.minutes.txt`, which in turn equals counts
//! computed here without Weir; late views are dropped, counted and written
//! to the late topic. Regenerate the golden file with `WEIR_BLESS=1`.

use std::collections::BTreeMap;

use weir::driver::{DriverConfig, TopologyTestDriver};
use weir::processor::Headers;
use weir::serdes::{Serde, StringSerde};
use weir::topologies::page_views::{self, WINDOW_MS, sample, sample_is_late, sample_view};
use weir::windows::{LATE_HEADER_REASON, LATE_REASON_WINDOW_CLOSED, WindowedSerde};

/// 12 minutes of sample views.
const SAMPLES: u64 = 7_200;
const GRACE_MS: i64 = 10_000;
const GOLDEN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/golden/page_views.minutes.txt"
);

fn driver() -> TopologyTestDriver {
    let shipped = weir::topologies::find("page-views").unwrap();
    let params = shipped.params(&Default::default()).unwrap();
    let topology = (shipped.build)(&params).unwrap();
    TopologyTestDriver::new(topology, DriverConfig::new("page-views")).unwrap()
}

/// `(page, window start) -> count` of the views `0..n` that are not late,
/// for the windows closed at the largest event time among them.
fn reference(n: u64) -> BTreeMap<(String, i64), i64> {
    let mut counts = BTreeMap::new();
    let mut stream_time = i64::MIN;
    for i in 0..n {
        let (page, ts) = sample_view(i);
        stream_time = stream_time.max(ts);
        if !sample_is_late(i) {
            let start = ts - ts.rem_euclid(WINDOW_MS);
            *counts.entry((page.to_string(), start)).or_insert(0) += 1;
        }
    }
    counts.retain(|(_, start), _| start + WINDOW_MS + GRACE_MS <= stream_time);
    counts
}

#[test]
fn page_views_per_minute_match_the_golden_output_and_an_independent_count() {
    let mut d = driver();
    let mut late_expected = 0;
    for i in 0..SAMPLES {
        let (key, value) = sample(i);
        late_expected += u64::from(sample_is_late(i));
        // The Kafka timestamp is wall-clock-like and ignored: event time is in the value.
        d.pipe_raw(
            page_views::INPUT,
            key.as_deref(),
            Some(&value),
            1,
            &Headers::new(),
        )
        .unwrap();
    }
    let keys = WindowedSerde::time(StringSerde, WINDOW_MS);
    let mut lines = String::new();
    let mut emitted = BTreeMap::new();
    for r in d.read_raw(page_views::OUTPUT) {
        let key = keys
            .deserialize(page_views::OUTPUT, r.key.as_deref().unwrap())
            .unwrap();
        let count = i64::from_be_bytes(r.value.as_deref().unwrap().try_into().unwrap());
        lines.push_str(&format!("{} {} {}\n", key.window.start_ms, key.key, count));
        let previous = emitted.insert((key.key.clone(), key.window.start_ms), count);
        assert!(previous.is_none(), "{key:?} was emitted twice");
    }
    if std::env::var_os("WEIR_BLESS").is_some() {
        std::fs::write(GOLDEN, &lines).unwrap();
    }
    let golden = std::fs::read_to_string(GOLDEN).expect("reading the golden file");
    assert_eq!(lines, golden, "the output differs from {GOLDEN}");

    assert_eq!(emitted, reference(SAMPLES), "emitted counts vs. reference");
    // The minute before the first sample holds only the first views that
    // were jittered into it (7 pages); then 8 pages x 11 closed minutes.
    assert_eq!(emitted.len(), 7 + 8 * 11);

    let metrics = d.task_metrics(0).unwrap();
    assert_eq!(late_expected, 2);
    assert_eq!(metrics.late_dropped, late_expected);
    let late = d.read_raw(page_views::LATE);
    assert_eq!(late.len() as u64, late_expected);
    for r in &late {
        assert_eq!(
            r.headers.last_str(LATE_HEADER_REASON),
            Some(LATE_REASON_WINDOW_CLOSED)
        );
    }
}

#[test]
fn a_bad_grace_parameter_is_named() {
    let shipped = weir::topologies::find("page-views").unwrap();
    let given = [("grace_ms".to_string(), "ten".to_string())].into();
    let params = shipped.params(&given).unwrap();
    let Err(err) = (shipped.build)(&params) else {
        panic!("grace_ms=ten was accepted");
    };
    assert_eq!(
        err.to_string(),
        "config key 'topology.grace_ms' = 'ten': it must be a whole number of milliseconds >= 0, e.g. 10000"
    );
}

#[test]
fn a_retention_shorter_than_size_plus_grace_is_refused() {
    let shipped = weir::topologies::find("page-views").unwrap();
    let given = [
        ("grace_ms".to_string(), "10000".to_string()),
        ("retention_ms".to_string(), "30000".to_string()),
    ]
    .into();
    let params = shipped.params(&given).unwrap();
    let Err(err) = (shipped.build)(&params) else {
        panic!("retention_ms=30000 was accepted");
    };
    let message = err.to_string();
    assert!(
        message.contains("page-views-per-minute") && message.contains("70000"),
        "{message}"
    );
}
