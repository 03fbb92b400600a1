//! Foreign-key table–table joins (inner, left) in the test driver: golden
//! outputs as the left rows change, as the right rows change, and as a
//! left row's foreign key changes (the old result is replaced, never kept,
//! also when the new key has no row);
//! stale responses dropped; the internal topics and stores they use.

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::serdes::{OptionSerde, StringSerde};
use weir::topology::{Consumed, Materialized, Produced, StreamsBuilder};

fn s(x: &str) -> String {
    x.to_owned()
}

fn topic(name: &str) -> TestInputTopic<String, Option<String>> {
    TestInputTopic::new(name, StringSerde, OptionSerde::new(StringSerde))
}

/// orders (order id → "customer-id:item") ⋈ customers (customer id → name).
fn driver(left: bool) -> TopologyTestDriver {
    let builder = StreamsBuilder::new();
    let orders = builder.table::<String, String>("orders", Consumed::new(), Materialized::as_("o"));
    let customers =
        builder.table::<String, String>("customers", Consumed::new(), Materialized::as_("c"));
    let fk = |v: &String| v.split(':').next().unwrap_or_default().to_owned();
    let joined = if left {
        orders.named("fk").left_join_on_foreign_key(
            &customers,
            fk,
            |o: &String, c: Option<&String>| format!("{o}@{}", c.map_or("?", String::as_str)),
        )
    } else {
        orders
            .named("fk")
            .join_on_foreign_key(&customers, fk, |o: &String, c: &String| format!("{o}@{c}"))
    };
    joined.to_stream().to("out", Produced::new());
    let topology = builder.build().unwrap();
    assert_eq!(
        topology.subtopology_count(),
        2,
        "left and right sides are separate tasks"
    );
    assert_eq!(
        topology.repartition_topics("app"),
        vec![
            s("app-fk-subscription-registration-repartition"),
            s("app-fk-subscription-response-repartition"),
        ]
    );
    TopologyTestDriver::new(topology, DriverConfig::new("app")).unwrap()
}

/// The output after each step of the script.
type Steps = Vec<Vec<(String, Option<String>)>>;

fn run(left: bool) -> (TopologyTestDriver, Steps) {
    let mut d = driver(left);
    let (orders, customers) = (topic("orders"), topic("customers"));
    let out = TestOutputTopic::new("out", StringSerde, OptionSerde::new(StringSerde));
    let mut steps = Vec::new();
    let mut step = |d: &mut TopologyTestDriver| steps.push(d.read_key_values(&out).unwrap());
    d.pipe(&orders, s("o1"), Some(s("c1:pen")), 1).unwrap(); // customer unknown yet
    step(&mut d); // 0
    d.pipe(&customers, s("c1"), Some(s("Ann")), 2).unwrap(); // right insert
    step(&mut d); // 1
    d.pipe(&customers, s("c2"), Some(s("Bo")), 3).unwrap(); // nobody subscribes
    step(&mut d); // 2
    d.pipe(&orders, s("o1"), Some(s("c1:ink")), 4).unwrap(); // left update, same FK
    step(&mut d); // 3
    d.pipe(&orders, s("o1"), Some(s("c2:ink")), 5).unwrap(); // FK change c1 → c2
    step(&mut d); // 4
    d.pipe(&customers, s("c1"), Some(s("Anna")), 6).unwrap(); // old FK: no longer joined
    step(&mut d); // 5
    d.pipe(&customers, s("c2"), Some(s("Bob")), 7).unwrap(); // new FK's update
    step(&mut d); // 6
    d.pipe(&customers, s("c2"), None, 8).unwrap(); // right delete
    step(&mut d); // 7
    d.pipe(&orders, s("o1"), None, 9).unwrap(); // left delete
    step(&mut d); // 8
    d.pipe(&orders, s("o2"), Some(s("c1:cap")), 10).unwrap(); // joins c1
    step(&mut d); // 9
    d.pipe(&orders, s("o2"), Some(s("c9:cap")), 11).unwrap(); // FK moves to a missing row
    step(&mut d); // 10
    d.pipe(&orders, s("o2"), None, 12).unwrap(); // left delete
    step(&mut d); // 11
    (d, steps)
}

fn r(k: &str, v: Option<&str>) -> (String, Option<String>) {
    (s(k), v.map(s))
}

#[test]
fn inner_foreign_key_join_golden() {
    let (d, steps) = run(false);
    let expected: Steps = vec![
        vec![],
        vec![r("o1", Some("c1:pen@Ann"))],
        vec![],
        vec![r("o1", Some("c1:ink@Ann"))],
        vec![r("o1", Some("c2:ink@Bo"))],
        vec![],
        vec![r("o1", Some("c2:ink@Bob"))],
        vec![r("o1", None)],
        vec![r("o1", None)],
        vec![r("o2", Some("c1:cap@Anna"))],
        // The old result is retracted though the new key has no row.
        vec![r("o2", None)],
        vec![r("o2", None)],
    ];
    assert_eq!(steps, expected);
    // The old foreign key's subscription is gone; the left row was deleted.
    let subs: Vec<(Vec<u8>, Vec<u8>)> = d.key_value_store_all("fk-subscription-store").unwrap();
    assert!(subs.is_empty(), "no subscription left: {subs:?}");
}

#[test]
fn left_foreign_key_join_golden() {
    let (_, steps) = run(true);
    let expected: Steps = vec![
        vec![r("o1", Some("c1:pen@?"))],
        vec![r("o1", Some("c1:pen@Ann"))],
        vec![],
        vec![r("o1", Some("c1:ink@Ann"))],
        vec![r("o1", Some("c2:ink@Bo"))],
        vec![],
        vec![r("o1", Some("c2:ink@Bob"))],
        vec![r("o1", Some("c2:ink@?"))],
        vec![r("o1", None)],
        vec![r("o2", Some("c1:cap@Anna"))],
        vec![r("o2", Some("c9:cap@?"))],
        vec![r("o2", None)],
    ];
    assert_eq!(steps, expected);
}

/// 64-bit FNV-1a, as the join hashes serialized left values.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A response message: hash of the left value it answers, then the right row.
fn response(left_value: &str, row: &str) -> Vec<u8> {
    let mut out = vec![1];
    out.extend_from_slice(&fnv1a(left_value.as_bytes()).to_be_bytes());
    out.push(1);
    out.extend_from_slice(row.as_bytes());
    out
}

#[test]
fn a_response_for_a_replaced_left_value_is_dropped() {
    let mut d = driver(false);
    let (orders, customers) = (topic("orders"), topic("customers"));
    let out = TestOutputTopic::new("out", StringSerde, OptionSerde::new(StringSerde));
    d.pipe(&customers, s("c1"), Some(s("Ann")), 1).unwrap();
    d.pipe(&orders, s("o1"), Some(s("c1:pen")), 2).unwrap();
    d.pipe(&orders, s("o1"), Some(s("c1:ink")), 3).unwrap();
    assert_eq!(
        d.read_key_values(&out).unwrap(),
        vec![r("o1", Some("c1:pen@Ann")), r("o1", Some("c1:ink@Ann"))]
    );
    // A response still in flight for the replaced value "c1:pen" arrives late.
    let topic = "app-fk-subscription-response-repartition";
    let headers = Default::default();
    d.pipe_raw(
        topic,
        Some(b"o1"),
        Some(&response("c1:pen", "Zed")),
        4,
        &headers,
    )
    .unwrap();
    assert_eq!(d.read_key_values(&out).unwrap(), vec![], "stale: dropped");
    d.pipe_raw(
        topic,
        Some(b"o1"),
        Some(&response("c1:ink", "Zed")),
        5,
        &headers,
    )
    .unwrap();
    assert_eq!(
        d.read_key_values(&out).unwrap(),
        vec![r("o1", Some("c1:ink@Zed"))],
        "a response for the current value applies"
    );
}

#[test]
fn subscriptions_survive_a_task_restart() {
    let mut d = driver(false);
    let (orders, customers) = (topic("orders"), topic("customers"));
    let out = TestOutputTopic::new("out", StringSerde, OptionSerde::new(StringSerde));
    d.pipe(&customers, s("c1"), Some(s("Ann")), 1).unwrap();
    d.pipe(&orders, s("o1"), Some(s("c1:pen")), 2).unwrap();
    d.pipe(&orders, s("o2"), Some(s("c1:cup")), 3).unwrap();
    assert_eq!(d.read_key_values(&out).unwrap().len(), 2);
    // Fresh stores, restored from the changelogs (subscription store included).
    d.restart_tasks().unwrap();
    d.pipe(&customers, s("c1"), Some(s("Anna")), 4).unwrap();
    assert_eq!(
        d.read_key_values(&out).unwrap(),
        vec![r("o1", Some("c1:pen@Anna")), r("o2", Some("c1:cup@Anna"))]
    );
}

#[test]
fn a_failing_extractor_or_joiner_is_a_processing_error_of_its_record() {
    use weir::handler::ErrorHandling;
    use weir::processor::ProcessorError;
    let builder = StreamsBuilder::new();
    let orders = builder.table::<String, String>("orders", Consumed::new(), Materialized::as_("o"));
    let customers =
        builder.table::<String, String>("customers", Consumed::new(), Materialized::as_("c"));
    orders
        .try_join_on_foreign_key(
            &customers,
            |v: &String| match v.split_once(':') {
                Some((customer, _)) => Ok(customer.to_owned()),
                None => Err(ProcessorError::user(format!("no customer in {v:?}"))),
            },
            |o: &String, c: &String| match c.as_str() {
                "bad" => Err(ProcessorError::user("bad customer")),
                _ => Ok(format!("{o}@{c}")),
            },
        )
        .to_stream()
        .to("out", Produced::new());
    let config = DriverConfig::new("app").with_processing_handler(ErrorHandling::LogAndContinue);
    let mut d = TopologyTestDriver::new(builder.build().unwrap(), config).unwrap();
    let (orders, customers) = (topic("orders"), topic("customers"));
    let out = TestOutputTopic::new("out", StringSerde, OptionSerde::new(StringSerde));
    d.pipe(&customers, s("c1"), Some(s("Ann")), 1).unwrap();
    d.pipe(&customers, s("c2"), Some(s("bad")), 2).unwrap();
    d.pipe(&orders, s("o1"), Some(s("pen")), 3).unwrap(); // extractor fails: skipped
    d.pipe(&orders, s("o2"), Some(s("c2:ink")), 4).unwrap(); // joiner fails: skipped
    d.pipe(&orders, s("o3"), Some(s("c1:cap")), 5).unwrap();
    assert_eq!(
        d.read_key_values(&out).unwrap(),
        vec![r("o3", Some("c1:cap@Ann"))]
    );

    let config = DriverConfig::new("app").with_processing_handler(ErrorHandling::LogAndFail);
    let builder = StreamsBuilder::new();
    let orders_t =
        builder.table::<String, String>("orders", Consumed::new(), Materialized::as_("o"));
    let customers_t =
        builder.table::<String, String>("customers", Consumed::new(), Materialized::as_("c"));
    orders_t
        .try_left_join_on_foreign_key(
            &customers_t,
            |_: &String| Err::<String, _>(ProcessorError::user("no extractor today")),
            |o: &String, _: Option<&String>| Ok(o.clone()),
        )
        .to_stream()
        .to("out", Produced::new());
    let mut d = TopologyTestDriver::new(builder.build().unwrap(), config).unwrap();
    let err = d.pipe(&orders, s("o1"), Some(s("c1:pen")), 1).unwrap_err();
    assert!(err.to_string().contains("no extractor today"), "{err}");
}
