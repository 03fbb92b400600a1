//! Triggers: emit-final (exactly one result per window and key, also across
//! a task restart restored from the changelogs, stream time included) and early firings (every N
//! updates, every T of wall-clock time) followed by the final result.

use std::collections::HashSet;
use std::time::Duration;

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::serdes::{I64Serde, OptionSerde, Serde, StringSerde};
use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use weir::windows::{EmitStrategy, TimeWindows, Windowed, WindowedSerde};

type Out = (Windowed<String>, Option<i64>);

fn w(key: &str, start: i64, value: i64) -> Out {
    (
        Windowed::new(key.to_string(), start, start + 10),
        Some(value),
    )
}

/// Tumbling 10 ms windows with 5 ms grace, counted, emitted per `emit`.
fn driver(emit: EmitStrategy) -> TopologyTestDriver {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("in", Consumed::new())
        .group_by_key(Grouped::new())
        .windowed_by(
            TimeWindows::of_size_with_grace(Duration::from_millis(10), Duration::from_millis(5))
                .unwrap(),
        )
        .emit(emit)
        .count(Materialized::as_("counts"))
        .to_stream()
        .to("out", Produced::new());
    TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("app")).unwrap()
}

fn output() -> TestOutputTopic<Windowed<String>, Option<i64>> {
    TestOutputTopic::new(
        "out",
        WindowedSerde::time(StringSerde, 10),
        OptionSerde::new(I64Serde),
    )
}

fn pipe(driver: &mut TopologyTestDriver, key: &str, ts: i64) -> Vec<Out> {
    let input = TestInputTopic::new("in", StringSerde, StringSerde);
    driver
        .pipe(&input, key.to_string(), "v".to_string(), ts)
        .unwrap();
    driver.read_key_values(&output()).unwrap()
}

/// Every (key, window) in everything written to "out", asserting none repeats.
fn assert_one_result_per_window(driver: &TopologyTestDriver) -> usize {
    let serde = WindowedSerde::time(StringSerde, 10);
    let mut seen = HashSet::new();
    for r in driver.all_raw("out") {
        let key = serde.deserialize("out", r.key.as_deref().unwrap()).unwrap();
        assert!(seen.insert(key.clone()), "{key:?} was emitted twice");
    }
    seen.len()
}

#[test]
fn emit_final_emits_one_result_per_window_and_survives_a_restart() {
    let mut d = driver(EmitStrategy::OnWindowClose);
    assert_eq!(pipe(&mut d, "a", 1), vec![]);
    assert_eq!(pipe(&mut d, "a", 3), vec![]);
    assert_eq!(pipe(&mut d, "b", 12), vec![]);
    assert_eq!(pipe(&mut d, "a", 8), vec![]);
    // Stream time 20 passes [0,10)'s end + grace (15): its final count.
    assert_eq!(pipe(&mut d, "a", 20), vec![w("a", 0, 3)]);
    assert_eq!(pipe(&mut d, "a", 4), vec![], "late");
    assert_eq!(pipe(&mut d, "b", 14), vec![]);
    assert_eq!(pipe(&mut d, "b", 26), vec![w("b", 10, 2)]);
    assert_eq!(d.task_metrics(0).unwrap().late_dropped, 1);

    // Close the task and build it again from its changelogs: windows
    // [20,30) of a and b stay open, the emitted ones stay emitted.
    d.restart_tasks().unwrap();
    assert_eq!(d.stream_time(0), Some(26), "stream time continues");
    // [0,10) closed before the restart and stays closed.
    assert_eq!(pipe(&mut d, "a", 2), vec![]);
    assert_eq!(
        d.task_metrics(0).unwrap().late_dropped,
        1,
        "a@2 is late for the restarted task too"
    );
    assert_eq!(pipe(&mut d, "a", 21), vec![]);
    assert_eq!(
        pipe(&mut d, "b", 45),
        vec![w("a", 20, 2), w("b", 20, 1)],
        "counts from before and after the restart, emitted once"
    );
    assert_eq!(assert_one_result_per_window(&d), 4);
}

#[test]
fn stream_time_survives_a_restart_so_a_late_record_stays_late() {
    let mut d = driver(EmitStrategy::OnWindowClose);
    assert_eq!(pipe(&mut d, "a", 100), vec![]);
    d.restart_tasks().unwrap();
    assert_eq!(d.stream_time(0), Some(100));
    // [50,60) closed at stream time 65, before the restart, without ever
    // holding a record: only the restored stream time knows it is closed.
    assert_eq!(pipe(&mut d, "a", 50), vec![]);
    assert_eq!(d.task_metrics(0).unwrap().late_dropped, 1, "a@50 is late");
    assert_eq!(
        pipe(&mut d, "a", 120),
        vec![w("a", 100, 1)],
        "only the window that was open before the restart"
    );
    assert_eq!(assert_one_result_per_window(&d), 1);
}

#[test]
fn early_firings_every_n_updates_then_the_final_result() {
    let mut d = driver(EmitStrategy::early(2, None).unwrap());
    assert_eq!(pipe(&mut d, "a", 1), vec![]);
    assert_eq!(pipe(&mut d, "a", 2), vec![w("a", 0, 2)]);
    assert_eq!(pipe(&mut d, "a", 3), vec![]);
    assert_eq!(pipe(&mut d, "b", 4), vec![]);
    assert_eq!(pipe(&mut d, "a", 5), vec![w("a", 0, 4)]);
    assert_eq!(pipe(&mut d, "a", 6), vec![]);
    // Stream time 15 closes [0,10): final results, by key.
    assert_eq!(pipe(&mut d, "c", 15), vec![w("a", 0, 5), w("b", 0, 1)]);
}

#[test]
fn early_firings_on_wall_clock_then_the_final_result() {
    let mut d = driver(EmitStrategy::early(0, Some(Duration::from_secs(1))).unwrap());
    assert_eq!(pipe(&mut d, "a", 1), vec![]);
    assert_eq!(pipe(&mut d, "a", 2), vec![]);
    d.advance_wall_clock_time(Duration::from_secs(1)).unwrap();
    assert_eq!(d.read_key_values(&output()).unwrap(), vec![w("a", 0, 2)]);
    // Nothing changed since: the next tick emits nothing.
    d.advance_wall_clock_time(Duration::from_secs(1)).unwrap();
    assert_eq!(d.read_key_values(&output()).unwrap(), vec![]);
    assert_eq!(pipe(&mut d, "b", 3), vec![]);
    assert_eq!(pipe(&mut d, "a", 12), vec![]);
    d.advance_wall_clock_time(Duration::from_secs(1)).unwrap();
    assert_eq!(
        d.read_key_values(&output()).unwrap(),
        vec![w("b", 0, 1), w("a", 10, 1)],
        "windows updated since the last tick, by window end"
    );
    // Stream time 16 closes [0,10): the finals of a and b.
    assert_eq!(pipe(&mut d, "a", 16), vec![w("a", 0, 2), w("b", 0, 1)]);
}

#[test]
fn early_trigger_without_condition_is_rejected() {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("in", Consumed::new())
        .group_by_key(Grouped::new())
        .windowed_by(
            TimeWindows::of_size_with_grace(Duration::from_millis(10), Duration::ZERO).unwrap(),
        )
        .emit(EmitStrategy::Early {
            every_updates: 0,
            every_wall_clock_ms: 0,
        })
        .count(Materialized::as_("counts"));
    let err = builder.build().unwrap_err();
    assert!(err.to_string().contains("every_updates"), "{err}");
}

#[test]
fn trigger_bookkeeping_and_windows_are_logged_with_window_retention() {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("in", Consumed::new())
        .group_by_key(Grouped::new())
        .windowed_by(
            TimeWindows::of_size_with_grace(Duration::from_millis(10), Duration::from_millis(5))
                .unwrap(),
        )
        .emit(EmitStrategy::OnWindowClose)
        .count(Materialized::as_("counts").with_retention(Duration::from_millis(100)));
    let topology = builder.build().unwrap();
    let mut changelogs = topology.changelog_topics("app");
    changelogs.sort();
    assert_eq!(
        changelogs,
        vec![
            ("counts".to_string(), "app-counts-changelog".to_string()),
            (
                "counts-trigger".to_string(),
                "app-counts-trigger-changelog".to_string()
            ),
        ]
    );
    let description = topology.describe().to_string();
    assert!(description.contains("counts-trigger"), "{description}");
    // Only the window store's changelog gets time-based retention.
    assert_eq!(
        topology.changelog_retention_ms("app"),
        vec![("app-counts-changelog".to_string(), 100)]
    );
}
