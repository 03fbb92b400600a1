//! Stateless DSL operations through the test driver: split, merge, filter,
//! map, select_key, peek, foreach, and tables.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::serdes::{I64Serde, OptionSerde, StringSerde};
use weir::topology::{Consumed, Materialized, Produced, StreamsBuilder, TopologyError};

fn s(x: &str) -> String {
    x.to_owned()
}

#[test]
fn split_routes_each_record_to_exactly_one_branch() {
    let builder = StreamsBuilder::new();
    let branches = builder
        .stream::<String, i64>("numbers", Consumed::new())
        .named("split-")
        .split()
        .branch("negative", |_, v| *v < 0)
        .branch("small", |_, v| *v < 10) // 0..10: negatives matched already
        .default_branch("large");
    let mut names: Vec<_> = branches.keys().cloned().collect();
    names.sort();
    assert_eq!(names, vec!["split-large", "split-negative", "split-small"]);
    for (name, stream) in &branches {
        stream.to(name, Produced::new());
    }
    let mut driver =
        TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("split")).unwrap();
    let input = TestInputTopic::new("numbers", StringSerde, I64Serde);
    for (i, v) in [-5i64, 3, 10, -1, 0, 99].into_iter().enumerate() {
        driver.pipe(&input, format!("k{i}"), v, i as i64).unwrap();
    }
    let mut read = |topic: &str| -> Vec<i64> {
        let out = TestOutputTopic::new(topic, StringSerde, I64Serde);
        driver
            .read_key_values(&out)
            .unwrap()
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    };
    assert_eq!(read("split-negative"), vec![-5, -1]);
    assert_eq!(read("split-small"), vec![3, 0]);
    assert_eq!(read("split-large"), vec![10, 99]);
}

#[test]
fn split_without_default_drops_unmatched_and_unfinished_split_is_an_error() {
    let builder = StreamsBuilder::new();
    let branches = builder
        .stream::<String, i64>("numbers", Consumed::new())
        .split()
        .branch("even", |_, v| v % 2 == 0)
        .no_default_branch();
    let (name, even) = branches.into_iter().next().unwrap();
    assert_eq!(name, "KSTREAM-BRANCH-0000000001even");
    even.to("even", Produced::new());
    let mut driver =
        TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("a")).unwrap();
    let input = TestInputTopic::new("numbers", StringSerde, I64Serde);
    for v in 1..=4 {
        driver.pipe(&input, s("k"), v, 0).unwrap();
    }
    assert_eq!(driver.all_raw("even").len(), 2);

    let builder = StreamsBuilder::new();
    let _unfinished = builder
        .stream::<String, i64>("numbers", Consumed::new())
        .split();
    assert!(matches!(
        builder.build(),
        Err(TopologyError::UnfinishedSplit(_))
    ));
}

#[test]
fn stateless_chain_and_merge() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_in_peek = seen.clone();
    let builder = StreamsBuilder::new();
    let words = builder.stream::<String, String>("words", Consumed::new());
    let long = words
        .filter(|_, w| w.len() > 3)
        .map(|k, w| (w.clone(), format!("{k}:{w}")))
        .peek(move |k, _| seen_in_peek.lock().unwrap().push(k.clone()));
    let short = words
        .filter_not(|_, w| w.len() > 3)
        .select_key(|_, w| w.to_uppercase());
    let merged = long.merge(&short);
    merged
        .map_values(|v: String| v.len() as i64)
        .to("lengths", Produced::new());
    let counter = Arc::new(Mutex::new(0));
    let c = counter.clone();
    merged.foreach(move |_, _| *c.lock().unwrap() += 1);

    let mut driver =
        TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("m")).unwrap();
    let input = TestInputTopic::new("words", StringSerde, StringSerde);
    driver.pipe(&input, s("x"), s("kafka"), 1).unwrap();
    driver.pipe(&input, s("y"), s("rust"), 2).unwrap();
    driver.pipe(&input, s("z"), s("go"), 3).unwrap();
    let out = TestOutputTopic::new("lengths", StringSerde, I64Serde);
    assert_eq!(
        driver.read_key_values(&out).unwrap(),
        vec![(s("kafka"), 7), (s("rust"), 6), (s("GO"), 2)]
    );
    assert_eq!(*seen.lock().unwrap(), vec![s("kafka"), s("rust")]);
    assert_eq!(*counter.lock().unwrap(), 3);
}

#[test]
fn table_filter_map_values_and_tombstones() {
    let builder = StreamsBuilder::new();
    let prices =
        builder.table::<String, i64>("prices", Consumed::new(), Materialized::as_("prices-store"));
    prices
        .filter(|_, p| *p >= 100)
        .map_values(|p| p * 2)
        .to_stream()
        .to("expensive-doubled", Produced::new());
    let mut driver =
        TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("t")).unwrap();
    let input = TestInputTopic::new("prices", StringSerde, OptionSerde::new(I64Serde));
    driver.pipe(&input, s("a"), Some(150), 1).unwrap();
    driver.pipe(&input, s("b"), Some(50), 2).unwrap(); // filtered out entirely
    driver.pipe(&input, s("a"), Some(80), 3).unwrap(); // stops matching: delete downstream
    driver.pipe(&input, s("c"), Some(300), 4).unwrap();
    driver.pipe(&input, s("c"), None, 5).unwrap(); // tombstone
    let out = TestOutputTopic::new("expensive-doubled", StringSerde, OptionSerde::new(I64Serde));
    assert_eq!(
        driver.read_key_values(&out).unwrap(),
        vec![
            (s("a"), Some(300)),
            (s("a"), None),
            (s("c"), Some(600)),
            (s("c"), None)
        ]
    );
    let store: Vec<(String, i64)> = driver.key_value_store_all("prices-store").unwrap();
    assert_eq!(store, vec![(s("a"), 80), (s("b"), 50)]);
    let changelog = driver.all_raw("t-prices-store-changelog");
    assert_eq!(
        changelog.last().unwrap().value,
        None,
        "the delete is logged as a tombstone"
    );
}

#[test]
fn to_table_and_aggregate_without_repartition() {
    let builder = StreamsBuilder::new();
    let events = builder.stream::<String, i64>("events", Consumed::new());
    events
        .group_by_key(Default::default())
        .aggregate(|| 0i64, |_, v, sum| sum + v, Materialized::as_("sums"))
        .to_stream()
        .to("sums", Produced::new());
    events.to_table(Materialized::as_("latest"));
    let topology = builder.build().unwrap();
    assert_eq!(
        topology.subtopology_count(),
        1,
        "no key change: no repartition"
    );
    assert!(topology.repartition_topics("x").is_empty());
    let mut driver = TopologyTestDriver::new(topology, DriverConfig::new("x")).unwrap();
    let input = TestInputTopic::new("events", StringSerde, I64Serde);
    for (k, v) in [("a", 1), ("b", 10), ("a", 5)] {
        driver.pipe(&input, s(k), v, 0).unwrap();
    }
    let sums: HashMap<String, i64> = driver
        .key_value_store_all("sums")
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(sums, HashMap::from([(s("a"), 6), (s("b"), 10)]));
    assert_eq!(
        driver
            .key_value_store_get::<String, i64>("latest", &s("a"))
            .unwrap(),
        Some(5)
    );
    // Reading a store with the wrong types is a typed error, not garbage.
    assert!(
        driver
            .key_value_store_all::<String, String>("sums")
            .is_err()
    );
}

#[test]
fn missing_serde_and_duplicate_names_fail_the_build() {
    #[derive(Clone)]
    struct NoSerde;
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("in", Consumed::new())
        .map_values(|_| NoSerde)
        .to("out", Produced::new());
    let err = builder.build().unwrap_err();
    assert!(
        matches!(err, TopologyError::MissingSerde { what: "value", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("KSTREAM-SINK-0000000002"), "{err}");

    let builder = StreamsBuilder::new();
    let s1 = builder.stream::<String, String>("in", Consumed::new());
    s1.named("f").filter(|_, _| true);
    s1.named("f").filter(|_, _| false);
    assert_eq!(
        builder.build().unwrap_err(),
        TopologyError::DuplicateName(s("f"))
    );
}

#[test]
fn nodes_sharing_a_store_form_one_subtopology() {
    use weir::processor::{Processor, ProcessorContext, ProcessorError, Record};
    struct Remember;
    impl Processor<String, i64> for Remember {
        fn process(
            &mut self,
            ctx: &ProcessorContext<'_>,
            r: Record<String, i64>,
        ) -> Result<(), ProcessorError> {
            ctx.key_value_store::<String, i64>("shared")?
                .put(&r.key, &r.value)
        }
    }
    let builder = StreamsBuilder::new();
    builder.add_key_value_store::<String, i64>(Materialized::as_("shared"));
    builder
        .stream::<String, i64>("a", Consumed::new())
        .process::<(), (), _>(|| Remember, &["shared"]);
    builder
        .stream::<String, i64>("b", Consumed::new())
        .process::<(), (), _>(|| Remember, &["shared"]);
    builder
        .stream::<String, i64>("c", Consumed::new())
        .to("d", Produced::new());
    let topology = builder.build().unwrap();
    assert_eq!(topology.subtopology_count(), 2);
    assert_eq!(topology.source_topics(0, "x"), vec![s("a"), s("b")]);
    assert_eq!(topology.source_topics(1, "x"), vec![s("c")]);

    let mut driver = TopologyTestDriver::new(topology, DriverConfig::new("x")).unwrap();
    driver
        .pipe(
            &TestInputTopic::new("a", StringSerde, I64Serde),
            s("k1"),
            1,
            0,
        )
        .unwrap();
    driver
        .pipe(
            &TestInputTopic::new("b", StringSerde, I64Serde),
            s("k2"),
            2,
            0,
        )
        .unwrap();
    let all: Vec<(String, i64)> = driver.key_value_store_all("shared").unwrap();
    assert_eq!(all, vec![(s("k1"), 1), (s("k2"), 2)]);
}

#[test]
fn flat_map_then_reduce_repartitions_through_a_named_grouping() {
    use weir::topology::Grouped;
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("sentences", Consumed::new())
        .flat_map(|_, line: String| {
            line.split_whitespace()
                .map(|w| (w[..1].to_string(), w.len() as i64))
                .collect::<Vec<_>>()
        })
        .group_by_key(Grouped::as_("by-letter"))
        .reduce(|a, b| a.max(b), Materialized::as_("longest"))
        .to_stream()
        .to("longest-by-letter", Produced::new());
    let topology = builder.build().unwrap();
    assert_eq!(
        topology.repartition_topics("r"),
        vec![s("r-by-letter-repartition")]
    );
    let mut driver = TopologyTestDriver::new(topology, DriverConfig::new("r")).unwrap();
    let input = TestInputTopic::new("sentences", StringSerde, StringSerde);
    driver
        .pipe(&input, s("1"), s("apple avocado banana"), 1)
        .unwrap();
    driver.pipe(&input, s("2"), s("ant bee"), 2).unwrap();
    let out = TestOutputTopic::new("longest-by-letter", StringSerde, OptionSerde::new(I64Serde));
    assert_eq!(
        driver.read_key_values(&out).unwrap(),
        vec![
            (s("a"), Some(5)),
            (s("a"), Some(7)),
            (s("b"), Some(6)),
            (s("a"), Some(7)),
            (s("b"), Some(6)),
        ]
    );
}

#[test]
fn custom_partitioner_chooses_the_output_partition() {
    let builder = StreamsBuilder::new();
    builder.stream::<String, i64>("in", Consumed::new()).to(
        "out",
        Produced::new()
            .with_partitioner(|_: &str, _: &String, v: &i64, n: i32| Some((*v % n as i64) as i32)),
    );
    let config = DriverConfig::new("p").with_partition_count("out", 3);
    let mut driver = TopologyTestDriver::new(builder.build().unwrap(), config).unwrap();
    let input = TestInputTopic::new("in", StringSerde, I64Serde);
    for v in [4, 5, 6] {
        driver.pipe(&input, s("k"), v, 0).unwrap();
    }
    let partitions: Vec<_> = driver.all_raw("out").iter().map(|r| r.partition).collect();
    assert_eq!(partitions, vec![Some(1), Some(2), Some(0)]);
}
