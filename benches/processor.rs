//! Benchmarks of the processor chain: the four benchmark workloads
//! (bench/harness/topologies.rs) run by a `TaskInstance` — the code the
//! stream thread runs per record — on batches of 1 000 input records, with a
//! flush of the record cache (10 MiB, the runtime's default) and a commit per
//! batch and a collector that only counts what it is given (no Kafka).
//! Stateful workloads run on in-memory and on RocksDB stores.
//!
//! Run: `cargo bench --bench processor` (figures of a run are in
//! BENCHMARKS.md's notes; this file asserts nothing about time).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use weir::processor::{
    CollectorError, Headers, InputRecord, OutputRecord, RecordCollector, StoreProvider, StoreSpec,
    TaskConfig, TaskId, TaskInstance,
};
use weir::state::{
    InMemoryKeyValueStore, InMemoryWindowStore, KeyValueStore, RocksDbKeyValueStore, RocksDbMemory,
    RocksDbWindowStore, StateConfig, StoreError, WindowStore,
};

#[path = "../bench/harness/topologies.rs"]
mod topologies;
#[path = "../bench/harness/workload.rs"]
#[allow(dead_code)]
mod workload;

const BATCH: u64 = 1_000;

/// Counts records and bytes; keeps nothing.
#[derive(Default)]
struct CountingCollector {
    records: u64,
    bytes: usize,
}

impl RecordCollector for CountingCollector {
    fn send(&mut self, record: OutputRecord<'_>) -> Result<(), CollectorError> {
        self.records += 1;
        self.bytes += record.key.map_or(0, <[u8]>::len) + record.value.map_or(0, <[u8]>::len);
        Ok(())
    }
}

struct Batch {
    keys: Vec<Vec<u8>>,
    values: Vec<Vec<u8>>,
    timestamps: Vec<i64>,
}

fn batch() -> Batch {
    let input = workload::Input {
        records: 100_000,
        keys: 10_000,
        value_bytes: 200,
        base_ts: 1_700_000_000_000,
    };
    Batch {
        keys: (0..BATCH).map(|i| input.key(i).into_bytes()).collect(),
        values: (0..BATCH)
            .map(|i| serde_json::to_vec(&input.event(i)).unwrap())
            .collect(),
        timestamps: (0..BATCH).map(|i| input.timestamp(i)).collect(),
    }
}

/// In-memory stores, or RocksDB key-value and window stores under a directory.
struct Provider<'a> {
    rocks: Option<(&'a std::path::Path, &'a RocksDbMemory)>,
}

impl StoreProvider for Provider<'_> {
    fn key_value_store(
        &mut self,
        _: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<Box<dyn KeyValueStore>, StoreError> {
        Ok(match self.rocks {
            Some((dir, mem)) => Box::new(RocksDbKeyValueStore::open(
                &dir.join(spec.name),
                spec.name,
                mem,
            )?),
            None => Box::new(InMemoryKeyValueStore::new(spec.name)),
        })
    }

    fn window_store(
        &mut self,
        _: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<Box<dyn WindowStore>, StoreError> {
        let (retention_ms, segment_ms) = spec.retention()?;
        Ok(match self.rocks {
            Some((dir, mem)) => Box::new(RocksDbWindowStore::open(
                &dir.join(spec.name),
                spec.name,
                mem,
                retention_ms,
                segment_ms,
            )?),
            None => Box::new(InMemoryWindowStore::new(
                spec.name,
                retention_ms,
                segment_ms,
            )?),
        })
    }
}

fn task(workload: &str, rocks: Option<(&std::path::Path, &RocksDbMemory)>) -> TaskInstance {
    let topology = Arc::new(topologies::build(workload, "in", "out", "table").unwrap());
    let id = TaskId {
        subtopology: 0,
        partition: 0,
    };
    let mut config = TaskConfig::new("bench");
    config.cache = Arc::new(weir::state::CacheBudget::new(10 << 20));
    let mut provider = Provider { rocks };
    let mut t = TaskInstance::new(topology, id, config, &mut provider).unwrap();
    t.initialize(0, &mut CountingCollector::default()).unwrap();
    t
}

fn chain(c: &mut Criterion) {
    let b = batch();
    let headers = Headers::new();
    let mut g = c.benchmark_group("processor_chain_1000_records");
    g.throughput(Throughput::Elements(BATCH));
    let dir = tempfile::tempdir().unwrap();
    let mem = RocksDbMemory::new(&StateConfig::default());
    let cases: [(&str, bool); 6] = [
        ("passthrough", false),
        ("stateless", false),
        ("count", false),
        ("count", true),
        ("window", false),
        ("window", true),
    ];
    for (workload, rocks) in cases {
        let sub = dir.path().join(format!("{workload}-{rocks}"));
        let mut t = task(workload, rocks.then_some((sub.as_path(), &mem)));
        let mut offset = 0i64;
        let label = if rocks { "rocksdb" } else { "in_memory" };
        g.bench_function(BenchmarkId::new(workload, label), |bench| {
            bench.iter(|| {
                let mut out = CountingCollector::default();
                for i in 0..BATCH as usize {
                    let input = InputRecord {
                        topic: "in",
                        partition: 0,
                        offset,
                        timestamp: b.timestamps[i],
                        headers: &headers,
                        key: Some(&b.keys[i]),
                        value: Some(&b.values[i]),
                    };
                    offset += 1;
                    t.process(&input, &mut out).unwrap();
                }
                t.flush(&mut out).unwrap();
                t.commit(|_| Some(offset)).unwrap();
                black_box(out.records + out.bytes as u64)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, chain);
criterion_main!(benches);
