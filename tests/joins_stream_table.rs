//! Stream–table joins (inner, left) in the test driver: golden outputs,
//! table updates and deletes, the stream side not being stored, key changes
//! upstream (repartition), and the topology they make.

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::serdes::{OptionSerde, StringSerde};
use weir::topology::{Consumed, Joined, Materialized, Produced, StreamsBuilder};

fn s(x: &str) -> String {
    x.to_owned()
}

fn orders() -> TestInputTopic<String, String> {
    TestInputTopic::new("orders", StringSerde, StringSerde)
}

fn customers() -> TestInputTopic<String, Option<String>> {
    TestInputTopic::new("customers", StringSerde, OptionSerde::new(StringSerde))
}

fn out() -> TestOutputTopic<String, String> {
    TestOutputTopic::new("out", StringSerde, StringSerde)
}

/// orders (customer id → item) joined with customers (id → name).
fn driver(left: bool) -> TopologyTestDriver {
    let builder = StreamsBuilder::new();
    let table = builder.table::<String, String>(
        "customers",
        Consumed::new(),
        Materialized::as_("customers-store"),
    );
    let stream = builder.stream::<String, String>("orders", Consumed::new());
    let joined = if left {
        stream.left_join_table(
            &table,
            |item: &String, name: Option<&String>| {
                format!("{item} for {}", name.map_or("?", String::as_str))
            },
            Joined::new(),
        )
    } else {
        stream.join_table(
            &table,
            |item: &String, name: &String| format!("{item} for {name}"),
            Joined::new(),
        )
    };
    joined.to("out", Produced::new());
    let topology = builder.build().unwrap();
    assert_eq!(
        topology.subtopology_count(),
        1,
        "stream and table share a task"
    );
    TopologyTestDriver::new(topology, DriverConfig::new("app")).unwrap()
}

/// The input script shared by the inner and left tests.
fn script(d: &mut TopologyTestDriver) {
    d.pipe(&orders(), s("c1"), s("book"), 1).unwrap(); // before any customer
    d.pipe(&customers(), s("c1"), Some(s("Ann")), 2).unwrap();
    d.pipe(&orders(), s("c1"), s("pen"), 3).unwrap();
    d.pipe(&customers(), s("c1"), Some(s("Anna")), 4).unwrap(); // update: no output
    d.pipe(&orders(), s("c1"), s("ink"), 5).unwrap();
    d.pipe(&orders(), s("c2"), s("cup"), 6).unwrap(); // unknown customer
    d.pipe(&customers(), s("c1"), None, 7).unwrap(); // delete
    d.pipe(&orders(), s("c1"), s("mug"), 8).unwrap();
}

#[test]
fn inner_join_golden() {
    let mut d = driver(false);
    script(&mut d);
    let records = d.read_records(&out()).unwrap();
    let got: Vec<_> = records
        .iter()
        .map(|r| (r.key.as_str(), r.value.as_str(), r.timestamp))
        .collect();
    assert_eq!(
        got,
        vec![("c1", "pen for Ann", 3), ("c1", "ink for Anna", 5)]
    );
}

#[test]
fn left_join_golden() {
    let mut d = driver(true);
    script(&mut d);
    let got = d.read_key_values(&out()).unwrap();
    assert_eq!(
        got,
        vec![
            (s("c1"), s("book for ?")),
            (s("c1"), s("pen for Ann")),
            (s("c1"), s("ink for Anna")),
            (s("c2"), s("cup for ?")),
            (s("c1"), s("mug for ?")),
        ]
    );
}

#[test]
fn a_key_changed_upstream_is_repartitioned_before_the_join() {
    let builder = StreamsBuilder::new();
    let table = builder.table::<String, String>("customers", Consumed::new(), Materialized::new());
    builder
        .stream::<String, String>("orders-by-id", Consumed::new())
        // value "customer:item" → key customer
        .select_key(|_, v: &String| v.split(':').next().unwrap_or_default().to_owned())
        .join_table(
            &table,
            |v: &String, name: &String| format!("{v} -> {name}"),
            Joined::as_("enrich"),
        )
        .to("out", Produced::new());
    let topology = builder.build().unwrap();
    assert_eq!(topology.subtopology_count(), 2);
    assert_eq!(
        topology.repartition_topics("app"),
        vec![s("app-enrich-repartition")]
    );
    let mut d = TopologyTestDriver::new(topology, DriverConfig::new("app")).unwrap();
    d.pipe(&customers(), s("c7"), Some(s("Bo")), 1).unwrap();
    let by_id = TestInputTopic::new("orders-by-id", StringSerde, StringSerde);
    d.pipe(&by_id, s("o1"), s("c7:lamp"), 2).unwrap();
    d.pipe(&by_id, s("o2"), s("c8:desk"), 3).unwrap();
    assert_eq!(
        d.read_key_values(&out()).unwrap(),
        vec![(s("c7"), s("c7:lamp -> Bo"))]
    );
    assert_eq!(d.all_raw("app-enrich-repartition").len(), 2);
}

#[test]
fn an_unmaterialized_table_is_materialized_for_the_join() {
    let builder = StreamsBuilder::new();
    let table = builder
        .table::<String, String>("customers", Consumed::new(), Materialized::as_("raw"))
        .map_values(|name: String| name.to_uppercase());
    builder
        .stream::<String, String>("orders", Consumed::new())
        .join_table(
            &table,
            |item: &String, name: &String| format!("{item}/{name}"),
            Joined::as_("j"),
        )
        .to("out", Produced::new());
    let mut d =
        TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("app")).unwrap();
    d.pipe(&customers(), s("c1"), Some(s("ann")), 1).unwrap();
    d.pipe(&orders(), s("c1"), s("pen"), 2).unwrap();
    assert_eq!(
        d.read_key_values(&out()).unwrap(),
        vec![(s("c1"), s("pen/ANN"))]
    );
    assert_eq!(
        d.key_value_store_get::<String, String>("j-STORE", &s("c1"))
            .unwrap(),
        Some(s("ANN"))
    );
    assert!(
        d.all_raw("app-j-STORE-changelog").len() == 1,
        "the join store is logged"
    );
}
