//! Word count through the test driver: counts and their updates, the
//! repartition topic, the changelog, and the topology description.

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::processor::OutputKind;
use weir::serdes::{I64Serde, OptionSerde, StringSerde, UnitSerde};
use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder, Topology};

fn word_count() -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream::<(), String>("text-lines", Consumed::new())
        .flat_map_values(|line: String| {
            line.to_lowercase()
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .group_by(|_, word: &String| word.clone(), Grouped::new())
        .count(Materialized::as_("counts-store"))
        .to_stream()
        .to("word-counts", Produced::new());
    builder.build().expect("word count builds")
}

fn s(x: &str) -> String {
    x.to_owned()
}

#[test]
fn counts_words_and_emits_every_update() {
    let mut driver = TopologyTestDriver::new(word_count(), DriverConfig::new("wc")).unwrap();
    let lines = TestInputTopic::new("text-lines", UnitSerde, StringSerde);
    let counts = TestOutputTopic::new("word-counts", StringSerde, OptionSerde::new(I64Serde));

    driver.pipe(&lines, (), s("Hello world"), 1_000).unwrap();
    assert_eq!(
        driver.read_key_values(&counts).unwrap(),
        vec![(s("hello"), Some(1)), (s("world"), Some(1))]
    );

    driver
        .pipe(&lines, (), s("hello Kafka hello"), 2_000)
        .unwrap();
    let updates = driver.read_records(&counts).unwrap();
    let pairs: Vec<_> = updates.iter().map(|r| (r.key.clone(), r.value)).collect();
    assert_eq!(
        pairs,
        vec![
            (s("hello"), Some(2)),
            (s("kafka"), Some(1)),
            (s("hello"), Some(3))
        ]
    );
    assert!(
        updates.iter().all(|r| r.timestamp == 2_000),
        "results carry the input timestamp"
    );

    let store: Vec<(String, i64)> = driver.key_value_store_all("counts-store").unwrap();
    assert_eq!(
        store,
        vec![(s("hello"), 3), (s("kafka"), 1), (s("world"), 1)]
    );
    assert_eq!(
        driver
            .key_value_store_get::<String, i64>("counts-store", &s("hello"))
            .unwrap(),
        Some(3)
    );
    assert_eq!(
        driver
            .key_value_store_get::<String, i64>("counts-store", &s("nope"))
            .unwrap(),
        None
    );
}

#[test]
fn words_travel_through_the_repartition_topic_and_the_store_is_logged() {
    let mut driver = TopologyTestDriver::new(word_count(), DriverConfig::new("wc")).unwrap();
    let lines = TestInputTopic::new("text-lines", UnitSerde, StringSerde);
    driver.pipe(&lines, (), s("a b a"), 5).unwrap();

    let repartition = driver.all_raw("wc-counts-store-repartition");
    assert_eq!(repartition.len(), 3);
    assert!(
        repartition
            .iter()
            .all(|r| r.kind == OutputKind::Repartition && r.partition.is_none())
    );
    assert_eq!(repartition[0].key.as_deref(), Some(&b"a"[..]));

    let changelog = driver.all_raw("wc-counts-store-changelog");
    let entries: Vec<_> = changelog
        .iter()
        .map(|r| {
            assert_eq!(r.kind, OutputKind::Changelog);
            assert_eq!(r.partition, Some(0), "changelog partition = task partition");
            assert_eq!(r.timestamp, 5);
            (r.key.clone().unwrap(), r.value.clone().unwrap())
        })
        .collect();
    assert_eq!(
        entries,
        vec![
            (b"a".to_vec(), 1i64.to_be_bytes().to_vec()),
            (b"b".to_vec(), 1i64.to_be_bytes().to_vec()),
            (b"a".to_vec(), 2i64.to_be_bytes().to_vec()),
        ]
    );
    assert_eq!(
        driver.written_topics(),
        vec![
            "wc-counts-store-changelog",
            "wc-counts-store-repartition",
            "word-counts"
        ]
    );
}

#[test]
fn describe_matches_the_golden_file() {
    let text = word_count().describe().to_string();
    let golden = include_str!("golden/wordcount.describe.txt");
    assert_eq!(text, golden, "describe() changed:\n{text}");
}

#[test]
fn generated_names_are_stable_across_builds() {
    assert_eq!(word_count().describe(), word_count().describe());
    let t = word_count();
    assert_eq!(
        t.repartition_topics("wc"),
        vec![s("wc-counts-store-repartition")]
    );
    assert_eq!(
        t.changelog_topics("wc"),
        vec![(s("counts-store"), s("wc-counts-store-changelog"))]
    );
    assert_eq!(t.source_topics(0, "wc"), vec![s("text-lines")]);
    assert_eq!(
        t.source_topics(1, "wc"),
        vec![s("wc-counts-store-repartition")]
    );
    assert_eq!(t.subtopology_of_store("counts-store"), Some(1));
}

/// Checks the Mermaid text the way the Mermaid flowchart grammar needs it:
/// a `flowchart` header, balanced `subgraph`/`end`, every node id declared
/// exactly once, and every edge between declared ids.
#[test]
fn mermaid_output_is_a_well_formed_flowchart() {
    let mermaid = word_count().describe().to_mermaid();
    let mut lines = mermaid.lines();
    assert_eq!(lines.next(), Some("flowchart TB"));
    let mut depth = 0i32;
    let mut declared = std::collections::HashSet::new();
    let mut edges = Vec::new();
    for line in lines {
        let line = line.trim();
        if line.starts_with("subgraph ") {
            depth += 1;
        } else if line == "end" {
            depth -= 1;
            assert!(depth >= 0, "unbalanced end");
        } else if let Some((from, to)) = line
            .split_once(" --> ")
            .or_else(|| line.split_once(" -.- "))
        {
            edges.push((from.to_owned(), to.to_owned()));
        } else {
            let id: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            assert!(!id.is_empty(), "unexpected line: {line}");
            let rest = &line[id.len()..];
            assert!(
                rest.starts_with("[\"") || rest.starts_with("[/\"") || rest.starts_with("[(\""),
                "bad node shape: {line}"
            );
            assert!(declared.insert(id), "node declared twice: {line}");
        }
    }
    assert_eq!(depth, 0, "subgraphs not closed");
    for (from, to) in &edges {
        assert!(
            declared.contains(from) && declared.contains(to),
            "edge to undeclared node: {from} -> {to}"
        );
    }
    // 8 sources/processors/sinks, 3 topics (input, repartition, output), 1 store.
    assert_eq!(declared.len(), 12);
    assert_eq!(mermaid.matches("subgraph ").count(), 2);
    // The repartition topic links the two sub-topologies.
    assert!(mermaid.contains("[/\"counts-store-repartition\"/]"));
    assert!(mermaid.contains("[(\"counts-store\")]"));
}
