//! Notices an input partition the consumer has stopped fetching and sets
//! its fetch position again.
//!
//! After broker kills the chaos harness saw a partition with records to
//! read that librdkafka no longer fetched for minutes while the thread ran
//! and polled (ARCHITECTURE.md, "Failures of the cluster"). The consumer's
//! statistics (every 5 s) give each partition's fetch state, next fetch
//! offset, fetch queue and end offset; a partition the thread waits for
//! (assigned, not paused, nothing buffered) whose next fetch offset stayed
//! put for [`STUCK_AFTER`] with records after it and none queued is stuck,
//! and the thread seeks it to the position it needs next, which restarts
//! librdkafka's fetch state machine for that partition.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::Statistics;

/// How long a partition may wait with records to fetch and none fetched.
pub(super) const STUCK_AFTER: Duration = Duration::from_secs(30);

/// One partition's fetch progress from a statistics document.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FetchSample {
    pub topic: String,
    pub partition: i32,
    /// librdkafka's fetch state (`active`, `offset-query`,
    /// `validate-epoch-wait`, …).
    pub state: String,
    /// The next offset to fetch (negative when logical or unknown).
    pub next_offset: i64,
    /// The offset the consumer can read up to: the last stable offset
    /// under `read_committed`, else the high watermark (negative when
    /// unknown).
    pub end_offset: i64,
    /// Records fetched and not yet polled.
    pub queued: i64,
}

/// The latest statistics' samples, handed from the consumer's context to
/// the thread's loop.
pub(crate) type FetchSamples = Arc<Mutex<Option<Vec<FetchSample>>>>;

/// Hands the latest samples over (replacing any not yet taken).
pub(super) fn put(shared: &FetchSamples, latest: Vec<FetchSample>) {
    *shared.lock().unwrap_or_else(|p| p.into_inner()) = Some(latest);
}

/// Takes the samples handed over since the last call, if any.
pub(super) fn take(shared: &FetchSamples) -> Option<Vec<FetchSample>> {
    shared.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// The samples of the partitions the application assigned.
pub(crate) fn samples(statistics: &Statistics, read_committed: bool) -> Vec<FetchSample> {
    let mut out = Vec::new();
    for (topic, t) in &statistics.topics {
        for p in t.partitions.values() {
            if p.partition < 0 || !p.desired {
                continue;
            }
            out.push(FetchSample {
                topic: topic.clone(),
                partition: p.partition,
                state: p.fetch_state.clone(),
                next_offset: p.next_offset,
                end_offset: if read_committed {
                    p.ls_offset
                } else {
                    p.hi_offset
                },
                queued: p.fetchq_cnt,
            });
        }
    }
    out
}

/// A partition found stuck.
#[derive(Debug, PartialEq)]
pub(super) struct Stuck {
    pub topic: String,
    pub partition: i32,
    pub state: String,
    pub next_offset: i64,
    pub end_offset: i64,
}

struct Progress {
    next_offset: i64,
    since: Instant,
}

/// Each watched partition's next fetch offset and since when it has not
/// moved.
#[derive(Default)]
pub(super) struct FetchWatch {
    seen: HashMap<(String, i32), Progress>,
}

impl FetchWatch {
    /// Notes `samples` taken at `now`; returns the partitions stuck for
    /// [`STUCK_AFTER`] among those `waits` says the thread waits for.
    /// A partition reported stuck is watched afresh (reported again only
    /// after another [`STUCK_AFTER`]).
    pub(super) fn observe(
        &mut self,
        samples: &[FetchSample],
        waits: impl Fn(&str, i32) -> bool,
        now: Instant,
    ) -> Vec<Stuck> {
        let mut stuck = Vec::new();
        let mut seen = HashMap::with_capacity(samples.len());
        for s in samples {
            let behind = s.end_offset >= 0 && s.end_offset > s.next_offset.max(0);
            if !behind || s.queued > 0 || !waits(&s.topic, s.partition) {
                continue;
            }
            let key = (s.topic.clone(), s.partition);
            let mut progress = match self.seen.remove(&key) {
                Some(p) if p.next_offset == s.next_offset => p,
                _ => Progress {
                    next_offset: s.next_offset,
                    since: now,
                },
            };
            if now.duration_since(progress.since) >= STUCK_AFTER {
                stuck.push(Stuck {
                    topic: s.topic.clone(),
                    partition: s.partition,
                    state: s.state.clone(),
                    next_offset: s.next_offset,
                    end_offset: s.end_offset,
                });
                progress.since = now;
            }
            seen.insert(key, progress);
        }
        self.seen = seen;
        stuck
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(next: i64, end: i64, queued: i64) -> FetchSample {
        FetchSample {
            topic: "in".to_string(),
            partition: 0,
            state: "validate-epoch-wait".to_string(),
            next_offset: next,
            end_offset: end,
            queued,
        }
    }

    #[test]
    fn a_partition_behind_and_not_fetched_for_the_bound_is_stuck_once_per_bound() {
        let mut w = FetchWatch::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(
            w.observe(&[sample(10, 50, 0)], |_, _| true, at(0))
                .is_empty()
        );
        assert!(
            w.observe(&[sample(10, 50, 0)], |_, _| true, at(29))
                .is_empty()
        );
        let stuck = w.observe(&[sample(10, 50, 0)], |_, _| true, at(30));
        assert_eq!(stuck.len(), 1);
        assert_eq!(
            (
                stuck[0].next_offset,
                stuck[0].end_offset,
                stuck[0].state.as_str()
            ),
            (10, 50, "validate-epoch-wait")
        );
        assert!(
            w.observe(&[sample(10, 50, 0)], |_, _| true, at(35))
                .is_empty(),
            "watched afresh after a report"
        );
        assert_eq!(
            w.observe(&[sample(10, 50, 0)], |_, _| true, at(60)).len(),
            1
        );
    }

    #[test]
    fn progress_a_queue_a_pause_or_nothing_to_read_is_not_stuck() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut w = FetchWatch::default();
        w.observe(&[sample(10, 50, 0)], |_, _| true, at(0));
        assert!(
            w.observe(&[sample(11, 50, 0)], |_, _| true, at(31))
                .is_empty(),
            "moved"
        );
        assert!(
            w.observe(&[sample(11, 50, 0)], |_, _| true, at(60))
                .is_empty()
        );
        assert_eq!(
            w.observe(&[sample(11, 50, 0)], |_, _| true, at(61)).len(),
            1
        );

        for (s, waits) in [
            (sample(10, 50, 5), true),  // fetched, not yet polled
            (sample(10, 50, 0), false), // paused or buffered by the thread
            (sample(50, 50, 0), true),  // nothing to read
            (sample(10, -1, 0), true),  // end unknown
        ] {
            let mut w = FetchWatch::default();
            w.observe(std::slice::from_ref(&s), |_, _| waits, at(0));
            assert!(
                w.observe(std::slice::from_ref(&s), |_, _| waits, at(40))
                    .is_empty(),
                "{s:?} waits={waits}"
            );
        }
    }

    #[test]
    fn a_logical_next_offset_behind_a_known_end_counts_as_behind() {
        let t0 = Instant::now();
        let mut w = FetchWatch::default();
        w.observe(&[sample(-1001, 5, 0)], |_, _| true, t0);
        assert_eq!(
            w.observe(&[sample(-1001, 5, 0)], |_, _| true, t0 + STUCK_AFTER)
                .len(),
            1
        );
    }
}
