//! Tumbling and hopping windows over out-of-order input: golden outputs,
//! late records dropped, counted and written to a late topic with headers saying why, store
//! expiry, and configuration errors.

use std::time::Duration;

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::serdes::{I64Serde, OptionSerde, StringSerde};
use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder, TopologyError};
use weir::windows::{
    LATE_HEADER_MESSAGE, LATE_HEADER_OFFSET, LATE_HEADER_PARTITION, LATE_HEADER_REASON,
    LATE_HEADER_STORE, LATE_HEADER_STREAM_TIME, LATE_HEADER_TOPIC, LATE_REASON_WINDOW_CLOSED,
    TimeWindows, WindowError, Windowed, WindowedSerde,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn input() -> TestInputTopic<String, String> {
    TestInputTopic::new("in", StringSerde, StringSerde)
}

fn output(size_ms: i64) -> TestOutputTopic<Windowed<String>, Option<i64>> {
    TestOutputTopic::new(
        "out",
        WindowedSerde::time(StringSerde, size_ms),
        OptionSerde::new(I64Serde),
    )
}

fn w(key: &str, start: i64, end: i64, value: i64) -> (Windowed<String>, Option<i64>) {
    (Windowed::new(key.to_string(), start, end), Some(value))
}

fn pipe_all(driver: &mut TopologyTestDriver, records: &[(&str, i64)]) {
    for (key, ts) in records {
        driver
            .pipe(&input(), key.to_string(), format!("{key}@{ts}"), *ts)
            .unwrap();
    }
}

fn count_topology(windows: TimeWindows, late_topic: Option<&str>) -> TopologyTestDriver {
    let builder = StreamsBuilder::new();
    let mut windowed = builder
        .stream::<String, String>("in", Consumed::new())
        .group_by_key(Grouped::new())
        .windowed_by(windows);
    if let Some(topic) = late_topic {
        windowed = windowed.late_records_to(topic);
    }
    windowed
        .count(Materialized::as_("counts"))
        .to_stream()
        .to("out", Produced::new());
    TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("app")).unwrap()
}

#[test]
fn tumbling_count_out_of_order_with_late_records() {
    let windows = TimeWindows::of_size_with_grace(ms(10), ms(5)).unwrap();
    let mut driver = count_topology(windows, Some("late"));
    pipe_all(
        &mut driver,
        &[
            ("a", 1),
            ("a", 3),
            ("b", 12), // stream time 12: [0,10) still open (closes at 15)
            ("a", 8),  // out of order, accepted
            ("a", 20), // stream time 20: [0,10) closed
            ("a", 4),  // late: dropped
            ("b", 14), // out of order, [10,20) open until 25
            ("b", 9),  // late
        ],
    );
    assert_eq!(
        driver.read_key_values(&output(10)).unwrap(),
        vec![
            w("a", 0, 10, 1),
            w("a", 0, 10, 2),
            w("b", 10, 20, 1),
            w("a", 0, 10, 3),
            w("a", 20, 30, 1),
            w("b", 10, 20, 2),
        ]
    );
    assert_eq!(driver.task_metrics(0).unwrap().late_dropped, 2);
    // Each late record says why, when, and where it came from.
    let raw = driver.all_raw("late");
    let header = |i: usize, key: &str| raw[i].headers.last_str(key).map(str::to_owned);
    assert_eq!(raw.len(), 2);
    assert_eq!(
        header(0, LATE_HEADER_REASON).as_deref(),
        Some(LATE_REASON_WINDOW_CLOSED)
    );
    assert_eq!(header(0, LATE_HEADER_STREAM_TIME).as_deref(), Some("20"));
    assert_eq!(header(0, LATE_HEADER_STORE).as_deref(), Some("counts"));
    assert_eq!(header(0, LATE_HEADER_TOPIC).as_deref(), Some("in"));
    assert_eq!(header(0, LATE_HEADER_PARTITION).as_deref(), Some("0"));
    assert_eq!(header(0, LATE_HEADER_OFFSET).as_deref(), Some("5"));
    assert_eq!(
        header(1, LATE_HEADER_MESSAGE).as_deref(),
        Some(
            "record at 9 ms dropped by 'counts': its windows closed \
             (they end at or before 15 ms at stream time 20 ms)"
        )
    );
    assert_eq!(raw[1].timestamp, 9, "a late record keeps its event time");
    let late = TestOutputTopic::new("late", StringSerde, StringSerde);
    assert_eq!(
        driver.read_key_values(&late).unwrap(),
        vec![
            ("a".to_string(), "a@4".to_string()),
            ("b".to_string(), "b@9".to_string())
        ]
    );
}

#[test]
fn hopping_count_updates_every_window_of_a_record() {
    let windows = TimeWindows::of_size_with_grace(ms(10), ms(0))
        .unwrap()
        .advance_by(ms(5))
        .unwrap();
    let mut driver = count_topology(windows, None);
    pipe_all(
        &mut driver,
        &[
            ("a", 7),  // windows [0,10) and [5,15)
            ("a", 3),  // [0,10) only ([-5,5) does not exist)
            ("a", 12), // stream time 12: [0,10) closed; [5,15), [10,20)
            ("a", 6),  // [0,10) closed, [5,15) open: counted there, not late
            ("a", 4),  // only [0,10): late
        ],
    );
    assert_eq!(
        driver.read_key_values(&output(10)).unwrap(),
        vec![
            w("a", 0, 10, 1),
            w("a", 5, 15, 1),
            w("a", 0, 10, 2),
            w("a", 5, 15, 2),
            w("a", 10, 20, 1),
            w("a", 5, 15, 3),
        ]
    );
    assert_eq!(driver.task_metrics(0).unwrap().late_dropped, 1);
}

#[test]
fn reduce_and_aggregate_over_tumbling_windows() {
    let builder = StreamsBuilder::new();
    let grouped = builder
        .stream::<String, String>("in", Consumed::new())
        .group_by_key(Grouped::new());
    let windows = TimeWindows::of_size_with_grace(ms(10), ms(0)).unwrap();
    grouped
        .windowed_by(windows)
        .reduce(|a, b| format!("{a}+{b}"), Materialized::as_("joined"))
        .to_stream()
        .to("joined", Produced::new());
    grouped
        .windowed_by(windows)
        .aggregate(
            || 0i64,
            |_, v: String, total| total + v.len() as i64,
            Materialized::as_("lengths"),
        )
        .to_stream()
        .to("lengths", Produced::new());
    let mut driver =
        TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("app")).unwrap();
    for (v, ts) in [("x", 1), ("yy", 2), ("zzz", 11)] {
        driver
            .pipe(&input(), "k".to_string(), v.to_string(), ts)
            .unwrap();
    }
    let joined = TestOutputTopic::new(
        "joined",
        WindowedSerde::time(StringSerde, 10),
        OptionSerde::new(StringSerde),
    );
    let key = |s| Windowed::new("k".to_string(), s, s + 10);
    assert_eq!(
        driver.read_key_values(&joined).unwrap(),
        vec![
            (key(0), Some("x".to_string())),
            (key(0), Some("x+yy".to_string())),
            (key(10), Some("zzz".to_string())),
        ]
    );
    let lengths = TestOutputTopic::new(
        "lengths",
        WindowedSerde::time(StringSerde, 10),
        OptionSerde::new(I64Serde),
    );
    assert_eq!(
        driver.read_key_values(&lengths).unwrap(),
        vec![(key(0), Some(1)), (key(0), Some(3)), (key(10), Some(3))]
    );
}

#[test]
fn window_store_expires_after_size_plus_grace() {
    let windows = TimeWindows::of_size_with_grace(ms(10), ms(5)).unwrap();
    let mut driver = count_topology(windows, None);
    pipe_all(&mut driver, &[("a", 1)]);
    let fetch = |d: &TopologyTestDriver| {
        d.window_store_fetch::<String, i64>("counts", &"a".to_string(), 0)
            .unwrap()
    };
    assert_eq!(fetch(&driver), Some(1));
    // Retention 15 ms in segments of 7 ms: at stream time 100 everything
    // that started before 85 is gone.
    pipe_all(&mut driver, &[("b", 100)]);
    assert_eq!(fetch(&driver), None);
}

#[test]
fn retention_shorter_than_size_plus_grace_is_rejected() {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("in", Consumed::new())
        .group_by_key(Grouped::new())
        .windowed_by(TimeWindows::of_size_with_grace(ms(10), ms(5)).unwrap())
        .count(Materialized::as_("counts").with_retention(ms(12)));
    let err = builder.build().unwrap_err();
    let TopologyError::Window { store, source } = &err else {
        panic!("expected a window error, got {err}");
    };
    assert_eq!(store, "counts");
    assert_eq!(
        *source,
        WindowError::RetentionTooShort {
            retention_ms: 12,
            needed_ms: 15
        }
    );
    assert!(err.to_string().contains("with_retention"), "{err}");
}

#[test]
fn invalid_window_definitions_are_rejected() {
    assert!(matches!(
        TimeWindows::of_size_with_grace(ms(0), ms(0)),
        Err(WindowError::InvalidDuration {
            what: "window size",
            ..
        })
    ));
    let tumbling = TimeWindows::of_size_with_grace(ms(10), ms(0)).unwrap();
    assert!(matches!(
        tumbling.advance_by(ms(11)),
        Err(WindowError::InvalidDuration {
            what: "advance",
            ..
        })
    ));
}

#[test]
fn late_records_keep_the_input_bytes() {
    use weir::processor::Headers;
    use weir::serdes::JsonSerde;
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, serde_json::Value>(
            "in",
            Consumed::with(StringSerde, JsonSerde::<serde_json::Value>::new()),
        )
        .group_by_key(Grouped::with(
            StringSerde,
            JsonSerde::<serde_json::Value>::new(),
        ))
        .windowed_by(TimeWindows::of_size_with_grace(ms(10), ms(0)).unwrap())
        .late_records_to("late")
        .count(Materialized::as_("counts"))
        .to_stream()
        .to("out", Produced::new());
    let mut driver =
        TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("app")).unwrap();
    let headers = Headers::new();
    // Field order and spacing that serializing the parsed value would change.
    let value = br#"{ "zeta": 1,  "alpha": [1, 2] }"#;
    driver
        .pipe_raw("in", Some(b"k"), Some(br#"{"at": 20}"#), 20, &headers)
        .unwrap();
    driver
        .pipe_raw("in", Some(b"k"), Some(value), 5, &headers)
        .unwrap();
    let late = driver.all_raw("late");
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].key.as_deref(), Some(&b"k"[..]));
    assert_eq!(
        late[0].value.as_deref(),
        Some(&value[..]),
        "the late topic gets the input's bytes, not a re-serialized value"
    );
}
