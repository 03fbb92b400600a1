//! The benchmark input and what each workload must output for it.
//!
//! Record `i` has key `k<n>` (`n` = a hash of `i` modulo the key
//! cardinality), a JSON [`Event`] value padded to the configured size, and a
//! timestamp spread evenly over ten minutes (so the window workload sees ten
//! or eleven one-minute windows). Everything is a pure function of `i`, so the
//! harness knows the exact final output of every workload. The join workload
//! also reads a table topic with one [`Profile`] per key, written before the
//! system starts.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// The workloads, in report order.
pub const WORKLOADS: &[&str] = &["passthrough", "stateless", "count", "window", "join"];

/// Span of input timestamps in the throughput phase.
pub const SPAN_MS: i64 = 10 * 60_000;
/// Tumbling window size of the window workload.
pub const WINDOW_MS: i64 = 60_000;
/// Grace of the window workload's windows.
pub const GRACE_MS: i64 = 10_000;

/// An input value.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Event {
    pub id: u64,
    pub user: String,
    pub amount: i64,
    pub kind: String,
    pub pad: String,
}

/// The stateless workload's output value: the event plus a derived field.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Enriched {
    pub id: u64,
    pub user: String,
    pub amount: i64,
    pub kind: String,
    pub pad: String,
    pub cents: i64,
}

/// The stateless workload's predicate (keeps about half the records).
pub fn keep(e: &Event) -> bool {
    e.amount < 50
}

/// The stateless workload's mapper.
pub fn enrich(e: Event) -> Enriched {
    Enriched {
        cents: e.amount * 100,
        id: e.id,
        user: e.user,
        amount: e.amount,
        kind: e.kind,
        pad: e.pad,
    }
}

/// A table row of the join workload (the table topic holds one per key).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Profile {
    pub user: String,
    pub tier: String,
    pub region: String,
}

/// The join workload's output value: the event and its key's profile.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Joined {
    pub id: u64,
    pub user: String,
    pub amount: i64,
    pub kind: String,
    pub pad: String,
    pub tier: String,
    pub region: String,
}

/// The profile of key `key` (a pure function of the key).
pub fn profile(key: &str) -> Profile {
    let h = key.bytes().fold(0u64, |h, b| mix(h ^ b as u64));
    Profile {
        user: key.to_string(),
        tier: ["free", "plus", "pro"][(h % 3) as usize].to_string(),
        region: ["eu", "us", "apac", "latam"][(h >> 8) as usize % 4].to_string(),
    }
}

/// The join workload's joiner.
pub fn join(e: &Event, p: &Profile) -> Joined {
    Joined {
        id: e.id,
        user: e.user.clone(),
        amount: e.amount,
        kind: e.kind.clone(),
        pad: e.pad.clone(),
        tier: p.tier.clone(),
        region: p.region.clone(),
    }
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The input of one run.
#[derive(Clone, Debug)]
pub struct Input {
    pub records: u64,
    pub keys: u64,
    pub value_bytes: usize,
    /// Timestamp of record 0.
    pub base_ts: i64,
}

impl Input {
    pub fn key(&self, i: u64) -> String {
        format!("k{:07}", mix(i) % self.keys.max(1))
    }

    pub fn event(&self, i: u64) -> Event {
        let key = self.key(i);
        let mut e = Event {
            id: i,
            user: key,
            amount: (mix(i ^ 0xABCD) % 100) as i64,
            kind: ["click", "view", "buy"][(i % 3) as usize].to_string(),
            pad: String::new(),
        };
        let len = serde_json::to_vec(&e).expect("json").len();
        e.pad = "x".repeat(self.value_bytes.saturating_sub(len));
        e
    }

    /// The keys of the join workload's table (its input keys; the warm-up
    /// keys are written separately, to their partitions).
    pub fn table_keys(&self) -> impl Iterator<Item = String> {
        (0..self.keys.max(1)).map(|n| format!("k{n:07}"))
    }

    /// Key of the warm-up record written (before the input) to `partition`.
    pub fn warm_key(partition: i32) -> String {
        format!("w{partition}")
    }

    /// The warm-up record's value: passes the stateless filter.
    pub fn warm_event(&self, partition: i32) -> Event {
        let mut e = self.event(0);
        e.user = Self::warm_key(partition);
        e.amount = 0;
        e
    }

    pub fn timestamp(&self, i: u64) -> i64 {
        self.base_ts + (i as i128 * SPAN_MS as i128 / self.records.max(1) as i128) as i64
    }
}

/// What a run must have output when it is done.
pub enum Expected {
    /// This many output records.
    Records(u64),
    /// The latest value (big-endian i64) per output key.
    Latest(HashMap<Vec<u8>, i64>),
}

/// The complete output of `workload` for `input`, apart from the output of
/// the warm-up records (one per partition, `partitions` of them, timestamp
/// `input.base_ts`; they may be written more than once, see `run.rs`).
pub fn expected(workload: &str, input: &Input, partitions: i32) -> Expected {
    match workload {
        // Every key has a profile, so the inner join outputs every record.
        "passthrough" | "join" => Expected::Records(input.records),
        "stateless" => Expected::Records(
            (0..input.records)
                .filter(|&i| keep(&input.event(i)))
                .count() as u64,
        ),
        "count" => {
            let mut m: HashMap<Vec<u8>, i64> = (0..partitions)
                .map(|p| (Input::warm_key(p).into_bytes(), 1))
                .collect();
            for i in 0..input.records {
                *m.entry(input.key(i).into_bytes()).or_insert(0) += 1;
            }
            Expected::Latest(m)
        }
        "window" => {
            let mut m: HashMap<Vec<u8>, i64> = (0..partitions)
                .map(|p| (window_key(&Input::warm_key(p), input.base_ts), 1))
                .collect();
            for i in 0..input.records {
                *m.entry(window_key(&input.key(i), input.timestamp(i)))
                    .or_insert(0) += 1;
            }
            Expected::Latest(m)
        }
        other => panic!("unknown workload {other}"),
    }
}

/// Start of the tumbling window holding `ts`.
pub fn window_start(ts: i64) -> i64 {
    ts - ts.rem_euclid(WINDOW_MS)
}

/// A windowed output key as Kafka Streams' `TimeWindowedSerializer` (and
/// Weir's `WindowedSerde::time`) writes it: the key, then the window start.
pub fn window_key(key: &str, ts: i64) -> Vec<u8> {
    let mut k = key.as_bytes().to_vec();
    k.extend_from_slice(&window_start(ts).to_be_bytes());
    k
}
