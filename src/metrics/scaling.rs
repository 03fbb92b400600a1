//! The scaling signal: how many instances the application needs to keep up
//! with its input, after DS2 (Kalavri et al., OSDI '18).
//!
//! # The model
//!
//! Every `scaling_window_ms` the sampler reads this instance's own series
//! and computes, per sub-topology `s` (over the tasks of `s` it owns):
//!
//! * **true rate** `μ_s` = records processed ÷ busy seconds
//!   (`weir_task_processed_records_total` ÷ `weir_task_busy_seconds_total`):
//!   what one stream thread processes per second while it does nothing
//!   else. Busy time is measured around the processing of each run of
//!   records, so polls, commits and waits for input do not count.
//! * **input rate** `λ_s` = growth of the end offsets (high watermarks) of
//!   its source partitions per second: what arrives, whether or not it is
//!   processed. The sampler asks the broker for them (ListOffsets) at the
//!   start and end of each window. librdkafka's statistics, which give
//!   `weir_consumer_lag_records`, are not enough here: they only learn a
//!   partition's end from its fetches, and a thread whose buffers are full
//!   pauses fetching, so an overloaded instance — the one that needs the
//!   answer — saw only part of its input (measured: 1,279 of 2,100
//!   records/s written). A partition the broker did not answer for falls
//!   back to the statistics' growth. (Processed plus lag growth would be
//!   the same in the long run, but the consumer's position moves in
//!   fetches of up to `buffered_records_per_partition` records, which a
//!   10 s window sees.)
//! * **threads needed** `n_s = λ_s × (1 + headroom) ÷ μ_s` on this
//!   instance's partitions, scaled to all partitions of `s`
//!   (`× tasks_total ÷ tasks_here`, assuming the partitions carry equal
//!   load), and capped at `tasks_total`: each task runs on one thread, so a
//!   sub-topology cannot use more threads than it has partitions. A capped
//!   answer says so (`capped_by_partitions`); more partitions are then the
//!   only way to more throughput.
//!
//! Each sub-topology is a queue served by the threads, and a thread serves
//! every sub-topology's tasks in turn, so the threads needed add up:
//! `Σ n_s`. Tasks are whole, though: with `P_s` tasks each needing
//! `n_s ÷ P_s` of a thread, a thread holds at most `k = ⌊P_s ÷ n_s⌋` of
//! them, so `s` takes `⌈P_s ÷ k⌉` threads (4 partitions needing 2.4
//! threads take 4: 3 threads would leave one with two tasks, 1.2 threads
//! of work). The answer is `instances = ⌈max(⌈Σ n_s⌉, max_s ⌈P_s ÷ k_s⌉)
//! ÷ num_stream_threads⌉` (at least 1). Like DS2 the
//! model sizes for the current rate; a backlog already built up is drained
//! by the headroom, not sized for.
//!
//! Every instance computes the answer from its own share; the instances of
//! one application agree as long as their partitions carry similar load.
//!
//! The lag comes from librdkafka's statistics (every 5 s): its growth is
//! taken over the time between the two statistics the samples saw, not
//! over the window. A window without new statistics for a partition, or
//! in which a partition arrived (start-up, a rebalance), gives no answer:
//! its lag growth is unknown. The window (`scaling_window_ms`, default
//! 10 s) should be longer than the statistics interval.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::Metrics;
use super::sample::{Sample, delta, subtopology_of_task};

/// What the model needs besides the samples.
#[derive(Clone, Debug)]
pub struct ScalingInputs {
    /// Tasks (partitions) of each sub-topology.
    pub tasks_per_subtopology: Vec<i32>,
    /// The sub-topology that reads each source topic.
    pub subtopology_of_topic: HashMap<String, u32>,
    /// `num_stream_threads` of an instance.
    pub threads_per_instance: usize,
    /// `scaling_headroom_percent`.
    pub headroom_percent: u32,
}

/// The answer of one window, and how it was reached.
#[derive(Clone, Debug, PartialEq)]
pub struct Recommendation {
    /// Instances needed (at least 1).
    pub instances: u64,
    /// Threads needed over all sub-topologies.
    pub threads: f64,
    /// Some sub-topology would need more threads than it has partitions.
    pub capped_by_partitions: bool,
    /// Per sub-topology.
    pub subtopologies: Vec<SubtopologyLoad>,
    /// Length of the window, seconds.
    pub window_seconds: f64,
}

/// One sub-topology's figures over a window.
#[derive(Clone, Debug, PartialEq)]
pub struct SubtopologyLoad {
    /// Its number.
    pub id: u32,
    /// Its tasks in all.
    pub tasks_total: i32,
    /// Its tasks this instance owns (with a processed-records series).
    pub tasks_here: usize,
    /// Records processed here per second.
    pub processed_rate: f64,
    /// Busy seconds per second, over its tasks here.
    pub busy_ratio: f64,
    /// Records per busy second (one thread's capacity); `None` without
    /// busy time in the window.
    pub true_rate: Option<f64>,
    /// Lag of its source partitions here at the window's end.
    pub lag: f64,
    /// Lag growth per second over the window.
    pub lag_growth: f64,
    /// Input arriving here per second (end offset growth).
    pub input_rate: f64,
    /// Threads all its partitions need (capped at `tasks_total`); `None`
    /// when input arrives but nothing was processed to measure a rate.
    pub threads: Option<f64>,
    /// `threads` was capped by the partition count.
    pub capped_by_partitions: bool,
}

/// True when both samples hold the lag of every source partition of every
/// task of `after`, from different statistics: the lag growth of a
/// partition that just arrived (or whose statistics have not come again)
/// is unknown, and would pass for none.
fn lag_known(inputs: &ScalingInputs, before: &Sample, after: &Sample) -> bool {
    after.tasks.keys().all(|task| {
        let Some((sub, partition)) = task
            .split_once('_')
            .and_then(|(s, p)| Some((s.parse::<u32>().ok()?, p.parse::<i32>().ok()?)))
        else {
            return true;
        };
        inputs
            .subtopology_of_topic
            .iter()
            .filter(|(_, s)| **s == sub)
            .all(|(topic, _)| {
                let key = (topic.clone(), partition);
                match (before.lag.get(&key), after.lag.get(&key)) {
                    (Some((_, _, was)), Some((_, _, at))) => at > was,
                    _ => false,
                }
            })
    })
}

/// The threads a sub-topology needing `threads` over `tasks` tasks takes
/// when tasks are whole: each task needs `threads ÷ tasks` of a thread, a
/// thread holds at most `k = ⌊tasks ÷ threads⌋` of them (at least 1), and
/// the assignor spreads the tasks evenly, so `⌈tasks ÷ k⌉` threads.
fn packed_threads(threads: f64, tasks: i32) -> u64 {
    if threads <= 0.0 || tasks <= 0 {
        return 0;
    }
    let per_thread = (f64::from(tasks) / threads).floor().max(1.0) as u64;
    (tasks as u64).div_ceil(per_thread)
}

/// Computes the recommendation from two samples of one instance; `None`
/// when the lag of some partition it owns is not known in both (see
/// [`lag_known`]): the sampler then waits for the next window.
pub fn recommend(
    inputs: &ScalingInputs,
    before: &Sample,
    after: &Sample,
) -> Option<Recommendation> {
    if !lag_known(inputs, before, after) {
        return None;
    }
    let dt = after
        .at
        .saturating_duration_since(before.at)
        .as_secs_f64()
        .max(1e-3);
    let headroom = 1.0 + f64::from(inputs.headroom_percent) / 100.0;
    let mut subtopologies = Vec::new();
    for (id, &tasks_total) in inputs.tasks_per_subtopology.iter().enumerate() {
        let id = id as u32;
        let (mut processed, mut busy, mut tasks_here) = (0.0, 0.0, 0);
        for (task, &(p, b)) in &after.tasks {
            if subtopology_of_task(task) != Some(id) {
                continue;
            }
            tasks_here += 1;
            let was = before.tasks.get(task);
            processed += delta(was.map(|w| w.0), p);
            busy += delta(was.map(|w| w.1), b);
        }
        // Each partition's growth over the time between its two
        // statistics (not the window: statistics come every few seconds).
        let (mut lag, mut lag_growth, mut arrival) = (0.0, 0.0, 0.0);
        for ((topic, partition), &(now, end, at)) in &after.lag {
            if inputs.subtopology_of_topic.get(topic) != Some(&id) {
                continue;
            }
            lag += now;
            let key = (topic.clone(), *partition);
            // The end offsets the broker gave at both ends of the window,
            // else those of the statistics.
            let asked = before.ends.get(&key).zip(after.ends.get(&key));
            if let Some((end_then, end)) = asked {
                arrival += (end - end_then).max(0.0) / dt;
            }
            if let Some(&(then, end_then, was)) = before.lag.get(&key) {
                let span = at.saturating_duration_since(was).as_secs_f64();
                if span > 0.0 {
                    lag_growth += (now - then) / span;
                    if asked.is_none() {
                        arrival += (end - end_then).max(0.0) / span;
                    }
                }
            }
        }
        let processed_rate = processed / dt;
        let input_rate = arrival;
        let true_rate = (busy > 0.0 && processed > 0.0).then(|| processed / busy);
        let share = if tasks_here > 0 {
            f64::from(tasks_total) / tasks_here as f64
        } else {
            0.0
        };
        let needed = match true_rate {
            Some(mu) => Some(input_rate * headroom / mu * share),
            None if input_rate == 0.0 => Some(0.0),
            None => None,
        };
        let capped = needed.is_some_and(|n| n > f64::from(tasks_total));
        subtopologies.push(SubtopologyLoad {
            id,
            tasks_total,
            tasks_here,
            processed_rate,
            busy_ratio: busy / dt,
            true_rate,
            lag,
            lag_growth,
            input_rate,
            threads: needed.map(|n| n.min(f64::from(tasks_total))),
            capped_by_partitions: capped,
        });
    }
    let threads: f64 = subtopologies.iter().filter_map(|s| s.threads).sum();
    // Tasks are whole: the busiest thread gets ⌈tasks ÷ threads⌉ of them.
    let packed = subtopologies
        .iter()
        .filter_map(|s| Some(packed_threads(s.threads?, s.tasks_total)))
        .max()
        .unwrap_or(0);
    let per_instance = inputs.threads_per_instance.max(1) as f64;
    let threads_whole = (threads.ceil() as u64).max(packed);
    let instances = ((threads_whole as f64 / per_instance).ceil() as u64).max(1);
    Some(Recommendation {
        instances,
        threads,
        capped_by_partitions: subtopologies.iter().any(|s| s.capped_by_partitions),
        subtopologies,
        window_seconds: dt,
    })
}

impl Recommendation {
    /// The `GET /scaling` body.
    pub fn to_json(&self, inputs: &ScalingInputs) -> Value {
        let round = |x: f64| (x * 1000.0).round() / 1000.0;
        json!({
            "recommended_instances": self.instances,
            "threads_needed": round(self.threads),
            "threads_per_instance": inputs.threads_per_instance,
            "headroom_percent": inputs.headroom_percent,
            "capped_by_partitions": self.capped_by_partitions,
            "window_seconds": round(self.window_seconds),
            "subtopologies": self.subtopologies.iter().map(|s| json!({
                "subtopology": s.id,
                "tasks_total": s.tasks_total,
                "tasks_here": s.tasks_here,
                "input_rate": round(s.input_rate),
                "processed_rate": round(s.processed_rate),
                "lag_records": round(s.lag),
                "lag_growth_per_second": round(s.lag_growth),
                "busy_ratio": round(s.busy_ratio),
                "true_rate_per_thread": s.true_rate.map(round),
                "threads_needed": s.threads.map(round),
                "capped_by_partitions": s.capped_by_partitions,
            })).collect::<Vec<_>>(),
            "model": "input_rate = growth of the source partitions' end offsets; true_rate_per_thread = records processed per busy second; threads_needed = input_rate * (1 + headroom) / true_rate_per_thread, scaled from this instance's tasks to all, capped at the partition count; tasks are whole, so a sub-topology takes ceil(tasks / floor(tasks / threads_needed)) threads; instances = ceil(max(ceil(sum of threads_needed), max of those) / threads_per_instance)",
        })
    }
}

/// The latest answer, for `GET /scaling`, and the latest live snapshot
/// (`GET /live`, [`super::live`]).
#[derive(Default)]
pub struct ScalingView {
    scaling: Mutex<Option<Value>>,
    live: Mutex<Option<Value>>,
}

impl ScalingView {
    /// The latest `GET /scaling` body, `None` before the first window.
    pub fn latest(&self) -> Option<Value> {
        self.scaling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The latest live snapshot, `None` before the first.
    pub fn live(&self) -> Option<Value> {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, body: Value) {
        *self.scaling.lock().unwrap_or_else(|p| p.into_inner()) = Some(body);
    }

    fn set_live(&self, body: Value) {
        *self.live.lock().unwrap_or_else(|p| p.into_inner()) = Some(body);
    }
}

/// Asks the broker for the end offsets (high watermarks) of partitions;
/// those it could not get are left out.
pub type EndOffsets = Box<dyn FnMut(&[(String, i32)]) -> BTreeMap<(String, i32), f64> + Send>;

/// A sample with the end offsets of the partitions it has lag for.
fn sample_with_ends(metrics: &Metrics, end_offsets: &mut EndOffsets) -> Sample {
    let mut sample = Sample::read(metrics);
    let partitions: Vec<(String, i32)> = sample.lag.keys().cloned().collect();
    if !partitions.is_empty() {
        sample.ends = end_offsets(&partitions);
    }
    sample
}

/// Starts the sampler thread: every `window` it computes the
/// recommendation, publishes the gauges and the `GET /scaling` body, until
/// `shutdown`. `end_offsets` asks the broker for the input's end offsets.
pub(crate) fn start(
    metrics: Arc<Metrics>,
    inputs: ScalingInputs,
    window: Duration,
    view: Arc<ScalingView>,
    shutdown: Arc<AtomicBool>,
    mut end_offsets: EndOffsets,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("weir-scaling".into())
        .spawn(move || {
            let mut before = sample_with_ends(&metrics, &mut end_offsets);
            let mut live_before = before.clone();
            while !shutdown.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                if live_before.at.elapsed() >= super::live::INTERVAL {
                    let now = Sample::read(&metrics);
                    view.set_live(super::live::snapshot(&live_before, &now));
                    live_before = now;
                }
                if before.at.elapsed() < window {
                    continue;
                }
                let after = sample_with_ends(&metrics, &mut end_offsets);
                let Some(answer) = recommend(&inputs, &before, &after) else {
                    before = after;
                    continue;
                };
                metrics.recommended_instances.set(answer.instances as i64);
                for s in &answer.subtopologies {
                    let label = [s.id.to_string()];
                    let label = [label[0].as_str()];
                    metrics
                        .subtopology_input_rate
                        .with_label_values(&label)
                        .set(s.input_rate);
                    if let Some(mu) = s.true_rate {
                        metrics
                            .subtopology_true_rate
                            .with_label_values(&label)
                            .set(mu);
                    }
                }
                view.set(answer.to_json(&inputs));
                before = after;
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn inputs(threads: usize) -> ScalingInputs {
        ScalingInputs {
            tasks_per_subtopology: vec![4, 2],
            subtopology_of_topic: HashMap::from([("in".to_string(), 0), ("rep".to_string(), 1)]),
            threads_per_instance: threads,
            headroom_percent: 20,
        }
    }

    /// A sample at `at` whose lag statistics came at the same moment; `lag`
    /// holds (topic, partition, lag, end offset).
    fn sample(at: Instant, tasks: &[(&str, f64, f64)], lag: &[(&str, i32, f64, f64)]) -> Sample {
        Sample {
            at,
            tasks: tasks
                .iter()
                .map(|(t, p, b)| (t.to_string(), (*p, *b)))
                .collect(),
            lag: lag
                .iter()
                .map(|(t, p, l, e)| ((t.to_string(), *p), (*l, *e, at)))
                .collect(),
            ends: BTreeMap::new(),
            nodes: BTreeMap::new(),
            drops: BTreeMap::new(),
        }
    }

    #[test]
    fn an_instance_that_falls_behind_is_told_how_many_more_it_needs() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(10);
        // Sub-topology 0, all 4 tasks here: 10,000 records in 10 s, busy
        // 10 s in all (one thread saturated), true rate 1,000/s; the end
        // offsets grew by 30,000 (the lag by 20,000): input 3,000/s.
        // Sub-topology 1: idle.
        let before = sample(
            t0,
            &[("0_0", 0.0, 0.0), ("0_1", 0.0, 0.0)],
            &[
                ("in", 0, 100.0, 100.0),
                ("in", 1, 0.0, 0.0),
                ("in", 2, 0.0, 0.0),
                ("in", 3, 0.0, 0.0),
            ],
        );
        let after = sample(
            t1,
            &[
                ("0_0", 5_000.0, 5.0),
                ("0_1", 2_500.0, 2.5),
                ("0_2", 2_500.0, 2.5),
                ("0_3", 0.0, 0.0),
            ],
            &[
                ("in", 0, 10_100.0, 15_100.0),
                ("in", 1, 10_000.0, 15_000.0),
                ("in", 2, 0.0, 0.0),
                ("in", 3, 0.0, 0.0),
            ],
        );
        let r = recommend(&inputs(1), &before, &after).unwrap();
        let s0 = &r.subtopologies[0];
        assert_eq!(s0.tasks_here, 4);
        assert!((s0.true_rate.unwrap() - 1_000.0).abs() < 1e-6);
        assert!((s0.input_rate - 3_000.0).abs() < 1e-6, "{}", s0.input_rate);
        // 3,000 × 1.2 / 1,000 = 3.6 threads → 4 instances of one thread.
        assert!((r.threads - 3.6).abs() < 1e-6, "{}", r.threads);
        assert_eq!(r.instances, 4);
        assert_eq!(
            packed_threads(2.4, 4),
            4,
            "3 threads: one would hold 2 tasks"
        );
        assert_eq!(packed_threads(1.9, 4), 2);
        assert_eq!(packed_threads(0.3, 4), 1);
        assert_eq!(packed_threads(2.0, 8), 2);
        assert!(!r.capped_by_partitions);
        assert_eq!(r.subtopologies[1].threads, Some(0.0));
        // Two threads per instance: 2 instances.
        assert_eq!(recommend(&inputs(2), &before, &after).unwrap().instances, 2);
    }

    #[test]
    fn the_end_offsets_asked_of_the_broker_count_where_paused_statistics_lag() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(10);
        let tasks = |p: f64, b: f64| [("0_0", p, b), ("0_1", p, b), ("0_2", p, b), ("0_3", p, b)];
        // The consumer paused all four partitions (full buffers): the
        // statistics saw no end offset move, while the broker's grew by
        // 5,000 each (2,000 records/s in all).
        let stale = [
            ("in", 0, 1_000.0, 1_000.0),
            ("in", 1, 1_000.0, 1_000.0),
            ("in", 2, 1_000.0, 1_000.0),
            ("in", 3, 1_000.0, 1_000.0),
        ];
        let mut before = sample(t0, &tasks(0.0, 0.0), &stale);
        let mut after = sample(t1, &tasks(1_750.0, 2.5), &stale);
        let paused = recommend(&inputs(1), &before, &after).unwrap();
        assert_eq!(paused.subtopologies[0].input_rate, 0.0, "statistics alone");
        for p in 0..4 {
            before.ends.insert(("in".to_string(), p), 1_000.0);
            after.ends.insert(("in".to_string(), p), 6_000.0);
        }
        // One partition the broker did not answer for at the end: its
        // statistics count (no growth).
        after.ends.remove(&("in".to_string(), 3));
        let r = recommend(&inputs(1), &before, &after).unwrap();
        let s0 = &r.subtopologies[0];
        assert!((s0.input_rate - 1_500.0).abs() < 1e-6, "{}", s0.input_rate);
        // 7,000 records in 10 busy seconds: 700/s; 1,500 × 1.2 / 700.
        assert!((r.threads - 1_500.0 * 1.2 / 700.0).abs() < 1e-6);
        assert_eq!(r.instances, 4, "2.57 threads over 4 tasks take 4");
    }

    #[test]
    fn more_threads_than_partitions_are_capped_and_said_so() {
        let t0 = Instant::now();
        let before = sample(t0, &[], &[("rep", 0, 900.0, 900.0)]);
        // Half the partitions here, input 1.2 × 2 × the true rate.
        let after = sample(
            t0 + Duration::from_secs(1),
            &[("1_0", 100.0, 1.0)],
            &[("rep", 0, 900.0, 1_000.0)],
        );
        let r = recommend(&inputs(1), &before, &after).unwrap();
        let s1 = &r.subtopologies[1];
        assert_eq!((s1.tasks_here, s1.tasks_total), (1, 2));
        assert!(s1.capped_by_partitions);
        assert_eq!(s1.threads, Some(2.0), "capped at its 2 partitions");
        assert!(r.capped_by_partitions);
        assert_eq!(r.instances, 2);
        let json = r.to_json(&inputs(1));
        assert_eq!(json["recommended_instances"], 2);
        assert_eq!(json["subtopologies"][1]["capped_by_partitions"], true);
    }

    #[test]
    fn lag_growth_is_measured_between_the_statistics_not_over_the_window() {
        let t0 = Instant::now();
        let mut before = sample(t0, &[("0_0", 0.0, 0.0)], &[("in", 0, 0.0, 0.0)]);
        let mut after = sample(
            t0 + Duration::from_secs(10),
            &[("0_0", 1_000.0, 1.0)],
            &[("in", 0, 5_000.0, 5_500.0)],
        );
        // The statistics came 5 s apart within the 10 s window.
        before.lag.get_mut(&("in".to_string(), 0)).unwrap().2 = t0 + Duration::from_secs(3);
        after.lag.get_mut(&("in".to_string(), 0)).unwrap().2 = t0 + Duration::from_secs(8);
        let r = recommend(&inputs(1), &before, &after).unwrap();
        let s0 = &r.subtopologies[0];
        assert!((s0.lag_growth - 1_000.0).abs() < 1e-6, "{}", s0.lag_growth);
        assert!((s0.input_rate - 1_100.0).abs() < 1e-6, "{}", s0.input_rate);
        // No new statistics in the window: no answer.
        after.lag.get_mut(&("in".to_string(), 0)).unwrap().2 = t0 + Duration::from_secs(3);
        assert_eq!(recommend(&inputs(1), &before, &after), None);
    }

    #[test]
    fn a_window_in_which_a_partition_arrived_gives_no_answer() {
        let t0 = Instant::now();
        let before = sample(t0, &[("0_0", 0.0, 0.0)], &[("in", 0, 0.0, 0.0)]);
        let after = sample(
            t0 + Duration::from_secs(10),
            &[("0_0", 100.0, 0.1), ("0_1", 100.0, 0.1)],
            &[("in", 0, 0.0, 100.0), ("in", 1, 5_000.0, 5_000.0)],
        );
        assert_eq!(recommend(&inputs(1), &before, &after), None);
    }

    #[test]
    fn an_idle_application_needs_one_instance_and_a_reset_counter_counts_from_zero() {
        let t0 = Instant::now();
        let before = sample(t0, &[("0_0", 500.0, 1.0)], &[("in", 0, 0.0, 500.0)]);
        let after = sample(
            t0 + Duration::from_secs(10),
            &[("0_0", 0.0, 0.0)],
            &[("in", 0, 0.0, 500.0)],
        );
        let r = recommend(&inputs(1), &before, &after).unwrap();
        assert_eq!(r.instances, 1);
        assert_eq!(r.threads, 0.0);
        // The task reopened (counter reset) and processed 100 in 0.1 s busy.
        let after = sample(
            t0 + Duration::from_secs(10),
            &[("0_0", 100.0, 0.1)],
            &[("in", 0, 0.0, 500.0)],
        );
        let r = recommend(&inputs(1), &before, &after).unwrap();
        assert!((r.subtopologies[0].true_rate.unwrap() - 1_000.0).abs() < 1e-6);
        assert!((r.subtopologies[0].processed_rate - 10.0).abs() < 1e-6);
    }
}
