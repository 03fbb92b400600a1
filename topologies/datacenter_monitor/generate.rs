//! Generated input for `datacenter-monitor`: background traffic of many
//! machines, jobs and hosts, anomalies of every kind injected into it, and
//! the ground truth of what was injected where.
//!
//! Everything is a pure function of the [`Spec`] (no randomness beyond a
//! seeded hash), so a test can regenerate the truth. The background is
//! built to stay inside the default thresholds: task CPU within ±7 % of the
//! job's level plus ±3 % noise, machine means steady, 4–10 connections per
//! host and minute, and *near misses* of the sequence rules (a deployed
//! binary that is started but talks only inside the datacenter, a sensitive
//! file read by `sshd` which never connects outside, a download that is
//! never executed, a package manager that connects outside without reading
//! secrets). Anomalies start after the baselines' warm-up and end two
//! windows before the data does, so every window they touch closes.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::{Object, Operation, Process, Rule, SystemEvent, TaskUsage};
use crate::topologies::SampleDataset;

/// What to generate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// Seed of every choice.
    pub seed: u64,
    /// Event time of the first sample (ms; a minute boundary).
    pub start_ms: i64,
    /// Minutes of traffic (at least 16).
    pub minutes: u32,
    /// Machines (also the hosts of the system events).
    pub machines: u32,
    /// Jobs (6–12 tasks each).
    pub jobs: u32,
    /// Injected anomalies of each [`Anomaly`] kind.
    pub per_kind: u32,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            seed: 7,
            start_ms: 1_699_999_980_000,
            minutes: 30,
            machines: 12,
            jobs: 10,
            per_kind: 2,
        }
    }
}

/// Minutes before the first injected anomaly (baselines warm up).
pub const QUIET_MINUTES: u32 = 8;
/// Interval between two usage samples of a task (ms).
pub const USAGE_PERIOD_MS: i64 = 10_000;

/// A kind of injected anomaly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Anomaly {
    /// A machine's daemon burns CPU for a minute.
    MachineCpu,
    /// A machine's daemon leaks memory for a minute.
    MachineMemory,
    /// A task uses 2.5 × its CPU for a minute.
    RunawayTask,
    /// A task uses 0.2 × its CPU for a minute.
    StragglerTask,
    /// Write a binary, start it, connect outside.
    DropperConnect,
    /// Read /etc/shadow, connect outside.
    SecretExfiltration,
    /// 150 connections in a minute (an internal port scan).
    ConnectionBurst,
}

/// Every kind, in injection order.
pub const KINDS: [Anomaly; 7] = [
    Anomaly::MachineCpu,
    Anomaly::MachineMemory,
    Anomaly::RunawayTask,
    Anomaly::StragglerTask,
    Anomaly::DropperConnect,
    Anomaly::SecretExfiltration,
    Anomaly::ConnectionBurst,
];

impl Anomaly {
    /// The rule that must catch it.
    pub fn rule(self) -> Rule {
        match self {
            Anomaly::MachineCpu | Anomaly::MachineMemory => Rule::MachineMetric,
            Anomaly::RunawayTask | Anomaly::StragglerTask => Rule::OutlierTask,
            Anomaly::DropperConnect => Rule::DropperConnect,
            Anomaly::SecretExfiltration => Rule::SecretExfiltration,
            Anomaly::ConnectionBurst => Rule::ConnectionBurst,
        }
    }
}

/// One injected anomaly: the ground truth.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Injected {
    /// What was injected.
    pub anomaly: Anomaly,
    /// The rule that must alert.
    pub rule: Rule,
    /// The alert's entity: machine, `job/task` or host.
    pub entity: String,
    /// The alert's window start (sequences: the first event's time).
    pub window_start: i64,
}

impl Injected {
    /// The alert identity it expects (see [`super::Alert::identity`]).
    pub fn identity(&self) -> (Rule, String, i64) {
        (self.rule, self.entity.clone(), self.window_start)
    }
}

/// Generated input and its ground truth; both topics in event-time order.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// Task usage samples (for `usage_topic`, key: machine).
    pub usage: Vec<TaskUsage>,
    /// System events (for `events_topic`, key: host).
    pub events: Vec<SystemEvent>,
    /// What was injected.
    pub truth: Vec<Injected>,
}

fn mix(seed: u64, a: u64, b: u64) -> u64 {
    let mut x = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(a.wrapping_mul(0xD1B5_4A32_D192_ED03))
        .wrapping_add(b.wrapping_mul(0x8CB9_2BA7_2F3D_8DD7))
        .wrapping_add(1);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 29;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 32)
}

/// A number in [-1, 1) from the hash.
fn unit(seed: u64, a: u64, b: u64) -> f64 {
    (mix(seed, a, b) % 2_000_000) as f64 / 1_000_000.0 - 1.0
}

/// The name of machine (and host) `m`.
pub fn machine_name(m: u32) -> String {
    format!("m{m:03}")
}

struct Task {
    job: String,
    index: u32,
    machine: u32,
    cpu: f64,
    memory: f64,
}

fn tasks(spec: &Spec) -> Vec<Task> {
    let mut out = Vec::new();
    for j in 0..spec.jobs {
        let job = format!("job-{}", 1000 + j);
        let count = 6 + (mix(spec.seed, 1, u64::from(j)) % 7) as u32;
        let cpu = 0.10 + (mix(spec.seed, 2, u64::from(j)) % 50) as f64 / 100.0;
        let memory = 0.02 + (mix(spec.seed, 3, u64::from(j)) % 6) as f64 / 100.0;
        for i in 0..count {
            let id = u64::from(j) * 1000 + u64::from(i);
            out.push(Task {
                job: job.clone(),
                index: i,
                machine: (mix(spec.seed, 4, id) % u64::from(spec.machines)) as u32,
                cpu: cpu * (1.0 + 0.07 * unit(spec.seed, 5, id)),
                memory: memory * (1.0 + 0.05 * unit(spec.seed, 6, id)),
            });
        }
    }
    for m in 0..spec.machines {
        out.push(Task {
            job: format!("daemon-{}", machine_name(m)),
            index: 0,
            machine: m,
            cpu: 0.03,
            memory: 0.01,
        });
    }
    out
}

/// Usage changes: (task number, minute, cpu, memory multipliers or levels).
struct UsageChange {
    task: usize,
    minute: u32,
    cpu: f64,
    memory: f64,
}

/// The minute of injection `n` (spread over the injectable minutes).
fn minute_of(spec: &Spec, n: u32) -> u32 {
    let span = spec.minutes.saturating_sub(QUIET_MINUTES + 3).max(1);
    QUIET_MINUTES + (n * 7) % span
}

/// Generates the dataset of `spec`.
///
/// ```
/// use weir::topologies::datacenter_monitor::generate::{generate, Spec, KINDS};
/// let d = generate(&Spec::default());
/// assert_eq!(d.truth.len(), 2 * KINDS.len());
/// assert!(d.usage.windows(2).all(|w| w[0].start_time <= w[1].start_time));
/// ```
pub fn generate(spec: &Spec) -> Dataset {
    let tasks = tasks(spec);
    let machine_cpu =
        |m: u32| -> f64 { tasks.iter().filter(|t| t.machine == m).map(|t| t.cpu).sum() };
    let machine_memory = |m: u32| -> f64 {
        tasks
            .iter()
            .filter(|t| t.machine == m)
            .map(|t| t.memory)
            .sum()
    };
    let minute_ms = |minute: u32| spec.start_ms + i64::from(minute) * 60_000;
    let mut truth = Vec::new();
    let mut changes: Vec<UsageChange> = Vec::new();
    let mut host_injections: Vec<(Anomaly, u32, u32, u32)> = Vec::new();
    // Tasks a runaway or straggler cannot push their machine past its own
    // threshold with: at most a fifth of the machine's CPU, in a job.
    let quiet_tasks: Vec<usize> = (0..tasks.len())
        .filter(|&i| !tasks[i].job.starts_with("daemon-"))
        .filter(|&i| tasks[i].cpu <= 0.2 * machine_cpu(tasks[i].machine))
        .collect();
    let mut n = 0u32;
    for (k, kind) in KINDS.iter().enumerate() {
        for p in 0..spec.per_kind {
            let minute = minute_of(spec, n);
            let pick = (k as u32) * spec.per_kind + p;
            let place = (pick * 5 + 1) % spec.machines;
            let daemon = tasks.len() - spec.machines as usize + place as usize;
            let entity = match kind {
                Anomaly::MachineCpu => {
                    let spike = 1.5 * machine_cpu(place) + 0.03;
                    changes.push(UsageChange {
                        task: daemon,
                        minute,
                        cpu: spike,
                        memory: 0.01,
                    });
                    machine_name(place)
                }
                Anomaly::MachineMemory => {
                    let leak = 1.5 * machine_memory(place) + 0.01;
                    changes.push(UsageChange {
                        task: daemon,
                        minute,
                        cpu: 0.03,
                        memory: leak,
                    });
                    machine_name(place)
                }
                Anomaly::RunawayTask | Anomaly::StragglerTask => {
                    let i = quiet_tasks[(pick as usize * 11) % quiet_tasks.len()];
                    let factor = if *kind == Anomaly::RunawayTask {
                        2.5
                    } else {
                        0.2
                    };
                    changes.push(UsageChange {
                        task: i,
                        minute,
                        cpu: tasks[i].cpu * factor,
                        memory: tasks[i].memory,
                    });
                    format!("{}/{}", tasks[i].job, tasks[i].index)
                }
                _ => {
                    host_injections.push((*kind, place, minute, n));
                    machine_name(place)
                }
            };
            let window_start = match kind {
                Anomaly::DropperConnect | Anomaly::SecretExfiltration => {
                    minute_ms(minute) + INJECT_OFFSET_MS
                }
                _ => minute_ms(minute),
            };
            truth.push(Injected {
                anomaly: *kind,
                rule: kind.rule(),
                entity,
                window_start,
            });
            n += 1;
        }
    }
    let usage = usage(spec, &tasks, &changes);
    let events = events(spec, &host_injections);
    Dataset {
        usage,
        events,
        truth,
    }
}

/// Offset of an injected sequence's first event into its minute (ms).
const INJECT_OFFSET_MS: i64 = 5_000;

fn usage(spec: &Spec, tasks: &[Task], changes: &[UsageChange]) -> Vec<TaskUsage> {
    let ticks = i64::from(spec.minutes) * 60_000 / USAGE_PERIOD_MS;
    let mut out = Vec::with_capacity(ticks as usize * tasks.len());
    for tick in 0..ticks {
        let t = spec.start_ms + tick * USAGE_PERIOD_MS;
        let minute = (tick * USAGE_PERIOD_MS / 60_000) as u32;
        let mut row: Vec<TaskUsage> = tasks
            .iter()
            .enumerate()
            .map(|(i, task)| {
                let id = (tick as u64) << 20 | i as u64;
                let (cpu, memory) = changes
                    .iter()
                    .find(|c| c.task == i && c.minute == minute)
                    .map_or((task.cpu, task.memory), |c| (c.cpu, c.memory));
                TaskUsage {
                    start_time: t,
                    end_time: t + USAGE_PERIOD_MS,
                    machine_id: machine_name(task.machine),
                    job_id: task.job.clone(),
                    task_index: task.index,
                    cpu_rate: cpu * (1.0 + 0.03 * unit(spec.seed, 7, id)),
                    canonical_memory_usage: memory * (1.0 + 0.02 * unit(spec.seed, 8, id)),
                    assigned_memory_usage: memory * 1.25,
                    disk_io_time: 0.001 * (1.0 + unit(spec.seed, 9, id)),
                }
            })
            .collect();
        row.sort_by(|a, b| {
            (&a.machine_id, &a.job_id, a.task_index).cmp(&(&b.machine_id, &b.job_id, b.task_index))
        });
        out.extend(row);
    }
    out
}

fn event(host: &str, ts: i64, pid: u32, exe: &str, op: Operation, object: Object) -> SystemEvent {
    SystemEvent {
        host: host.to_string(),
        ts,
        subject: Process {
            pid,
            exe: exe.to_string(),
        },
        op,
        object,
    }
}

fn file(path: &str) -> Object {
    Object::File {
        path: path.to_string(),
    }
}

fn net(address: String, port: u16) -> Object {
    Object::Network { address, port }
}

/// One minute of a host's background: connections inside the datacenter,
/// log writes, and the near misses of the sequence rules.
fn background_minute(spec: &Spec, h: u32, minute: u32, out: &mut Vec<SystemEvent>) {
    let host = machine_name(h);
    let at = spec.start_ms + i64::from(minute) * 60_000;
    let id = u64::from(h) * 100_000 + u64::from(minute);
    let connects = 4 + mix(spec.seed, 10, u64::from(h)) % 5 + mix(spec.seed, 11, id) % 3;
    for c in 0..connects {
        let ts = at + 1_000 + (c as i64) * (55_000 / connects as i64);
        let (pid, exe) = if c % 2 == 0 {
            (1200 + h, "/usr/sbin/nginx")
        } else {
            (2300 + h, "/usr/bin/java")
        };
        let address = format!(
            "10.0.{}.{}",
            mix(spec.seed, 12, id + c) % 8,
            1 + mix(spec.seed, 13, id + c) % 250
        );
        out.push(event(
            &host,
            ts,
            pid,
            exe,
            Operation::Connect,
            net(address, 8080),
        ));
    }
    out.push(event(
        &host,
        at + 2_500,
        2300 + h,
        "/usr/bin/java",
        Operation::Write,
        file("/var/log/app/app.log"),
    ));
    match (minute + h) % 6 {
        0 => {
            // A deployment: written, started, talks inside only.
            let exe = format!("/opt/app/bin/server-{minute}");
            out.push(event(
                &host,
                at + 3_000,
                3100 + h,
                "/usr/bin/dpkg",
                Operation::Write,
                file(&exe),
            ));
            out.push(event(
                &host,
                at + 4_000,
                1,
                "/usr/lib/systemd/systemd",
                Operation::Start,
                Object::Process {
                    pid: 5000 + minute,
                    exe: exe.clone(),
                },
            ));
            out.push(event(
                &host,
                at + 6_000,
                5000 + minute,
                &exe,
                Operation::Connect,
                net("10.0.0.5".into(), 5432),
            ));
        }
        2 => {
            // sshd reads the password file and never connects outside.
            out.push(event(
                &host,
                at + 3_000,
                800 + h,
                "/usr/sbin/sshd",
                Operation::Read,
                file("/etc/shadow"),
            ));
            out.push(event(
                &host,
                at + 3_500,
                800 + h,
                "/usr/sbin/sshd",
                Operation::Connect,
                net("10.0.1.9".into(), 22),
            ));
        }
        4 => {
            // A download that is never started; the package manager goes outside.
            out.push(event(
                &host,
                at + 3_000,
                4100 + h,
                "/usr/bin/curl",
                Operation::Write,
                file("/tmp/build.tar.gz"),
            ));
            out.push(event(
                &host,
                at + 3_500,
                4200 + h,
                "/usr/bin/apt",
                Operation::Read,
                file("/etc/apt/sources.list"),
            ));
            out.push(event(
                &host,
                at + 4_000,
                4200 + h,
                "/usr/bin/apt",
                Operation::Connect,
                net("151.101.2.132".into(), 443),
            ));
        }
        _ => {}
    }
}

fn injected(kind: Anomaly, h: u32, minute: u32, n: u32, spec: &Spec, out: &mut Vec<SystemEvent>) {
    let host = machine_name(h);
    let t = spec.start_ms + i64::from(minute) * 60_000 + INJECT_OFFSET_MS;
    let pid = 40_000 + n * 10;
    match kind {
        Anomaly::DropperConnect => {
            let exe = "/tmp/.cache/kworkerd";
            out.push(event(
                &host,
                t,
                pid,
                "/usr/bin/curl",
                Operation::Write,
                file(exe),
            ));
            out.push(event(
                &host,
                t + 20_000,
                pid + 1,
                "/bin/bash",
                Operation::Start,
                Object::Process {
                    pid: pid + 2,
                    exe: exe.into(),
                },
            ));
            for s in [60_000, 90_000, 120_000] {
                out.push(event(
                    &host,
                    t + s,
                    pid + 2,
                    exe,
                    Operation::Connect,
                    net("203.0.113.50".into(), 4444),
                ));
            }
        }
        Anomaly::SecretExfiltration => {
            out.push(event(
                &host,
                t,
                pid,
                "/usr/bin/python3",
                Operation::Read,
                file("/etc/shadow"),
            ));
            for s in [30_000, 35_000] {
                out.push(event(
                    &host,
                    t + s,
                    pid,
                    "/usr/bin/python3",
                    Operation::Connect,
                    net("198.51.100.23".into(), 443),
                ));
            }
        }
        Anomaly::ConnectionBurst => {
            let start = t - INJECT_OFFSET_MS;
            for c in 0..150i64 {
                let address = format!("10.1.{}.{}", c / 250, 1 + c % 250);
                out.push(event(
                    &host,
                    start + 200 + c * 380,
                    pid,
                    "/usr/bin/nmap",
                    Operation::Connect,
                    net(address, 22),
                ));
            }
        }
        _ => {}
    }
}

fn events(spec: &Spec, injections: &[(Anomaly, u32, u32, u32)]) -> Vec<SystemEvent> {
    let mut out = Vec::new();
    for h in 0..spec.machines {
        for minute in 0..spec.minutes {
            background_minute(spec, h, minute, &mut out);
        }
    }
    for &(kind, h, minute, n) in injections {
        injected(kind, h, minute, n, spec, &mut out);
    }
    out.sort_by(|a, b| (a.ts, &a.host).cmp(&(b.ts, &b.host)));
    out
}

/// The dataset `weir generate datacenter-monitor` writes: 40 machines
/// (and hosts), 24 jobs, 30 minutes, 3 anomalies of every kind.
pub fn sample_spec() -> Spec {
    Spec {
        machines: 40,
        jobs: 24,
        per_kind: 3,
        ..Spec::default()
    }
}

/// The sample dataset with both topics merged in event-time order: the
/// input (0: usage, 1: events) and index of each record.
struct SampleStream {
    dataset: Dataset,
    order: Vec<(u8, u32)>,
    span_ms: i64,
}

fn sample_stream() -> &'static SampleStream {
    static STREAM: OnceLock<SampleStream> = OnceLock::new();
    STREAM.get_or_init(|| {
        let spec = sample_spec();
        let dataset = generate(&spec);
        let (usage, events) = (&dataset.usage, &dataset.events);
        let mut order = Vec::with_capacity(usage.len() + events.len());
        let (mut u, mut e) = (0, 0);
        while u < usage.len() || e < events.len() {
            if e >= events.len() || (u < usage.len() && usage[u].start_time <= events[e].ts) {
                order.push((0, u as u32));
                u += 1;
            } else {
                order.push((1, e as u32));
                e += 1;
            }
        }
        SampleStream {
            dataset,
            order,
            span_ms: i64::from(spec.minutes) * 60_000,
        }
    })
}

/// Where sample `i` comes from: its input, its index and the event-time
/// shift of its repetition (the dataset repeats, shifted by its span).
fn locate(i: u64) -> (u8, usize, i64) {
    let s = sample_stream();
    let n = s.order.len() as u64;
    let (input, index) = s.order[(i % n) as usize];
    (input, index as usize, (i / n) as i64 * s.span_ms)
}

/// Sample record `i`: the [`sample_spec`] dataset's usage samples and
/// system events merged in event-time order, repeated with event times
/// shifted by the dataset's span. Key: the machine or host.
pub fn sample(i: u64) -> (Option<Vec<u8>>, Vec<u8>) {
    sample_at(i, 0)
}

/// [`sample`] with every event time moved by `shift_ms` more.
pub fn sample_at(i: u64, shift_ms: i64) -> (Option<Vec<u8>>, Vec<u8>) {
    let (input, index, repetition) = locate(i);
    let shift = repetition + shift_ms;
    let d = &sample_stream().dataset;
    let (key, value) = if input == 0 {
        let mut u = d.usage[index].clone();
        u.start_time += shift;
        u.end_time += shift;
        (u.machine_id.clone(), serde_json::to_vec(&u))
    } else {
        let mut e = d.events[index].clone();
        e.ts += shift;
        (e.host.clone(), serde_json::to_vec(&e))
    };
    let value = value.expect("generated records always serialize");
    (Some(key.into_bytes()), value)
}

/// The event-time shift (whole minutes) under which samples
/// `start..start + count` end at wall-clock time `now_ms`: their
/// repetitions of the dataset replay the time just before now. Written
/// with current event times, the records (and the alerts and changelog
/// records derived from them) are not deleted by the broker's time
/// retention, as records from the dataset's fixed 2023 dates would be.
pub fn shift_to_end_at(now_ms: i64, start: u64, count: u64) -> i64 {
    let s = sample_stream();
    let n = s.order.len() as u64;
    let last = (start + count.max(1) - 1) / n;
    let end = sample_spec().start_ms + (last as i64 + 1) * s.span_ms;
    let now_minute = now_ms - now_ms.rem_euclid(60_000);
    now_minute - end
}

/// The input of sample `i`: 0 for task usage, 1 for system events.
fn sample_input(i: u64) -> usize {
    usize::from(locate(i).0)
}

fn sample_len() -> u64 {
    sample_stream().order.len() as u64
}

/// What was injected in samples `start..start + count`: the anomalies of
/// every repetition of the dataset wholly among them, shifted with it.
pub fn sample_truth(start: u64, count: u64) -> Vec<Injected> {
    sample_truth_at(start, count, 0)
}

/// [`sample_truth`] of [`sample_at`]`(_, shift_ms)`.
pub fn sample_truth_at(start: u64, count: u64, shift_ms: i64) -> Vec<Injected> {
    let s = sample_stream();
    let n = s.order.len() as u64;
    let end = start + count;
    (start.div_ceil(n)..end / n)
        .flat_map(|r| {
            s.dataset.truth.iter().map(move |t| Injected {
                window_start: t.window_start + r as i64 * s.span_ms + shift_ms,
                ..t.clone()
            })
        })
        .collect()
}

fn sample_truth_json(start: u64, count: u64, shift_ms: i64) -> serde_json::Value {
    serde_json::to_value(sample_truth_at(start, count, shift_ms))
        .expect("the truth always serializes")
}

/// The samples' topics and ground truth for `weir generate`.
pub const SAMPLE_DATASET: SampleDataset = SampleDataset {
    input_of: sample_input,
    len: sample_len,
    sample_at,
    truth: sample_truth_json,
    shift_to_end_at,
};
