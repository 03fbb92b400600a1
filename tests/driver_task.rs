//! The task API as the runtime uses it, without the driver: a custom
//! collector and store provider, restore, initialize, process, commit.

use std::sync::Arc;

use weir::processor::{
    CollectorError, Headers, InputRecord, OutputKind, OutputRecord, RecordCollector, StoreSpec,
    TaskConfig, TaskError, TaskId, TaskInstance, TaskState,
};
use weir::state::{InMemoryKeyValueStore, KeyValueStore, StoreError};
use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder, Topology};

/// topic, partition, key, value, kind
type Sent = (
    String,
    Option<i32>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    OutputKind,
);

#[derive(Default)]
struct Collected(Vec<Sent>);

impl RecordCollector for Collected {
    fn send(&mut self, r: OutputRecord<'_>) -> Result<(), CollectorError> {
        self.0.push((
            r.topic.to_owned(),
            r.partition,
            r.key.map(<[u8]>::to_vec),
            r.value.map(<[u8]>::to_vec),
            r.kind,
        ));
        Ok(())
    }
}

fn word_count() -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream::<(), String>("lines", Consumed::new())
        .flat_map_values(|l: String| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .group_by(|_, w: &String| w.clone(), Grouped::new())
        .count(Materialized::as_("counts"))
        .to_stream()
        .to("counts-out", Produced::new());
    builder.build().unwrap()
}

#[test]
fn a_task_restores_processes_logs_to_its_partition_and_commits_offsets() {
    let topology = Arc::new(word_count());
    let id = TaskId {
        subtopology: 1,
        partition: 3,
    };
    let mut opened = Vec::new();
    let mut provider =
        |task: TaskId, spec: &StoreSpec<'_>| -> Result<Box<dyn KeyValueStore>, StoreError> {
            opened.push((
                task,
                spec.name.to_owned(),
                spec.changelog_topic.map(str::to_owned),
            ));
            Ok(Box::new(InMemoryKeyValueStore::new(spec.name)))
        };
    let mut task = TaskInstance::new(topology, id, TaskConfig::new("app"), &mut provider).unwrap();
    assert_eq!(
        opened,
        vec![(
            id,
            "counts".to_owned(),
            Some("app-counts-changelog".to_owned())
        )]
    );
    assert_eq!(
        task.source_topics().collect::<Vec<_>>(),
        vec!["app-counts-repartition"]
    );
    assert_eq!(
        task.changelog_topics().collect::<Vec<_>>(),
        vec![("counts", "app-counts-changelog")]
    );

    let mut out = Collected::default();
    let input = InputRecord {
        topic: "app-counts-repartition",
        partition: 3,
        offset: 7,
        timestamp: 100,
        headers: &Headers::new(),
        key: Some(b"a"),
        value: Some(b"a"),
    };
    // Not running yet: processing is refused; restoring is allowed.
    assert!(matches!(
        task.process(&input, &mut out),
        Err(TaskError::State {
            state: TaskState::Created,
            ..
        })
    ));
    task.restore("counts", b"a", Some(&5i64.to_be_bytes()))
        .unwrap();
    task.initialize(0, &mut out).unwrap();
    assert!(
        task.restore("counts", b"a", None).is_err(),
        "no restore after initialize"
    );

    task.process(&input, &mut out).unwrap();
    assert_eq!(task.stream_time(), 100);
    let six = Some(6i64.to_be_bytes().to_vec());
    assert_eq!(
        out.0,
        vec![
            (
                "app-counts-changelog".to_owned(),
                Some(3),
                Some(b"a".to_vec()),
                six.clone(),
                OutputKind::Changelog
            ),
            (
                "counts-out".to_owned(),
                None,
                Some(b"a".to_vec()),
                six,
                OutputKind::Sink
            ),
        ]
    );

    task.commit(|topic| (topic == "app-counts-changelog").then_some(41))
        .unwrap();
    assert_eq!(
        task.read_store("counts", |s| s.committed_offset()),
        Some(Some(41))
    );

    // An aborted transaction rolls the store back to the last commit.
    task.process(&input, &mut out).unwrap();
    task.abort();
    let value = task.read_store("counts", |s| s.get(b"a").unwrap()).unwrap();
    assert_eq!(value, Some(6i64.to_be_bytes().to_vec()));

    let unknown = InputRecord {
        topic: "lines",
        ..input
    };
    assert!(matches!(
        task.process(&unknown, &mut out),
        Err(TaskError::UnknownTopic { .. })
    ));
    task.close().unwrap();
    assert_eq!(task.state(), TaskState::Closed);
}
