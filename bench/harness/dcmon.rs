//! `weir-bench dcmon`: throughput of the shipped `datacenter-monitor`
//! application. Loads repetitions of its generated dataset (task usage and
//! system events, anomalies injected) into fresh topics, then runs `weir run
//! datacenter-monitor` as a child process until the application's committed
//! input offsets reach the end of both topics and every injected anomaly
//! has been alerted. Reports events per second of wall time and per
//! CPU-second of the child (user + system, all its threads: events per
//! second per core), and rewrites its section of BENCHMARKS.md.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use weir::runtime::EndOfPartitionContext;
use weir::topologies::{ShippedTopology, find};

use crate::procstat;
use crate::run::{create_topics, delete_topics, producer, send, stop};

/// Where the section starts and ends in BENCHMARKS.md (`weir-bench report`
/// keeps it when it rewrites the file).
pub const BEGIN: &str = "<!-- datacenter-monitor:begin -->";
/// See [`BEGIN`].
pub const END: &str = "<!-- datacenter-monitor:end -->";

/// What to run.
pub struct DcmonArgs {
    pub bootstrap: String,
    pub repetitions: u64,
    pub partitions: i32,
    pub commit_ms: u64,
    pub guarantees: Vec<String>,
    pub threads: Vec<usize>,
    pub work_dir: PathBuf,
    pub out: PathBuf,
    pub command: String,
}

/// One measured run.
struct Run {
    guarantee: String,
    threads: usize,
    wall: Duration,
    cpu: Duration,
    peak_rss: u64,
    alerts: usize,
}

fn topology() -> &'static ShippedTopology {
    find("datacenter-monitor").expect("datacenter-monitor ships")
}

/// Writes samples `0..count` to `topics[input_of(i)]`; returns per-topic counts.
fn load(bootstrap: &str, topics: &[String; 3], count: u64) -> Result<[u64; 2]> {
    let t = topology();
    let dataset = t.dataset.expect("datacenter-monitor has a dataset");
    let p = producer(bootstrap, "5")?;
    let mut per_topic = [0u64; 2];
    // Current event times: the broker's time retention would delete the
    // alerts of the dataset's 2023 dates.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let shift = (dataset.shift_to_end_at)(now, 0, count);
    for i in 0..count {
        let (key, value) = (dataset.sample_at)(i, shift);
        let input = (dataset.input_of)(i);
        per_topic[input] += 1;
        let key = key.unwrap_or_default();
        send(&p, &topics[input], &key, &value, 0)?;
        if i % 1024 == 0 {
            p.poll(Duration::ZERO);
        }
    }
    p.flush(Duration::from_secs(60))?;
    Ok(per_topic)
}

/// Whether the group's committed offsets reached the end of `inputs`.
pub(crate) fn inputs_done(client: &BaseConsumer, inputs: &[&str], partitions: i32) -> Result<bool> {
    let mut tpl = TopicPartitionList::new();
    for topic in inputs {
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
    }
    let committed = client.committed_offsets(tpl, Duration::from_secs(10))?;
    for e in committed.elements() {
        let (_, high) =
            client.fetch_watermarks(e.topic(), e.partition(), Duration::from_secs(10))?;
        let at = match e.offset() {
            Offset::Offset(o) => o,
            _ => 0,
        };
        if at < high {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The outlier rule's grace in this benchmark. The input is loaded before
/// the application starts, so its usage partitions are read at full speed
/// and drift apart in event time by far more than the default 10 windows;
/// job windows would then close before every machine's task means arrived
/// through the repartition topic, and their outliers would go unalerted
/// (dropped as late). With this grace a job window closes when all its
/// tasks reported, as it does when input arrives in real time.
const OUTLIER_GRACE_WINDOWS: u32 = 1_000;

/// The records of `topic` visible to a `read_committed` reader.
fn count_committed(bootstrap: &str, topic: &str, partitions: i32) -> Result<usize> {
    let c: BaseConsumer<EndOfPartitionContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "weir-bench-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create_with_context(EndOfPartitionContext)?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    c.assign(&tpl)?;
    let (mut done, mut count) = (HashSet::new(), 0);
    while done.len() < partitions as usize {
        match c.poll(Duration::from_millis(500)) {
            Some(Ok(_)) => count += 1,
            Some(Err(KafkaError::PartitionEOF(p))) => {
                done.insert(p);
            }
            Some(Err(e)) => return Err(e.into()),
            None => {}
        }
    }
    Ok(count)
}

fn spawn_weir(
    a: &DcmonArgs,
    topics: &[String; 3],
    app_id: &str,
    guarantee: &str,
    threads: usize,
) -> Result<Child> {
    let exe = std::env::current_exe()?;
    let weir = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("weir"))
        .context("locating the weir binary")?;
    let mut cmd = Command::new(&weir);
    cmd.args(["run", "datacenter-monitor"]);
    for s in [
        format!("application_id={app_id}"),
        format!("bootstrap_servers={}", a.bootstrap),
        format!("processing_guarantee={guarantee}"),
        format!("num_stream_threads={threads}"),
        format!("commit_interval_ms={}", a.commit_ms),
        format!("state_dir={}", a.work_dir.join("state").display()),
        "http_bind=off".to_string(),
        format!("topology.usage_topic={}", topics[0]),
        format!("topology.events_topic={}", topics[1]),
        format!("topology.alerts_topic={}", topics[2]),
        format!("topology.outlier_grace_windows={OUTLIER_GRACE_WINDOWS}"),
    ] {
        cmd.arg("--set").arg(s);
    }
    let log = std::fs::File::create(a.work_dir.join(format!("{app_id}.log")))?;
    cmd.env("WEIR_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (build it: cargo build --release)",
                weir.display()
            )
        })
}

/// One run: fresh topics loaded, then the application until done.
fn measure(a: &DcmonArgs, guarantee: &str, threads: usize, expected: usize) -> Result<Run> {
    let app_id = format!("bench-dcmon-{guarantee}-{threads}-{}", std::process::id());
    let topics = [
        format!("{app_id}-usage"),
        format!("{app_id}-events"),
        format!("{app_id}-alerts"),
    ];
    let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    create_topics(&a.bootstrap, &refs, a.partitions)?;
    let count = a.repetitions * (topology().dataset.expect("dataset").len)();
    load(&a.bootstrap, &topics, count)?;
    let client: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &a.bootstrap)
        .set("group.id", &app_id)
        .create()?;
    let ticks = procstat::clock_ticks();
    let began = Instant::now();
    let mut child = spawn_weir(a, &topics, &app_id, guarantee, threads)?;
    let outcome = wait_done(a, &client, &topics, &mut child, expected, began, ticks);
    stop(&mut child);
    let _ = delete_topics(&a.bootstrap, &refs, &format!("{app_id}-"));
    let _ = std::fs::remove_dir_all(a.work_dir.join("state").join(&app_id));
    let (wall, cpu, peak_rss, alerts) = outcome?;
    Ok(Run {
        guarantee: guarantee.to_string(),
        threads,
        wall,
        cpu,
        peak_rss,
        alerts,
    })
}

/// Polls until the inputs are committed and `expected` alerts are visible;
/// returns wall time, CPU time, peak RSS and the alerts.
fn wait_done(
    a: &DcmonArgs,
    client: &BaseConsumer,
    topics: &[String; 3],
    child: &mut Child,
    expected: usize,
    began: Instant,
    ticks: f64,
) -> Result<(Duration, Duration, u64, usize)> {
    let pid = child.id();
    let deadline = began + Duration::from_secs(600);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("weir exited early: {status}");
        }
        let (cpu, rss) = (procstat::cpu_time(pid, ticks), procstat::peak_rss(pid));
        let wall = began.elapsed();
        if inputs_done(client, &[&topics[0], &topics[1]], a.partitions)? {
            let alerts = count_committed(&a.bootstrap, &topics[2], a.partitions)?;
            if alerts >= expected {
                return Ok((wall, cpu.unwrap_or_default(), rss.unwrap_or(0), alerts));
            }
        }
        if Instant::now() > deadline {
            bail!("not done within 600 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs every guarantee × thread count and rewrites the report section.
pub fn run(a: &DcmonArgs) -> Result<()> {
    std::fs::create_dir_all(a.work_dir.join("state"))?;
    let t = topology();
    let dataset = t.dataset.expect("dataset");
    let per_dataset = (dataset.len)();
    let events = a.repetitions * per_dataset;
    let expected = (dataset.truth)(0, events, 0).as_array().map_or(0, Vec::len);
    let mut runs = Vec::new();
    for g in &a.guarantees {
        for &threads in &a.threads {
            eprintln!("dcmon: {g}, {threads} thread(s), {events} events");
            let run = measure(a, g, threads, expected)?;
            eprintln!(
                "dcmon: {:.1} s, {:.0} events/s, {:.0} events per CPU-second",
                run.wall.as_secs_f64(),
                events as f64 / run.wall.as_secs_f64(),
                events as f64 / run.cpu.as_secs_f64()
            );
            runs.push(run);
        }
    }
    let section = section(a, events, per_dataset, expected, &runs)?;
    print!("{section}");
    crate::sections::write(&a.out, (BEGIN, END), &section)
}

fn section(
    a: &DcmonArgs,
    events: u64,
    per_dataset: u64,
    expected: usize,
    runs: &[Run],
) -> Result<String> {
    let mut s = String::new();
    writeln!(s, "{BEGIN}")?;
    writeln!(s, "## The datacenter-monitor application")?;
    writeln!(s)?;
    writeln!(
        s,
        "Generated by `{}` (bench/harness/dcmon.rs); measured separately from the table above. \
         {} repetitions of the `weir generate datacenter-monitor` dataset ({per_dataset} task-usage \
         samples and system events each, event times shifted per repetition): {events} events \
         in {} partitions per input topic, loaded before the application starts; `weir run \
         datacenter-monitor` ({}) as a child process, commit interval {} ms, \
         `outlier_grace_windows` {OUTLIER_GRACE_WINDOWS} (the loaded partitions drift apart in \
         event time; see bench/harness/dcmon.rs). A run \
         ends when the committed input offsets reach the end of both topics and all {expected} \
         injected anomalies are alerted. *Per core* is events per CPU-second of the Weir process \
         (user + system time of all its threads, librdkafka's included).",
        a.command,
        a.repetitions,
        a.partitions,
        build_description(),
        a.commit_ms
    )?;
    writeln!(s)?;
    writeln!(
        s,
        "| guarantee | stream threads | wall time | events/s | CPU time | events/s per core | peak RSS | alerts |"
    )?;
    writeln!(s, "| --- | --- | --- | --- | --- | --- | --- | --- |")?;
    for r in runs {
        writeln!(
            s,
            "| {} | {} | {:.1} s | {:.0} | {:.1} s | {:.0} | {:.0} MiB | {} of {expected} |",
            r.guarantee,
            r.threads,
            r.wall.as_secs_f64(),
            events as f64 / r.wall.as_secs_f64(),
            r.cpu.as_secs_f64(),
            events as f64 / r.cpu.as_secs_f64(),
            r.peak_rss as f64 / (1024.0 * 1024.0),
            r.alerts,
        )?;
    }
    writeln!(s, "{END}")?;
    Ok(s)
}

/// The build measured (`BENCH_BUILD` of `scripts/bench`).
pub fn build_description() -> &'static str {
    match std::env::var("BENCH_BUILD").as_deref() {
        Ok("dev-opt") => {
            "dev-profile build: Weir at opt-level 3 without debug assertions, librdkafka and RocksDB at opt-level 2"
        }
        _ => "release build",
    }
}
