//! The shipped counting topologies through the test driver: the first 40
//! sample records of each, with their default parameters, give exactly the
//! output recorded in `tests/golden/<topology>.output.txt` (one line per
//! output record: `key<TAB>count`). Set `WEIR_BLESS=1` to rewrite the files
//! after an intended change, and review the diff.

use std::path::PathBuf;

use weir::driver::{DriverConfig, TopologyTestDriver};
use weir::processor::Headers;
use weir::topologies::{self, ShippedTopology};

const SAMPLES: u64 = 40;

fn run(topology: &ShippedTopology) -> String {
    let params = topology.params(&Default::default()).unwrap();
    let built = (topology.build)(&params).unwrap();
    let mut driver = TopologyTestDriver::new(built, DriverConfig::new("golden")).unwrap();
    let input = &topology.input_topics(&params)[0];
    let output = &topology.output_topics(&params)[0];
    let headers = Headers::new();
    for i in 0..SAMPLES {
        let (key, value) = (topology.sample)(i);
        driver
            .pipe_raw(
                input,
                key.as_deref(),
                Some(&value),
                1_000 * i as i64,
                &headers,
            )
            .unwrap();
    }
    let mut text = String::new();
    for record in driver.read_raw(output) {
        let key = String::from_utf8(record.key.expect("keyed output")).unwrap();
        let value = record.value.expect("counts are never null");
        let count = i64::from_be_bytes(value.as_slice().try_into().expect("8-byte count"));
        text.push_str(&format!("{key}\t{count}\n"));
    }
    text
}

fn check(name: &str) {
    let topology = topologies::find(name).unwrap();
    let actual = run(topology);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.output.txt"));
    if std::env::var("WEIR_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with WEIR_BLESS=1 once", path.display()));
    assert_eq!(
        actual,
        expected,
        "{name} output differs from {}",
        path.display()
    );
}

#[test]
fn word_count_matches_its_golden_output() {
    check("word-count");
}

#[test]
fn events_by_type_matches_its_golden_output() {
    check("events-by-type");
}

#[test]
fn events_by_type_counts_agree_with_an_independent_count() {
    // The golden file's last line per key equals a count done without Weir.
    let topology = topologies::find("events-by-type").unwrap();
    let text = run(topology);
    let mut last = std::collections::BTreeMap::new();
    for line in text.lines() {
        let (k, v) = line.split_once('\t').unwrap();
        last.insert(k.to_string(), v.parse::<i64>().unwrap());
    }
    let mut truth = std::collections::BTreeMap::new();
    for i in 0..SAMPLES {
        let (_, value) = (topology.sample)(i);
        let event: serde_json::Value = serde_json::from_slice(&value).unwrap();
        *truth
            .entry(event["type"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    assert_eq!(last, truth);
    assert_eq!(text.lines().count() as u64, SAMPLES, "one update per event");
}
