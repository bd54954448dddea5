//! The runtime's settings: every `NVT_*` variable, read once into a typed [`Env`]
//! (`include/nvthreads.h` lists them for C programmers).
//!
//! A value that does not parse is an error naming the variable and what it expects; the
//! runtime reports it and ends the program before it touches the pool, so a typo never runs
//! with a setting silently replaced by its default.

use crate::pfail;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Default heap size of a new pool (`NVT_HEAP_MB`).
pub const DEFAULT_HEAP_MB: u64 = 64;
/// Default log size of a new pool (`NVT_LOG_MB`).
pub const DEFAULT_LOG_MB: u64 = 16;
/// Default size of the volatile `malloc` region (`NVT_MALLOC_MB`).
pub const DEFAULT_MALLOC_MB: u64 = 2048;
/// Largest value of every size variable (`NVT_HEAP_MB`, `NVT_LOG_MB`, `NVT_MALLOC_MB`,
/// `NVT_PMALLOC_MB`): 1 TiB. The regions are reserved at fixed bases and counted in the page
/// tracker's space (at most 2^31 pages, 8 TiB, with the globals), so a larger value would
/// fail deep in the start-up with a message that names no variable (or wrap when shifted
/// to bytes).
pub const MAX_SIZE_MB: u64 = 1 << 20;

/// Where the interposed `malloc` family allocates (`NVT_MALLOC`, `docs/nvthreads.md` §3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MallocMode {
    /// `shared` (default): a volatile region shared by all thread-processes and merged at
    /// synchronisation points like globals; not persistent.
    Shared,
    /// `persistent`: a range of the persistent heap; logged and recovered like `nvmalloc`'d
    /// memory (the paper's "every malloc persistent" setting). Memory malloc'd by an earlier
    /// run is never reused.
    Persistent,
    /// `private`: glibc's allocator; each thread-process has its own copy after creation.
    Private,
}

/// What happens to the program's globals (`NVT_GLOBALS`, `docs/nvthreads.md` §3.2, §4.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlobalsMode {
    /// `0` or `private`: not adopted; each thread-process has its own copy.
    Private,
    /// unset, empty or `shared` (default): shared between thread-processes, not persistent.
    Shared,
    /// `persistent`: shared, logged and recovered.
    Persistent,
}

/// A deliberate runtime bug selected by `NVT_MUTANT`, which the C-program tests must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutant {
    /// `commit-per-page`: every dirty page is logged and committed on its own, so a section
    /// can be torn.
    CommitPerPage,
    /// `no-dependence`: a section that depends on an open section commits anyway, so it can
    /// become durable without the section it observed.
    NoDependence,
    /// `no-log-flush`: the journal fences its records without flushing them, which only a
    /// power failure (`NVT_PFAIL`) can expose.
    NoLogFlush,
}

/// A failure injected into a thread-process by `NVT_FAIL_AT=<action>@<point>` (tests only):
/// the run must end, never hang, whatever a thread-process dies of and wherever
/// (`docs/nvthreads.md` §3.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailAt {
    /// What the thread-process does there.
    pub action: FailAction,
    /// Where.
    pub point: FailPoint,
}

/// What an injected failure does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailAction {
    /// `panic`: a Rust panic in the runtime.
    Panic,
    /// `abort`: `abort()`.
    Abort,
    /// `stall`: says on stderr that it stalls, with its process id, and waits forever (for
    /// a test to kill it there).
    Stall,
}

/// Where an injected failure strikes a thread-process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailPoint {
    /// `exit`: in its exit, after its last commit, before its slot says it ended.
    Exit,
    /// `lane`: inside the log's gate, holding its lane, before appending a record.
    Lane,
    /// `checkpoint`: holding the log's gate closed for a checkpoint.
    Checkpoint,
}

impl FailPoint {
    /// Every point, for parsing by name.
    const ALL: [FailPoint; 3] = [FailPoint::Exit, FailPoint::Lane, FailPoint::Checkpoint];

    /// The point's name in `NVT_FAIL_AT`.
    pub fn name(self) -> &'static str {
        match self {
            FailPoint::Exit => "exit",
            FailPoint::Lane => "lane",
            FailPoint::Checkpoint => "checkpoint",
        }
    }
}

/// Every setting of the runtime, parsed once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Env {
    /// `NVT_POOL`: the pool file.
    pub pool: PathBuf,
    /// `NVT_HEAP_MB`: heap size of a new pool, in MiB.
    pub heap_mb: u64,
    /// `NVT_LOG_MB`: log size of a new pool, in MiB.
    pub log_mb: u64,
    /// `NVT_MALLOC`.
    pub malloc: MallocMode,
    /// `NVT_MALLOC_MB`: size of the shared `malloc` region, in MiB.
    pub malloc_mb: u64,
    /// `NVT_PMALLOC_MB`: size of a new persistent `malloc` arena, in MiB (default: three
    /// quarters of the free heap).
    pub pmalloc_mb: Option<u64>,
    /// `NVT_GLOBALS`.
    pub globals: GlobalsMode,
    /// `NVT_ISOLATE_VOLATILE=1`: thread-processes track their writes to the unlogged regions
    /// (shared `malloc` memory, shared globals) and merge them at synchronisation points, as
    /// the persistent heap's, instead of writing them in place (`docs/nvthreads.md` §3.2).
    pub isolate_volatile: bool,
    /// `NVT_NVM_NS_PER_PAGE`: emulated NVM write latency, ns per 4 KiB written back.
    pub nvm_ns_per_page: u64,
    /// `NVT_DISABLE=1`: dormant (plain pthreads and glibc `malloc`).
    pub disable: bool,
    /// `NVT_ENABLE=1`: the runtime runs even if the executable neither creates threads nor
    /// uses the persistence API (threads made by a library); `NVT_DISABLE=1` still wins.
    pub enable: bool,
    /// `NVT_ACTIVE`: the pool a process of a running program (this one's ancestor) uses.
    pub active: Option<OsString>,
    /// `NVT_CRASH_AT`: kill the process group after this persistence step (tests).
    pub crash_at: Option<u64>,
    /// `NVT_PFAIL`: roll back the pool's pending lines at the crash point (tests).
    pub pfail: Option<pfail::Mode>,
    /// `NVT_STATS=1`: print the runtime's counters at exit.
    pub stats: bool,
    /// `NVT_PROFILE=1`: time every step of the runtime and print the totals at exit.
    pub profile: bool,
    /// `NVT_DEBUG=1`: say on stderr why a call of the persistence API failed.
    pub debug: bool,
    /// `NVT_MUTANT` (tests only).
    pub mutant: Option<Mutant>,
    /// `NVT_FAIL_AT` (tests only).
    pub fail_at: Option<FailAt>,
}

/// A variable whose value does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value}: expected {expected}")]
pub struct EnvError {
    /// The variable.
    pub name: &'static str,
    /// Its value.
    pub value: String,
    /// What it may hold.
    pub expected: &'static str,
}

impl Env {
    /// Parses the settings from `var` (the process environment in the runtime; a table in
    /// the tests). `exe_name` and `uid` name the default pool.
    pub fn parse(
        var: impl Fn(&str) -> Option<OsString>,
        exe_name: &str,
        uid: u32,
    ) -> Result<Env, EnvError> {
        let text = |name: &'static str| var(name).map(|v| v.to_string_lossy().into_owned());
        let number = |name: &'static str| -> Result<Option<u64>, EnvError> {
            text(name)
                .map(|value| {
                    value.trim().parse().map_err(|_| EnvError {
                        name,
                        value,
                        expected: "a number",
                    })
                })
                .transpose()
        };
        Ok(Env {
            pool: pool_path(var("NVT_POOL")).unwrap_or_else(|| Ok(default_pool(exe_name, uid)))?,
            heap_mb: megabytes("NVT_HEAP_MB", number("NVT_HEAP_MB")?)?.unwrap_or(DEFAULT_HEAP_MB),
            log_mb: megabytes("NVT_LOG_MB", number("NVT_LOG_MB")?)?.unwrap_or(DEFAULT_LOG_MB),
            malloc: malloc_mode(text("NVT_MALLOC"))?,
            malloc_mb: megabytes("NVT_MALLOC_MB", number("NVT_MALLOC_MB")?)?
                .unwrap_or(DEFAULT_MALLOC_MB),
            pmalloc_mb: megabytes("NVT_PMALLOC_MB", number("NVT_PMALLOC_MB")?)?,
            globals: globals_mode(text("NVT_GLOBALS"))?,
            isolate_volatile: flag("NVT_ISOLATE_VOLATILE", text("NVT_ISOLATE_VOLATILE"))?,
            nvm_ns_per_page: number("NVT_NVM_NS_PER_PAGE")?.unwrap_or(0),
            disable: flag("NVT_DISABLE", text("NVT_DISABLE"))?,
            enable: flag("NVT_ENABLE", text("NVT_ENABLE"))?,
            active: var("NVT_ACTIVE"),
            crash_at: number("NVT_CRASH_AT")?.filter(|&step| step != 0),
            pfail: pfail_mode(text("NVT_PFAIL"))?,
            stats: flag("NVT_STATS", text("NVT_STATS"))?,
            profile: flag("NVT_PROFILE", text("NVT_PROFILE"))?,
            debug: flag("NVT_DEBUG", text("NVT_DEBUG"))?,
            mutant: mutant(text("NVT_MUTANT"))?,
            fail_at: fail_at(text("NVT_FAIL_AT"))?,
        })
    }

    /// Whether the settings alone keep the runtime dormant in this process: `NVT_DISABLE=1`,
    /// or a process of a running program on the same pool started this one (a `system()`
    /// call inheriting `LD_PRELOAD`).
    pub fn dormant(&self) -> bool {
        self.disable || self.active.as_deref() == Some(self.pool.as_os_str())
    }
}

/// `NVT_POOL`, if set: a path, never empty (an empty value would name no file, and the
/// error would then name none either).
fn pool_path(value: Option<OsString>) -> Option<Result<PathBuf, EnvError>> {
    value.map(|path| {
        if path.is_empty() {
            Err(EnvError {
                name: "NVT_POOL",
                value: String::new(),
                expected: "the path of the pool file (unset for the default)",
            })
        } else {
            Ok(PathBuf::from(path))
        }
    })
}

fn default_pool(exe_name: &str, uid: u32) -> PathBuf {
    PathBuf::from(format!(
        "{}/nvthreads-{exe_name}-{uid}.pool",
        pmem::DEFAULT_POOL_DIR
    ))
}

/// A size variable in MiB: at least 1 (0 would make an empty heap, log or region, which
/// fails later with a message about bytes that names no variable) and at most
/// [`MAX_SIZE_MB`].
fn megabytes(name: &'static str, value: Option<u64>) -> Result<Option<u64>, EnvError> {
    match value {
        None => Ok(None),
        Some(mb @ 1..=MAX_SIZE_MB) => Ok(Some(mb)),
        Some(mb) => Err(EnvError {
            name,
            value: mb.to_string(),
            expected: "a number of MiB from 1 to 1048576",
        }),
    }
}

fn malloc_mode(value: Option<String>) -> Result<MallocMode, EnvError> {
    match value.as_deref() {
        None | Some("shared") => Ok(MallocMode::Shared),
        Some("persistent") => Ok(MallocMode::Persistent),
        Some("private") => Ok(MallocMode::Private),
        Some(other) => Err(EnvError {
            name: "NVT_MALLOC",
            value: other.to_owned(),
            expected: "shared, persistent or private",
        }),
    }
}

fn globals_mode(value: Option<String>) -> Result<GlobalsMode, EnvError> {
    match value.as_deref() {
        Some("0" | "private") => Ok(GlobalsMode::Private),
        None | Some("" | "shared") => Ok(GlobalsMode::Shared),
        Some("persistent") => Ok(GlobalsMode::Persistent),
        Some(other) => Err(EnvError {
            name: "NVT_GLOBALS",
            value: other.to_owned(),
            expected: "shared, persistent, private or 0 (private)",
        }),
    }
}

/// A switch: unset, empty or `0` is off, `1` is on; anything else is an error (a typo must
/// not silently run with the other behaviour).
fn flag(name: &'static str, value: Option<String>) -> Result<bool, EnvError> {
    match value.as_deref() {
        None | Some("" | "0") => Ok(false),
        Some("1") => Ok(true),
        Some(other) => Err(EnvError {
            name,
            value: other.to_owned(),
            expected: "0 or 1",
        }),
    }
}

fn pfail_mode(value: Option<String>) -> Result<Option<pfail::Mode>, EnvError> {
    match value {
        None => Ok(None),
        Some(text) if text.trim().is_empty() => Ok(None),
        Some(text) => pfail::Mode::parse(&text).map(Some).ok_or(EnvError {
            name: "NVT_PFAIL",
            value: text,
            expected: "none, all or random:<seed>",
        }),
    }
}

fn mutant(value: Option<String>) -> Result<Option<Mutant>, EnvError> {
    match value.as_deref() {
        None | Some("") => Ok(None),
        Some("commit-per-page") => Ok(Some(Mutant::CommitPerPage)),
        Some("no-dependence") => Ok(Some(Mutant::NoDependence)),
        Some("no-log-flush") => Ok(Some(Mutant::NoLogFlush)),
        Some(other) => Err(EnvError {
            name: "NVT_MUTANT",
            value: other.to_owned(),
            expected: "commit-per-page, no-dependence or no-log-flush",
        }),
    }
}

fn fail_at(value: Option<String>) -> Result<Option<FailAt>, EnvError> {
    let Some(text) = value.filter(|text| !text.is_empty()) else {
        return Ok(None);
    };
    let (action, point) = text.split_once('@').unwrap_or((&text, ""));
    let action = match action {
        "panic" => Some(FailAction::Panic),
        "abort" => Some(FailAction::Abort),
        "stall" => Some(FailAction::Stall),
        _ => None,
    };
    let point = FailPoint::ALL
        .into_iter()
        .find(|known| known.name() == point);
    match (action, point) {
        (Some(action), Some(point)) => Ok(Some(FailAt { action, point })),
        _ => Err(EnvError {
            name: "NVT_FAIL_AT",
            value: text,
            expected: "<panic|abort|stall>@<exit|lane|checkpoint>",
        }),
    }
}

/// The settings of this process, read on first use. A bad value ends the program with a
/// message naming the variable.
pub fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let exe = std::env::current_exe().ok();
        let name = exe
            .as_ref()
            .and_then(|exe| exe.file_name())
            .map_or_else(|| "program".into(), |n| n.to_string_lossy().into_owned());
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        Env::parse(|name| std::env::var_os(name), &name, uid)
            .unwrap_or_else(|error| super::cannot_start(&error.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)]) -> Result<Env, EnvError> {
        Env::parse(
            |name| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| OsString::from(v))
            },
            "prog",
            1000,
        )
    }

    #[test]
    fn defaults_when_nothing_is_set() {
        let env = parse(&[]).expect("defaults");
        assert_eq!(env.heap_mb, DEFAULT_HEAP_MB);
        assert_eq!(env.log_mb, DEFAULT_LOG_MB);
        assert_eq!(env.malloc, MallocMode::Shared);
        assert_eq!(env.globals, GlobalsMode::Shared);
        assert!(!env.isolate_volatile);
        assert_eq!((env.crash_at, env.pfail, env.mutant), (None, None, None));
        assert_eq!(env.fail_at, None);
        assert!(!env.dormant());
        assert!(
            env.pool
                .to_string_lossy()
                .ends_with("/nvthreads-prog-1000.pool"),
            "{:?}",
            env.pool
        );
    }

    #[test]
    fn every_variable_is_read() {
        let env = parse(&[
            ("NVT_POOL", "/tmp/p.pool"),
            ("NVT_HEAP_MB", "8"),
            ("NVT_LOG_MB", " 2 "),
            ("NVT_MALLOC", "persistent"),
            ("NVT_MALLOC_MB", "256"),
            ("NVT_PMALLOC_MB", "3"),
            ("NVT_GLOBALS", "0"),
            ("NVT_NVM_NS_PER_PAGE", "1000"),
            ("NVT_CRASH_AT", "7"),
            ("NVT_PFAIL", "random:3"),
            ("NVT_STATS", "1"),
            ("NVT_ISOLATE_VOLATILE", "1"),
            ("NVT_ENABLE", "1"),
            ("NVT_FAIL_AT", "stall@lane"),
        ])
        .expect("valid");
        assert_eq!(env.pool, PathBuf::from("/tmp/p.pool"));
        assert_eq!((env.heap_mb, env.log_mb, env.malloc_mb), (8, 2, 256));
        assert_eq!(env.malloc, MallocMode::Persistent);
        assert_eq!(env.pmalloc_mb, Some(3));
        assert_eq!(env.globals, GlobalsMode::Private);
        assert_eq!(env.nvm_ns_per_page, 1000);
        assert_eq!(env.crash_at, Some(7));
        assert_eq!(env.pfail, Some(pfail::Mode::Random(3)));
        assert!(env.stats);
        assert!(env.isolate_volatile);
        assert!(env.enable);
        assert_eq!(
            env.fail_at,
            Some(FailAt {
                action: FailAction::Stall,
                point: FailPoint::Lane
            })
        );
    }

    #[test]
    fn bad_values_name_the_variable() {
        let error = parse(&[("NVT_HEAP_MB", "lots")]).expect_err("not a number");
        assert_eq!(error.to_string(), "NVT_HEAP_MB=lots: expected a number");
        for name in [
            "NVT_HEAP_MB",
            "NVT_LOG_MB",
            "NVT_MALLOC_MB",
            "NVT_PMALLOC_MB",
        ] {
            for bad in ["0", "1048577", "99999999999", "18446744073709551615"] {
                let error = parse(&[(name, bad)]).expect_err("out of range");
                assert_eq!(
                    error.to_string(),
                    format!("{name}={bad}: expected a number of MiB from 1 to 1048576")
                );
            }
        }
        assert_eq!(
            parse(&[("NVT_MALLOC_MB", "1048576")])
                .expect("max")
                .malloc_mb,
            1 << 20
        );
        let error = parse(&[("NVT_MALLOC", "everywhere")]).expect_err("no such mode");
        assert_eq!(error.name, "NVT_MALLOC");
        assert!(parse(&[("NVT_PFAIL", "some")]).is_err());
        assert!(parse(&[("NVT_GLOBALS", "yes")]).is_err());
        for bad in ["panic", "panic@", "crash@exit", "stall@merge"] {
            let error = parse(&[("NVT_FAIL_AT", bad)]).expect_err("no such failure");
            assert_eq!(error.name, "NVT_FAIL_AT", "{bad}");
        }
        for name in [
            "NVT_DISABLE",
            "NVT_ENABLE",
            "NVT_STATS",
            "NVT_PROFILE",
            "NVT_DEBUG",
        ] {
            for bad in ["yes", "true", "2", "on"] {
                let error = parse(&[(name, bad)]).expect_err("not a switch");
                assert_eq!(error.to_string(), format!("{name}={bad}: expected 0 or 1"));
            }
            assert!(!parse(&[(name, "0")]).expect("off").debug);
        }
        assert!(parse(&[("NVT_DEBUG", "1")]).expect("on").debug);
        let error = parse(&[("NVT_GLOBALS", "1")]).expect_err("not a mode");
        assert_eq!(
            error.to_string(),
            "NVT_GLOBALS=1: expected shared, persistent, private or 0 (private)"
        );
        let error = parse(&[("NVT_POOL", "")]).expect_err("no file");
        assert_eq!(error.name, "NVT_POOL");
        let error = parse(&[("NVT_ISOLATE_VOLATILE", "yes")]).expect_err("not a switch");
        assert_eq!(
            error.to_string(),
            "NVT_ISOLATE_VOLATILE=yes: expected 0 or 1"
        );
    }

    #[test]
    fn dormant_when_disabled_or_the_pool_is_in_use_upstream() {
        assert!(parse(&[("NVT_DISABLE", "1")]).expect("valid").dormant());
        let env = parse(&[("NVT_POOL", "/a"), ("NVT_ACTIVE", "/a")]).expect("valid");
        assert!(env.dormant());
        let env = parse(&[("NVT_POOL", "/a"), ("NVT_ACTIVE", "/b")]).expect("valid");
        assert!(!env.dormant());
    }
}
