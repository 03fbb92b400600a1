//! Benchmarks of the serdes on the hot path: the benchmark workloads' JSON
//! event (deserialize at the source, serialize at the sink), strings, the
//! big-endian `i64` of counts, and time-windowed keys.
//!
//! Run: `cargo bench --bench serdes` (figures of a run are in BENCHMARKS.md's
//! notes; this file asserts nothing about time).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir::serdes::{I64Serde, JsonSerde, Serde, StringSerde};
use weir::windows::{Windowed, WindowedSerde};

#[path = "../bench/harness/workload.rs"]
#[allow(dead_code)]
mod workload;

fn input() -> workload::Input {
    workload::Input {
        records: 1_000,
        keys: 1_000,
        value_bytes: 200,
        base_ts: 0,
    }
}

fn json(c: &mut Criterion) {
    let event = input().event(42);
    let serde = JsonSerde::<workload::Event>::new();
    let mut bytes = Vec::new();
    serde.serialize("t", &event, &mut bytes).unwrap();
    let mut g = c.benchmark_group("json_event_200b");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("deserialize", |b| {
        b.iter(|| serde.deserialize("t", black_box(&bytes)).unwrap())
    });
    let mut out = Vec::with_capacity(256);
    g.bench_function("serialize", |b| {
        b.iter(|| {
            out.clear();
            serde.serialize("t", black_box(&event), &mut out).unwrap();
        })
    });
    g.finish();
}

fn primitives(c: &mut Criterion) {
    let mut g = c.benchmark_group("primitives");
    let key = "k0001234".to_string();
    let mut out = Vec::with_capacity(64);
    g.bench_function("string_serialize", |b| {
        b.iter(|| {
            out.clear();
            StringSerde
                .serialize("t", black_box(&key), &mut out)
                .unwrap();
        })
    });
    g.bench_function("string_deserialize", |b| {
        b.iter(|| {
            StringSerde
                .deserialize("t", black_box(key.as_bytes()))
                .unwrap()
        })
    });
    g.bench_function("i64_roundtrip", |b| {
        b.iter(|| {
            out.clear();
            I64Serde.serialize("t", black_box(&42), &mut out).unwrap();
            I64Serde.deserialize("t", &out).unwrap()
        })
    });
    let windowed = WindowedSerde::time(StringSerde, 60_000);
    let wkey = Windowed::new(key.clone(), 120_000, 180_000);
    g.bench_function("windowed_key_roundtrip", |b| {
        b.iter(|| {
            out.clear();
            windowed.serialize("t", black_box(&wkey), &mut out).unwrap();
            windowed.deserialize("t", &out).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, json, primitives);
criterion_main!(benches);
