//! Malformed records under each error-handler setting.

use weir::driver::{
    DriverConfig, DriverError, TestInputTopic, TestOutputTopic, TopologyTestDriver,
};
use weir::handler::{self, ErrorHandling};
use weir::processor::{Headers, OutputKind, ProcessorError, TaskError};
use weir::serdes::{I64Serde, StringSerde};
use weir::time::ValueTimestamp;
use weir::topology::{Consumed, Produced, StreamsBuilder, Topology};

fn s(x: &str) -> String {
    x.to_owned()
}

/// `numbers` (String → i64) doubled into `doubled`.
fn doubler() -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, i64>("numbers", Consumed::new())
        .map_values(|v: i64| v * 2)
        .to("doubled", Produced::new());
    builder.build().unwrap()
}

fn driver(
    topology: Topology,
    deser: ErrorHandling,
    processing: ErrorHandling,
) -> TopologyTestDriver {
    let config = DriverConfig::new("errs")
        .with_deserialization_handler(deser)
        .with_processing_handler(processing);
    TopologyTestDriver::new(topology, config).unwrap()
}

/// A good record, a malformed value (3 bytes, not an i64), a good record.
fn pipe_with_malformed(driver: &mut TopologyTestDriver) -> Result<(), DriverError> {
    let input = TestInputTopic::new("numbers", StringSerde, I64Serde);
    driver.pipe(&input, s("a"), 1, 10)?;
    let mut headers = Headers::new();
    headers.add("trace", Some(b"t-1".to_vec()));
    driver.pipe_raw("numbers", Some(b"bad"), Some(b"abc"), 11, &headers)?;
    driver.pipe(&input, s("b"), 2, 12)
}

fn doubled(driver: &mut TopologyTestDriver) -> Vec<(String, i64)> {
    driver
        .read_key_values(&TestOutputTopic::new("doubled", StringSerde, I64Serde))
        .unwrap()
}

#[test]
fn log_and_fail_stops_with_topic_partition_and_offset() {
    let mut d = driver(
        doubler(),
        ErrorHandling::LogAndFail,
        ErrorHandling::LogAndFail,
    );
    let err = pipe_with_malformed(&mut d).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            &err,
            DriverError::Task(TaskError::Deserialization { topic, partition: 0, offset: 1, .. }) if topic == "numbers"
        ),
        "{err:?}"
    );
    assert!(msg.contains("numbers/0@1"), "{msg}");
    assert!(msg.contains("expected 8 bytes, got 3"), "{msg}");
    assert_eq!(doubled(&mut d), vec![(s("a"), 2)]);
}

#[test]
fn log_and_continue_skips_and_counts() {
    let mut d = driver(
        doubler(),
        ErrorHandling::LogAndContinue,
        ErrorHandling::LogAndFail,
    );
    pipe_with_malformed(&mut d).unwrap();
    assert_eq!(doubled(&mut d), vec![(s("a"), 2), (s("b"), 4)]);
    let m = d.task_metrics(0).unwrap();
    assert_eq!(
        (m.processed, m.skipped_deserialization, m.dead_lettered),
        (2, 1, 0)
    );
}

#[test]
fn dead_letter_writes_the_original_record_with_the_reason() {
    let dlq = ErrorHandling::DeadLetter {
        topic: s("numbers-dlq"),
    };
    let mut d = driver(doubler(), dlq, ErrorHandling::LogAndFail);
    pipe_with_malformed(&mut d).unwrap();
    assert_eq!(doubled(&mut d), vec![(s("a"), 2), (s("b"), 4)]);
    let letters = d.read_raw("numbers-dlq");
    assert_eq!(letters.len(), 1);
    let l = &letters[0];
    assert_eq!(l.kind, OutputKind::DeadLetter);
    assert_eq!(
        (l.key.as_deref(), l.value.as_deref(), l.timestamp),
        (Some(&b"bad"[..]), Some(&b"abc"[..]), 11)
    );
    let h = &l.headers;
    assert_eq!(h.last_str("trace"), Some("t-1"), "input headers are kept");
    assert_eq!(
        h.last_str(handler::HEADER_EXCEPTION),
        Some("deserialization")
    );
    assert_eq!(h.last_str(handler::HEADER_TOPIC), Some("numbers"));
    assert_eq!(h.last_str(handler::HEADER_PARTITION), Some("0"));
    assert_eq!(h.last_str(handler::HEADER_OFFSET), Some("1"));
    assert!(
        h.last_str(handler::HEADER_MESSAGE)
            .unwrap()
            .contains("expected 8 bytes, got 3")
    );
    let m = d.task_metrics(0).unwrap();
    assert_eq!((m.skipped_deserialization, m.dead_lettered), (1, 1));
}

/// Fails on negative values inside a processor.
fn rejecting_negatives() -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, i64>("numbers", Consumed::new())
        .named("checker")
        .process::<String, i64, _>(
            || {
                weir_processor(|v| {
                    if v < 0 {
                        Err(ProcessorError::user(format!("negative amount {v}")))
                    } else {
                        Ok(v)
                    }
                })
            },
            &[],
        )
        .to("doubled", Produced::new());
    builder.build().unwrap()
}

struct Check<F>(F);
impl<F> weir::processor::Processor<String, i64, String, i64> for Check<F>
where
    F: Fn(i64) -> Result<i64, ProcessorError> + Send + 'static,
{
    fn process(
        &mut self,
        ctx: &weir::processor::ProcessorContext<'_, String, i64>,
        r: weir::processor::Record<String, i64>,
    ) -> Result<(), ProcessorError> {
        let v = (self.0)(r.value)?;
        ctx.forward(r.with_value(v))
    }
}
fn weir_processor<F: Fn(i64) -> Result<i64, ProcessorError> + Send + 'static>(f: F) -> Check<F> {
    Check(f)
}

fn pipe_with_negative(d: &mut TopologyTestDriver) -> Result<(), DriverError> {
    let input = TestInputTopic::new("numbers", StringSerde, I64Serde);
    d.pipe(&input, s("a"), 1, 0)?;
    d.pipe(&input, s("n"), -7, 0)?;
    d.pipe(&input, s("b"), 2, 0)
}

#[test]
fn processing_errors_follow_the_processing_handler() {
    let mut d = driver(
        rejecting_negatives(),
        ErrorHandling::LogAndFail,
        ErrorHandling::LogAndFail,
    );
    let err = pipe_with_negative(&mut d).unwrap_err();
    assert!(
        matches!(&err, DriverError::Task(TaskError::Processing { node, offset: 1, .. }) if node == "checker"),
        "{err:?}"
    );
    assert!(err.to_string().contains("negative amount -7"), "{err}");

    let mut d = driver(
        rejecting_negatives(),
        ErrorHandling::LogAndFail,
        ErrorHandling::LogAndContinue,
    );
    pipe_with_negative(&mut d).unwrap();
    assert_eq!(doubled(&mut d), vec![(s("a"), 1), (s("b"), 2)]);
    assert_eq!(d.task_metrics(0).unwrap().skipped_processing, 1);

    let dlq = ErrorHandling::DeadLetter { topic: s("dlq") };
    let mut d = driver(rejecting_negatives(), ErrorHandling::LogAndFail, dlq);
    pipe_with_negative(&mut d).unwrap();
    let letters = d.read_raw("dlq");
    assert_eq!(letters.len(), 1);
    assert_eq!(
        letters[0].value.as_deref(),
        Some(&(-7i64).to_be_bytes()[..])
    );
    assert_eq!(
        letters[0].headers.last_str(handler::HEADER_EXCEPTION),
        Some("processing")
    );
    assert!(
        letters[0]
            .headers
            .last_str(handler::HEADER_MESSAGE)
            .unwrap()
            .contains("checker")
    );
}

#[test]
fn negative_timestamps_go_to_the_deserialization_handler() {
    // Event time read from the value: a negative value is an invalid timestamp.
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, i64>(
            "numbers",
            Consumed::new().with_timestamp_extractor(ValueTimestamp::new(|v: &i64| *v)),
        )
        .to("doubled", Produced::new());
    let topology = builder.build().unwrap();
    let mut d = driver(
        topology,
        ErrorHandling::LogAndFail,
        ErrorHandling::LogAndFail,
    );
    let input = TestInputTopic::new("numbers", StringSerde, I64Serde);
    d.pipe(&input, s("a"), 100, 0).unwrap();
    let out = d
        .read_records(&TestOutputTopic::new("doubled", StringSerde, I64Serde))
        .unwrap();
    assert_eq!(out[0].timestamp, 100, "the extractor set the event time");
    let err = d.pipe(&input, s("b"), -3, 0).unwrap_err();
    assert!(
        matches!(
            err,
            DriverError::Task(TaskError::InvalidTimestamp {
                timestamp: -3,
                offset: 1,
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(
        d.stream_time(0),
        Some(100),
        "an invalid record does not move stream time"
    );
}
