//! Sliding windows over out-of-order input: golden outputs (every distinct
//! window of records within the time difference), late records dropped and
//! counted, and emit-final.

use std::time::Duration;

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::serdes::{I64Serde, OptionSerde, StringSerde};
use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use weir::windows::{EmitStrategy, SlidingWindows, Windowed, WindowedSerde};

type Out = (Windowed<String>, Option<i64>);

/// `[start, start + 10]` (both inclusive) counted `value` records.
fn w(start: i64, value: i64) -> Out {
    (
        Windowed::new("a".to_string(), start, start + 10),
        Some(value),
    )
}

fn driver(emit: EmitStrategy) -> TopologyTestDriver {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("in", Consumed::new())
        .group_by_key(Grouped::new())
        .windowed_by_sliding(
            SlidingWindows::with_time_difference_and_grace(
                Duration::from_millis(10),
                Duration::from_millis(5),
            )
            .unwrap(),
        )
        .emit(emit)
        .count(Materialized::as_("sliding"))
        .to_stream()
        .to("out", Produced::new());
    TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("app")).unwrap()
}

fn pipe(driver: &mut TopologyTestDriver, ts: i64) -> Vec<Out> {
    let input = TestInputTopic::new("in", StringSerde, StringSerde);
    driver
        .pipe(&input, "a".to_string(), "v".to_string(), ts)
        .unwrap();
    let output = TestOutputTopic::new(
        "out",
        WindowedSerde::time(StringSerde, 10),
        OptionSerde::new(I64Serde),
    );
    driver.read_key_values(&output).unwrap()
}

#[test]
fn sliding_count_out_of_order_with_late_records() {
    let mut d = driver(EmitStrategy::OnEveryUpdate);
    // The left window of 100.
    assert_eq!(pipe(&mut d, 100), vec![w(90, 1)]);
    // 105's left window, and the right window of 100 (now holding 105).
    assert_eq!(pipe(&mut d, 105), vec![w(95, 2), w(101, 1)]);
    // Out of order: 103's left window, the two windows containing it, and
    // 103's new right window [104, 114] holding 105.
    assert_eq!(
        pipe(&mut d, 103),
        vec![w(93, 2), w(95, 3), w(101, 2), w(104, 1)]
    );
    // Stream time 120: windows ending before 115 are closed.
    assert_eq!(pipe(&mut d, 120), vec![w(110, 1)]);
    assert_eq!(
        pipe(&mut d, 104),
        vec![],
        "late: its left window [94, 104] closed"
    );
    assert_eq!(d.task_metrics(0).unwrap().late_dropped, 1);
    // Out of order, still open: [106, 116] (105's right window, 116's left
    // window), [110, 120] updated, and 116's right window holding 120.
    assert_eq!(pipe(&mut d, 116), vec![w(106, 1), w(110, 2), w(117, 1)]);
}

#[test]
fn sliding_emit_final_emits_each_window_once() {
    let mut d = driver(EmitStrategy::OnWindowClose);
    for ts in [100, 105, 103] {
        assert_eq!(pipe(&mut d, ts), vec![]);
    }
    // Stream time 120 closes every window ending before 115.
    assert_eq!(
        pipe(&mut d, 120),
        vec![w(90, 1), w(93, 2), w(95, 3), w(101, 2), w(104, 1)]
    );
    assert_eq!(pipe(&mut d, 200), vec![w(110, 1)]);
}
