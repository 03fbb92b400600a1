//! `weir-chaos`: runs the shipped `word-count` with N instances on a
//! 3-broker cluster (`scripts/kafka cluster`) while it injects faults, then
//! checks the output with its own `read_committed` reader against the truth
//! it computed from the input. `scripts/chaos` starts the cluster, builds
//! and runs this, and stops the cluster.
//!
//! Faults, in a seeded order: SIGKILL and restart of an instance; `kill -9`
//! and restart of a broker (the leader of an input partition, the
//! transaction coordinator of an instance, or any); SIGSTOP/SIGCONT of a
//! broker (a long GC pause); SIGSTOP of an instance past the session
//! timeout, then SIGCONT (a zombie, whose late writes must be fenced).
//! Input is written while each fault happens. Checks: every key's last
//! committed value equals the truth (at-least-once: is not below it, the
//! over-count is reported), per key committed values never repeat or go
//! backwards (exactly-once), and no instance exits by itself.

mod check;
mod cluster;
mod instances;
mod report;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;

use cluster::Cluster;
use instances::{Instance, Launch};

/// How long a killed broker may take to be fenced by the controller
/// (`broker.session.timeout.ms` is 12 s; a controller that died with it
/// starts counting again once a new one is elected).
const FENCE_WAIT: Duration = Duration::from_secs(60);

#[derive(Parser, Clone, Debug)]
#[command(about = "Fault injection against Weir on a 3-broker cluster, checked against the truth")]
pub struct Cli {
    /// Seed of the fault order, targets and pauses (same seed, same plan).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Instances of word-count.
    #[arg(long, default_value_t = 3)]
    pub instances: usize,
    /// Input sentences (word-count samples 0..records).
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Partitions of the input and output topics.
    #[arg(long, default_value_t = 6)]
    pub partitions: i32,
    /// exactly_once_v2 or at_least_once.
    #[arg(long, default_value = "exactly_once_v2")]
    pub guarantee: String,
    #[arg(long, default_value_t = 5)]
    pub instance_kills: usize,
    #[arg(long, default_value_t = 2)]
    pub broker_kills: usize,
    #[arg(long, default_value_t = 1)]
    pub broker_pauses: usize,
    #[arg(long, default_value_t = 1)]
    pub zombies: usize,
    /// The cluster's base port (`KAFKA_CLUSTER_PORT` of `scripts/kafka cluster`).
    #[arg(long, env = "KAFKA_CLUSTER_PORT", default_value_t = 19092)]
    pub cluster_port: u16,
    /// Instance state, logs and the report go here.
    #[arg(long)]
    pub work_dir: PathBuf,
    /// The `weir` binary (default: beside this one, or in the directory above).
    #[arg(long)]
    pub weir: Option<PathBuf>,
    /// When the output has not reached the truth this many seconds after
    /// the last input, restart every instance once (as an operator would),
    /// keep the stacks of any that does not stop, and wait again; the
    /// restart is reported as a stall. Without it the run waits 900 s and
    /// fails on a stall.
    #[arg(long)]
    pub stall_restart_after: Option<u64>,
    /// Also write the results into this file's section for the guarantee
    /// (RELIABILITY.md).
    #[arg(long)]
    pub reliability: Option<PathBuf>,
    /// How the run was started, for the report.
    #[arg(long, env = "CHAOS_COMMAND", default_value = "weir-chaos")]
    pub command: String,
}

/// One injected fault.
#[derive(Clone, Debug)]
pub enum Fault {
    InstanceKill,
    BrokerKill(KillTarget),
    BrokerPause,
    Zombie,
}

#[derive(Clone, Copy, Debug)]
pub enum KillTarget {
    InputLeader,
    /// The transaction coordinator of an instance (under at_least_once,
    /// the group coordinator).
    Coordinator,
    /// The group coordinator of the application, down for longer than the
    /// controller's broker session timeout, so that the cluster fences it
    /// and the clients' metadata drops it.
    GroupCoordinator,
    Any,
}

/// What happened, for the report.
pub struct Event {
    pub at: Duration,
    pub fault: String,
    pub target: String,
    pub detail: String,
}

/// splitmix64: a small seeded generator (the plan must repeat per seed).
pub struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }
}

/// The faults of a run in a seeded order; broker kills cycle through
/// input leader, transaction coordinator, group coordinator and any broker.
fn plan(cli: &Cli, rng: &mut Rng) -> Vec<Fault> {
    let mut faults: Vec<Fault> = Vec::new();
    faults.extend((0..cli.instance_kills).map(|_| Fault::InstanceKill));
    let targets = [
        KillTarget::InputLeader,
        KillTarget::Coordinator,
        KillTarget::GroupCoordinator,
        KillTarget::Any,
    ];
    faults.extend((0..cli.broker_kills).map(|i| Fault::BrokerKill(targets[i % targets.len()])));
    faults.extend((0..cli.broker_pauses).map(|_| Fault::BrokerPause));
    faults.extend((0..cli.zombies).map(|_| Fault::Zombie));
    for i in (1..faults.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        faults.swap(i, j);
    }
    faults
}

struct Run<'a> {
    cli: &'a Cli,
    cluster: Cluster,
    launch: Launch,
    instances: Vec<Instance>,
    app_id: String,
    input: String,
    started: Instant,
    events: Vec<Event>,
    /// Instances found exited by themselves: (instance, code, log tail).
    exits: Vec<(usize, Option<i32>, String)>,
}

impl Run<'_> {
    fn event(&mut self, fault: &str, target: String, detail: String) {
        let at = self.started.elapsed();
        println!(
            "chaos: {:>7.1}s {fault} {target} {detail}",
            at.as_secs_f64()
        );
        self.events.push(Event {
            at,
            fault: fault.to_string(),
            target,
            detail,
        });
    }

    /// Restarts instances that exited by themselves, noting each.
    fn check_instances(&mut self) -> Result<()> {
        for i in 0..self.instances.len() {
            if let Some(code) = self.instances[i].exited() {
                let tail = instances::log_tail(&self.launch.log(i), 20);
                println!("chaos: instance {i} exited by itself ({code:?}):\n{tail}");
                self.exits.push((i, code, tail));
                self.launch.start(&mut self.instances[i])?;
            }
        }
        Ok(())
    }

    /// Sleeps `d`, checking the instances every half second.
    fn watch(&mut self, d: Duration) -> Result<()> {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.check_instances()?;
            std::thread::sleep(Duration::from_millis(500).min(until - Instant::now()));
        }
        Ok(())
    }

    /// Kills `broker`, and restarts it after `down` but not before the
    /// controller fenced it. A broker back before it was fenced is still
    /// the leader in the metadata it replays, and Kafka 4.4 lets it act on
    /// records its log holds beyond the high watermark: a chaos run saw a
    /// restarted transaction coordinator finish a commit that was never
    /// replicated (its PrepareCommit was lost with the kill), writing commit
    /// markers to the partitions it could reach before the controller moved
    /// its leaderships, while the new coordinator aborted the same
    /// transaction on a partition the restarted broker led itself —
    /// committed input offsets with some of their output aborted
    /// (chaos/FINDINGS.md; ARCHITECTURE.md, *A broker back before it was
    /// fenced*).
    fn broker_down_and_up(&mut self, broker: i32, why: String, down: Duration) -> Result<()> {
        self.cluster.script(&["kill", &broker.to_string()])?;
        let killed = Instant::now();
        self.event(
            "broker kill -9",
            format!("broker {broker}"),
            format!("{why}; down {:.1} s", down.as_secs_f64()),
        );
        let event = self.events.len() - 1;
        self.watch(down)?;
        let fenced = loop {
            if weir::testing::broker().fenced(broker) {
                break killed.elapsed();
            }
            if killed.elapsed() > FENCE_WAIT {
                bail!("broker {broker} was not fenced {FENCE_WAIT:?} after it was killed");
            }
            self.watch(Duration::from_millis(500))?;
        };
        self.cluster.script(&["restart", &broker.to_string()])?;
        let down = killed.elapsed();
        println!(
            "chaos:          broker {broker} fenced {:.1} s after the kill, restarted after {:.1} s",
            fenced.as_secs_f64(),
            down.as_secs_f64()
        );
        self.events[event].detail = format!(
            "{why}; down {:.1} s (fenced after {:.1} s)",
            down.as_secs_f64(),
            fenced.as_secs_f64()
        );
        Ok(())
    }

    fn inject(&mut self, fault: &Fault, rng: &mut Rng) -> Result<()> {
        match fault {
            Fault::InstanceKill => {
                let i = rng.below(self.instances.len() as u64) as usize;
                let down = rng.millis(0, 3_000);
                self.instances[i].kill();
                self.event(
                    "instance SIGKILL",
                    format!("instance {i}"),
                    format!("restarted after {:.1} s", down.as_secs_f64()),
                );
                self.watch(down)?;
                let launch = &self.launch;
                launch.start(&mut self.instances[i])?;
            }
            Fault::BrokerKill(target) => {
                let (broker, why) = match target {
                    KillTarget::InputLeader => {
                        let p = rng.below(self.cli.partitions as u64) as i32;
                        (
                            self.cluster.leader(&self.input, p)?,
                            format!("leader of {}/{p}", self.input),
                        )
                    }
                    KillTarget::Coordinator => {
                        let i = rng.below(self.instances.len() as u64) as usize;
                        match self.launch.transactional_id(&self.app_id, i) {
                            Some(id) if self.cli.guarantee == "exactly_once_v2" => (
                                self.cluster.coordinator(&id)?,
                                format!("transaction coordinator of instance {i} ({id})"),
                            ),
                            _ => {
                                let group = self.cluster.coordinator_of_group(&self.app_id)?;
                                (group, "group coordinator".to_string())
                            }
                        }
                    }
                    KillTarget::GroupCoordinator => (
                        self.cluster.coordinator_of_group(&self.app_id)?,
                        "group coordinator".to_string(),
                    ),
                    KillTarget::Any => (
                        1 + rng.below(self.cluster.brokers as u64) as i32,
                        "any broker".to_string(),
                    ),
                };
                // At least this long, and never before the controller
                // fenced the broker (`broker_down_and_up`): scripts/kafka's
                // broker.session.timeout.ms is 12 s.
                let down = match target {
                    KillTarget::GroupCoordinator => rng.millis(13_000, 18_000),
                    _ => rng.millis(3_000, 10_000),
                };
                self.broker_down_and_up(broker, why, down)?;
            }
            Fault::BrokerPause => {
                let broker = 1 + rng.below(self.cluster.brokers as u64) as i32;
                let paused = rng.millis(8_000, 20_000);
                self.cluster.script(&["pause", &broker.to_string()])?;
                self.event(
                    "broker SIGSTOP",
                    format!("broker {broker}"),
                    format!("paused {:.1} s", paused.as_secs_f64()),
                );
                self.watch(paused)?;
                self.cluster.script(&["resume", &broker.to_string()])?;
            }
            Fault::Zombie => {
                let i = rng.below(self.instances.len() as u64) as usize;
                // Past the group session timeout (10 s) and the transaction
                // timeout (10 s): its tasks move and its open transaction is
                // aborted; when it wakes, its writes must be fenced.
                let stopped = rng.millis(15_000, 20_000);
                self.instances[i].signal("STOP");
                self.event(
                    "instance SIGSTOP (zombie)",
                    format!("instance {i}"),
                    format!("stopped {:.1} s, then SIGCONT", stopped.as_secs_f64()),
                );
                // Not `watch`: a stopped process has not exited.
                std::thread::sleep(stopped);
                let log = self.launch.log(i);
                let seen = std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
                self.instances[i].signal("CONT");
                // Its first write after waking must be refused: the log
                // says so (`producer fenced`, `assignment lost`).
                let woke = Instant::now();
                let fenced = loop {
                    let text = std::fs::read(&log).unwrap_or_default();
                    let since = String::from_utf8_lossy(&text[seen.min(text.len())..]).into_owned();
                    if since.contains("fenced") || since.contains("assignment lost") {
                        break Some(woke.elapsed());
                    }
                    if woke.elapsed() > Duration::from_secs(30) {
                        break None;
                    }
                    self.check_instances()?;
                    std::thread::sleep(Duration::from_millis(200));
                };
                self.event(
                    "zombie woke",
                    format!("instance {i}"),
                    match fenced {
                        Some(d) => format!("fenced {:.1} s after SIGCONT", d.as_secs_f64()),
                        None => "no fencing logged within 30 s".to_string(),
                    },
                );
            }
        }
        // Before the next fault: every partition back to full replication.
        let waited = self.cluster.wait_in_sync(Duration::from_secs(180))?;
        if waited > Duration::from_secs(1) {
            println!(
                "chaos: replicas back in sync after {:.1} s",
                waited.as_secs_f64()
            );
        }
        Ok(())
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    if !matches!(cli.guarantee.as_str(), "exactly_once_v2" | "at_least_once") {
        bail!(
            "--guarantee must be exactly_once_v2 or at_least_once, not '{}'",
            cli.guarantee
        );
    }
    let weir = match &cli.weir {
        Some(w) => w.clone(),
        // Beside this binary (scripts/chaos copies both), else in the
        // target directory above `examples/`.
        None => {
            let exe = std::env::current_exe()?;
            let dir = exe.parent().context("locating the weir binary")?;
            [dir.join("weir"), dir.join("../weir")]
                .into_iter()
                .find(|p| p.is_file())
                .unwrap_or_else(|| dir.join("weir"))
        }
    };
    if !weir.exists() {
        bail!(
            "{} not found; build it (scripts/chaos does) or pass --weir",
            weir.display()
        );
    }
    let cluster = Cluster::attach(cli.cluster_port)?;
    // weir::testing's reader and writer use this cluster.
    // SAFETY: no other thread runs yet.
    unsafe { std::env::set_var("KAFKA_BOOTSTRAP_SERVERS", &cluster.bootstrap) };
    let _ = std::fs::remove_dir_all(&cli.work_dir);
    std::fs::create_dir_all(&cli.work_dir)?;

    let app_id = weir::testing::unique_name("chaos-wc");
    let (input, output) = (format!("{app_id}-in"), format!("{app_id}-out"));
    let kafka = weir::testing::broker();
    kafka.create_topics(&[(&input, cli.partitions), (&output, cli.partitions)]);
    let launch = Launch {
        weir,
        work_dir: cli.work_dir.clone(),
        settings: vec![
            format!("bootstrap_servers={}", cluster.bootstrap),
            format!("application_id={app_id}"),
            format!("processing_guarantee={}", cli.guarantee),
            format!("topology.input_topic={input}"),
            format!("topology.output_topic={output}"),
            "replication_factor=3".to_string(),
        ],
    };
    let mut rng = Rng(cli.seed);
    let faults = plan(&cli, &mut rng);
    println!(
        "chaos: seed {} · {} instances · {} sentences · {} faults on {} ({})",
        cli.seed,
        cli.instances,
        cli.records,
        faults.len(),
        cluster.bootstrap,
        cli.guarantee
    );
    let mut run = Run {
        cli: &cli,
        cluster,
        launch,
        instances: (0..cli.instances).map(Instance::new).collect(),
        app_id: app_id.clone(),
        input: input.clone(),
        started: Instant::now(),
        events: Vec::new(),
        exits: Vec::new(),
    };
    for i in 0..run.instances.len() {
        run.launch.start(&mut run.instances[i])?;
    }

    // Input in chunks, one written while each fault happens, the last after.
    let chunks = faults.len() as u64 + 1;
    let chunk = cli.records / chunks;
    let write = |from: u64, to: u64| {
        let records = (from..to).map(|i| {
            let (key, line) = weir::topologies::word_count::sample(i);
            (key, line)
        });
        kafka.produce(&input, records);
    };
    for (n, fault) in faults.iter().enumerate() {
        let from = n as u64 * chunk;
        let result = std::thread::scope(|s| {
            let writer = s.spawn(|| write(from, from + chunk));
            run.watch(rng.millis(1_000, 3_000))?;
            let result = run.inject(fault, &mut rng);
            writer.join().expect("the input writer panicked");
            result
        });
        result.with_context(|| format!("injecting {fault:?}"))?;
    }
    write((chunks - 1) * chunk, cli.records);
    let input_done = run.started.elapsed();
    println!(
        "chaos: all input written and all faults injected after {:.0} s; waiting for the output",
        input_done.as_secs_f64()
    );

    let truth = check::truth(cli.records);
    let exact = cli.guarantee == "exactly_once_v2";
    let limit = Duration::from_secs(900);
    let first = cli.stall_restart_after.map_or(limit, Duration::from_secs);
    let mut converged =
        check::wait_converged(&output, &truth, exact, first, || run.check_instances())?;
    if converged.is_none() && first < limit {
        // A stall: correctness is still checked below, after a restart.
        let mut stacks = Vec::new();
        for instance in &mut run.instances {
            if let Err(path) = instance.stop(&cli.work_dir, "stalled") {
                stacks.push(path.display().to_string());
            }
        }
        run.event(
            "stall",
            "all instances".to_string(),
            format!(
                "output not at the truth {} s after the last input; every instance restarted{}",
                first.as_secs(),
                if stacks.is_empty() {
                    String::new()
                } else {
                    format!(" (did not stop on SIGTERM, stacks: {})", stacks.join(", "))
                }
            ),
        );
        for i in 0..run.instances.len() {
            run.launch.start(&mut run.instances[i])?;
        }
        converged = check::wait_converged(&output, &truth, exact, limit - first, || {
            run.check_instances()
        })?
        .map(|d| d + first);
    }
    let outcome = check::check(&output, &truth);
    let took = run.started.elapsed();
    // An instance that does not stop on SIGTERM is hung: its stacks are
    // kept for diagnosis and it is reported.
    let mut hung = Vec::new();
    for instance in &mut run.instances {
        if let Err(stacks) = instance.stop(&cli.work_dir, "hung") {
            println!(
                "chaos: instance {} did not stop within 60 s of SIGTERM; stacks in {}",
                instance.index,
                stacks.display()
            );
            hung.push((instance.index, stacks));
        }
    }
    let report = report::Report {
        cli: &cli,
        events: &run.events,
        exits: &run.exits,
        hung: &hung,
        outcome: &outcome,
        converged,
        input_done,
        took,
        restarts: run.instances.iter().map(|i| i.starts - 1).sum(),
    };
    let summary = report.summary();
    let path = cli.work_dir.join("chaos-report.md");
    std::fs::write(&path, report.markdown())?;
    if let Some(reliability) = &cli.reliability {
        report::write_section(reliability, &cli.guarantee, &report.markdown())?;
    }
    println!("{summary}");
    println!("chaos: report {}", path.display());
    if !report.passed() {
        std::process::exit(1);
    }
    Ok(())
}
