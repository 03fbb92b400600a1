//! The benchmark workloads as Weir topologies, built with the public DSL
//! (bench/kafka-streams builds the same five with Kafka Streams).

use std::time::Duration;

use weir::serdes::{BytesSerde, I64Serde, JsonSerde, OptionSerde, StringSerde};
use weir::topology::{Consumed, Grouped, Joined, Materialized, Produced, StreamsBuilder, Topology};
use weir::windows::{TimeWindows, WindowedSerde};

use crate::workload::{self, Enriched, Event, Profile};

/// Builds `workload` reading `input` (and `table`, for the join) and
/// writing `output`.
pub fn build(workload: &str, input: &str, output: &str, table: &str) -> anyhow::Result<Topology> {
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
        "join" => {
            let profiles = b.table::<String, Profile>(
                table,
                Consumed::with(StringSerde, JsonSerde::new()),
                Materialized::as_("profiles"),
            );
            b.stream::<String, Event>(input, Consumed::with(StringSerde, JsonSerde::new()))
                .join_table(&profiles, workload::join, Joined::new())
                .to(
                    output,
                    Produced::with(StringSerde, JsonSerde::<workload::Joined>::new()),
                )
        }
        other => anyhow::bail!("unknown workload {other}"),
    }
    Ok(b.build()?)
}
