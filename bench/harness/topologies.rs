//! The benchmark workloads as Weir topologies, built with the public DSL
//! (bench/kafka-streams builds the same four with Kafka Streams).

use std::time::Duration;

use weir::serdes::{BytesSerde, I64Serde, JsonSerde, OptionSerde, StringSerde};
use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder, Topology};
use weir::windows::{TimeWindows, WindowedSerde};

use crate::workload::{self, Enriched, Event};

/// Builds `workload` reading `input` and writing `output`.
pub fn build(workload: &str, input: &str, output: &str) -> anyhow::Result<Topology> {
    let b = StreamsBuilder::new();
    match workload {
        "passthrough" => b
            .stream::<Vec<u8>, Vec<u8>>(input, Consumed::with(BytesSerde, BytesSerde))
            .to(output, Produced::with(BytesSerde, BytesSerde)),
        "stateless" => b
            .stream::<String, Event>(input, Consumed::with(StringSerde, JsonSerde::new()))
            .filter(|_, e| workload::keep(e))
            .map_values(workload::enrich)
            .to(
                output,
                Produced::with(StringSerde, JsonSerde::<Enriched>::new()),
            ),
        "count" => b
            .stream::<String, Vec<u8>>(input, Consumed::with(StringSerde, BytesSerde))
            .group_by_key(Grouped::with(StringSerde, BytesSerde))
            .count(Materialized::as_("counts"))
            .to_stream()
            .to(
                output,
                Produced::with(StringSerde, OptionSerde::new(I64Serde)),
            ),
        "window" => b
            .stream::<String, Vec<u8>>(input, Consumed::with(StringSerde, BytesSerde))
            .group_by_key(Grouped::with(StringSerde, BytesSerde))
            .windowed_by(TimeWindows::of_size_with_grace(
                Duration::from_millis(workload::WINDOW_MS as u64),
                Duration::from_millis(workload::GRACE_MS as u64),
            )?)
            .count(Materialized::as_("window-counts"))
            .to_stream()
            .to(
                output,
                Produced::with(
                    WindowedSerde::time(StringSerde, workload::WINDOW_MS),
                    OptionSerde::new(I64Serde),
                ),
            ),
        other => anyhow::bail!("unknown workload {other}"),
    }
    Ok(b.build()?)
}
