//! Stream–global-table joins (inner, left) in the test driver: golden
//! outputs, key mapping, updates and deletes of the global table, and no
//! repartitioning for a re-keyed stream.

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::serdes::{OptionSerde, StringSerde};
use weir::topology::{Consumed, Materialized, Produced, StreamsBuilder};

fn s(x: &str) -> String {
    x.to_owned()
}

fn products() -> TestInputTopic<String, Option<String>> {
    TestInputTopic::new("products", StringSerde, OptionSerde::new(StringSerde))
}

fn orders() -> TestInputTopic<String, String> {
    TestInputTopic::new("orders", StringSerde, StringSerde)
}

/// Orders (order id → product id) enriched with the product name.
fn driver(left: bool) -> TopologyTestDriver {
    let builder = StreamsBuilder::new();
    let products = builder.global_table::<String, String>(
        "products",
        Consumed::new(),
        Materialized::as_("products-store"),
    );
    let orders = builder
        .stream::<String, String>("orders", Consumed::new())
        // A key change: a global join needs no repartition topic.
        .select_key(|k: &String, _| k.to_uppercase());
    let enriched = if left {
        orders.left_join_global(
            &products,
            |_, product: &String| product.clone(),
            |product: &String, name: Option<&String>| {
                format!("{product}={}", name.map_or("?", String::as_str))
            },
        )
    } else {
        orders.join_global(
            &products,
            |_, product: &String| product.clone(),
            |product: &String, name: &String| format!("{product}={name}"),
        )
    };
    enriched.to("out", Produced::new());
    let topology = builder.build().unwrap();
    assert_eq!(
        topology.subtopology_count(),
        1,
        "the global table has no task"
    );
    assert!(topology.repartition_topics("app").is_empty());
    assert_eq!(
        topology.global_topics(),
        vec![(s("products-store"), s("products"))]
    );
    TopologyTestDriver::new(topology, DriverConfig::new("app")).unwrap()
}

fn script(d: &mut TopologyTestDriver) -> Vec<(String, String)> {
    d.pipe(&products(), s("p1"), Some(s("lamp")), 1).unwrap();
    d.pipe(&orders(), s("o1"), s("p1"), 2).unwrap();
    d.pipe(&orders(), s("o2"), s("p2"), 3).unwrap(); // unknown product
    d.pipe(&products(), s("p2"), Some(s("desk")), 4).unwrap();
    d.pipe(&products(), s("p1"), Some(s("LED lamp")), 5)
        .unwrap();
    d.restart_tasks().unwrap(); // the global store is not a task's: it stays
    d.pipe(&orders(), s("o3"), s("p1"), 6).unwrap();
    d.pipe(&orders(), s("o4"), s("p2"), 7).unwrap();
    d.pipe(&products(), s("p2"), None, 8).unwrap(); // deleted
    d.pipe(&orders(), s("o5"), s("p2"), 9).unwrap();
    let out = TestOutputTopic::new("out", StringSerde, StringSerde);
    d.read_key_values(&out).unwrap()
}

#[test]
fn inner_global_join_golden() {
    let mut d = driver(false);
    assert_eq!(
        script(&mut d),
        vec![
            (s("O1"), s("p1=lamp")),
            (s("O3"), s("p1=LED lamp")),
            (s("O4"), s("p2=desk")),
        ]
    );
}

#[test]
fn left_global_join_golden() {
    let mut d = driver(true);
    assert_eq!(
        script(&mut d),
        vec![
            (s("O1"), s("p1=lamp")),
            (s("O2"), s("p2=?")),
            (s("O3"), s("p1=LED lamp")),
            (s("O4"), s("p2=desk")),
            (s("O5"), s("p2=?")),
        ]
    );
}

#[test]
fn describe_lists_the_global_store() {
    let builder = StreamsBuilder::new();
    let products = builder.global_table::<String, String>(
        "products",
        Consumed::new(),
        Materialized::as_("products-store"),
    );
    builder
        .stream::<String, String>("orders", Consumed::new())
        .join_global(
            &products,
            |_, p: &String| p.clone(),
            |_: &String, n: &String| n.clone(),
        )
        .to("out", Produced::new());
    let text = builder.build().unwrap().describe().to_string();
    assert!(
        text.ends_with(
            "   Global store: products-store (topic: products; loaded in full by every instance, no tasks)\n"
        ),
        "{text}"
    );
}
