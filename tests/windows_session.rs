//! Session windows: sessions grow, stay apart beyond the gap, merge when a
//! record bridges them (with tombstones for the replaced sessions), and drop
//! late records. Golden outputs for emit-on-update and emit-final.

use std::time::Duration;

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::serdes::{I64Serde, OptionSerde, StringSerde};
use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use weir::windows::{EmitStrategy, SessionWindows, Windowed, WindowedSerde};

type Out = (Windowed<String>, Option<i64>);

fn s(key: &str, start: i64, end: i64, value: Option<i64>) -> Out {
    (Windowed::new(key.to_string(), start, end), value)
}

fn driver(emit: EmitStrategy) -> TopologyTestDriver {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("in", Consumed::new())
        .group_by_key(Grouped::new())
        .windowed_by_session(
            SessionWindows::with_inactivity_gap_and_grace(
                Duration::from_millis(10),
                Duration::from_millis(20),
            )
            .unwrap(),
        )
        .emit(emit)
        .count(Materialized::as_("sessions"))
        .to_stream()
        .to("out", Produced::new());
    TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("app")).unwrap()
}

fn pipe(driver: &mut TopologyTestDriver, key: &str, ts: i64) -> Vec<Out> {
    let input = TestInputTopic::new("in", StringSerde, StringSerde);
    driver
        .pipe(&input, key.to_string(), "v".to_string(), ts)
        .unwrap();
    let output = TestOutputTopic::new(
        "out",
        WindowedSerde::session(StringSerde),
        OptionSerde::new(I64Serde),
    );
    driver.read_key_values(&output).unwrap()
}

#[test]
fn sessions_grow_merge_and_drop_late_records() {
    let mut d = driver(EmitStrategy::OnEveryUpdate);
    assert_eq!(pipe(&mut d, "a", 0), vec![s("a", 0, 0, Some(1))]);
    // Within the gap: the session grows; the old session is replaced.
    assert_eq!(
        pipe(&mut d, "a", 5),
        vec![s("a", 0, 0, None), s("a", 0, 5, Some(2))]
    );
    // More than the gap after 5: a separate session.
    assert_eq!(pipe(&mut d, "a", 30), vec![s("a", 30, 30, Some(1))]);
    // Out of order, within the gap before 30: extends that session backwards.
    assert_eq!(
        pipe(&mut d, "a", 22),
        vec![s("a", 30, 30, None), s("a", 22, 30, Some(2))]
    );
    // Bridges [0,5] and [22,30]: one merged session replaces both.
    assert_eq!(
        pipe(&mut d, "a", 14),
        vec![
            s("a", 0, 5, None),
            s("a", 22, 30, None),
            s("a", 0, 30, Some(5))
        ]
    );
    // Inside the session: updated in place, no tombstone.
    assert_eq!(pipe(&mut d, "a", 25), vec![s("a", 0, 30, Some(6))]);
    // Another key moves stream time to 70: sessions ending before
    // 70 - gap - grace = 40 are closed.
    assert_eq!(pipe(&mut d, "b", 70), vec![s("b", 70, 70, Some(1))]);
    assert_eq!(pipe(&mut d, "a", 28), vec![], "late: [0,30] is closed");
    assert_eq!(d.task_metrics(0).unwrap().late_dropped, 1);
    // Beyond the gap of the closed session: a new, separate session.
    assert_eq!(pipe(&mut d, "a", 45), vec![s("a", 45, 45, Some(1))]);
}

#[test]
fn emit_final_sessions_emit_only_merged_closed_sessions() {
    let mut d = driver(EmitStrategy::OnWindowClose);
    for ts in [0, 5, 30, 22, 14, 25] {
        assert_eq!(pipe(&mut d, "a", ts), vec![]);
    }
    // Stream time 70 closes [0,30] (ends before 40): its one final result;
    // the sessions it absorbed were never emitted.
    assert_eq!(pipe(&mut d, "b", 70), vec![s("a", 0, 30, Some(6))]);
    assert_eq!(pipe(&mut d, "a", 28), vec![]);
    assert_eq!(pipe(&mut d, "a", 45), vec![]);
    // Stream time 200 closes everything, in order of session end.
    assert_eq!(
        pipe(&mut d, "b", 200),
        vec![s("a", 45, 45, Some(1)), s("b", 70, 70, Some(1))]
    );
    assert_eq!(d.task_metrics(0).unwrap().late_dropped, 1);
}
