//! `ferrite`: pool administration and the project's evaluation report.
//!
//! Exit codes (README, "Exit codes of `ferrite`"): 0 success; 2 usage errors (from clap,
//! invalid pool arguments, and arguments of `ferrite sim` clap cannot check: trace files,
//! configurations); a pool error's [`pmem::PoolError::exit_code`] when a pool file is the
//! problem, and its 18 for a heap or pool that ran out of space; 128 + N when `bench` or
//! `eval`'s measuring process was killed by signal N; 1 for anything else, including an
//! evaluation with a failed section. `fs fsck` keeps e2fsck's codes (`fs_cmd`). Errors are
//! one line on stderr: `ferrite: <path>: <reason>`; all codes come from one mapping,
//! [`exit_code_of`].

#![forbid(unsafe_code)]

mod bench_cmd;
mod bench_space;
mod cells;
mod eval;
mod fs_cmd;
mod output;
mod plot;
mod pool_cmd;
mod report;
mod sim;
mod size;
mod terminal;
mod time;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Ferrite: atomic durability on persistent memory.
#[derive(Debug, Parser)]
#[command(name = "ferrite", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create, inspect and validate pool files.
    #[command(subcommand)]
    Pool(PoolCommand),
    /// Run every evaluation section and write the report folder.
    Eval(EvalArgs),
    /// Benchmark engines on workloads, side by side (PMDK and the ideal reference included).
    Bench(BenchArgs),
    /// Simulate hardware logging designs (Silo and its baselines) on workload traces.
    #[command(subcommand)]
    Sim(sim::SimCommand),
    /// Create, mount, unmount and check PMFS file systems (FUSE).
    #[command(subcommand)]
    Fs(fs_cmd::FsCommand),
}

/// A count of at least 1 (keys, operations, runs, transactions). clap's range parser said
/// "0 is not in 1..18446744073709551615"; the message here follows clap's "invalid value '0'
/// for '--keys <KEYS>': ".
pub(crate) fn count(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(error) => Err(format!("expected a whole number of at least 1 ({error})")),
    }
}

/// [`count`] as a `usize`.
fn count_usize(text: &str) -> Result<usize, String> {
    let n = count(text)?;
    usize::try_from(n).map_err(|_| format!("{n} is too large"))
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// Engines (comma-separated): undo, redo, mvcc (TimeStone), pmdk, ideal, mem; undo and
    /// redo take a log mode suffix (redo:cacheable, redo:non-temporal, redo:packed,
    /// redo:auto); raw and raw:volatile are the raw reference (array and hash only).
    #[arg(long, value_delimiter = ',', default_value = "redo,undo,pmdk,ideal", value_parser = parse_engine)]
    engine: Vec<bench::choice::EngineChoice>,
    /// Workloads (comma-separated): array, queue, hash, btree, rbtree, list, ts-hash, bst,
    /// ycsb-a … ycsb-f, ycsb-silo, tpcc.
    #[arg(long, value_delimiter = ',', default_value = "hash", value_parser = parse_workload)]
    workload: Vec<bench::choice::WorkloadChoice>,
    /// Thread counts (comma-separated), 1 to 1024 (thousands of threads exhausted the
    /// memory for their stacks and aborted the run).
    #[arg(long, value_delimiter = ',', default_value = "1", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    threads: Vec<usize>,
    /// Keys (elements) loaded at setup (tpcc's tables have fixed sizes: it takes no --keys or
    /// --value-size, and runs one warehouse per thread).
    #[arg(long, default_value_t = 100_000, value_parser = count)]
    keys: u64,
    /// Value (element) size in bytes, 1 to 64 KiB (K suffix as for sizes): one transaction
    /// may log up to 9 values (a B+tree split), and the undo engine's lane holds 768 KiB.
    #[arg(long, default_value = "64", value_parser = parse_value_size)]
    value_size: u32,
    /// Update percentage of read/update mixes.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=100))]
    update: u32,
    /// Operations per timed run.
    #[arg(long, default_value_t = 200_000, value_parser = count)]
    ops: u64,
    /// Untimed warm-up operations.
    #[arg(long, default_value_t = 20_000)]
    warmup: u64,
    /// Timed runs per configuration (the median is reported).
    #[arg(long, default_value_t = 5, value_parser = count_usize)]
    runs: usize,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Pool size.
    #[arg(long, default_value = "1G", value_parser = size::parse_size)]
    pool_size: u64,
    /// Directory for pool files.
    #[arg(long, default_value = pmem::DEFAULT_POOL_DIR)]
    pool_dir: PathBuf,
    /// Emulated PM: nanoseconds spun for every cache line Ferrite's pools write back (0,
    /// the default: none). PMDK cannot be charged, so it is skipped when this or
    /// --pm-fence-ns is set.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pm_line_ns: u64,
    /// Emulated PM: nanoseconds spun for every fence of Ferrite's pools (0: none).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pm_fence_ns: u64,
    /// Workloads take their locks at one thread too (by default a one-thread run takes
    /// none). Engines that leave isolation to their caller (redo, undo, PMDK, ideal) then
    /// pay for the locks a concurrent service's code takes at any thread count; mvcc
    /// isolates its transactions itself and takes none either way.
    #[arg(long)]
    locks_at_one_thread: bool,
    /// Engine the ratio column divides by (default: the first engine).
    #[arg(long, value_parser = parse_engine)]
    baseline: Option<bench::choice::EngineChoice>,
    /// Also write the measurements as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// The largest `bench --value-size`: every engine runs every workload with it at the
/// default lane sizes (tried for each engine and workload). One transaction logs whole
/// values: two for an array swap, up to 9 for a B+tree split or a YCSB insert (undo their
/// old bytes, redo and mvcc their new ones), and the undo engine's lane holds 768 KiB of
/// entries, redo's 1 MiB: 512 KiB failed on the B+tree, YCSB and array workloads, 1 MiB (the
/// workloads' own limit) on nearly everything.
const MAX_BENCH_VALUE_SIZE: u64 = 64 << 10;

/// `--value-size`: a size (`4096`, `16K`) of at most [`MAX_BENCH_VALUE_SIZE`].
fn parse_value_size(text: &str) -> Result<u32, String> {
    let bytes = size::parse_size(text)?;
    if bytes > MAX_BENCH_VALUE_SIZE {
        return Err(format!(
            "{bytes} bytes is more than the 64 KiB every engine and workload can log in one \
             transaction at the default lane sizes (a B+tree split logs up to 9 values; the \
             undo engine's lane holds 768 KiB)"
        ));
    }
    // At most 64 KiB: fits a u32.
    Ok(bytes as u32)
}

fn parse_engine(text: &str) -> Result<bench::choice::EngineChoice, String> {
    bench::choice::EngineChoice::parse(text).ok_or_else(|| {
        let modes: Vec<&str> = tx::LogMode::ALL.iter().map(|mode| mode.name()).collect();
        format!(
            "unknown engine {text:?} (known: {}; undo and redo also take a log mode, \
             undo:<mode> or redo:<mode>, with <mode> one of {})",
            bench::choice::EngineChoice::NAMES.join(", "),
            modes.join(", ")
        )
    })
}

fn parse_workload(text: &str) -> Result<bench::choice::WorkloadChoice, String> {
    bench::choice::WorkloadChoice::parse(text).ok_or_else(|| {
        let known: Vec<String> = bench::choice::WorkloadChoice::ALL
            .iter()
            .map(|w| w.name())
            .collect();
        format!("unknown workload {text:?} (known: {})", known.join(", "))
    })
}

#[derive(Debug, Subcommand)]
enum PoolCommand {
    /// Create and format a new pool file.
    Create(CreateArgs),
    /// Print a pool's header (read-only; works while the pool is open).
    Info {
        /// Pool file.
        path: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Validate a pool file deeply (header, engine area, logs, heap); exit 0 and print
    /// "ok: ..." when it is sound, 14 when it is damaged.
    Check {
        /// Pool file.
        path: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Recover the pool when no damage was found (replay or roll back its logs).
        #[arg(long)]
        repair: bool,
        /// Open a damaged pool anyway, replaying what is intact (may mix states).
        #[arg(long, conflicts_with = "repair")]
        salvage: bool,
    },
}

#[derive(Debug, Args)]
struct CreateArgs {
    /// Path of the new pool file (must not exist).
    path: PathBuf,
    /// Pool size, with an optional K, M, G or T suffix (powers of 1024).
    #[arg(long, value_parser = size::parse_size)]
    size: u64,
    /// Layout name the pool's users must ask for (1 to 63 bytes). The pool is made empty: an
    /// engine (undo, redo, mvcc) formats its area when the program that opens it with this
    /// layout creates it; PMFS pools come from `ferrite fs mkfs`, NVthreads programs make
    /// theirs (`NVT_POOL`) or format an empty one of layout `ferrite-nvthreads`.
    #[arg(long, default_value = "ferrite")]
    layout: String,
    /// Size of the root region (rounded up to 4 KiB).
    #[arg(long, default_value = "4K", value_parser = size::parse_size)]
    root_size: u64,
    /// Persistence mode (default: FERRITE_PERSIST_MODE, else chosen from the media).
    #[arg(long, value_enum)]
    mode: Option<ModeArg>,
    /// Flush instruction (default: FERRITE_FLUSH, else the best this CPU has).
    #[arg(long, value_enum)]
    flush: Option<FlushArg>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ModeArg {
    Adr,
    Eadr,
    Msync,
}

impl From<ModeArg> for pmem::PersistMode {
    fn from(mode: ModeArg) -> Self {
        match mode {
            ModeArg::Adr => pmem::PersistMode::Adr,
            ModeArg::Eadr => pmem::PersistMode::Eadr,
            ModeArg::Msync => pmem::PersistMode::Msync,
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FlushArg {
    Clwb,
    Clflushopt,
    Clflush,
}

impl From<FlushArg> for pmem::FlushInstr {
    fn from(flush: FlushArg) -> Self {
        match flush {
            FlushArg::Clwb => pmem::FlushInstr::Clwb,
            FlushArg::Clflushopt => pmem::FlushInstr::Clflushopt,
            FlushArg::Clflush => pmem::FlushInstr::Clflush,
        }
    }
}

#[derive(Debug, Args)]
struct EvalArgs {
    /// Report folder (created if needed). With --only, the other sections of a report
    /// already there are kept, marked with when they ran, and index.html shows them all (a
    /// report there that cannot be read back is refused, exit 2); without it, every section
    /// is replaced.
    #[arg(long, default_value = "report")]
    out: PathBuf,
    /// Small sizes everywhere: fast, numbers indicative only.
    #[arg(long)]
    quick: bool,
    /// Run only these sections (repeatable).
    #[arg(long, value_name = "SECTION", value_parser = clap::builder::PossibleValuesParser::new(
        eval::SECTIONS.iter().map(|spec| spec.id)))]
    only: Vec<String>,
    /// Directory for scratch pools.
    #[arg(long, default_value = pmem::DEFAULT_POOL_DIR)]
    pool_dir: PathBuf,
}

fn main() -> ExitCode {
    // Usage errors exit with 2 here, --help and --version with 0.
    let cli = Cli::parse();
    if matches!(cli.command, Command::Bench(_) | Command::Eval(_)) {
        if needs_pmdk_environment() {
            return rerun_with_pmdk_environment();
        }
        tear_down_scratch_on_interrupt();
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if reader_went_away(&error) => ExitCode::from(EXIT_BROKEN_PIPE),
        Err(error) => {
            // Not `eprintln!`: it panics when stderr is a closed pipe too.
            let _ = writeln!(std::io::stderr(), "ferrite: {}", one_line(&error));
            ExitCode::from(exit_code_of(&error))
        }
    }
}

/// The status of a command whose reader closed its output early (`ferrite … | head`): 128 +
/// SIGPIPE, what a shell reports for a tool the signal ended, which is how the tools `ferrite`
/// is piped with end there (Rust ignores SIGPIPE, so a write fails instead).
const EXIT_BROKEN_PIPE: u8 = 141;

/// Whether `error` is a write to a pipe nobody reads any more: the reader has what it wanted,
/// so the command ends quietly, without an error line nobody would see.
fn reader_went_away(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match cli.command {
        Command::Pool(PoolCommand::Create(args)) => {
            let request = pool_cmd::CreateRequest {
                path: args.path,
                size: args.size,
                layout: args.layout,
                root_size: args.root_size,
                mode: args.mode.map(Into::into),
                flush: args.flush.map(Into::into),
            };
            pool_cmd::create(&request, &mut stdout)
        }
        Command::Pool(PoolCommand::Info { path, json }) => pool_cmd::info(&path, json, &mut stdout),
        Command::Pool(PoolCommand::Check {
            path,
            json,
            repair,
            salvage,
        }) => {
            let request = pool_cmd::CheckRequest {
                json,
                repair,
                salvage,
            };
            pool_cmd::check(&path, request, &mut stdout)
        }
        Command::Eval(args) => run_eval(&args, &mut stdout),
        Command::Bench(args) => run_bench(&args, &mut stdout),
        Command::Sim(command) => sim::run(&command, &mut stdout),
        Command::Fs(command) => fs_cmd::run(&command, &mut stdout),
    }
}

/// libpmem reads `PMEM_IS_PMEM_FORCE` once, when it loads; it must be in the environment
/// from the start for the PMDK peer to flush like Ferrite does on tmpfs.
fn needs_pmdk_environment() -> bool {
    std::env::var_os(pmdk::FORCE_ENV).is_none()
}

/// Runs this same command again with `PMEM_IS_PMEM_FORCE=1` (setting it in-process would race
/// with threads reading the environment) and exits with its status. An interrupt or
/// termination request is passed on to the run, which tears down its scratch pools and exits;
/// the handler is in place before the run starts, so no request falls between the two. A
/// death no handler sees (`SIGKILL`) reaches the run as `SIGTERM` from the kernel
/// (`PR_SET_PDEATHSIG`), so it tears down and exits all the same.
fn rerun_with_pmdk_environment() -> ExitCode {
    if let Err(error) = ctrlc::set_handler(RERUN.forward_interrupt()) {
        let _ = writeln!(std::io::stderr(), "ferrite: {}", interrupt_warning(&error));
    }
    let status = std::env::current_exe().and_then(|exe| {
        let mut command = std::process::Command::new(exe);
        pdeathsig::die_with_parent(&mut command, pdeathsig::Signal::Terminate);
        let mut run = command
            .args(std::env::args_os().skip(1))
            .env(pmdk::FORCE_ENV, "1")
            .spawn()?;
        RERUN.started(run.id());
        run.wait()
    });
    match status {
        Ok(status) => {
            if let Some(signal) = killed_by(status)
                && !RERUN.interrupted.load(Ordering::SeqCst)
            {
                let _ = writeln!(
                    std::io::stderr(),
                    "ferrite: {}",
                    rerun_killed_message(RERUN.pid.load(Ordering::SeqCst), signal)
                );
            }
            ExitCode::from(exit_status_code(status))
        }
        Err(error) => {
            let _ = writeln!(
                std::io::stderr(),
                "ferrite: re-running with {}=1: {error}",
                pmdk::FORCE_ENV
            );
            ExitCode::from(1)
        }
    }
}

/// The re-run's process and whether an interrupt came, shared with the signal handler. Each
/// side stores its own fact before it reads the other's (both `SeqCst`), so whichever comes
/// second sees the first and the run gets the request once the two meet.
struct Rerun {
    pid: AtomicU32,
    interrupted: AtomicBool,
}

static RERUN: Rerun = Rerun {
    pid: AtomicU32::new(0),
    interrupted: AtomicBool::new(false),
};

impl Rerun {
    fn forward_interrupt(&'static self) -> impl FnMut() + Send + 'static {
        move || {
            self.interrupted.store(true, Ordering::SeqCst);
            self.terminate(self.pid.load(Ordering::SeqCst));
        }
    }

    fn started(&self, pid: u32) {
        self.pid.store(pid, Ordering::SeqCst);
        if self.interrupted.load(Ordering::SeqCst) {
            self.terminate(pid);
        }
    }

    fn terminate(&self, pid: u32) {
        if let Ok(pid @ 1..) = i32::try_from(pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

/// The signal that ended a process, if one did.
fn killed_by(status: std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

/// What to say when the re-run (the process that measures, see
/// [`rerun_with_pmdk_environment`]) was ended by `signal` that this process did not forward:
/// without it, the command exited 137 with no word. `SIGKILL` runs no teardown, so its
/// scratch pools stay until the next run removes them.
fn rerun_killed_message(pid: u32, signal: i32) -> String {
    let command = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "ferrite".to_owned());
    let name = nix::sys::signal::Signal::try_from(signal)
        .map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_owned());
    let (who, after) = if signal == libc_sigkill() {
        (
            " (by another process, or by the kernel's out-of-memory killer: `dmesg` says \
             which)",
            "; it could not clean up: its scratch pools stay on --pool-dir until the next \
             bench or eval removes them",
        )
    } else {
        ("", "")
    };
    format!(
        "{command}: the measuring process {pid} (this command run again with {}=1) was \
         killed by {name}{who}, exit status {}{after}",
        pmdk::FORCE_ENV,
        128 + signal
    )
}

/// `SIGKILL`'s number.
fn libc_sigkill() -> i32 {
    nix::sys::signal::Signal::SIGKILL as i32
}

/// The exit code a shell would report for `status`: the code, or 128 + the signal that ended
/// the process.
fn exit_status_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code.clamp(0, 255) as u8,
        (None, Some(signal)) => (128 + signal).clamp(0, 255) as u8,
        (None, None) => 1,
    }
}

/// The status of a run ended by Ctrl-C or a termination request (128 + SIGINT, as a shell
/// reports a process killed by it).
const EXIT_INTERRUPTED: i32 = 130;

/// Ctrl-C or SIGTERM during `bench` or `eval` tears down what the runs still have (scratch
/// pools, mounts, loop devices: a signal's default action would leave them, pools up to the
/// pool size each in `/dev/shm`) and exits with [`EXIT_INTERRUPTED`].
fn tear_down_scratch_on_interrupt() {
    let installed = ctrlc::set_handler(|| {
        let undone = bench::scratch::tear_down_all();
        let _ = writeln!(
            std::io::stderr(),
            "ferrite: interrupted; cleaned up {undone} scratch item(s) (pools, directories, mounts)"
        );
        std::process::exit(EXIT_INTERRUPTED)
    });
    if let Err(error) = installed {
        let _ = writeln!(std::io::stderr(), "ferrite: {}", interrupt_warning(&error));
    }
}

fn interrupt_warning(error: &ctrlc::Error) -> String {
    format!("cannot handle Ctrl-C ({error}): an interrupted run may leave its scratch pools behind")
}

fn run_bench(args: &BenchArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    bench_lists_are_consistent(args)?;
    bench_keys_fit(args)?;
    output::pool_dir_exists(&args.pool_dir)?;
    remove_abandoned_pools(&args.pool_dir);
    if let Some(path) = &args.json {
        output::file_can_be_written(path)?;
    }
    let request = bench_cmd::BenchRequest {
        engines: args.engine.clone(),
        workloads: args.workload.clone(),
        threads: args.threads.clone(),
        params: workloads::Params {
            keys: args.keys,
            value_size: args.value_size,
            update_percent: args.update,
            threads: 1,
            seed: args.seed,
            locks_at_one_thread: args.locks_at_one_thread,
        },
        ops: args.ops,
        warmup: args.warmup,
        runs: args.runs,
        pool_size: args.pool_size,
        pool_dir: args.pool_dir.clone(),
        pm_latency: pmem::LatencyModel {
            line_writeback_ns: args.pm_line_ns,
            fence_ns: args.pm_fence_ns,
        },
    };
    let results = bench_cmd::run(&request, args.quiet)?;
    if args.locks_at_one_thread {
        writeln!(out, "\n{}", bench_cmd::LOCKS_AT_ONE_THREAD_NOTE)?;
    }
    let baseline = args.baseline.map(|b| b.to_string());
    bench_cmd::print_tables(&results, baseline.as_deref(), request.pm_latency, out)?;
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&bench_cmd::json_report(&request, &results))?;
        crate::output::replace_file(path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The tables have one row per engine and one table per workload and thread count, and
/// the ratio column divides by the baseline: a name given twice would print two rows or
/// tables no reader can tell apart, and a baseline that is not measured would silently
/// become the first engine. Both are usage errors.
fn bench_lists_are_consistent(args: &BenchArgs) -> Result<(), UsageError> {
    let engines: Vec<String> = args.engine.iter().map(ToString::to_string).collect();
    let workloads: Vec<String> = args.workload.iter().map(|w| w.name()).collect();
    let threads: Vec<String> = args.threads.iter().map(ToString::to_string).collect();
    for (option, names) in [
        ("--engine", &engines),
        ("--workload", &workloads),
        ("--threads", &threads),
    ] {
        if let Some(twice) = names
            .iter()
            .enumerate()
            .find_map(|(i, name)| names[..i].contains(name).then_some(name))
        {
            return Err(UsageError(format!("{option} lists {twice} twice")));
        }
    }
    match args.baseline {
        Some(baseline) if !args.engine.contains(&baseline) => Err(UsageError(format!(
            "--baseline {baseline} is not one of the engines measured (--engine {})",
            engines.join(",")
        ))),
        Some(bench::choice::EngineChoice::Pmdk) if args.pm_line_ns > 0 || args.pm_fence_ns > 0 => {
            Err(UsageError(
                "--baseline pmdk: PMDK is skipped under --pm-line-ns or --pm-fence-ns (the \
                 emulation cannot charge its stores); choose another baseline"
                    .to_owned(),
            ))
        }
        _ => Ok(()),
    }
}

/// A `--pool-size` that cannot hold some configuration before its first operation (the
/// engine's logs, the initial content as its allocator places it: `bench_space`), refused
/// before any pool is made. Some workloads build their model of the initial content in DRAM
/// before the pool runs out, so a key count far beyond the pool would abort on that
/// allocation instead of failing on the pool. The array swaps two distinct elements, so one
/// element gives it nothing to do.
fn bench_keys_fit(args: &BenchArgs) -> Result<(), UsageError> {
    use bench::choice::WorkloadChoice;
    if args.keys < 2 && args.workload.contains(&WorkloadChoice::Array) {
        return Err(UsageError(
            "--keys 1: the array workload swaps two distinct elements, so it needs --keys 2 \
             or more"
                .to_owned(),
        ));
    }
    let params = workloads::Params {
        keys: args.keys,
        value_size: args.value_size,
        update_percent: args.update,
        threads: args.threads.first().copied().unwrap_or(1),
        seed: args.seed,
        locks_at_one_thread: args.locks_at_one_thread,
    };
    let emulated = args.pm_line_ns > 0 || args.pm_fence_ns > 0;
    bench_space::check(&bench_space::Request {
        engines: &args.engine,
        workloads: &args.workload,
        params: &params,
        pool_size: args.pool_size,
        pmdk_runs: !emulated && pmdk::Pmdk::available().is_ok(),
    })
}

/// Removes the scratch pools earlier runs left in `pool_dir` when they were killed before
/// their teardown (each holds its `--pool-size` of memory on `/dev/shm`), saying so on stderr.
fn remove_abandoned_pools(pool_dir: &std::path::Path) {
    let removed = bench::scratch::remove_abandoned(pool_dir);
    if !removed.is_empty() {
        let names: Vec<String> = removed.iter().map(|p| p.display().to_string()).collect();
        let _ = writeln!(
            std::io::stderr(),
            "ferrite: removed {} scratch pool(s) of runs that ended without removing them \
             (their processes are gone and nothing has them open): {}",
            removed.len(),
            names.join(", ")
        );
    }
}

fn run_eval(args: &EvalArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    output::pool_dir_exists(&args.pool_dir)?;
    remove_abandoned_pools(&args.pool_dir);
    output::folder_can_be_written(&args.out)?;
    // Read before the (long) run, so a report that cannot be kept is refused first.
    let earlier = if args.only.is_empty() {
        Vec::new()
    } else {
        earlier_sections(&args.out)?
    };
    let options = eval::EvalOptions {
        quick: args.quick,
        pool_dir: args.pool_dir.clone(),
    };
    let mut report = eval::run(&options, &args.only);
    eval::carry_over(&mut report, earlier);
    let written = report::write(&report, &args.out)
        .with_context(|| format!("writing the report to {}", args.out.display()))?;
    eval::print_summary(&report, &args.out, written.len(), out)?;
    // Only the sections this run made judge it; a carried-over failure is the earlier run's.
    let failed: Vec<&str> = report
        .failed_sections()
        .iter()
        .filter(|section| section.earlier.is_none())
        .map(|section| section.id.as_str())
        .collect();
    if !failed.is_empty() {
        anyhow::bail!(
            "eval: failed sections: {} (see {})",
            failed.join(", "),
            args.out.join("index.html").display()
        );
    }
    Ok(())
}

/// The sections of the report already in `dir`, which a run of some sections keeps: one that
/// cannot be read back would be lost, so it is refused (exit 2) before anything runs.
pub(crate) fn earlier_sections(dir: &std::path::Path) -> Result<Vec<report::Section>, UsageError> {
    report::read_sections(dir).map_err(|why| {
        UsageError(format!(
            "--out {}: the report there cannot be read back ({why}), so its other sections \
             would be lost; move it away, or give another --out",
            dir.display()
        ))
    })
}

/// The error and its causes on one line, joined with ": ". A cause whose text its wrapper
/// already quotes (as pool errors quote their I/O error) is not repeated.
fn one_line(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if text.contains(&message) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&message);
    }
    text.replace(['\n', '\r'], " ")
}

/// An argument clap accepted but the command cannot use (an unreadable trace file, a
/// configuration out of range): it exits with 2, like clap's own usage errors. The text is
/// the whole one-line message, starting with the file's path when a file is the problem.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Exit code of usage errors (clap's).
const USAGE_EXIT: u8 = 2;

/// The exit code of an error, the one place errors meet the README's table: 2 for a
/// [`UsageError`]; the code of the first pool error (or pool check problem) in the error's
/// chain, however deep the layers that wrapped it; 1 otherwise.
pub(crate) fn exit_code_of(error: &anyhow::Error) -> u8 {
    error
        .chain()
        .find_map(pool_exit_code)
        .and_then(|code| u8::try_from(code).ok())
        .filter(|&code| code != 0)
        .unwrap_or(1)
}

/// The table's code of one error of a chain, when it is a pool error in any wrapping.
fn pool_exit_code(error: &(dyn std::error::Error + 'static)) -> Option<i32> {
    if let Some(failure) = error.downcast_ref::<pool_cmd::PoolFailure>() {
        return Some(failure.error.exit_code());
    }
    if let Some(failure) = error.downcast_ref::<pool_cmd::CheckFailure>() {
        return Some(failure.problem.exit_code());
    }
    if let Some(error) = error.downcast_ref::<pmem::PoolError>() {
        return Some(error.exit_code());
    }
    // A FERRITE_* variable set to a value it does not take: the invocation is wrong.
    if error.downcast_ref::<pmem::EnvOverrideError>().is_some() {
        return Some(i32::from(USAGE_EXIT));
    }
    // These wrap pool errors transparently: the chain skips the pool error, so look inside.
    if let Some(error) = error.downcast_ref::<tx::TxError>() {
        return tx_exit_code(error);
    }
    if let Some(error) = error.downcast_ref::<pmfs::FsError>() {
        return match error {
            pmfs::FsError::Pool(error) => Some(error.exit_code()),
            pmfs::FsError::InvalidArgument(_) => Some(i32::from(USAGE_EXIT)),
            _ => None,
        };
    }
    // A mount point that is missing is "no such file"; one that is a file is a wrong
    // argument; a dead FUSE mount still there is none of these (1, with its hint).
    match error.downcast_ref::<fsmount::MountError>() {
        Some(fsmount::MountError::MissingMountPoint(_)) => {
            return Some(pmem::PoolError::NotFound.exit_code());
        }
        Some(
            fsmount::MountError::NotADirectory(_)
            | fsmount::MountError::Threads(_)
            | fsmount::MountError::Descriptors { .. },
        ) => return Some(i32::from(USAGE_EXIT)),
        _ => {}
    }
    if let Some(failure) = error.downcast_ref::<fs_cmd::ServerFailed>() {
        return Some(failure.exit_code);
    }
    if let Some(target) = error.downcast_ref::<fs_cmd::NotAMountPoint>() {
        return Some(target.exit_code());
    }
    if let Some(error) = error.downcast_ref::<bench::runner::RunError>() {
        return run_exit_code(error);
    }
    if error.downcast_ref::<UsageError>().is_some() {
        return Some(i32::from(USAGE_EXIT));
    }
    // An output (`--json`, `--out`, a trace) that did not fit: the table's "out of space",
    // as for a pool that does not fit.
    if let Some(error) = error.downcast_ref::<std::io::Error>()
        && matches!(
            error.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        )
    {
        return Some(pmem::PoolError::OutOfSpace { requested: 0 }.exit_code());
    }
    None
}

/// The table's code of a transaction error: its pool error's, or "out of space" for a heap
/// (or a PMDK pool, an ideal or raw reference) that had no room left.
fn tx_exit_code(error: &tx::TxError) -> Option<i32> {
    match error {
        tx::TxError::Pool(error) => Some(error.exit_code()),
        tx::TxError::OutOfSpace { size } => {
            Some(pmem::PoolError::OutOfSpace { requested: *size }.exit_code())
        }
        _ => None,
    }
}

fn run_exit_code(error: &bench::runner::RunError) -> Option<i32> {
    use bench::choice::OpenError;
    use bench::runner::RunError;
    match error {
        RunError::Open(OpenError::Pool(error)) => Some(error.exit_code()),
        RunError::Open(OpenError::Tx(error))
        | RunError::Setup(error)
        | RunError::Operation(error) => tx_exit_code(error),
        _ => None,
    }
}

/// The serde name of a unit enum variant (`Media::EmulatedTmpfs` -> "emulated-tmpfs").
fn serde_name(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn pool_failures_keep_their_exit_code_through_context() {
        let failure = pool_cmd::PoolFailure {
            path: "/x".into(),
            error: pmem::PoolError::AlreadyExists,
        };
        let error = anyhow::Error::new(failure);
        assert_eq!(exit_code_of(&error), 17);
        assert_eq!(one_line(&error), "/x: a file already exists at that path");
        assert_eq!(exit_code_of(&anyhow::anyhow!("other")), 1);
        let usage = anyhow::Error::new(UsageError("t.trace: bad magic".into())).context("sim");
        assert_eq!(
            exit_code_of(&usage),
            USAGE_EXIT,
            "context keeps the usage code"
        );
        let nested = anyhow::Error::new(pmem::PoolError::from(std::io::Error::other("disk\ngone")))
            .context("benchmarking");
        assert_eq!(one_line(&nested), "benchmarking: I/O error: disk gone");
    }

    #[test]
    fn media_names_match_their_serde_form() {
        assert_eq!(serde_name(&pmem::Media::EmulatedTmpfs), "emulated-tmpfs");
        assert_eq!(serde_name(&42), "unknown");
    }
}
