//! Table–table joins (inner, left, outer) in the test driver: golden
//! outputs as either side inserts, updates and deletes (tombstones).

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::serdes::{OptionSerde, StringSerde};
use weir::topology::{Consumed, Materialized, Produced, StreamsBuilder};

fn s(x: &str) -> String {
    x.to_owned()
}

fn topic(name: &str) -> TestInputTopic<String, Option<String>> {
    TestInputTopic::new(name, StringSerde, OptionSerde::new(StringSerde))
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

fn driver(kind: Kind) -> TopologyTestDriver {
    let builder = StreamsBuilder::new();
    let left = builder.table::<String, String>("left", Consumed::new(), Materialized::as_("l"));
    let right = builder.table::<String, String>("right", Consumed::new(), Materialized::as_("r"));
    let joined = match kind {
        Kind::Inner => left.join(&right, |l: &String, r: &String| format!("{l}+{r}")),
        Kind::Left => left.left_join(&right, |l: &String, r: Option<&String>| {
            format!("{l}+{}", show(r))
        }),
        Kind::Outer => left.outer_join(&right, |l: Option<&String>, r: Option<&String>| {
            format!("{}+{}", show(l), show(r))
        }),
    };
    joined.to_stream().to("out", Produced::new());
    TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("app")).unwrap()
}

/// Inserts, updates and deletes on both sides; returns `(key, value, ts)` out.
fn run(kind: Kind) -> Vec<(String, Option<String>, i64)> {
    let mut d = driver(kind);
    let (l, r) = (topic("left"), topic("right"));
    d.pipe(&l, s("a"), Some(s("L1")), 1).unwrap();
    d.pipe(&r, s("a"), Some(s("R1")), 2).unwrap();
    d.pipe(&l, s("a"), Some(s("L2")), 3).unwrap();
    d.pipe(&r, s("b"), Some(s("R9")), 4).unwrap();
    d.pipe(&r, s("a"), None, 5).unwrap();
    d.pipe(&l, s("a"), None, 6).unwrap();
    d.pipe(&l, s("b"), None, 7).unwrap(); // deleting an absent row: nothing
    d.pipe(&r, s("b"), None, 8).unwrap();
    let out = TestOutputTopic::new("out", StringSerde, OptionSerde::new(StringSerde));
    d.read_records(&out)
        .unwrap()
        .into_iter()
        .map(|r| (r.key, r.value, r.timestamp))
        .collect()
}

fn row(k: &str, v: Option<&str>, ts: i64) -> (String, Option<String>, i64) {
    (s(k), v.map(s), ts)
}

#[test]
fn inner_join_golden() {
    assert_eq!(
        run(Kind::Inner),
        vec![
            row("a", Some("L1+R1"), 2),
            row("a", Some("L2+R1"), 3),
            row("a", None, 5), // right deleted: the row goes
        ]
    );
}

#[test]
fn left_join_golden() {
    assert_eq!(
        run(Kind::Left),
        vec![
            row("a", Some("L1+-"), 1),
            row("a", Some("L1+R1"), 2),
            row("a", Some("L2+R1"), 3),
            row("a", Some("L2+-"), 5),
            row("a", None, 6),
        ]
    );
}

#[test]
fn outer_join_golden() {
    assert_eq!(
        run(Kind::Outer),
        vec![
            row("a", Some("L1+-"), 1),
            row("a", Some("L1+R1"), 2),
            row("a", Some("L2+R1"), 3),
            row("b", Some("-+R9"), 4),
            row("a", Some("L2+-"), 5),
            row("a", None, 6),
            row("b", None, 8),
        ]
    );
}
