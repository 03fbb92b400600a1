//! The record cache of aggregations through the test driver, which flushes
//! and commits after every input record: the updates one input record
//! causes collapse to one output and one changelog record per key, with the
//! record's timestamp; a full budget sends everything through at once; a
//! store that a join also reads is not cached; a key's aggregate stays in
//! the cache after a commit, so it is read from the store once. (On
//! the broker, the runtime tests count exactly with the cache on, as it is
//! by default.)

use std::sync::Arc;
use std::time::Duration;

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::metrics::Metrics;
use weir::metrics::store::MeteredKeyValueStore;
use weir::processor::{StoreSpec, TaskId};
use weir::serdes::{I64Serde, OptionSerde, StringSerde, UnitSerde};
use weir::state::{InMemoryKeyValueStore, KeyValueStore, StoreError};
use weir::topology::{Consumed, Grouped, Joined, Materialized, Produced, StreamsBuilder, Topology};
use weir::windows::{TimeWindows, Windowed, WindowedSerde};

fn word_count() -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream::<(), String>("text-lines", Consumed::new())
        .flat_map_values(|line: String| {
            line.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .group_by(|_, word: &String| word.clone(), Grouped::new())
        .count(Materialized::as_("counts-store"))
        .to_stream()
        .to("word-counts", Produced::new());
    builder.build().expect("word count builds")
}

fn s(x: &str) -> String {
    x.to_owned()
}

fn run(cache_max_bytes: u64) -> (Vec<(String, Option<i64>)>, usize, TopologyTestDriver) {
    let config = DriverConfig::new("wc").with_cache_max_bytes(cache_max_bytes);
    let mut driver = TopologyTestDriver::new(word_count(), config).unwrap();
    let lines = TestInputTopic::new("text-lines", UnitSerde, StringSerde);
    let counts = TestOutputTopic::new("word-counts", StringSerde, OptionSerde::new(I64Serde));
    driver.pipe(&lines, (), s("hello world"), 1_000).unwrap();
    driver
        .pipe(&lines, (), s("hello kafka hello hello"), 2_000)
        .unwrap();
    let out = driver.read_key_values(&counts).unwrap();
    let changelog = driver.all_raw("wc-counts-store-changelog").len();
    (out, changelog, driver)
}

#[test]
fn one_record_per_key_per_commit_with_the_cache() {
    let (out, changelog, driver) = run(10 << 20);
    // The second line updates "hello" three times: one result, in key order.
    assert_eq!(
        out,
        vec![
            (s("hello"), Some(1)),
            (s("world"), Some(1)),
            (s("hello"), Some(4)),
            (s("kafka"), Some(1)),
        ]
    );
    assert_eq!(changelog, 4, "one changelog record per key and commit");
    let store: Vec<(String, i64)> = driver.key_value_store_all("counts-store").unwrap();
    assert_eq!(
        store,
        vec![(s("hello"), 4), (s("kafka"), 1), (s("world"), 1)]
    );
}

#[test]
fn every_update_without_the_cache_or_with_a_full_budget() {
    let every = vec![
        (s("hello"), Some(1)),
        (s("world"), Some(1)),
        (s("hello"), Some(2)),
        (s("kafka"), Some(1)),
        (s("hello"), Some(3)),
        (s("hello"), Some(4)),
    ];
    let (out, changelog, _) = run(0);
    assert_eq!(out, every);
    assert_eq!(changelog, 6);
    // A budget smaller than one entry: each update overflows it and goes
    // through at once.
    let (out, changelog, _) = run(1);
    assert_eq!(out, every);
    assert_eq!(changelog, 6);
}

#[test]
fn a_key_updated_several_times_by_one_record_is_emitted_once_with_its_timestamp() {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("events", Consumed::new())
        .flat_map(|k: String, v: String| {
            // One input record, several updates of key k.
            v.split(',')
                .map(|part| (k.clone(), part.to_owned()))
                .collect::<Vec<_>>()
        })
        .group_by_key(Grouped::new())
        .count(Materialized::as_("c"))
        .to_stream()
        .to("out", Produced::new());
    let config = DriverConfig::new("ts").with_cache_max_bytes(1 << 20);
    let mut driver = TopologyTestDriver::new(builder.build().unwrap(), config).unwrap();
    let input = TestInputTopic::new("events", StringSerde, StringSerde);
    let out = TestOutputTopic::new("out", StringSerde, OptionSerde::new(I64Serde));
    driver.pipe(&input, s("a"), s("x,y,z"), 5_000).unwrap();
    driver.pipe(&input, s("b"), s("x"), 7_000).unwrap();
    let records = driver.read_records(&out).unwrap();
    let got: Vec<_> = records
        .iter()
        .map(|r| (r.key.clone(), r.value, r.timestamp))
        .collect();
    assert_eq!(
        got,
        vec![(s("a"), Some(3), 5_000), (s("b"), Some(1), 7_000)]
    );
}

/// Tumbling 10 ms windows counted per key; one input record "a" → "x,y,z"
/// updates window [0, 10) of "a" three times.
type WindowCounts = Vec<(Windowed<String>, Option<i64>)>;

fn window_counts(cache_max_bytes: u64) -> (WindowCounts, usize) {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("events", Consumed::new())
        .flat_map(|k: String, v: String| {
            v.split(',')
                .map(|part| (k.clone(), part.to_owned()))
                .collect::<Vec<_>>()
        })
        .group_by_key(Grouped::new())
        .windowed_by(
            TimeWindows::of_size_with_grace(Duration::from_millis(10), Duration::from_millis(5))
                .unwrap(),
        )
        .count(Materialized::as_("wc"))
        .to_stream()
        .to("out", Produced::new());
    let config = DriverConfig::new("win").with_cache_max_bytes(cache_max_bytes);
    let mut driver = TopologyTestDriver::new(builder.build().unwrap(), config).unwrap();
    let input = TestInputTopic::new("events", StringSerde, StringSerde);
    let out = TestOutputTopic::new(
        "out",
        WindowedSerde::time(StringSerde, 10),
        OptionSerde::new(I64Serde),
    );
    driver.pipe(&input, s("a"), s("x,y,z"), 3).unwrap();
    driver.pipe(&input, s("a"), s("x"), 12).unwrap();
    driver.pipe(&input, s("a"), s("y,z"), 8).unwrap();
    let got = driver.read_key_values(&out).unwrap();
    (got, driver.all_raw("win-wc-changelog").len())
}

#[test]
fn window_updates_collapse_per_window_with_the_cache() {
    let w = |start: i64, n: i64| (Windowed::new(s("a"), start, start + 10), Some(n));
    let (cached, changelog) = window_counts(1 << 20);
    assert_eq!(cached, vec![w(0, 3), w(10, 1), w(0, 5)]);
    assert_eq!(changelog, 3);
    let (every, changelog) = window_counts(0);
    assert_eq!(
        every,
        vec![w(0, 1), w(0, 2), w(0, 3), w(10, 1), w(0, 4), w(0, 5)]
    );
    assert_eq!(changelog, 6);
}

#[test]
fn a_store_another_processor_reads_is_not_cached() {
    let builder = StreamsBuilder::new();
    let counts = builder
        .stream::<String, String>("events", Consumed::new())
        .flat_map(|k: String, v: String| {
            v.split(',')
                .map(|part| (k.clone(), part.to_owned()))
                .collect::<Vec<_>>()
        })
        .group_by_key(Grouped::new())
        .count(Materialized::as_("c"));
    counts.to_stream().to("out", Produced::new());
    // The join reads store "c": it must see every update at once.
    builder
        .stream::<String, String>("probes", Consumed::new())
        .join_table(&counts, |_: &String, n: &i64| *n, Joined::new())
        .to("probed", Produced::new());
    let config = DriverConfig::new("shared").with_cache_max_bytes(1 << 20);
    let mut driver = TopologyTestDriver::new(builder.build().unwrap(), config).unwrap();
    let input = TestInputTopic::new("events", StringSerde, StringSerde);
    let out = TestOutputTopic::new("out", StringSerde, OptionSerde::new(I64Serde));
    driver.pipe(&input, s("a"), s("x,y,z"), 5).unwrap();
    assert_eq!(
        driver.read_key_values(&out).unwrap(),
        vec![(s("a"), Some(1)), (s("a"), Some(2)), (s("a"), Some(3))]
    );
    let probes = TestInputTopic::new("probes", StringSerde, StringSerde);
    let probed = TestOutputTopic::new("probed", StringSerde, I64Serde);
    driver.pipe(&probes, s("a"), s("?"), 6).unwrap();
    assert_eq!(driver.read_key_values(&probed).unwrap(), vec![(s("a"), 3)]);
}

/// Word count over in-memory stores wrapped in Weir's metered store; the
/// driver commits after every line. Returns the output and the stores'
/// point reads (`weir_store_gets_total`).
fn counted_word_count(cache_max_bytes: u64, lines: &[&str]) -> (Vec<(String, Option<i64>)>, u64) {
    let metrics = Arc::new(Metrics::new("wc"));
    let mut provider = {
        let metrics = metrics.clone();
        move |task: TaskId, spec: &StoreSpec<'_>| -> Result<Box<dyn KeyValueStore>, StoreError> {
            Ok(Box::new(MeteredKeyValueStore::new(
                Box::new(InMemoryKeyValueStore::new(spec.name)),
                metrics.clone(),
                &task.to_string(),
            )))
        }
    };
    let config = DriverConfig::new("wc").with_cache_max_bytes(cache_max_bytes);
    let mut driver =
        TopologyTestDriver::with_store_provider(word_count(), config, &mut provider).unwrap();
    let input = TestInputTopic::new("text-lines", UnitSerde, StringSerde);
    let counts = TestOutputTopic::new("word-counts", StringSerde, OptionSerde::new(I64Serde));
    for (i, line) in lines.iter().enumerate() {
        driver
            .pipe(&input, (), s(line), 1_000 * (i as i64 + 1))
            .unwrap();
    }
    let out = driver.read_key_values(&counts).unwrap();
    let gets: f64 = metrics
        .registry()
        .gather()
        .iter()
        .filter(|f| f.name() == "weir_store_gets_total")
        .flat_map(|f| f.get_metric().iter().map(|m| m.get_counter().get_value()))
        .sum();
    (out, gets as u64)
}

#[test]
fn a_cached_key_is_read_from_the_store_once_across_commits() {
    let lines = ["hello world", "hello", "hello world"];
    let expected = vec![
        (s("hello"), Some(1)),
        (s("world"), Some(1)),
        (s("hello"), Some(2)),
        (s("hello"), Some(3)),
        (s("world"), Some(2)),
    ];
    // With the cache the aggregates of "hello" and "world" stay in it,
    // clean, after each commit: two reads in all.
    let (out, gets) = counted_word_count(10 << 20, &lines);
    assert_eq!(out, expected);
    assert_eq!(gets, 2, "one store read per key");
    // Without it every update reads the store.
    let (out, gets) = counted_word_count(0, &lines);
    assert_eq!(out, expected);
    assert_eq!(gets, 5);
    // A budget that fits no entry drops each one at its flush: every first
    // update of a key in a commit interval reads the store again.
    let (out, gets) = counted_word_count(1, &lines);
    assert_eq!(out, expected);
    assert_eq!(gets, 5);
}
