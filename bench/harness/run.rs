//! One measured run: one system, one workload, one guarantee.
//!
//! 1. Create a fresh input and output topic; for the join workload also a
//!    table topic with one profile per key (written now, with timestamps
//!    before every input record). Write one warm-up record to each input
//!    partition, then the whole input (serialized beforehand): the warm-up
//!    records (`warmup_records`), then the measured ones (`records`). The
//!    input is in the topic before the system starts, so the loader takes
//!    no CPU from it.
//! 2. Start the system as a child process. Throughput is the steady
//!    state's: the window opens when the system's committed input offsets
//!    pass the warm-up records (start-up, the first rebalance and the JVM's
//!    JIT behind it) and closes when they reach the input's end; throughput
//!    = records committed in the window / its length, CPU = the child's
//!    utime + stime over it.
//! 3. Read the output topic (`read_committed`) until the complete expected
//!    output is there; a run whose output is incomplete fails.
//! 4. Latency: produce at a fixed rate with the wall clock as record
//!    timestamp; every output record carries its input's timestamp (all three
//!    systems propagate it), so latency = when the output became visible to a
//!    `read_committed` reader − its timestamp.
//! 5. Peak RSS (`VmHWM`), stop the child (SIGTERM, then SIGKILL), delete the
//!    run's topics (internal ones too) and state.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::procstat;
use crate::workload::{self, Expected, Input};

/// Settings shared by every run of a report.
#[derive(Clone, Debug)]
pub struct Settings {
    pub bootstrap: String,
    /// Measured input records (after the warm-up).
    pub records: u64,
    /// Input records before the measured ones, processed but not counted.
    pub warmup_records: u64,
    pub keys: u64,
    pub value_bytes: usize,
    pub partitions: i32,
    pub commit_ms: u64,
    pub latency_rate: u64,
    pub latency_secs: u64,
    pub timeout_secs: u64,
    pub kstreams_dir: PathBuf,
    pub java_opts: Vec<String>,
    pub work_dir: PathBuf,
}

/// A system under test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct System {
    /// `weir`, `raw` or `kstreams`.
    pub kind: String,
    pub threads: usize,
    /// Weir settings of this variant (`weir:1+KEY=VALUE+...`), to compare
    /// a setting side by side with the defaults in one run. The key
    /// [`EXE_SETTING`] instead names another build of this harness to run
    /// the Weir child (a `weir-bench` built from another commit), to
    /// compare two versions of Weir side by side.
    pub settings: Vec<(String, String)>,
}

/// `weir:1+bench.exe=PATH`: run this Weir system with the harness at PATH.
pub const EXE_SETTING: &str = "bench.exe";

impl System {
    pub fn parse(s: &str) -> Result<Self> {
        let mut parts = s.split('+');
        let head = parts.next().unwrap_or_default();
        let (kind, threads) = match head.split_once(':') {
            Some((k, t)) => (k, t.parse().context("thread count")?),
            None => (head, 1),
        };
        if !["weir", "raw", "kstreams"].contains(&kind) {
            bail!(
                "unknown system {kind}; use weir[:threads][+KEY=VALUE...], raw, kstreams[:threads]"
            );
        }
        let settings = parts
            .map(|p| {
                p.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .with_context(|| format!("system {s}: expected KEY=VALUE after '+', got {p}"))
            })
            .collect::<Result<Vec<_>>>()?;
        if !settings.is_empty() && kind != "weir" {
            bail!("system {s}: only Weir takes settings");
        }
        for (k, v) in &settings {
            if k == EXE_SETTING && !std::path::Path::new(v).is_file() {
                bail!("system {s}: {EXE_SETTING}={v} is not a file (a weir-bench binary)");
            }
        }
        Ok(System {
            kind: kind.to_string(),
            threads,
            settings,
        })
    }

    pub fn label(&self) -> String {
        let base = match self.kind.as_str() {
            "raw" => "raw rdkafka loop".to_string(),
            "weir" => format!("Weir {}t", self.threads),
            _ => format!("Kafka Streams {}t", self.threads),
        };
        let settings: Vec<String> = self
            .settings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if settings.is_empty() {
            base
        } else {
            format!("{base} ({})", settings.join(", "))
        }
    }
}

/// The figures of one run.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub workload: String,
    pub guarantee: String,
    pub system: String,
    pub kind: String,
    pub threads: usize,
    pub error: Option<String>,
    pub seconds: f64,
    pub throughput: f64,
    pub cpu_s_per_m: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub latency_samples: usize,
    pub peak_rss_bytes: u64,
    /// How long writing the input took (before the system started).
    pub load_seconds: f64,
    /// From the system's start until its group had settled (one member
    /// per thread, every member owning input partitions).
    pub settle_seconds: f64,
    /// Lowest and highest throughput of the repetitions this outcome is
    /// the median of (equal for one run).
    pub throughput_range: (f64, f64),
    /// Repetitions measured.
    pub runs: usize,
    /// Repetitions that failed (left out of the medians).
    pub failed_runs: usize,
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

impl Outcome {
    /// One outcome from repetitions of the same run: each figure's median
    /// over the runs that succeeded and the throughput's range; the first
    /// failure when none did.
    pub fn median_of(runs: Vec<Outcome>) -> Outcome {
        let (ok, failed): (Vec<Outcome>, Vec<Outcome>) =
            runs.into_iter().partition(|o| o.error.is_none());
        let Some(first) = ok.first() else {
            let failed_runs = failed.len();
            let mut o = failed.into_iter().next().unwrap_or_default();
            o.failed_runs = failed_runs;
            return o;
        };
        let of = |f: fn(&Outcome) -> Option<f64>| median(ok.iter().filter_map(f).collect());
        let throughputs: Vec<f64> = ok.iter().map(|o| o.throughput).collect();
        Outcome {
            throughput: of(|o| Some(o.throughput)).unwrap_or_default(),
            seconds: of(|o| Some(o.seconds)).unwrap_or_default(),
            cpu_s_per_m: of(|o| Some(o.cpu_s_per_m)).unwrap_or_default(),
            p50_ms: of(|o| o.p50_ms),
            p99_ms: of(|o| o.p99_ms),
            latency_samples: first.latency_samples,
            peak_rss_bytes: of(|o| Some(o.peak_rss_bytes as f64)).unwrap_or_default() as u64,
            load_seconds: of(|o| Some(o.load_seconds)).unwrap_or_default(),
            settle_seconds: of(|o| Some(o.settle_seconds)).unwrap_or_default(),
            throughput_range: (
                throughputs.iter().copied().fold(f64::INFINITY, f64::min),
                throughputs.iter().copied().fold(0.0, f64::max),
            ),
            runs: ok.len(),
            failed_runs: failed.len(),
            ..first.clone()
        }
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn admin(bootstrap: &str) -> Result<AdminClient<DefaultClientContext>> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?)
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

pub(crate) fn create_topics(bootstrap: &str, names: &[&str], partitions: i32) -> Result<()> {
    let admin = admin(bootstrap)?;
    let topics: Vec<NewTopic<'_>> = names
        .iter()
        .map(|n| NewTopic::new(n, partitions, TopicReplication::Fixed(1)))
        .collect();
    for r in block_on(admin.create_topics(&topics, &AdminOptions::new()))? {
        r.map_err(|(t, e)| anyhow::anyhow!("creating topic {t}: {e}"))?;
    }
    Ok(())
}

/// Deletes every topic named `exact` or starting with `prefix`.
pub fn delete_topics(bootstrap: &str, exact: &[&str], prefix: &str) -> Result<()> {
    let client: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let md = client.fetch_metadata(None, Duration::from_secs(10))?;
    let names: Vec<String> = md
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .filter(|n| exact.contains(&n.as_str()) || n.starts_with(prefix))
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let admin = admin(bootstrap)?;
    let _ = block_on(admin.delete_topics(&refs, &AdminOptions::new()))?;
    Ok(())
}

pub(crate) fn producer(bootstrap: &str, linger_ms: &str) -> Result<BaseProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("partitioner", "murmur2_random")
        .set("linger.ms", linger_ms)
        .set("queue.buffering.max.messages", "200000")
        .create()?)
}

pub(crate) fn send(p: &BaseProducer, topic: &str, key: &[u8], value: &[u8], ts: i64) -> Result<()> {
    let mut record = BaseRecord::to(topic).key(key).payload(value).timestamp(ts);
    loop {
        match p.send(record) {
            Ok(()) => return Ok(()),
            Err((rdkafka::error::KafkaError::MessageProduction(_), back)) => {
                record = back;
                p.poll(Duration::from_millis(5));
            }
            Err((e, _)) => return Err(e.into()),
        }
    }
}

/// Writes the join workload's table: one profile per key, timestamped before
/// the first warm-up and input record.
fn load_table(bootstrap: &str, topic: &str, input: &Input, partitions: i32) -> Result<()> {
    let p = producer(bootstrap, "5")?;
    for key in input.table_keys() {
        let value = serde_json::to_vec(&workload::profile(&key))?;
        send(&p, topic, key.as_bytes(), &value, input.base_ts - 1)?;
    }
    // A warm-up key goes to its partition number, not where its hash points,
    // so its row goes to the same partition number (co-partitioned).
    for partition in 0..partitions {
        let key = Input::warm_key(partition);
        let value = serde_json::to_vec(&workload::profile(&key))?;
        let record = BaseRecord::to(topic)
            .key(key.as_bytes())
            .payload(&value[..])
            .partition(partition)
            .timestamp(input.base_ts - 1);
        p.send(record).map_err(|(e, _)| e)?;
    }
    p.flush(Duration::from_secs(30))?;
    Ok(())
}

/// Writes one warm-up record to each partition, ahead of the input.
fn warm_up(bootstrap: &str, topic: &str, input: &Input, partitions: i32) -> Result<()> {
    let p = producer(bootstrap, "0")?;
    for partition in 0..partitions {
        let key = Input::warm_key(partition);
        let value = serde_json::to_vec(&input.warm_event(partition))?;
        let record = BaseRecord::to(topic)
            .key(key.as_bytes())
            .payload(&value[..])
            .partition(partition)
            .timestamp(input.base_ts);
        p.send(record).map_err(|(e, _)| e)?;
    }
    p.flush(Duration::from_secs(30))?;
    Ok(())
}

/// The throughput-phase input, serialized up front so loading it is only sending.
pub(crate) struct Prepared {
    keys: Vec<Vec<u8>>,
    values: Vec<Vec<u8>>,
}

pub(crate) fn prepare(input: &Input) -> Result<Prepared> {
    Ok(Prepared {
        keys: (0..input.records)
            .map(|i| input.key(i).into_bytes())
            .collect(),
        values: (0..input.records)
            .map(|i| serde_json::to_vec(&input.event(i)))
            .collect::<Result<_, _>>()?,
    })
}

/// Writes the throughput-phase input as fast as the producer goes.
pub(crate) fn load(
    bootstrap: &str,
    topic: &str,
    input: &Input,
    prepared: &Prepared,
) -> Result<Duration> {
    let started = Instant::now();
    let p = producer(bootstrap, "10")?;
    for i in 0..input.records as usize {
        send(
            &p,
            topic,
            &prepared.keys[i],
            &prepared.values[i],
            input.timestamp(i as u64),
        )?;
        if i % 10_000 == 0 {
            p.poll(Duration::ZERO);
        }
    }
    p.flush(Duration::from_secs(60))?;
    Ok(started.elapsed())
}

/// A JVM running `class` of the bench/kafka-streams build in `dir`.
pub(crate) fn java(dir: &std::path::Path, java_opts: &[String], class: &str) -> Command {
    let mut c = Command::new("java");
    c.args(java_opts)
        .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
        .arg("-cp")
        .arg(format!(
            "{}:{}/*",
            dir.join("target/classes").display(),
            dir.join("target/lib").display()
        ))
        .arg(class);
    c
}

/// Seconds with two decimals, or a dash.
pub(crate) fn secs(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.2}", d.as_secs_f64()))
        .unwrap_or_else(|| "—".into())
}

pub(crate) fn spawn(
    settings: &Settings,
    system: &System,
    args: &RunArgs,
    log: &std::path::Path,
) -> Result<Child> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let err = out.try_clone()?;
    let guarantee = if args.exactly_once {
        "exactly_once_v2"
    } else {
        "at_least_once"
    };
    let mut cmd = match system.kind.as_str() {
        "kstreams" => {
            let mut c = java(
                &settings.kstreams_dir,
                &settings.java_opts,
                "dev.weir.bench.BenchStreams",
            );
            for (k, v) in [
                ("workload", args.workload.clone()),
                ("guarantee", guarantee.to_string()),
                ("threads", system.threads.to_string()),
                ("commit_ms", settings.commit_ms.to_string()),
                ("input", args.input.clone()),
                ("output", args.output.clone()),
                ("table", args.table.clone()),
                ("app_id", args.app_id.clone()),
                ("bootstrap", settings.bootstrap.clone()),
                ("state_dir", args.state_dir.display().to_string()),
            ] {
                c.arg(format!("{k}={v}"));
            }
            if let Some(id) = &args.instance_id {
                c.arg(format!("prop.group.instance.id={id}"));
            }
            for (k, v) in &args.kstreams_props {
                c.arg(format!("prop.{k}={v}"));
            }
            c
        }
        kind => {
            let exe = match args.weir_config.iter().find(|(k, _)| k == EXE_SETTING) {
                Some((_, path)) => path.into(),
                None => std::env::current_exe()?,
            };
            let mut c = Command::new(exe);
            c.arg(kind)
                .arg("--workload")
                .arg(&args.workload)
                .arg("--guarantee")
                .arg(guarantee)
                .arg("--threads")
                .arg(system.threads.to_string())
                .arg("--commit-ms")
                .arg(settings.commit_ms.to_string())
                .arg("--input")
                .arg(&args.input)
                .arg("--output")
                .arg(&args.output)
                .arg("--table")
                .arg(&args.table)
                .arg("--app-id")
                .arg(&args.app_id)
                .arg("--bootstrap")
                .arg(&settings.bootstrap)
                .arg("--state-dir")
                .arg(&args.state_dir);
            if let Some(id) = &args.instance_id {
                c.arg("--instance-id").arg(id);
            }
            for (k, v) in args.weir_config.iter().filter(|(k, _)| k != EXE_SETTING) {
                c.arg("--set").arg(format!("{k}={v}"));
            }
            // BENCH_WEIR_LOG: the child's log filter (e.g. to see commits).
            c.env(
                "WEIR_LOG",
                std::env::var("BENCH_WEIR_LOG").unwrap_or_else(|_| "warn".into()),
            );
            c
        }
    };
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {}", system.label()))
}

/// What one child process runs.
pub(crate) struct RunArgs {
    pub workload: String,
    pub exactly_once: bool,
    pub input: String,
    pub output: String,
    /// The join workload's table topic.
    pub table: String,
    pub app_id: String,
    pub state_dir: PathBuf,
    /// Static membership (`instance_id` for Weir, `group.instance.id` for
    /// Kafka Streams): a restarted child takes its partitions back at once.
    pub instance_id: Option<String>,
    /// Further Kafka Streams properties (ignored by the other systems).
    pub kstreams_props: Vec<(String, String)>,
    /// Further Weir settings (ignored by the other systems).
    pub weir_config: Vec<(String, String)>,
}

/// A `read_committed` consumer outside any group's offsets (`group` only
/// names it), to be assigned partitions; fetches return after 10 ms.
pub(crate) fn committed_reader(bootstrap: &str, group: &str) -> Result<BaseConsumer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "10")
        // librdkafka's default (1 s) postpones the next fetch of a
        // partition whose local queue was over `queued.min.messages` when
        // it was last fetched: after a throughput run's output, the
        // reader fetched nothing for a second, so the latency phase's
        // first outputs reached it ~0.9 s late, which made count's p99
        // (the broker's request log showed the gap: Weir's transactions
        // every 100 ms, its markers within 2 ms, no fetch by the reader).
        .set("fetch.queue.backoff.ms", "20")
        .create()?)
}

/// Reads the output topic and knows when it is complete.
struct OutputReader {
    consumer: BaseConsumer,
    expected: Expected,
    /// Output records read, apart from the warm-up records' output.
    seen: u64,
    latest: HashMap<Vec<u8>, i64>,
    remaining: usize,
}

impl OutputReader {
    fn new(settings: &Settings, topic: &str, expected: Expected) -> Result<Self> {
        let consumer = committed_reader(&settings.bootstrap, &format!("{topic}-reader"))?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..settings.partitions {
            tpl.add_partition_offset(topic, p, Offset::Beginning)?;
        }
        consumer.assign(&tpl)?;
        let remaining = match &expected {
            Expected::Records(_) => 0,
            Expected::Latest(m) => m.len(),
        };
        Ok(Self {
            consumer,
            expected,
            seen: 0,
            latest: HashMap::new(),
            remaining,
        })
    }

    /// Polls once; returns the (timestamp) of each output record read.
    fn poll(&mut self, timeout: Duration, out: &mut Vec<i64>) -> Result<()> {
        out.clear();
        let mut next = self.consumer.poll(timeout);
        while let Some(m) = next {
            let m = m?;
            out.push(m.timestamp().to_millis().unwrap_or(0));
            // Warm-up keys start with `w` (Input::warm_key).
            if m.key().and_then(|k| k.first()) != Some(&b'w') {
                self.seen += 1;
            }
            if let Expected::Latest(exp) = &self.expected
                && let (Some(k), Some(v)) = (m.key(), m.payload())
                && let Some(&want) = exp.get(k)
                && let Ok(b) = <[u8; 8]>::try_from(v)
            {
                let v = i64::from_be_bytes(b);
                let was_ok = self.latest.get(k) == Some(&want);
                self.latest.insert(k.to_vec(), v);
                match (was_ok, v == want) {
                    (false, true) => self.remaining -= 1,
                    (true, false) => self.remaining += 1,
                    _ => {}
                }
            }
            next = self.consumer.poll(Duration::ZERO);
        }
        Ok(())
    }

    fn complete(&self) -> bool {
        match &self.expected {
            Expected::Records(n) => self.seen >= *n,
            Expected::Latest(_) => self.remaining == 0,
        }
    }
}

pub(crate) fn stop(child: &mut Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn percentile(sorted: &[i64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    Some(sorted[idx] as f64)
}

/// Runs `system` on `workload` under one guarantee.
pub fn run(
    settings: &Settings,
    system: &System,
    workload: &str,
    exactly_once: bool,
    run_id: &str,
) -> Outcome {
    let guarantee = if exactly_once {
        "exactly_once_v2"
    } else {
        "at_least_once"
    };
    let mut outcome = Outcome {
        workload: workload.to_string(),
        guarantee: guarantee.to_string(),
        system: system.label(),
        kind: system.kind.clone(),
        threads: system.threads,
        ..Default::default()
    };
    let app_id = format!("bench-{run_id}");
    let args = RunArgs {
        workload: workload.to_string(),
        exactly_once,
        input: format!("{app_id}-in"),
        output: format!("{app_id}-out"),
        table: format!("{app_id}-profiles"),
        state_dir: settings.work_dir.join("state").join(&app_id),
        app_id,
        instance_id: None,
        kstreams_props: Vec::new(),
        weir_config: system.settings.clone(),
    };
    let result = measure(settings, system, &args, &mut outcome);
    if let Err(e) = result {
        outcome.error = Some(format!("{e:#}"));
    }
    let _ = delete_topics(
        &settings.bootstrap,
        &[&args.input, &args.output, &args.table],
        &format!("{}-", args.app_id),
    );
    let _ = std::fs::remove_dir_all(&args.state_dir);
    outcome
}

fn measure(settings: &Settings, system: &System, args: &RunArgs, o: &mut Outcome) -> Result<()> {
    let input = Input {
        records: settings.warmup_records + settings.records,
        keys: settings.keys,
        value_bytes: settings.value_bytes,
        base_ts: workload::window_start(now_ms() - 3_600_000),
    };
    let join = args.workload == "join";
    let topics: &[&str] = if join {
        &[&args.input, &args.output, &args.table]
    } else {
        &[&args.input, &args.output]
    };
    create_topics(&settings.bootstrap, topics, settings.partitions)?;
    if join {
        load_table(
            &settings.bootstrap,
            &args.table,
            &input,
            settings.partitions,
        )?;
    }
    warm_up(
        &settings.bootstrap,
        &args.input,
        &input,
        settings.partitions,
    )?;
    // The whole input is written before the system starts: the measured
    // rate is the system's, not the loader's.
    let prepared = prepare(&input)?;
    o.load_seconds = load(&settings.bootstrap, &args.input, &input, &prepared)?.as_secs_f64();
    drop(prepared);
    let expected = workload::expected(&args.workload, &input, settings.partitions);
    let mut reader = OutputReader::new(settings, &args.output, expected)?;
    std::fs::create_dir_all(settings.work_dir.join("logs"))?;
    let log = settings
        .work_dir
        .join("logs")
        .join(format!("{}.log", args.app_id));
    let mut child = spawn(settings, system, args, &log)?;
    let result = (|| -> Result<()> {
        steady_state(settings, args, system.threads, &mut child, &log, o)?;
        // Every output record must be there (the throughput counts nothing
        // that was not produced correctly).
        let deadline = Instant::now() + Duration::from_secs(settings.timeout_secs);
        let mut stamps = Vec::new();
        while !reader.complete() {
            if Instant::now() > deadline {
                bail!(
                    "output incomplete after {} s: {} records read (log: {})",
                    settings.timeout_secs,
                    reader.seen,
                    log.display()
                );
            }
            reader.poll(Duration::from_millis(20), &mut stamps)?;
        }
        latency(settings, args, &input, &mut reader, o)?;
        o.peak_rss_bytes = procstat::peak_rss(child.id()).unwrap_or(0);
        Ok(())
    })();
    stop(&mut child);
    result
}

/// Input records committed by the system's group (offsets summed over the
/// input partitions).
fn committed(client: &BaseConsumer, topic: &str, partitions: i32) -> Result<u64> {
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = client.committed_offsets(tpl, Duration::from_secs(10))?;
    Ok(committed
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => o.max(0) as u64,
            _ => 0,
        })
        .sum())
}

/// Whether the system's group has settled: one member per stream thread,
/// every input partition owned, and each member owning some when there are
/// enough partitions. Under KIP-848 the first thread to join takes every
/// partition and the broker moves the others' shares over the next
/// heartbeats of both members (2 s each on `scripts/kafka`'s broker):
/// until then those partitions are processed by nobody for a while.
fn group_settled(settings: &Settings, args: &RunArgs, threads: usize) -> Result<bool, String> {
    let members =
        weir::testing::group_members(&settings.bootstrap, &args.app_id, Duration::from_secs(5))?;
    let mut owned: Vec<i32> = Vec::new();
    let mut idle = 0;
    for member in &members {
        let before = owned.len();
        owned.extend(
            member
                .assignment
                .iter()
                .filter(|(topic, _)| *topic == args.input)
                .map(|&(_, partition)| partition),
        );
        if owned.len() == before {
            idle += 1;
        }
    }
    owned.sort_unstable();
    owned.dedup();
    let all_owned = owned.len() == settings.partitions as usize;
    let all_busy = idle == 0 || (settings.partitions as usize) < threads;
    Ok(members.len() == threads && all_owned && all_busy)
}

/// The throughput of the steady state: the window opens when the system's
/// group has settled ([`group_settled`]) and its committed input offsets
/// have passed the warm-up records (start-up, the first rebalance and the
/// JIT's warm-up are behind it), and closes when they reach the end of the
/// input. Throughput = records committed in the window / its length; CPU =
/// the child's utime + stime over it.
fn steady_state(
    settings: &Settings,
    args: &RunArgs,
    threads: usize,
    child: &mut Child,
    log: &std::path::Path,
    o: &mut Outcome,
) -> Result<()> {
    let client: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &settings.bootstrap)
        .set("group.id", &args.app_id)
        .create()?;
    let total = settings.partitions as u64 + settings.warmup_records + settings.records;
    let warm = settings.partitions as u64 + settings.warmup_records;
    let ticks = procstat::clock_ticks();
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(settings.timeout_secs);
    let mut start: Option<(Instant, u64, Duration)> = None;
    let spawned = Instant::now();
    let mut settled = false;
    let mut last_check: Option<Instant> = None;
    loop {
        if !settled && last_check.is_none_or(|t| t.elapsed() >= Duration::from_millis(250)) {
            last_check = Some(Instant::now());
            match group_settled(settings, args, threads) {
                Ok(true) => {
                    settled = true;
                    o.settle_seconds = spawned.elapsed().as_secs_f64();
                }
                Ok(false) => {}
                Err(e) => eprintln!("  describing group {}: {e}", args.app_id),
            }
        }
        let at = committed(&client, &args.input, settings.partitions)?;
        let now = Instant::now();
        if start.is_none() && settled && at >= warm {
            start = Some((now, at, procstat::cpu_time(pid, ticks).unwrap_or_default()));
        }
        if at >= total && start.is_none() {
            bail!(
                "all input was committed before the group settled ({threads} threads); raise BENCH_RECORDS"
            );
        }
        if at >= total {
            let (t1, c1, cpu1) = start.expect("the warm-up precedes the end");
            let cpu2 = procstat::cpu_time(pid, ticks).unwrap_or_default();
            let n = at - c1;
            if n == 0 {
                // The warm-up and the measured records were committed
                // between two samples: there is no window to measure.
                bail!(
                    "all {} measured records were committed within one 50 ms sample; raise BENCH_RECORDS",
                    settings.records
                );
            }
            o.seconds = (now - t1).as_secs_f64();
            o.throughput = n as f64 / o.seconds.max(1e-3);
            o.cpu_s_per_m = (cpu2 - cpu1).as_secs_f64() / n as f64 * 1e6;
            return Ok(());
        }
        if now > deadline {
            bail!(
                "timed out after {} s with {at} of {total} input records committed (log: {})",
                settings.timeout_secs,
                log.display()
            );
        }
        if let Ok(Some(status)) = child.try_wait() {
            bail!("exited early ({status}); log: {}", log.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Latency: records at a fixed rate with the wall clock as timestamp.
fn latency(
    settings: &Settings,
    args: &RunArgs,
    input: &Input,
    reader: &mut OutputReader,
    o: &mut Outcome,
) -> Result<()> {
    let mut stamps = Vec::new();
    let stop_flag = Arc::new(AtomicBool::new(false));
    let phase_start = now_ms();
    let feeder = {
        let bootstrap = settings.bootstrap.clone();
        let topic = args.input.clone();
        let rate = settings.latency_rate;
        let secs = settings.latency_secs;
        let input = input.clone();
        let stop_flag = stop_flag.clone();
        std::thread::spawn(move || -> Result<()> {
            let p = producer(&bootstrap, "0")?;
            let started = Instant::now();
            let total = rate * secs;
            let mut sent = 0u64;
            while sent < total && !stop_flag.load(Ordering::Relaxed) {
                let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
                while sent < due.min(total) {
                    let i = input.records + sent;
                    let value = serde_json::to_vec(&input.event(i))?;
                    send(&p, &topic, input.key(i).as_bytes(), &value, now_ms())?;
                    sent += 1;
                }
                // Not `poll(1 ms)`: rdkafka's `BaseProducer::poll` waits
                // out its whole timeout, and below 1 ms left it polls
                // librdkafka with a timeout of 0 in a loop; with a delivery
                // report every millisecond this feeder spun on a core the
                // system under test and the broker needed.
                p.poll(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(1));
            }
            p.flush(Duration::from_secs(30))?;
            Ok(())
        })
    };
    let tail = Duration::from_millis(2_000 + 2 * settings.commit_ms);
    let phase_end = Instant::now() + Duration::from_secs(settings.latency_secs) + tail;
    let mut latencies = Vec::new();
    while Instant::now() < phase_end {
        reader.poll(Duration::from_millis(5), &mut stamps)?;
        let now = now_ms();
        latencies.extend(
            stamps
                .iter()
                .filter(|&&ts| ts >= phase_start)
                .map(|ts| now - ts),
        );
    }
    stop_flag.store(true, Ordering::Relaxed);
    feeder
        .join()
        .map_err(|_| anyhow::anyhow!("latency feeder panicked"))??;
    latencies.sort_unstable();
    o.latency_samples = latencies.len();
    o.p50_ms = percentile(&latencies, 0.50);
    o.p99_ms = percentile(&latencies, 0.99);
    Ok(())
}
