//! The broker-only ceiling of this machine: how fast the broker takes the
//! passthrough input from one producer (produce-only) and hands it to one
//! `read_committed` consumer (consume-only), with nothing processing it.
//! A consume→produce system on the same broker and cores can go no faster
//! than the slower of the two (it does both at once), so Weir's
//! passthrough is reported as a share of that.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::run::{Settings, create_topics, delete_topics, load, now_ms, prepare};
use crate::workload::{self, Input};

/// Records per second of each half.
#[derive(Clone, Copy, Debug)]
pub struct Ceiling {
    pub produce: f64,
    pub consume: f64,
}

impl Ceiling {
    /// The slower half: what a consume→produce loop cannot exceed.
    pub fn limit(&self) -> f64 {
        self.produce.min(self.consume)
    }
}

/// Produces the passthrough input to a fresh topic, then reads it back.
pub fn measure(settings: &Settings, run_id: &str) -> Result<Ceiling> {
    let topic = format!("bench-{run_id}-ceiling");
    create_topics(&settings.bootstrap, &[&topic], settings.partitions)?;
    let result = (|| {
        let input = Input {
            records: settings.records,
            keys: settings.keys,
            value_bytes: settings.value_bytes,
            base_ts: workload::window_start(now_ms() - 3_600_000),
        };
        let prepared = prepare(&input)?;
        let produced = load(&settings.bootstrap, &topic, &input, &prepared)?;
        let consumed = consume(settings, &topic)?;
        Ok(Ceiling {
            produce: settings.records as f64 / produced.as_secs_f64(),
            consume: settings.records as f64 / consumed.as_secs_f64(),
        })
    })();
    let _ = delete_topics(&settings.bootstrap, &[&topic], &format!("{topic}-"));
    result
}

/// Reads every record of `topic` from the start; returns how long it took.
fn consume(settings: &Settings, topic: &str) -> Result<Duration> {
    // librdkafka's default fetch wait, unlike the harness's readers.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &settings.bootstrap)
        .set("group.id", format!("{topic}-reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..settings.partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    let started = Instant::now();
    consumer.assign(&tpl)?;
    let deadline = started + Duration::from_secs(settings.timeout_secs);
    let mut read = 0u64;
    while read < settings.records {
        if Instant::now() > deadline {
            bail!("consume-only read {read} of {} records", settings.records);
        }
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            m?;
            read += 1;
        }
    }
    Ok(started.elapsed())
}
