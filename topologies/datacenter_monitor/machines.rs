//! Detection 1, abnormal machine metrics, and the per-task window means that
//! detection 2 judges per job.
//!
//! Per machine (the input key) the store `dc-machines` holds the open window
//! (sums of CPU rate and canonical memory over its samples, and per task) and
//! the machine's two [`Baseline`]s. The first sample of a later window closes
//! the open one: its means are scored against the baselines (once at least
//! `warmup_windows` windows were learned), an alert goes out when either
//! score exceeds `machine_k`, and otherwise the means are learned. Each task's
//! mean over the closed window goes out as a [`TaskMean`] for
//! [`super::jobs`]. A sample for a window that already closed is late: it is
//! dropped and counted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::stats::Baseline;
use super::{Alert, MACHINE_STORE, Rule, Settings, TaskUsage};
use crate::processor::{Processor, ProcessorContext, ProcessorError, Record};

/// One task's mean usage over one window, keyed downstream by its job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskMean {
    /// The job.
    pub job_id: String,
    /// The task's index.
    pub task_index: u32,
    /// The machine it ran on.
    pub machine_id: String,
    /// The window's start.
    pub window_start: i64,
    /// Mean CPU rate over the window's samples.
    pub cpu_rate: f64,
    /// Mean canonical memory over the window's samples.
    pub canonical_memory_usage: f64,
    /// Samples in the window.
    pub samples: u32,
}

/// What the machine monitor emits.
#[derive(Clone, Debug, PartialEq)]
pub enum MachineOutput {
    /// A machine-metric alert.
    Alert(Alert),
    /// A task's window mean (for the outlier detection).
    TaskMean(TaskMean),
}

/// Sums of one task's samples in the open window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskSums {
    /// The job.
    pub job_id: String,
    /// The task's index.
    pub task_index: u32,
    /// Samples.
    pub samples: u32,
    /// Sum of CPU rates.
    pub cpu: f64,
    /// Sum of canonical memory.
    pub memory: f64,
}

/// The stored state of one machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineState {
    /// Start of the open window (`None` before the first sample).
    pub window_start: Option<i64>,
    /// The open window's sums per task (`job/task`).
    pub tasks: BTreeMap<String, TaskSums>,
    /// Baseline of the machine's mean CPU rate per window.
    pub cpu: Baseline,
    /// Baseline of the machine's mean canonical memory per window.
    pub memory: Baseline,
}

impl MachineState {
    fn add(&mut self, u: &TaskUsage) {
        let t = self
            .tasks
            .entry(format!("{}/{}", u.job_id, u.task_index))
            .or_insert_with(|| TaskSums {
                job_id: u.job_id.clone(),
                task_index: u.task_index,
                ..TaskSums::default()
            });
        t.samples += 1;
        t.cpu += u.cpu_rate;
        t.memory += u.canonical_memory_usage;
    }

    /// Closes the open window of `machine`: the task means, and an alert when
    /// the machine's means are abnormal (otherwise they are learned).
    fn close(&mut self, machine: &str, s: &Settings) -> Vec<MachineOutput> {
        let Some(start) = self.window_start else {
            return Vec::new();
        };
        let tasks = std::mem::take(&mut self.tasks);
        let samples: u32 = tasks.values().map(|t| t.samples).sum();
        let mut out: Vec<MachineOutput> = tasks
            .values()
            .map(|t| {
                MachineOutput::TaskMean(TaskMean {
                    job_id: t.job_id.clone(),
                    task_index: t.task_index,
                    machine_id: machine.to_string(),
                    window_start: start,
                    cpu_rate: t.cpu / f64::from(t.samples),
                    canonical_memory_usage: t.memory / f64::from(t.samples),
                    samples: t.samples,
                })
            })
            .collect();
        if samples == 0 {
            return out;
        }
        let cpu = tasks.values().map(|t| t.cpu).sum::<f64>() / f64::from(samples);
        let memory = tasks.values().map(|t| t.memory).sum::<f64>() / f64::from(samples);
        let warm = self.cpu.learned >= s.warmup_windows;
        let cpu_score = self.cpu.score(cpu, s.machine_min_std_fraction);
        let memory_score = self.memory.score(memory, s.machine_min_std_fraction);
        let score = cpu_score.max(memory_score);
        if warm && score > s.machine_k {
            let end = start + s.window_ms;
            out.push(MachineOutput::Alert(Alert {
                rule: Rule::MachineMetric,
                entity: machine.to_string(),
                window_start: start,
                window_end: end,
                score,
                evidence: vec![
                    json!({"metric": "cpu_rate", "mean": cpu, "baseline_mean": self.cpu.mean,
                           "baseline_std": self.cpu.var.sqrt(), "score": cpu_score}),
                    json!({"metric": "canonical_memory_usage", "mean": memory,
                           "baseline_mean": self.memory.mean,
                           "baseline_std": self.memory.var.sqrt(), "score": memory_score}),
                    json!({"samples": samples, "tasks": tasks.len()}),
                ],
                event_time: end - 1,
            }));
        } else {
            self.cpu.learn(cpu, s.baseline_alpha);
            self.memory.learn(memory, s.baseline_alpha);
        }
        out
    }
}

/// The processor of detection 1 (input key: machine id).
pub struct MachineMonitor {
    settings: Settings,
}

impl MachineMonitor {
    /// A monitor with these settings.
    pub fn new(settings: Settings) -> Self {
        MachineMonitor { settings }
    }
}

impl Processor<String, TaskUsage, String, MachineOutput> for MachineMonitor {
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, String, MachineOutput>,
        record: Record<String, TaskUsage>,
    ) -> Result<(), ProcessorError> {
        let store = ctx.key_value_store::<String, MachineState>(MACHINE_STORE)?;
        let mut state = store.get(&record.key)?.unwrap_or_default();
        let window = self.settings.window_of(record.timestamp);
        match state.window_start {
            Some(open) if window < open => {
                ctx.record_late();
                return Ok(());
            }
            Some(open) if window > open => {
                for out in state.close(&record.key, &self.settings) {
                    let ts = open + self.settings.window_ms - 1;
                    ctx.forward(Record::new(record.key.clone(), out, ts))?;
                }
                state.window_start = Some(window);
            }
            Some(_) => {}
            None => state.window_start = Some(window),
        }
        state.add(&record.value);
        store.put(&record.key, &state)
    }
}
