//! `ferrite pool ...`: create, describe and validate pool files.
//!
//! Every way a file can be wrong ends as a [`PoolFailure`]: one line on stderr naming the
//! path and the reason, and the exit code of the [`PoolError`].

use crate::size::format_bytes;
use crate::time::rfc3339_from_unix_ns;
use pmem::integrity::{Finding, Severity};
use pmem::{
    CreateOptions, FileReport, FlushInstr, Header, MemPm, NativeOptions, PersistMode, PoolError,
    Region,
};
use serde_json::{Value, json};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use tx::RecoveryMode;

/// A pool operation that failed on a file.
#[derive(Debug)]
pub struct PoolFailure {
    /// The pool file.
    pub path: PathBuf,
    /// Why it failed.
    pub error: PoolError,
}

impl fmt::Display for PoolFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.error)
    }
}

impl std::error::Error for PoolFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

fn failure(path: &Path) -> impl FnOnce(PoolError) -> PoolFailure + '_ {
    move |error| PoolFailure {
        path: path.to_owned(),
        error,
    }
}

/// What `pool create` makes.
#[derive(Clone, Debug)]
pub struct CreateRequest {
    /// The new file (must not exist).
    pub path: PathBuf,
    /// Pool size in bytes.
    pub size: u64,
    /// Layout name.
    pub layout: String,
    /// Root region size in bytes.
    pub root_size: u64,
    /// Persistence mode to format with (`None`: from `FERRITE_PERSIST_MODE`, else the media).
    pub mode: Option<PersistMode>,
    /// Flush instruction (`None`: from `FERRITE_FLUSH`, else the best available).
    pub flush: Option<FlushInstr>,
}

/// Creates and formats a pool, then closes it cleanly.
pub fn create(request: &CreateRequest, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut native = NativeOptions::default().with_env_overrides();
    native.mode = request.mode.or(native.mode);
    native.flush = request.flush.or(native.flush);
    let options = CreateOptions {
        size: request.size,
        layout: request.layout.clone(),
        root_size: request.root_size,
        native,
    };
    let path = request.path.as_path();
    let pool = pmem::Pool::create(path, &options).map_err(failure(path))?;
    let header = pool.header().clone();
    let backend = pool.pm().info();
    pool.close().map_err(failure(path))?;
    writeln!(
        out,
        "created {}: {} pool, layout {:?}, uuid {}, root {} at {:#x}, arena {} at {:#x} \
         (media {}, mode {}, flush {})",
        path.display(),
        format_bytes(header.pool_size),
        header.layout,
        header.uuid_string(),
        format_bytes(header.root_size),
        header.root_offset,
        format_bytes(header.arena_size),
        header.arena_offset,
        crate::serde_name(&backend.media),
        backend.mode.name(),
        backend.flush.name()
    )?;
    Ok(())
}

/// Prints the header of the pool at `path` (read-only; works while the pool is open).
pub fn info(path: &Path, as_json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let report = pmem::inspect(path).map_err(failure(path))?;
    if as_json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&describe(path, &report))?
        )?;
        return Ok(());
    }
    let header = &report.header;
    let fields = [
        ("path", path.display().to_string()),
        ("format version", header.version.to_string()),
        ("uuid", header.uuid_string()),
        ("size", size_with_bytes(header.pool_size)),
        ("layout", header.layout.clone()),
        ("created", rfc3339_from_unix_ns(header.created_unix_ns)),
        (
            "root region",
            region_text(header.root_offset, header.root_size),
        ),
        ("arena", region_text(header.arena_offset, header.arena_size)),
        ("compat features", format!("{:#x}", header.compat_features)),
        ("clean shutdown", yes_no(report.clean).to_owned()),
        ("in use", yes_no(report.in_use).to_owned()),
    ];
    for (name, value) in fields {
        writeln!(out, "{:<16} {value}", format!("{name}:"))?;
    }
    Ok(())
}

/// What `pool check` is asked to do besides checking.
#[derive(Clone, Copy, Debug, Default)]
pub struct CheckRequest {
    /// Print JSON instead of text.
    pub json: bool,
    /// Recover the pool (what its next open would do: replay or roll back the logs, discard
    /// torn tails) when the check found no damage.
    pub repair: bool,
    /// Open the pool with salvage: replay what is intact around damaged log records.
    pub salvage: bool,
}

/// Checks the pool at `path` deeply (read-only unless repairing or salvaging): the header,
/// then the engine area, its logs and its heap (`pmem::integrity` findings). Prints an
/// `ok:` line, or the problems, or a JSON object; damage exits with the code of
/// `Corrupted` (14).
pub fn check(path: &Path, request: CheckRequest, out: &mut dyn Write) -> anyhow::Result<()> {
    let (image, report) = match pmem::read_image(path) {
        Ok(found) => found,
        Err(error) => {
            if request.json {
                let verdict = json!({
                    "ok": false,
                    "path": path.display().to_string(),
                    "error": error.to_string(),
                    "exit_code": error.exit_code(),
                });
                writeln!(out, "{verdict}")?;
            }
            return Err(failure(path)(error).into());
        }
    };
    let mut findings = deep_check(image, &report.header);
    if report.in_use {
        findings.push(Finding::new(
            Severity::Note,
            "pool",
            None,
            "the pool is open in another process: the check read an image that may be changing",
        ));
    }
    let damage: Vec<&Finding> = findings.iter().filter(|f| f.is_damage()).collect();
    let action = if request.salvage {
        Some(recover(path, &report.header, RecoveryMode::Salvage))
    } else if request.repair && damage.is_empty() && needs_recovery(&findings, &report) {
        Some(recover(path, &report.header, RecoveryMode::Strict))
    } else {
        None
    };
    if request.json {
        print_json(path, &report, &findings, action.as_ref(), out)?;
    } else {
        print_text(path, &report, &findings, action.as_ref(), out)?;
    }
    if let Some(Err(error)) = action {
        return Err(failure(path)(PoolError::Corrupted(error)).into());
    }
    let salvaged = request.salvage && matches!(action, Some(Ok(_)));
    if let Some(first) = damage.first().filter(|_| !salvaged) {
        let more = damage.len() - 1;
        let error = PoolError::Corrupted(format!(
            "{first}{}",
            if more > 0 {
                format!(" (and {more} more)")
            } else {
                String::new()
            }
        ));
        return Err(failure(path)(error).into());
    }
    Ok(())
}

/// The findings of every structure in the pool image (the checks run on this private copy).
fn deep_check(image: Vec<u8>, header: &Header) -> Vec<Finding> {
    let pm = MemPm::new(image);
    let arena = Region {
        offset: header.arena_offset,
        len: header.arena_size,
    };
    let note = |message: &str| Finding::new(Severity::Note, "arena", Some(arena.offset), message);
    match header.layout.as_str() {
        pmfs::LAYOUT => vec![note("a PMFS file system: check it with `ferrite fs fsck`")],
        nvthreads::journal::LAYOUT => vec![note("an NVthreads journal: not checked here")],
        _ => conformance::corrupt::check_engine_area(&pm, arena),
    }
}

/// Whether the next open has work to do (a crash left logs to replay or roll back).
fn needs_recovery(findings: &[Finding], report: &FileReport) -> bool {
    !report.clean || findings.iter().any(|f| f.severity == Severity::Recovery)
}

/// What a repair or salvage did: the recovery's report, as findings.
type Recovered = Result<Vec<Finding>, String>;

/// Opens the pool's engine (running its recovery, or its salvage) and closes it cleanly.
fn recover(path: &Path, header: &Header, mode: RecoveryMode) -> Recovered {
    let pool = pmem::Pool::open(path, &header.layout, &NativeOptions::default())
        .map_err(|e| e.to_string())?;
    let arena = pool.arena();
    let salvage = mode == RecoveryMode::Salvage;
    if let Some(kind) = tx::check::engine_kind(pool.pm(), arena) {
        let options = tx::EngineOptions::default();
        let report = match (kind, salvage) {
            (tx::EngineKind::Redo, false) => tx::Redo::open(pool, &options),
            (tx::EngineKind::Redo, true) => tx::Redo::salvage(pool, &options),
            (tx::EngineKind::Undo, false) => return opened(tx::Undo::open(pool, &options)),
            (tx::EngineKind::Undo, true) => return opened(tx::Undo::salvage(pool, &options)),
        };
        return opened(report);
    }
    if mvcc::check::is_mvcc_area(pool.pm(), arena) {
        let options = mvcc::MvccOptions::default();
        return if salvage {
            opened(mvcc::Mvcc::salvage(pool, &options, tx::NoReplay))
        } else {
            opened(mvcc::Mvcc::open(pool, &options, tx::NoReplay))
        };
    }
    Err("the pool holds no transaction engine area to recover".into())
}

/// The findings of an engine's recovery (dropping the engine then writes its state back and
/// closes the pool cleanly).
fn opened<E: Recovering>(engine: tx::TxResult<E>) -> Recovered {
    let engine = engine.map_err(|e| e.to_string())?;
    let mut findings = engine.report().findings.clone();
    findings.push(Finding::new(
        Severity::Note,
        "recovery",
        None,
        format!(
            "{} log records replayed or rolled back",
            engine.report().replayed
        ),
    ));
    Ok(findings)
}

/// An engine that was opened with a recovery report.
trait Recovering {
    fn report(&self) -> &tx::RecoveryReport;
}

impl Recovering for tx::Redo<pmem::Native> {
    fn report(&self) -> &tx::RecoveryReport {
        self.recovery_report()
    }
}

impl Recovering for tx::Undo<pmem::Native> {
    fn report(&self) -> &tx::RecoveryReport {
        self.recovery_report()
    }
}

impl Recovering for mvcc::Mvcc<pmem::Native, tx::NoReplay> {
    fn report(&self) -> &tx::RecoveryReport {
        self.recovery_report()
    }
}

fn print_text(
    path: &Path,
    report: &FileReport,
    findings: &[Finding],
    action: Option<&Recovered>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    for finding in findings.iter().filter(|f| f.severity != Severity::Note) {
        writeln!(out, "{finding}")?;
    }
    match action {
        Some(Ok(done)) => {
            for finding in done {
                writeln!(out, "recovered: {finding}")?;
            }
        }
        Some(Err(error)) => writeln!(out, "not recovered: {error}")?,
        None => {}
    }
    let damage = findings.iter().filter(|f| f.is_damage()).count();
    if damage > 0 {
        writeln!(
            out,
            "damaged: {}: {damage} problems (the engine refuses to open it; --salvage opens it \
             anyway, replaying what is intact)",
            path.display()
        )?;
        return Ok(());
    }
    let header = &report.header;
    let engine = findings
        .iter()
        .find(|f| f.severity == Severity::Note)
        .map_or(String::new(), |f| format!(", {}", f.message));
    writeln!(
        out,
        "ok: {}: Ferrite pool version {}, layout {:?}, {}, {}{}{engine}",
        path.display(),
        header.version,
        header.layout,
        format_bytes(header.pool_size),
        if report.clean {
            "closed cleanly"
        } else {
            "not closed cleanly (recovery runs at the next open)"
        },
        if report.in_use {
            ", in use by another process"
        } else {
            ""
        }
    )?;
    Ok(())
}

fn print_json(
    path: &Path,
    report: &FileReport,
    findings: &[Finding],
    action: Option<&Recovered>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut verdict = describe(path, report);
    let damage = findings.iter().filter(|f| f.is_damage()).count();
    verdict["ok"] = Value::Bool(damage == 0);
    verdict["damage"] = json!(damage);
    verdict["findings"] = serde_json::to_value(findings)?;
    if let Some(action) = action {
        verdict["recovery"] = match action {
            Ok(done) => json!({ "ok": true, "findings": done }),
            Err(error) => json!({ "ok": false, "error": error }),
        };
    }
    writeln!(out, "{}", serde_json::to_string_pretty(&verdict)?)?;
    Ok(())
}

/// The JSON form of a validated pool, shared by `info --json` and `check --json`.
fn describe(path: &Path, report: &FileReport) -> Value {
    let header: &Header = &report.header;
    json!({
        "path": path.display().to_string(),
        "version": header.version,
        "uuid": header.uuid_string(),
        "pool_size": header.pool_size,
        "layout": header.layout,
        "created": rfc3339_from_unix_ns(header.created_unix_ns),
        "created_unix_ns": header.created_unix_ns,
        "root": { "offset": header.root_offset, "len": header.root_size },
        "arena": { "offset": header.arena_offset, "len": header.arena_size },
        "compat_features": header.compat_features,
        "clean": report.clean,
        "in_use": report.in_use,
    })
}

fn size_with_bytes(bytes: u64) -> String {
    format!("{} ({bytes} bytes)", format_bytes(bytes))
}

fn region_text(offset: u64, len: u64) -> String {
    format!("{} at offset {offset:#x} ({len} bytes)", format_bytes(len))
}

fn yes_no(flag: bool) -> &'static str {
    if flag { "yes" } else { "no" }
}
