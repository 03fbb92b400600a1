//! Windowed stream–stream joins (inner, left, outer) in the test driver:
//! golden outputs over out-of-order and late input, unmatched results only
//! after the window closed, asymmetric windows, and the buffered state
//! surviving a task restart (restored from the changelogs).

use std::time::Duration;

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::serdes::StringSerde;
use weir::topology::{JoinWindows, Joined, Produced, StreamsBuilder};

fn s(x: &str) -> String {
    x.to_owned()
}

fn show(v: Option<&String>) -> &str {
    v.map_or("-", String::as_str)
}

#[derive(Clone, Copy)]
enum Kind {
    Inner,
    Left,
    Outer,
}

/// `left ⋈ right` within ±10 ms, 5 ms grace, written to `out`.
fn driver(kind: Kind, windows: JoinWindows) -> TopologyTestDriver {
    let builder = StreamsBuilder::new();
    let left = builder.stream::<String, String>("left", Default::default());
    let right = builder.stream::<String, String>("right", Default::default());
    let joined = Joined::as_("j");
    let out = match kind {
        Kind::Inner => left.join_stream(
            &right,
            |l: &String, r: &String| format!("{l}+{r}"),
            windows,
            joined,
        ),
        Kind::Left => left.left_join_stream(
            &right,
            |l: &String, r: Option<&String>| format!("{l}+{}", show(r)),
            windows,
            joined,
        ),
        Kind::Outer => left.outer_join_stream(
            &right,
            |l: Option<&String>, r: Option<&String>| format!("{}+{}", show(l), show(r)),
            windows,
            joined,
        ),
    };
    out.to("out", Produced::new());
    let topology = builder.build().unwrap();
    assert_eq!(topology.subtopology_count(), 1);
    TopologyTestDriver::new(topology, DriverConfig::new("app")).unwrap()
}

fn ten_and_five() -> JoinWindows {
    JoinWindows::of_time_difference_and_grace(Duration::from_millis(10), Duration::from_millis(5))
}

fn pipe(d: &mut TopologyTestDriver, side: &str, key: &str, value: &str, ts: i64) {
    let topic = TestInputTopic::new(side, StringSerde, StringSerde);
    d.pipe(&topic, s(key), s(value), ts).unwrap();
}

fn read(d: &mut TopologyTestDriver) -> Vec<(String, String, i64)> {
    let out = TestOutputTopic::new("out", StringSerde, StringSerde);
    d.read_records(&out)
        .unwrap()
        .into_iter()
        .map(|r| (r.key, r.value, r.timestamp))
        .collect()
}

fn row(k: &str, v: &str, ts: i64) -> (String, String, i64) {
    (s(k), s(v), ts)
}

/// The shared input: in order, out of order, late, and unmatched records.
/// Returns the output after each step that can emit, checked by the callers.
fn script(d: &mut TopologyTestDriver) -> Vec<Vec<(String, String, i64)>> {
    let mut steps = Vec::new();
    pipe(d, "left", "a", "L1", 100);
    steps.push(read(d)); // 0: L1 waits (its window is open until 115)
    pipe(d, "right", "a", "R1", 105);
    steps.push(read(d)); // 1: L1+R1
    pipe(d, "right", "a", "R2", 120); // too far from L1
    pipe(d, "left", "a", "L2", 95); // late: 95 + 10 + 5 < 120
    pipe(d, "left", "a", "L3", 112); // out of order, in time: R1 and R2
    steps.push(read(d)); // 2
    // (task metrics start again at 0 after a restart, so check them here)
    assert_eq!(d.task_metrics(0).unwrap().late_dropped, 1, "L2 was late");
    pipe(d, "left", "b", "L4", 121); // no partner
    pipe(d, "right", "d", "R3", 122); // no partner
    steps.push(read(d)); // 3: nothing closed yet (L4 closes after 136)
    d.restart_tasks().unwrap(); // the buffered records come back from the changelogs
    pipe(d, "left", "c", "L5", 140); // stream time 140 closes L4 and R3
    steps.push(read(d)); // 4
    steps
}

#[test]
fn inner_join_golden_with_out_of_order_and_late_records() {
    let mut d = driver(Kind::Inner, ten_and_five());
    let steps = script(&mut d);
    assert_eq!(steps[0], vec![]);
    assert_eq!(steps[1], vec![row("a", "L1+R1", 105)]);
    assert_eq!(
        steps[2],
        vec![row("a", "L3+R1", 112), row("a", "L3+R2", 120)]
    );
    assert_eq!(steps[3], vec![]);
    assert_eq!(steps[4], vec![]);
    let changelogs = d.written_topics();
    assert!(changelogs.contains(&"app-j-this-join-store-changelog"));
    assert!(changelogs.contains(&"app-j-other-join-store-changelog"));
    assert!(!changelogs.contains(&"app-j-outer-shared-join-store-changelog"));
}

#[test]
fn left_join_emits_unmatched_left_records_only_after_their_window_closed() {
    let mut d = driver(Kind::Left, ten_and_five());
    let steps = script(&mut d);
    // L1 matched later, so no "L1+-" ever appears (no spurious result).
    assert_eq!(steps[0], vec![]);
    assert_eq!(steps[1], vec![row("a", "L1+R1", 105)]);
    assert_eq!(
        steps[2],
        vec![row("a", "L3+R1", 112), row("a", "L3+R2", 120)]
    );
    assert_eq!(steps[3], vec![]);
    // After the restart: L4's window closed at 136 < 140; right records never emit alone.
    assert_eq!(steps[4], vec![row("b", "L4+-", 121)]);
}

#[test]
fn outer_join_emits_unmatched_records_of_both_sides_in_timestamp_order() {
    let mut d = driver(Kind::Outer, ten_and_five());
    let steps = script(&mut d);
    assert_eq!(steps[0], vec![]);
    assert_eq!(steps[1], vec![row("a", "L1+R1", 105)]);
    // R2 waited unmatched at 120, then L3 matched it: no "-+R2" later.
    assert_eq!(
        steps[2],
        vec![row("a", "L3+R1", 112), row("a", "L3+R2", 120)]
    );
    assert_eq!(steps[3], vec![]);
    assert_eq!(steps[4], vec![row("b", "L4+-", 121), row("d", "-+R3", 122)]);
    // L5 still waits; stream time 200 closes it.
    pipe(&mut d, "right", "z", "R9", 200);
    assert_eq!(read(&mut d), vec![row("c", "L5+-", 140)]);
}

#[test]
fn asymmetric_windows_and_duplicates() {
    // Right records join left records up to 0 ms before and 20 ms after them.
    let windows = JoinWindows::of_time_difference_without_grace(Duration::ZERO)
        .after(Duration::from_millis(20));
    let mut d = driver(Kind::Inner, windows);
    pipe(&mut d, "left", "k", "L1", 50);
    pipe(&mut d, "left", "k", "L1b", 50); // same key and time: both kept
    pipe(&mut d, "right", "k", "R-before", 49); // before the left records: late
    pipe(&mut d, "right", "k", "R-after", 70); // 20 ms after: joins both
    assert_eq!(
        read(&mut d),
        vec![row("k", "L1+R-after", 70), row("k", "L1b+R-after", 70)]
    );
    // R-before at 49 could only join left records in [29, 49], and its
    // window closed (49 + before 0 + grace 0 < stream time 50): late, counted.
    assert_eq!(d.task_metrics(0).unwrap().late_dropped, 1);
}
