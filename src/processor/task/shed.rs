//! Load shedding (opt-in): when input outruns the application, drop part
//! of it so that what is processed stays timely.
//!
//! A record's *lag* is the wall clock minus its timestamp when its task
//! takes it. Each task keeps a *shed level* `d` in `[0, 1]`, adjusted every
//! [`STEP_MS`] from the largest lag it saw in that step: above the bound
//! (`shed_max_lag_ms`) `d` rises by [`UP`]; below half the bound it falls
//! by [`DOWN`] per step of time since the last (so shedding stops as the
//! lag comes back under the bound, also after a pause in the input); in
//! between it stays. Skipping a record costs next to
//! nothing, so at level `d` the task consumes input `1 ÷ (1 − d)` times as
//! fast as it processes it, and `d` settles just above `1 − capacity ÷
//! input rate` with the lag between half the bound and the bound.
//!
//! Which records go is a function of the record alone: each gets a score in
//! `[0, 1)` and is shed when its score is below `d`. The level follows the
//! input with some delay; so that the bound holds meanwhile, a record whose
//! own lag is over the bound is shed whatever its score (the latency of
//! what is processed stays under the bound plus the time to the next
//! commit).
//!
//! * `sample`: the score is a hash of (topic, partition, offset): a uniform
//!   sample of the input is shed.
//! * `priority:<field>`: the value is a JSON object whose `<field>` is a
//!   number from 0 to 9 (missing or unreadable counts as 0; others are
//!   clamped); the score is `(priority + hash) ÷ 10`, so every record of a
//!   lower priority is shed before any of a higher one.
//!
//! Only records of the application's own source topics are shed (never
//! those of repartition topics: they were paid for upstream). Shed records
//! are counted (`weir_task_dropped_records_total{reason="shed"}`) and, when
//! `shed_topic` is set, written there with headers saying why, in the same
//! transaction as the output: under exactly-once every input record ends up
//! in the output's effects or in the shed topic, once.
//!
//! A record processed again after an abort is decided as before: each
//! task's decisions since its last commit, and its level, are kept in the
//! instance's [`ShedMemo`] (outside the task, which the runtime rebuilds
//! after an abort) and replayed; a commit forgets them.

use super::types::InputRecord;
pub use super::types::{ShedMemo, ShedPolicy, Shedding};

/// How long one step of the shed level's controller is, in ms.
pub const STEP_MS: i64 = 100;
/// How much the shed level rises after a step with lag above the bound.
pub const UP: f64 = 0.05;
/// How much it falls after a step with lag below half the bound (slower
/// than it rises: falling below `1 − capacity ÷ input` lets the lag grow
/// again).
pub const DOWN: f64 = 0.01;

/// The header of a shed record saying why it was shed.
pub const HEADER_REASON: &str = "weir.shed.reason";
/// The header with the record's source topic.
pub const HEADER_TOPIC: &str = "weir.shed.topic";
/// The header with the record's source partition.
pub const HEADER_PARTITION: &str = "weir.shed.partition";
/// The header with the record's source offset.
pub const HEADER_OFFSET: &str = "weir.shed.offset";

/// One task's shed level and its controller; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Shedder {
    level: f64,
    step_start_ms: i64,
    step_max_lag: i64,
}

/// What became of a record.
pub(crate) enum Verdict {
    /// Process it.
    Keep,
    /// Shed it; its lag (ms) and the level it was shed at (`None` when
    /// its own lag was over the bound).
    Shed { lag_ms: i64, level: Option<f64> },
}

impl Shedder {
    /// A controller starting at `level` (a rebuilt task's last level).
    pub(crate) fn at_level(level: f64) -> Self {
        Shedder {
            level,
            ..Shedder::default()
        }
    }

    /// Takes the lag of `input` at `now_ms` into the controller and says
    /// whether the record is shed.
    pub(crate) fn decide(
        &mut self,
        shedding: &Shedding,
        input: &InputRecord<'_>,
        now_ms: i64,
    ) -> Verdict {
        let lag_ms = now_ms - input.timestamp;
        self.step_max_lag = self.step_max_lag.max(lag_ms);
        if now_ms - self.step_start_ms >= STEP_MS {
            if self.step_max_lag > shedding.max_lag_ms {
                self.level = (self.level + UP).min(1.0);
            } else if self.step_max_lag < shedding.max_lag_ms / 2 {
                // Per step of time passed, not per step with records: after
                // a pause in the input the level is where it would be.
                let steps = ((now_ms - self.step_start_ms) / STEP_MS) as f64;
                self.level = (self.level - DOWN * steps).max(0.0);
            }
            self.step_start_ms = now_ms;
            self.step_max_lag = i64::MIN;
        }
        if lag_ms > shedding.max_lag_ms {
            Verdict::Shed {
                lag_ms,
                level: None,
            }
        } else if self.level > 0.0 && score(&shedding.policy, input) < self.level {
            Verdict::Shed {
                lag_ms,
                level: Some(self.level),
            }
        } else {
            Verdict::Keep
        }
    }

    /// The shed level now.
    pub(crate) fn level(&self) -> f64 {
        self.level
    }
}

/// The record's score in `[0, 1)`; see the module docs.
pub fn score(policy: &ShedPolicy, input: &InputRecord<'_>) -> f64 {
    let hash = uniform(input.topic, input.partition, input.offset);
    match policy {
        ShedPolicy::Sample => hash,
        ShedPolicy::Priority { field } => {
            let priority = input
                .value
                .and_then(|v| serde_json::from_slice::<serde_json::Value>(v).ok())
                .and_then(|v| v.get(field).and_then(serde_json::Value::as_f64))
                .unwrap_or(0.0)
                .clamp(0.0, 9.0)
                .floor();
            (priority + hash) / 10.0
        }
    }
}

/// A hash of a record's coordinates, uniform in `[0, 1)`.
fn uniform(topic: &str, partition: i32, offset: i64) -> f64 {
    // FNV-1a over the topic, then splitmix64 with partition and offset.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in topic.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut x = h ^ ((partition as u64) << 40) ^ (offset as u64);
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::{Headers, TaskId};

    fn record<'a>(offset: i64, timestamp: i64, value: &'a [u8], h: &'a Headers) -> InputRecord<'a> {
        InputRecord {
            topic: "in",
            partition: 0,
            offset,
            timestamp,
            headers: h,
            key: None,
            value: Some(value),
        }
    }

    fn shedding(policy: ShedPolicy) -> Shedding {
        Shedding {
            max_lag_ms: 1_000,
            policy,
            topic: None,
        }
    }

    #[test]
    fn the_sample_score_is_uniform_and_a_function_of_the_record() {
        let h = Headers::new();
        let scores: Vec<f64> = (0..100_000)
            .map(|o| score(&ShedPolicy::Sample, &record(o, 0, b"", &h)))
            .collect();
        let below = scores.iter().filter(|s| **s < 0.3).count() as f64 / 1e5;
        assert!((below - 0.3).abs() < 0.01, "{below}");
        assert_eq!(
            score(&ShedPolicy::Sample, &record(7, 0, b"", &h)),
            score(&ShedPolicy::Sample, &record(7, 99, b"x", &h)),
            "the same record, the same score"
        );
    }

    #[test]
    fn lower_priorities_score_lower() {
        let h = Headers::new();
        let policy = ShedPolicy::Priority {
            field: "p".to_string(),
        };
        let low = score(&policy, &record(1, 0, br#"{"p":2}"#, &h));
        let high = score(&policy, &record(2, 0, br#"{"p":3}"#, &h));
        let missing = score(&policy, &record(3, 0, b"not json", &h));
        assert!((0.2..0.3).contains(&low), "{low}");
        assert!((0.3..0.4).contains(&high), "{high}");
        assert!(missing < 0.1, "{missing}");
        assert!(score(&policy, &record(4, 0, br#"{"p":99}"#, &h)) >= 0.9);
    }

    #[test]
    fn the_level_rises_over_the_bound_holds_between_and_falls_below_half() {
        let h = Headers::new();
        let s = shedding(ShedPolicy::Sample);
        let mut shedder = Shedder::default();
        let mut now = 10_000;
        // Lag 2 s: over the bound for 10 steps.
        for i in 0..10 {
            now += STEP_MS;
            shedder.decide(&s, &record(i, now - 2_000, b"", &h), now);
        }
        assert!((shedder.level() - 0.5).abs() < 1e-9, "{}", shedder.level());
        // Lag 0.7 s: between half the bound and the bound, it holds.
        for i in 10..20 {
            now += STEP_MS;
            shedder.decide(&s, &record(i, now - 700, b"", &h), now);
        }
        assert!((shedder.level() - 0.5).abs() < 1e-9, "{}", shedder.level());
        // Lag 0.1 s: it falls.
        for i in 20..40 {
            now += STEP_MS;
            shedder.decide(&s, &record(i, now - 100, b"", &h), now);
        }
        assert!((shedder.level() - 0.3).abs() < 1e-9, "{}", shedder.level());
        // A record over the bound goes whatever its score.
        assert!(matches!(
            shedder.decide(&s, &record(99, now - 1_500, b"", &h), now),
            Verdict::Shed { level: None, .. }
        ));
        // At level 0.3, about 30 % of a uniform sample goes.
        let mut shed = 0;
        for i in 1_000..11_000 {
            if let Verdict::Shed { .. } = shedder.decide(&s, &record(i, now - 700, b"", &h), now) {
                shed += 1;
            }
        }
        assert!((2_800..3_200).contains(&shed), "{shed}");
    }

    #[test]
    fn after_a_pause_in_the_input_fresh_records_are_kept() {
        let h = Headers::new();
        let s = shedding(ShedPolicy::Sample);
        let mut shedder = Shedder::default();
        let mut now = 10_000;
        for i in 0..12 {
            now += STEP_MS;
            shedder.decide(&s, &record(i, now - 2_000, b"", &h), now);
        }
        assert!((shedder.level() - 0.6).abs() < 1e-9, "{}", shedder.level());
        // The overload ended; nothing came for 10 s, then a fresh record.
        now += 10_000;
        shedder.decide(&s, &record(100, now - 10, b"", &h), now);
        assert_eq!(shedder.level(), 0.0, "100 steps of time at 0.01 each");
        let kept = (101..1_101)
            .filter(|&i| {
                matches!(
                    shedder.decide(&s, &record(i, now - 10, b"", &h), now),
                    Verdict::Keep
                )
            })
            .count();
        assert_eq!(kept, 1_000, "nothing is shed once the level is 0");
    }

    /// Topics of the records a task sent.
    #[derive(Default)]
    struct Sent(Vec<String>);

    impl crate::processor::RecordCollector for Sent {
        fn send(
            &mut self,
            record: crate::processor::OutputRecord<'_>,
        ) -> Result<(), crate::processor::CollectorError> {
            self.0.push(record.topic.to_string());
            Ok(())
        }
    }

    fn passthrough_task(config: &super::super::TaskConfig) -> super::super::TaskInstance {
        use crate::topology::{Consumed, Produced, StreamsBuilder};
        let builder = StreamsBuilder::new();
        builder
            .stream::<String, String>("in", Consumed::new())
            .to("out", Produced::new());
        let topology = std::sync::Arc::new(builder.build().unwrap());
        let mut provider =
            |_: TaskId,
             spec: &crate::processor::StoreSpec<'_>|
             -> Result<Box<dyn crate::state::KeyValueStore>, crate::state::StoreError> {
                Ok(Box::new(crate::state::memory::InMemoryKeyValueStore::new(
                    spec.name,
                )))
            };
        let id = TaskId {
            subtopology: 0,
            partition: 0,
        };
        let mut task =
            super::super::TaskInstance::new(topology, id, config.clone(), &mut provider).unwrap();
        task.initialize(0, &mut Sent::default()).unwrap();
        task
    }

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    }

    #[test]
    fn a_record_processed_again_after_an_abort_is_decided_as_before() {
        let mut config = super::super::TaskConfig::new("app");
        config.shedding = Some(Shedding {
            max_lag_ms: 1_000,
            policy: ShedPolicy::Sample,
            topic: Some("shed".to_string()),
        });
        let h = Headers::new();
        let run =
            |task: &mut super::super::TaskInstance, offsets: std::ops::Range<i64>, lag: i64| {
                let mut sent = Sent::default();
                for o in offsets {
                    let value = format!("v{o}");
                    let input = InputRecord {
                        key: Some(value.as_bytes()),
                        ..record(o, now() - lag, value.as_bytes(), &h)
                    };
                    task.process(&input, &mut sent).unwrap();
                }
                sent.0
            };
        // 50 records 2 s old: over the bound, all shed.
        let mut first = passthrough_task(&config);
        let sent = run(&mut first, 0..50, 2_000);
        assert!(sent.iter().all(|t| t == "shed"), "{sent:?}");
        // The transaction aborts; the runtime rebuilds the task and the
        // same records come again, now fresh: decided as before.
        first.abort();
        first.close().unwrap();
        let mut again = passthrough_task(&config);
        let sent = run(&mut again, 0..50, 10);
        assert_eq!(sent.iter().filter(|t| *t == "shed").count(), 50, "{sent:?}");
        assert_eq!(again.metrics().shed, 50);
        // After a commit the decisions are final and forgotten: the memo
        // holds nothing for these offsets any more.
        again.commit(|_| None).unwrap();
        assert_eq!(
            config.shed_memo.recall(again.id(), &record(10, 0, b"", &h)),
            None
        );
    }

    #[test]
    fn policies_parse_and_a_bad_one_says_what_to_use() {
        assert_eq!("sample".parse::<ShedPolicy>(), Ok(ShedPolicy::Sample));
        assert_eq!(
            "priority:level".parse::<ShedPolicy>(),
            Ok(ShedPolicy::Priority {
                field: "level".to_string()
            })
        );
        let e = "random".parse::<ShedPolicy>().unwrap_err();
        assert!(e.contains("sample or priority:<json field>"), "{e}");
    }
}
