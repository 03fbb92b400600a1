//! The Processor API through the test driver: stores, wall-clock and
//! stream-time punctuation, record metadata.

use std::time::Duration;

use weir::driver::{
    DriverConfig, DriverError, TestInputTopic, TestOutputTopic, TopologyTestDriver,
};
use weir::processor::{
    OutputKind, Processor, ProcessorContext, ProcessorError, PunctuationType, Record, StoreKind,
    TaskError,
};
use weir::serdes::{I64Serde, OptionSerde, StringSerde};
use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};

fn s(x: &str) -> String {
    x.to_owned()
}

/// Sums values per key in a store; every 10 s of wall-clock time emits all
/// sums and clears the store.
struct SumAndFlush;

impl Processor<String, i64, String, i64> for SumAndFlush {
    fn init(&mut self, ctx: &ProcessorContext<'_, String, i64>) -> Result<(), ProcessorError> {
        ctx.schedule(
            Duration::from_secs(10),
            PunctuationType::WallClockTime,
            |ctx, now| {
                let store = ctx.key_value_store::<String, i64>("sums")?;
                for (key, sum) in store.all()? {
                    ctx.forward(Record::new(key.clone(), sum, now))?;
                    store.delete(&key)?;
                }
                Ok(())
            },
        );
        Ok(())
    }

    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, String, i64>,
        r: Record<String, i64>,
    ) -> Result<(), ProcessorError> {
        let store = ctx.key_value_store::<String, i64>("sums")?;
        let sum = store.get(&r.key)?.unwrap_or(0) + r.value;
        store.put(&r.key, &sum)
    }
}

fn sum_and_flush_driver() -> TopologyTestDriver {
    let builder = StreamsBuilder::new();
    builder.add_key_value_store::<String, i64>(Materialized::as_("sums"));
    builder
        .stream::<String, i64>("amounts", Consumed::new())
        .process(|| SumAndFlush, &["sums"])
        .to("flushed", Produced::<String, i64>::new());
    let config = DriverConfig::new("flush").with_initial_wall_clock_ms(1_000_000);
    TopologyTestDriver::new(builder.build().unwrap(), config).unwrap()
}

#[test]
fn wall_clock_punctuator_emits_and_clears_the_store() {
    let mut driver = sum_and_flush_driver();
    let input = TestInputTopic::new("amounts", StringSerde, I64Serde);
    let output = TestOutputTopic::new("flushed", StringSerde, I64Serde);
    driver.pipe(&input, s("b"), 2, 10).unwrap();
    driver.pipe(&input, s("a"), 1, 20).unwrap();
    driver.pipe(&input, s("a"), 3, 30).unwrap();
    assert!(driver.read_key_values(&output).unwrap().is_empty());
    assert_eq!(
        driver
            .key_value_store_get::<String, i64>("sums", &s("a"))
            .unwrap(),
        Some(4)
    );

    driver
        .advance_wall_clock_time(Duration::from_secs(9))
        .unwrap();
    assert!(
        driver.read_key_values(&output).unwrap().is_empty(),
        "not due before 10 s"
    );

    driver
        .advance_wall_clock_time(Duration::from_secs(1))
        .unwrap();
    let flushed = driver.read_records(&output).unwrap();
    let pairs: Vec<_> = flushed.iter().map(|r| (r.key.clone(), r.value)).collect();
    assert_eq!(pairs, vec![(s("a"), 4), (s("b"), 2)]);
    assert!(
        flushed.iter().all(|r| r.timestamp == 1_010_000),
        "punctuation time is the wall clock"
    );
    assert!(
        driver
            .key_value_store_all::<String, i64>("sums")
            .unwrap()
            .is_empty()
    );

    // Deletes are logged as tombstones, in the order they happened.
    let changelog = driver.all_raw("flush-sums-changelog");
    let tail: Vec<_> = changelog[changelog.len() - 2..]
        .iter()
        .map(|r| (r.key.clone().unwrap(), r.value.clone()))
        .collect();
    assert_eq!(tail, vec![(b"a".to_vec(), None), (b"b".to_vec(), None)]);
    assert!(changelog.iter().all(|r| r.kind == OutputKind::Changelog));

    driver
        .advance_wall_clock_time(Duration::from_secs(10))
        .unwrap();
    assert!(
        driver.read_key_values(&output).unwrap().is_empty(),
        "nothing left to flush"
    );
    assert_eq!(driver.task_metrics(0).unwrap().punctuations, 2);
}

/// Emits `("tick", stream time)` from a 10 ms stream-time punctuator and
/// tags each record with its input offset.
struct Ticker;

impl Processor<String, i64, String, i64> for Ticker {
    fn init(&mut self, ctx: &ProcessorContext<'_, String, i64>) -> Result<(), ProcessorError> {
        ctx.schedule(
            Duration::from_millis(10),
            PunctuationType::StreamTime,
            |ctx, now| {
                assert!(
                    ctx.record_metadata().is_none(),
                    "no input record during punctuation"
                );
                ctx.forward(Record::new(s("tick"), now, now))
            },
        );
        Ok(())
    }

    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, String, i64>,
        r: Record<String, i64>,
    ) -> Result<(), ProcessorError> {
        let meta = ctx.record_metadata().expect("processing a record");
        assert_eq!(meta.topic, "events");
        assert_eq!(ctx.timestamp(), r.timestamp);
        ctx.forward(Record::new(s("offset"), meta.offset, r.timestamp))
    }
}

#[test]
fn stream_time_punctuator_fires_only_when_record_time_advances() {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, i64>("events", Consumed::new())
        .process(|| Ticker, &[])
        .filter(|k, _| k == "tick")
        .to("ticks", Produced::<String, i64>::new());
    let mut driver =
        TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("tick")).unwrap();
    let input = TestInputTopic::new("events", StringSerde, I64Serde);
    let ticks = TestOutputTopic::new("ticks", StringSerde, I64Serde);
    let read = |d: &mut TopologyTestDriver| -> Vec<i64> {
        d.read_key_values(&ticks)
            .unwrap()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    };

    driver
        .advance_wall_clock_time(Duration::from_secs(3600))
        .unwrap();
    assert!(
        read(&mut driver).is_empty(),
        "wall-clock time never fires a stream-time punctuator"
    );

    driver.pipe(&input, s("k"), 0, 5).unwrap();
    assert_eq!(
        read(&mut driver),
        vec![5],
        "aligned to 0: the first record fires it"
    );
    driver.pipe(&input, s("k"), 0, 8).unwrap();
    assert!(read(&mut driver).is_empty(), "next due at 10");
    driver
        .advance_wall_clock_time(Duration::from_secs(3600))
        .unwrap();
    assert!(read(&mut driver).is_empty());
    driver.pipe(&input, s("k"), 0, 12).unwrap();
    assert_eq!(read(&mut driver), vec![12]);
    driver.pipe(&input, s("k"), 0, 47).unwrap();
    assert_eq!(read(&mut driver), vec![47], "missed intervals fire once");
    driver.pipe(&input, s("k"), 0, 20).unwrap();
    assert!(
        read(&mut driver).is_empty(),
        "an out-of-order record does not move stream time"
    );
    assert_eq!(driver.stream_time(0), Some(47));
    driver.pipe(&input, s("k"), 0, 50).unwrap();
    assert_eq!(read(&mut driver), vec![50]);
}

#[test]
fn forward_to_a_named_child() {
    struct Router;
    impl Processor<String, i64, String, i64> for Router {
        fn process(
            &mut self,
            ctx: &ProcessorContext<'_, String, i64>,
            r: Record<String, i64>,
        ) -> Result<(), ProcessorError> {
            let child = if r.value % 2 == 0 {
                "to-even"
            } else {
                "to-odd"
            };
            ctx.forward_to(child, r)
        }
    }
    let builder = StreamsBuilder::new();
    let routed = builder
        .stream::<String, i64>("n", Consumed::new())
        .process::<String, i64, _>(|| Router, &[]);
    routed.to("even", Produced::new().named("to-even"));
    routed.to("odd", Produced::new().named("to-odd"));
    let mut driver =
        TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("r")).unwrap();
    let input = TestInputTopic::new("n", StringSerde, I64Serde);
    for v in 1..=5 {
        driver.pipe(&input, s("k"), v, 0).unwrap();
    }
    assert_eq!(driver.all_raw("even").len(), 2);
    assert_eq!(driver.all_raw("odd").len(), 3);
}

#[test]
fn forwarding_from_init_is_refused() {
    struct Eager;
    impl Processor<String, i64, String, i64> for Eager {
        fn init(&mut self, ctx: &ProcessorContext<'_, String, i64>) -> Result<(), ProcessorError> {
            ctx.forward(Record::new(s("too-early"), 0, 0))
        }
        fn process(
            &mut self,
            _: &ProcessorContext<'_, String, i64>,
            _: Record<String, i64>,
        ) -> Result<(), ProcessorError> {
            Ok(())
        }
    }
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, i64>("n", Consumed::new())
        .named("eager")
        .process::<String, i64, _>(|| Eager, &[])
        .to("out", Produced::new());
    let err =
        TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("e")).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("initializing processor 'eager' failed"),
        "{msg}"
    );
    assert!(msg.contains("forwarded a record from init()"), "{msg}");
}

/// Opens the key-value store "sums" as a window store or with the wrong
/// value type, as chosen.
struct WrongAccess {
    as_window: bool,
}

impl Processor<String, i64> for WrongAccess {
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_>,
        _r: Record<String, i64>,
    ) -> Result<(), ProcessorError> {
        if self.as_window {
            ctx.window_store::<String, i64>("sums")?;
        } else {
            ctx.key_value_store::<String, String>("sums")?;
        }
        Ok(())
    }
}

fn wrong_access_error(as_window: bool) -> ProcessorError {
    let builder = StreamsBuilder::new();
    builder.add_key_value_store::<String, i64>(Materialized::as_("sums"));
    builder
        .stream::<String, i64>("amounts", Consumed::new())
        .process::<(), (), _>(move || WrongAccess { as_window }, &["sums"]);
    let mut driver =
        TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("wrong")).unwrap();
    let input = TestInputTopic::new("amounts", StringSerde, I64Serde);
    match driver.pipe(&input, s("a"), 1, 10) {
        Err(DriverError::Task(TaskError::Processing { source, .. })) => *source,
        other => panic!("expected a processing error, got {other:?}"),
    }
}

#[test]
fn a_store_opened_as_another_kind_names_both_kinds() {
    match wrong_access_error(true) {
        ProcessorError::StoreKind {
            store,
            actual,
            asked,
        } => {
            assert_eq!(store, "sums");
            assert_eq!(actual, StoreKind::KeyValue);
            assert_eq!(asked, StoreKind::Window);
        }
        other => panic!("expected StoreKind, got {other}"),
    }
}

#[test]
fn a_store_opened_with_other_types_names_both_types() {
    match wrong_access_error(false) {
        ProcessorError::StoreType {
            store,
            actual_value,
            asked_value,
            ..
        } => {
            assert_eq!(store, "sums");
            assert_eq!(actual_value, "i64");
            assert_eq!(asked_value, "String");
        }
        other => panic!("expected StoreType, got {other}"),
    }
}

/// Forwards each value's length under the same key.
struct Lengths;

impl Processor<String, String, String, i64> for Lengths {
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, String, i64>,
        record: Record<String, String>,
    ) -> Result<(), ProcessorError> {
        let len = record.value.len() as i64;
        ctx.forward(record.with_value(len))
    }
}

#[test]
fn process_values_keeps_the_key_so_a_later_aggregation_needs_no_repartition() {
    let build = |values_only: bool| {
        let builder = StreamsBuilder::new();
        let lines =
            builder.stream::<String, String>("lines", Consumed::with(StringSerde, StringSerde));
        let lengths = if values_only {
            lines.process_values(|| Lengths, &[])
        } else {
            lines.process(|| Lengths, &[])
        };
        lengths
            .group_by_key(Grouped::new().with_value_serde(I64Serde))
            .count(Materialized::new())
            .to_stream()
            .to(
                "counts",
                Produced::new().with_value_serde(OptionSerde::new(I64Serde)),
            );
        builder.build()
    };
    // `process` may change keys: the count repartitions first, in a
    // second sub-topology.
    assert_eq!(build(false).unwrap().subtopology_count(), 2);
    let topology = build(true).unwrap();
    assert_eq!(topology.subtopology_count(), 1);

    let mut driver = TopologyTestDriver::new(topology, DriverConfig::new("lengths")).unwrap();
    let input = TestInputTopic::new("lines", StringSerde, StringSerde);
    let output = TestOutputTopic::new("counts", StringSerde, OptionSerde::new(I64Serde));
    driver.pipe(&input, s("a"), s("xy"), 1).unwrap();
    driver.pipe(&input, s("a"), s("xyz"), 2).unwrap();
    assert_eq!(
        driver.read_key_values(&output).unwrap(),
        vec![(s("a"), Some(1)), (s("a"), Some(2))]
    );
}
