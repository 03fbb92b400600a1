//! The fallible aggregations (`try_reduce`, `try_aggregate`) through the
//! test driver: a failing step is a processing error of its record, and the
//! aggregate it failed on stays as it was, in the store and in the record
//! cache, plain and windowed; a session bridge that fails merges nothing.

use std::time::Duration;

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::handler::ErrorHandling;
use weir::processor::ProcessorError;
use weir::serdes::{I64Serde, OptionSerde, StringSerde};
use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder, Topology};
use weir::windows::{SessionWindows, SlidingWindows, TimeWindows, Windowed, WindowedSerde};

fn s(x: &str) -> String {
    x.to_owned()
}

/// Sums the non-negative values; a negative one fails.
fn add(sum: &i64, value: i64) -> Result<i64, ProcessorError> {
    if value < 0 {
        Err(ProcessorError::user(format!("negative value {value}")))
    } else {
        Ok(sum + value)
    }
}

/// `amounts` (key → comma-separated numbers, one record per number) summed
/// per key with `try_aggregate` into `sums`.
fn sums() -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("amounts", Consumed::with(StringSerde, StringSerde))
        .flat_map_values(|v: String| {
            v.split(',')
                .map(|n| n.parse::<i64>().unwrap())
                .collect::<Vec<_>>()
        })
        .group_by_key(Grouped::new().with_value_serde(I64Serde))
        .try_aggregate(
            || Ok(0),
            |_, value, sum: &i64| add(sum, value),
            Materialized::new().with_value_serde(I64Serde),
        )
        .to_stream()
        .to(
            "sums",
            Produced::new().with_value_serde(OptionSerde::new(I64Serde)),
        );
    builder.build().unwrap()
}

fn driver(topology: Topology, handling: ErrorHandling, cache_max_bytes: u64) -> TopologyTestDriver {
    let config = DriverConfig::new("try")
        .with_processing_handler(handling)
        .with_cache_max_bytes(cache_max_bytes);
    TopologyTestDriver::new(topology, config).unwrap()
}

#[test]
fn a_failing_step_fails_the_task_under_log_and_fail() {
    let mut d = driver(sums(), ErrorHandling::LogAndFail, 0);
    let input = TestInputTopic::new("amounts", StringSerde, StringSerde);
    d.pipe(&input, s("a"), s("1"), 1).unwrap();
    let err = d.pipe(&input, s("a"), s("-4"), 2).unwrap_err();
    assert!(err.to_string().contains("negative value -4"), "{err}");
}

#[test]
fn a_skipped_step_keeps_the_aggregate_in_the_store_and_in_the_cache() {
    for cache_max_bytes in [0, 1 << 20] {
        let mut d = driver(sums(), ErrorHandling::LogAndContinue, cache_max_bytes);
        let input = TestInputTopic::new("amounts", StringSerde, StringSerde);
        let output = TestOutputTopic::new("sums", StringSerde, OptionSerde::new(I64Serde));
        // With the cache on, 1 is held when -1 fails in the same input record.
        d.pipe(&input, s("a"), s("1,-1,2"), 1).unwrap();
        d.pipe(&input, s("a"), s("5"), 2).unwrap();
        d.pipe(&input, s("b"), s("-3"), 3).unwrap();
        d.pipe(&input, s("b"), s("4"), 4).unwrap();
        let out = d.read_key_values(&output).unwrap();
        assert_eq!(
            out.last_key_value(),
            Some((s("b"), Some(4))),
            "cache {cache_max_bytes}: b starts from the initializer after its failed first step"
        );
        let a: Vec<i64> = out
            .iter()
            .filter(|(k, _)| k == "a")
            .map(|(_, v)| v.unwrap())
            .collect();
        assert_eq!(
            a.last(),
            Some(&6),
            "cache {cache_max_bytes}: a = 1 + 5, {a:?}"
        );
        assert!(!a.contains(&0), "{a:?}");
    }
}

trait LastKeyValue {
    fn last_key_value(&self) -> Option<(String, Option<i64>)>;
}

impl LastKeyValue for Vec<(String, Option<i64>)> {
    fn last_key_value(&self) -> Option<(String, Option<i64>)> {
        self.last().cloned()
    }
}

#[test]
fn a_windowed_try_reduce_skips_the_failing_record_in_its_window() {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, i64>("amounts", Consumed::with(StringSerde, I64Serde))
        .group_by_key(Grouped::new())
        .windowed_by(
            TimeWindows::of_size_with_grace(Duration::from_secs(10), Duration::ZERO).unwrap(),
        )
        .try_reduce(add, Materialized::new())
        .to_stream()
        .to("sums", Produced::new());
    let mut d = driver(builder.build().unwrap(), ErrorHandling::LogAndContinue, 0);
    let input = TestInputTopic::new("amounts", StringSerde, I64Serde);
    let output = TestOutputTopic::new(
        "sums",
        WindowedSerde::time(StringSerde, 10_000),
        OptionSerde::new(I64Serde),
    );
    for (value, ts) in [(1, 1_000), (-7, 2_000), (2, 3_000), (10, 12_000)] {
        d.pipe(&input, s("k"), value, ts).unwrap();
    }
    assert_eq!(
        d.read_key_values(&output).unwrap(),
        vec![
            (Windowed::new(s("k"), 0, 10_000), Some(1)),
            (Windowed::new(s("k"), 0, 10_000), Some(3)),
            (Windowed::new(s("k"), 10_000, 20_000), Some(10)),
        ]
    );
}

#[test]
fn a_sliding_try_aggregate_leaves_no_trace_of_the_failing_record() {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, i64>("amounts", Consumed::with(StringSerde, I64Serde))
        .group_by_key(Grouped::new())
        .windowed_by_sliding(
            SlidingWindows::with_time_difference_and_grace(Duration::from_secs(10), Duration::ZERO)
                .unwrap(),
        )
        .try_aggregate(|| Ok(0), |_, v, sum: &i64| add(sum, v), Materialized::new())
        .to_stream()
        .to("sums", Produced::new());
    let mut d = driver(builder.build().unwrap(), ErrorHandling::LogAndContinue, 0);
    let input = TestInputTopic::new("amounts", StringSerde, I64Serde);
    let output = TestOutputTopic::new(
        "sums",
        WindowedSerde::time(StringSerde, 10_000),
        OptionSerde::new(I64Serde),
    );
    d.pipe(&input, s("k"), 1, 1_000).unwrap();
    d.pipe(&input, s("k"), -5, 2_000).unwrap();
    d.pipe(&input, s("k"), 2, 3_000).unwrap();
    let sums: Vec<i64> = d
        .read_key_values(&output)
        .unwrap()
        .into_iter()
        .map(|(_, v)| v.unwrap())
        .collect();
    // Had -5 stayed in the buffer, the windows after it would fail too (and
    // emit nothing) or count it; they sum 1 and 2 only.
    assert_eq!(sums.iter().max(), Some(&3), "{sums:?}");
    assert!(sums.contains(&3), "{sums:?}");
}

/// Sums per key and session (gap 10 s, grace 30 s) with `try_aggregate`;
/// `merger` merges the sessions a record bridges.
fn session_sums(
    merger: fn(&String, &i64, i64) -> Result<i64, ProcessorError>,
) -> Vec<(Windowed<String>, Option<i64>)> {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, i64>("amounts", Consumed::with(StringSerde, I64Serde))
        .group_by_key(Grouped::new())
        .windowed_by_session(
            SessionWindows::with_inactivity_gap_and_grace(
                Duration::from_secs(10),
                Duration::from_secs(30),
            )
            .unwrap(),
        )
        .try_aggregate(
            || Ok(0),
            |_, v, sum: &i64| add(sum, v),
            merger,
            Materialized::new(),
        )
        .to_stream()
        .to("sums", Produced::new());
    let mut d = driver(builder.build().unwrap(), ErrorHandling::LogAndContinue, 0);
    let input = TestInputTopic::new("amounts", StringSerde, I64Serde);
    let output = TestOutputTopic::new(
        "sums",
        WindowedSerde::session(StringSerde),
        OptionSerde::new(I64Serde),
    );
    // Two sessions, a failing record that would bridge them, then one that does.
    for (value, ts) in [(1, 0), (2, 20_000), (-5, 10_000), (3, 10_000)] {
        d.pipe(&input, s("k"), value, ts).unwrap();
    }
    d.read_key_values(&output).unwrap()
}

#[test]
fn a_session_try_aggregate_that_fails_on_a_bridging_record_keeps_both_sessions() {
    let out = session_sums(|_, a, b| Ok(a + b));
    assert_eq!(
        out,
        vec![
            (Windowed::new(s("k"), 0, 0), Some(1)),
            (Windowed::new(s("k"), 20_000, 20_000), Some(2)),
            // -5 failed: nothing was removed; 3 then merges both sessions.
            (Windowed::new(s("k"), 0, 0), None),
            (Windowed::new(s("k"), 20_000, 20_000), None),
            (Windowed::new(s("k"), 0, 20_000), Some(6)),
        ]
    );
}

#[test]
fn a_session_merger_that_fails_leaves_the_sessions_unmerged() {
    let out = session_sums(|_, _, _| Err(ProcessorError::user("cannot merge")));
    assert_eq!(
        out,
        vec![
            (Windowed::new(s("k"), 0, 0), Some(1)),
            (Windowed::new(s("k"), 20_000, 20_000), Some(2)),
        ]
    );
}
