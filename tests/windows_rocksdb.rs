//! Windowed aggregations on RocksDB stores: the test driver closes its task
//! and a new driver reopens the *same* on-disk window, session and trigger
//! stores (no changelog restore), and emit-final continues with exactly one
//! result per window.

use std::path::PathBuf;
use std::time::Duration;

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::processor::{StoreProvider, StoreSpec, TaskId};
use weir::serdes::{I64Serde, OptionSerde, StringSerde};
use weir::state::{
    KeyValueStore, RocksDbKeyValueStore, RocksDbMemory, RocksDbSessionStore, RocksDbWindowStore,
    SessionStore, StateConfig, StoreError, WindowStore,
};
use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder, Topology};
use weir::windows::{EmitStrategy, TimeWindows, Windowed, WindowedSerde};

/// Opens every store in RocksDB under `dir/<task>/<store>`.
struct RocksProvider {
    dir: PathBuf,
    memory: RocksDbMemory,
}

impl RocksProvider {
    fn path(&self, task: TaskId, spec: &StoreSpec<'_>) -> PathBuf {
        let path = self.dir.join(task.to_string()).join(spec.name);
        std::fs::create_dir_all(&path).unwrap();
        path
    }
}

impl StoreProvider for RocksProvider {
    fn key_value_store(
        &mut self,
        task: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<Box<dyn KeyValueStore>, StoreError> {
        let path = self.path(task, spec);
        Ok(Box::new(RocksDbKeyValueStore::open(
            &path,
            spec.name,
            &self.memory,
        )?))
    }

    fn window_store(
        &mut self,
        task: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<Box<dyn WindowStore>, StoreError> {
        let (retention, segment) = spec.retention()?;
        let path = self.path(task, spec);
        Ok(Box::new(RocksDbWindowStore::open(
            &path,
            spec.name,
            &self.memory,
            retention,
            segment,
        )?))
    }

    fn session_store(
        &mut self,
        task: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<Box<dyn SessionStore>, StoreError> {
        let (retention, segment) = spec.retention()?;
        let path = self.path(task, spec);
        Ok(Box::new(RocksDbSessionStore::open(
            &path,
            spec.name,
            &self.memory,
            retention,
            segment,
        )?))
    }
}

fn topology() -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("in", Consumed::new())
        .group_by_key(Grouped::new())
        .windowed_by(
            TimeWindows::of_size_with_grace(Duration::from_millis(10), Duration::from_millis(5))
                .unwrap(),
        )
        .emit(EmitStrategy::OnWindowClose)
        .count(Materialized::as_("counts"))
        .to_stream()
        .to("out", Produced::new());
    builder.build().unwrap()
}

fn open(dir: &std::path::Path) -> TopologyTestDriver {
    let mut provider = RocksProvider {
        dir: dir.to_path_buf(),
        memory: RocksDbMemory::new(&StateConfig::default()),
    };
    TopologyTestDriver::with_store_provider(topology(), DriverConfig::new("app"), &mut provider)
        .unwrap()
}

fn pipe(
    driver: &mut TopologyTestDriver,
    key: &str,
    ts: i64,
) -> Vec<(Windowed<String>, Option<i64>)> {
    let input = TestInputTopic::new("in", StringSerde, StringSerde);
    driver
        .pipe(&input, key.to_string(), "v".to_string(), ts)
        .unwrap();
    let output = TestOutputTopic::new(
        "out",
        WindowedSerde::time(StringSerde, 10),
        OptionSerde::new(I64Serde),
    );
    driver.read_key_values(&output).unwrap()
}

fn w(key: &str, start: i64, value: i64) -> (Windowed<String>, Option<i64>) {
    (
        Windowed::new(key.to_string(), start, start + 10),
        Some(value),
    )
}

#[test]
fn emit_final_continues_on_reopened_rocksdb_stores() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = open(dir.path());
    assert_eq!(pipe(&mut first, "a", 1), vec![]);
    assert_eq!(pipe(&mut first, "a", 3), vec![]);
    assert_eq!(pipe(&mut first, "b", 20), vec![w("a", 0, 2)]);
    first.close().unwrap();

    let mut second = open(dir.path());
    // [0,10) was emitted before the close: a late record cannot reopen it.
    assert_eq!(pipe(&mut second, "a", 4), vec![]);
    assert_eq!(second.task_metrics(0).unwrap().late_dropped, 1);
    assert_eq!(pipe(&mut second, "b", 22), vec![]);
    // b's [20,30) holds the counts from both drivers.
    assert_eq!(pipe(&mut second, "a", 40), vec![w("b", 20, 2)]);
    second.close().unwrap();
}
