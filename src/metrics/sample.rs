//! [`Sample`]: the counters of one instance at one moment, which the
//! scaling signal ([`super::scaling`]) and the live view ([`super::live`])
//! compare over time.

use std::collections::BTreeMap;
use std::time::Instant;

use super::Metrics;

/// The counters of one instance at one moment.
#[derive(Clone, Debug)]
pub struct Sample {
    /// When it was read.
    pub at: Instant,
    /// Per task (`"<subtopology>_<partition>"`): records processed and busy
    /// seconds, since the task opened here.
    pub tasks: BTreeMap<String, (f64, f64)>,
    /// Per (topic, partition): consumer lag, end offset (last stable
    /// offset, or high watermark), and when librdkafka's statistics
    /// reported them.
    pub lag: BTreeMap<(String, i32), (f64, f64, Instant)>,
    /// Per (topic, partition): the end offset (high watermark) asked of the
    /// broker when the sample was taken, where the sampler asked
    /// ([`super::scaling`]); empty from [`Sample::read`].
    pub ends: BTreeMap<(String, i32), f64>,
    /// Per (sub-topology, node): records taken and busy seconds.
    pub nodes: BTreeMap<(u32, String), (f64, f64)>,
    /// Per (sub-topology, reason): records dropped, over its tasks here.
    pub drops: BTreeMap<(u32, String), f64>,
}

impl Sample {
    /// Reads the instance's series.
    pub fn read(metrics: &Metrics) -> Sample {
        let mut tasks: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        let mut nodes: BTreeMap<(u32, String), (f64, f64)> = BTreeMap::new();
        let mut drops: BTreeMap<(u32, String), f64> = BTreeMap::new();
        let lag = metrics
            .lag_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, &(lag, end, at))| (k.clone(), (lag as f64, end as f64, at)))
            .collect();
        for family in metrics.registry().gather() {
            let name = family.name();
            for m in family.get_metric() {
                let label = |key: &str| {
                    m.get_label()
                        .iter()
                        .find(|l| l.name() == key)
                        .map(|l| l.value().to_string())
                };
                match name {
                    "weir_node_processed_records_total" | "weir_node_busy_seconds_total" => {
                        let (Some(sub), Some(node)) = (label("subtopology"), label("node")) else {
                            continue;
                        };
                        let Ok(sub) = sub.parse() else { continue };
                        let entry = nodes.entry((sub, node)).or_default();
                        if name == "weir_node_processed_records_total" {
                            entry.0 = m.get_counter().get_value();
                        } else {
                            entry.1 = m.get_counter().get_value();
                        }
                    }
                    "weir_task_dropped_records_total" => {
                        let (Some(task), Some(reason)) = (label("task"), label("reason")) else {
                            continue;
                        };
                        let Some(sub) = subtopology_of_task(&task) else {
                            continue;
                        };
                        *drops.entry((sub, reason)).or_default() += m.get_counter().get_value();
                    }
                    "weir_task_processed_records_total" | "weir_task_busy_seconds_total" => {
                        let Some(task) = label("task") else { continue };
                        let entry = tasks.entry(task).or_default();
                        if name == "weir_task_processed_records_total" {
                            entry.0 = m.get_counter().get_value();
                        } else {
                            entry.1 = m.get_counter().get_value();
                        }
                    }
                    _ => {}
                }
            }
        }
        Sample {
            at: Instant::now(),
            tasks,
            lag,
            ends: BTreeMap::new(),
            nodes,
            drops,
        }
    }
}

/// The counter delta between two samples: a counter that went down was
/// reset (the task closed and opened again) and counts from 0.
pub(crate) fn delta(before: Option<f64>, after: f64) -> f64 {
    match before {
        Some(b) if b <= after => after - b,
        _ => after,
    }
}

pub(crate) fn subtopology_of_task(task: &str) -> Option<u32> {
    task.split_once('_')?.0.parse().ok()
}
