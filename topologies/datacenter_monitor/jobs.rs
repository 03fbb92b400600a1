//! Detection 2, outlier tasks: per job (the key of the repartition topic),
//! the store `dc-jobs` collects the [`TaskMean`]s of each window.
//!
//! A job window is judged once, when it is *complete* — every task the job
//! has shown so far reported for it, counted only after the job's first
//! `warmup_windows` windows taught the task set — or, failing that, once the job has a
//! window `outlier_grace_windows` newer. Completeness, not time, closes the
//! usual window, because the means arrive from several upstream tasks that
//! may run far apart in event time (one instance restarting while another
//! races ahead). Judging: with at least `outlier_min_tasks` means, the
//! median m and the median absolute deviation MAD; a task whose mean is more
//! than `outlier_k` × max(MAD, `outlier_min_mad_fraction` × m) from m is an
//! outlier (above: a runaway, below: a straggler), one alert per task. A mean
//! for a window already judged is late: dropped and counted.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::machines::TaskMean;
use super::stats::median_and_mad;
use super::{Alert, JOB_STORE, Rule, Settings};
use crate::processor::{Processor, ProcessorContext, ProcessorError, Record};

/// The stored state of one job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobState {
    /// Every task index the job has shown.
    pub tasks: BTreeSet<u32>,
    /// Open windows: start → task index → mean.
    pub open: BTreeMap<i64, BTreeMap<u32, TaskMean>>,
    /// Windows judged, newer than [`Self::judged_before`].
    pub judged: BTreeSet<i64>,
    /// Every window before this start is judged (or too old to judge).
    pub judged_before: i64,
    /// The job's first window: during the first `warmup_windows` windows
    /// the task set is still being learned, so only the grace closes them.
    pub first_window: Option<i64>,
}

impl JobState {
    fn is_judged(&self, window: i64) -> bool {
        window < self.judged_before || self.judged.contains(&window)
    }

    /// Adds `mean`; returns the windows now due for judging, oldest first.
    fn add(&mut self, mean: TaskMean, s: &Settings) -> Vec<i64> {
        let window = mean.window_start;
        let first = *self.first_window.get_or_insert(window);
        let learned_from = first + i64::from(s.warmup_windows) * s.window_ms;
        self.open
            .entry(window)
            .or_default()
            .insert(mean.task_index, mean);
        let newest = self.open.keys().next_back().copied().unwrap_or(window);
        let horizon = newest - s.outlier_grace_windows * s.window_ms;
        self.open
            .iter()
            .filter(|(w, means)| {
                **w <= horizon || (**w >= learned_from && means.len() >= self.tasks.len())
            })
            .map(|(w, _)| *w)
            .collect()
    }

    /// Removes window `w` from the open ones and marks it judged.
    fn take(&mut self, w: i64, s: &Settings) -> BTreeMap<u32, TaskMean> {
        let means = self.open.remove(&w).unwrap_or_default();
        self.judged.insert(w);
        let newest = self
            .judged
            .iter()
            .next_back()
            .copied()
            .unwrap_or(w)
            .max(self.open.keys().next_back().copied().unwrap_or(w));
        let forget = newest - 2 * s.outlier_grace_windows * s.window_ms;
        if forget > self.judged_before {
            self.judged_before = forget;
            self.judged.retain(|j| *j >= forget);
        }
        means
    }
}

/// The outliers among one job window's task means.
pub fn judge(job: &str, window: i64, means: &BTreeMap<u32, TaskMean>, s: &Settings) -> Vec<Alert> {
    if means.len() < s.outlier_min_tasks {
        return Vec::new();
    }
    let values: Vec<f64> = means.values().map(|m| m.cpu_rate).collect();
    let Some((median, mad)) = median_and_mad(&values) else {
        return Vec::new();
    };
    let scale = mad.max(s.outlier_min_mad_fraction * median.abs()).max(1e-9);
    means
        .values()
        .filter_map(|m| {
            let score = (m.cpu_rate - median).abs() / scale;
            (score > s.outlier_k).then(|| {
                let end = window + s.window_ms;
                Alert {
                    rule: Rule::OutlierTask,
                    entity: format!("{job}/{}", m.task_index),
                    window_start: window,
                    window_end: end,
                    score,
                    evidence: vec![json!({
                        "kind": if m.cpu_rate > median { "runaway" } else { "straggler" },
                        "cpu_rate": m.cpu_rate,
                        "job_median": median,
                        "job_mad": mad,
                        "tasks": means.len(),
                        "machine_id": m.machine_id,
                    })],
                    event_time: end - 1,
                }
            })
        })
        .collect()
}

/// The processor of detection 2 (input key: job id).
pub struct JobOutliers {
    settings: Settings,
}

impl JobOutliers {
    /// An outlier detector with these settings.
    pub fn new(settings: Settings) -> Self {
        JobOutliers { settings }
    }
}

impl Processor<String, TaskMean, String, Alert> for JobOutliers {
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, String, Alert>,
        record: Record<String, TaskMean>,
    ) -> Result<(), ProcessorError> {
        let store = ctx.key_value_store::<String, JobState>(JOB_STORE)?;
        let mut state = store.get(&record.key)?.unwrap_or_default();
        state.tasks.insert(record.value.task_index);
        if state.is_judged(record.value.window_start) {
            ctx.record_late();
            return store.put(&record.key, &state);
        }
        for window in state.add(record.value, &self.settings) {
            let means = state.take(window, &self.settings);
            for alert in judge(&record.key, window, &means, &self.settings) {
                let ts = alert.event_time;
                ctx.forward(Record::new(alert.entity.clone(), alert, ts))?;
            }
        }
        store.put(&record.key, &state)
    }
}
