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
    let mut native = NativeOptions::default().try_with_env_overrides()?;
    native.mode = request.mode.or(native.mode);
    native.flush = request.flush.or(native.flush);
    let options = CreateOptions {
        size: request.size,
        layout: request.layout.clone(),
        root_size: request.root_size,
        native,
    };
    let path = request.path.as_path();
    crate::output::directory_of_new_file_exists(path)?;
    // `open(O_CREAT | O_EXCL)` on `dir/` fails with EISDIR, not EEXIST: name an existing
    // directory (with or without its trailing slash) as the existing file it is.
    if path.is_dir() {
        return Err(failure(path)(PoolError::AlreadyExists).into());
    }
    let pool = pmem::Pool::create(path, &options).map_err(failure(path))?;
    let header = pool.header().clone();
    let backend = pool.pm().info();
    pool.close().map_err(failure(path))?;
    if let Some(warning) = not_durable_warning(path, backend.media, backend.mode) {
        let _ = writeln!(std::io::stderr(), "ferrite: warning: {warning}");
    }
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

/// Why a pool made in `mode` on `media` is not durable, when it is not: a file in the page
/// cache (no DAX) is made durable by `msync` only, and the adr and eadr modes never call it
/// (`docs/persistence-seam.md` §5, "An explicitly chosen mode is not checked against the
/// media"). tmpfs, the emulation, keeps nothing across a power failure in any mode, as
/// documented, and is not warned about.
fn not_durable_warning(path: &Path, media: pmem::Media, mode: PersistMode) -> Option<String> {
    if media != pmem::Media::PageCache {
        return None;
    }
    let why = match mode {
        PersistMode::Eadr => {
            "mode eadr flushes nothing, trusting the CPU caches to be persistent, but the \
             page cache is not persistent memory"
        }
        PersistMode::Adr => {
            "mode adr's cache-line flushes reach the page cache, which is not persistent \
             memory"
        }
        PersistMode::Msync => return None,
    };
    Some(format!(
        "{} is on a file system without DAX (media page-cache): {why}, so what is written \
         in mode {} (this pool's header included) is not durable until the kernel writes the \
         pages back, and a power failure before that loses it; only --mode msync, the \
         default on this media, makes page-cache data durable (docs/persistence-seam.md §5)",
        path.display(),
        mode.name()
    ))
}

/// Prints the header of the pool at `path` (read-only; works while the pool is open).
pub fn info(path: &Path, as_json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let report = match pmem::inspect(path) {
        Ok(report) => report,
        Err(error) => return Err(refused(path, as_json, failure(path)(error).into(), out)),
    };
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
    for repair in &report.repairable {
        writeln!(
            out,
            "{:<16} {repair}; the next open repairs it",
            "repairable:"
        )?;
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

/// Why `pool check` failed on a pool whose header is sound.
#[derive(Debug)]
pub enum CheckProblem {
    /// The deep check found damage in a structure behind the header (a log lane, the heap).
    Damaged(String),
    /// The repair or salvage was refused before anything was written: the pool's owner
    /// recovers it (its layout, or its engine needs the application's operation handlers).
    /// The text starts with what was refused ("not repaired: …", "not salvaged: …").
    NotRepairableHere(String),
    /// The engine's recovery failed.
    RecoveryFailed(tx::TxError),
    /// The check found what looks like damage in a pool another process has open: the image
    /// it read was changing under it (half-written log records, a moving watermark), so the
    /// finding is not a verdict.
    InUse(String),
}

impl CheckProblem {
    /// The README's exit code: damage and failed recoveries 14, a refused repair 12 (the
    /// pool's layout or engine is one this tool does not recover).
    pub fn exit_code(&self) -> i32 {
        match self {
            CheckProblem::Damaged(_) => 14,
            CheckProblem::NotRepairableHere(_) => 12,
            CheckProblem::RecoveryFailed(tx::TxError::Pool(error)) => error.exit_code(),
            CheckProblem::RecoveryFailed(_) => 14,
            CheckProblem::InUse(_) => PoolError::AlreadyOpen.exit_code(),
        }
    }
}

impl fmt::Display for CheckProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckProblem::Damaged(first) => write!(f, "{first}"),
            CheckProblem::NotRepairableHere(reason) => write!(f, "{reason}"),
            CheckProblem::RecoveryFailed(error) => write!(f, "recovery failed: {error}"),
            CheckProblem::InUse(first) => write!(
                f,
                "already open in another process: the check read a changing image, so what \
                 it found ({first}) may be writes in flight, not damage; check it again once \
                 the pool is closed"
            ),
        }
    }
}

/// A `pool check` that found a problem behind a sound header.
#[derive(Debug)]
pub struct CheckFailure {
    /// The pool file.
    pub path: PathBuf,
    /// What is wrong.
    pub problem: CheckProblem,
}

impl fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.problem)
    }
}

impl std::error::Error for CheckFailure {}

/// Checks the pool at `path` deeply (read-only unless repairing or salvaging): the header,
/// then the engine area, its logs and its heap (`pmem::integrity` findings). Prints an
/// `ok:` line, or the problems, or a JSON object; damage exits 14, but 15 when another
/// process has the pool open (its image was read while it changed). A repair or salvage is
/// decided from the image before the pool is opened for writing: a pool in use, a layout
/// whose owner recovers it, or an MVCC area (its recovery re-executes operations only the
/// application can) is refused with the pool left untouched.
pub fn check(path: &Path, request: CheckRequest, out: &mut dyn Write) -> anyhow::Result<()> {
    // `--repair` and `--salvage` may write the pool through the native backend, which
    // FERRITE_PERSIST_MODE and FERRITE_FLUSH configure: a value they do not take is refused
    // first, as for every command that writes a pool (they were ignored here).
    let native = if request.repair || request.salvage {
        NativeOptions::default().try_with_env_overrides()?
    } else {
        NativeOptions::default()
    };
    let (image, report) = match pmem::read_image(path) {
        Ok(found) => found,
        Err(error) => {
            return Err(refused(
                path,
                request.json,
                failure(path)(error).into(),
                out,
            ));
        }
    };
    let pm = MemPm::new(image);
    let mut findings = deep_check(&pm, &report.header);
    // Damage in the header area that the copy or the state word's rewrite makes good: the
    // next open repairs it, as it recovers a crash.
    findings.extend(report.repairable.iter().map(|repair| {
        Finding::new(
            Severity::Recovery,
            "pool header",
            Some(0),
            format!("{repair}; the next open repairs it"),
        )
    }));
    if report.in_use {
        findings.push(Finding::new(
            Severity::Note,
            "pool",
            None,
            "the pool is open in another process: the check read an image that may be changing",
        ));
    }
    let damage: Vec<&Finding> = findings.iter().filter(|f| f.is_damage()).collect();
    let mode = if request.salvage {
        Some(RecoveryMode::Salvage)
    } else if request.repair && damage.is_empty() && needs_recovery(&findings, &report) {
        Some(RecoveryMode::Strict)
    } else {
        None
    };
    let refusal = mode.and_then(|mode| may_recover(path, &pm, &report, mode).err());
    // The image is done with: a damaged pool's remedy reads a second copy for its trial
    // salvage, and two whole images of a large pool at once could exhaust memory.
    drop(pm);
    if let Some(error) = refusal {
        return Err(refused(path, request.json, error, out));
    }
    let action = mode.map(|mode| recover(path, &report.header, mode, &native));
    let report = match &action {
        // The recovery closed the pool cleanly: describe it as it is now.
        Some(Ok(_)) => pmem::inspect(path).map_err(failure(path))?,
        _ => report,
    };
    if request.json {
        print_json(path, &report, &findings, action.as_ref(), out)?;
    } else {
        print_text(path, &report, &findings, action.as_ref(), out)?;
    }
    if let Some(Err(error)) = action {
        return Err(error);
    }
    let salvaged = request.salvage && matches!(action, Some(Ok(_)));
    match damage.first().filter(|_| !salvaged) {
        // No recovery ran on a pool in use (`may_recover` refuses it), so the image is the
        // one read while the pool changed: its damage is no verdict.
        Some(_) if report.in_use => {
            Err(check_failure(path, CheckProblem::InUse(first_of(&damage))))
        }
        Some(_) => Err(check_failure(
            path,
            CheckProblem::Damaged(first_of(&damage)),
        )),
        None => Ok(()),
    }
}

/// The first damage finding, and how many more there are.
fn first_of(damage: &[&Finding]) -> String {
    match damage.len() {
        0 | 1 => damage.first().map_or(String::new(), |f| f.to_string()),
        n => format!("{} (and {} more)", damage[0], n - 1),
    }
}

fn check_failure(path: &Path, problem: CheckProblem) -> anyhow::Error {
    CheckFailure {
        path: path.to_owned(),
        problem,
    }
    .into()
}

/// `error`, after printing it (with its exit code) as a JSON verdict when `as_json`: a
/// command that stopped before its verdict still gives a caller that asked for JSON a JSON
/// object on stdout.
fn refused(path: &Path, as_json: bool, error: anyhow::Error, out: &mut dyn Write) -> anyhow::Error {
    if as_json {
        let verdict = json!({
            "ok": false,
            "path": path.display().to_string(),
            "error": error.to_string(),
            "exit_code": crate::exit_code_of(&error),
        });
        if let Err(write) = writeln!(out, "{verdict}") {
            return write.into();
        }
    }
    error
}

/// Whether this tool may open the pool to recover it, decided from its image without
/// writing: not while another process holds it, not a layout whose owner recovers it, and
/// only an area of an engine whose recovery needs no application code.
fn may_recover(
    path: &Path,
    pm: &MemPm,
    report: &FileReport,
    mode: RecoveryMode,
) -> anyhow::Result<()> {
    if report.in_use {
        return Err(failure(path)(PoolError::AlreadyOpen).into());
    }
    let header = &report.header;
    let arena = Region {
        offset: header.arena_offset,
        len: header.arena_size,
    };
    let verb = if mode == RecoveryMode::Salvage {
        "salvaged"
    } else {
        "repaired"
    };
    let refusal = match header.layout.as_str() {
        pmfs::LAYOUT => Some(format!(
            "a PMFS file system is {verb} by `ferrite fs fsck --repair`, not here"
        )),
        nvthreads::journal::LAYOUT => Some(format!(
            "an NVthreads pool is recovered by the NVthreads runtime when its program starts \
             again (it replays or discards its redo log, and refuses a damaged one), not {verb} \
             here"
        )),
        _ if tx::check::engine_kind(pm, arena).is_some() => None,
        _ if mvcc::check::is_mvcc_area(pm, arena) => Some(format!(
            "an MVCC (TimeStone) pool's recovery re-executes logged operations with the \
             application's operation handlers, which this tool does not have: it is {verb} \
             when the program that owns it opens it again"
        )),
        // Not zeros and no engine's magic: an engine header whose magic is damaged, which
        // is damage (14), not a layout this tool leaves to another program (12).
        _ if !arena_is_empty(pm, arena) => {
            return Err(check_failure(
                path,
                CheckProblem::Damaged(format!(
                    "not {verb}: the arena starts with no engine's magic (a damaged engine \
                     header): no engine opens it; the pool was left untouched"
                )),
            ));
        }
        // No engine area: the open restores the header area (what the next open would do)
        // and there is nothing else to recover.
        _ => None,
    };
    match refusal {
        Some(reason) => Err(check_failure(
            path,
            CheckProblem::NotRepairableHere(format!(
                "not {verb}: {reason}; the pool was left untouched"
            )),
        )),
        None => Ok(()),
    }
}

/// Whether the arena starts with zeros (no engine was ever formatted there), as
/// `conformance::corrupt::check_engine_area` tells an empty arena from a damaged one.
fn arena_is_empty(pm: &impl pmem::Persist, arena: Region) -> bool {
    let mut start = [0u8; 64];
    pm.read(arena.offset, &mut start);
    start.iter().all(|&b| b == 0)
}

/// Whether `--salvage` would open the damaged pool at `path`: the engine's salvage run on a
/// fresh private copy of the file (the check's own copy holds what it already stored), so
/// the hint after the damage says what the salvage will really do. `None` when the file
/// holds no redo or undo area or cannot be read again.
fn salvage_trial(path: &Path) -> Option<tx::TxResult<()>> {
    let (image, report) = pmem::read_image(path).ok()?;
    let pool = pmem::Pool::attach(MemPm::new(image), &report.header.layout).ok()?;
    let options = tx::EngineOptions::default();
    Some(match tx::check::engine_kind(pool.pm(), pool.arena())? {
        tx::EngineKind::Redo => tx::Redo::salvage(pool, &options).map(drop),
        tx::EngineKind::Undo => tx::Undo::salvage(pool, &options).map(drop),
    })
}

/// The findings of every structure in the pool image (the checks run on this private copy).
fn deep_check(pm: &MemPm, header: &Header) -> Vec<Finding> {
    let arena = Region {
        offset: header.arena_offset,
        len: header.arena_size,
    };
    let note = |message: &str| Finding::new(Severity::Note, "arena", Some(arena.offset), message);
    match header.layout.as_str() {
        pmfs::LAYOUT => vec![note("a PMFS file system: check it with `ferrite fs fsck`")],
        nvthreads::journal::LAYOUT => {
            let root = Region {
                offset: header.root_offset,
                len: header.root_size,
            };
            nvthreads::check::check_pool(pm, root, arena)
        }
        _ => conformance::corrupt::check_engine_area(pm, arena),
    }
}

/// Whether the next open has work to do (a crash left logs to replay or roll back).
fn needs_recovery(findings: &[Finding], report: &FileReport) -> bool {
    !report.clean || findings.iter().any(|f| f.severity == Severity::Recovery)
}

/// What a repair or salvage did: the recovery's report, as findings.
type Recovered = anyhow::Result<Vec<Finding>>;

/// Opens the pool's redo or undo engine (running its recovery, or its salvage) and closes it
/// cleanly; a pool with no engine area is opened and closed, which restores its header area
/// (a header from its copy, a copy from the header, the state word) as any open does.
/// [`may_recover`] has vetted the area.
fn recover(path: &Path, header: &Header, mode: RecoveryMode, native: &NativeOptions) -> Recovered {
    let pool = pmem::Pool::open(path, &header.layout, native).map_err(failure(path))?;
    let arena = pool.arena();
    // What the open restored in the header area, reported before the engine's own recovery.
    let mut done: Vec<Finding> = pool
        .repaired()
        .iter()
        .map(|repair| {
            Finding::new(
                Severity::Recovery,
                "pool header",
                Some(0),
                format!("{repair}; rewritten"),
            )
        })
        .collect();
    if tx::check::engine_kind(pool.pm(), arena).is_none() && arena_is_empty(pool.pm(), arena) {
        pool.close().map_err(failure(path))?;
        done.push(Finding::new(
            Severity::Note,
            "recovery",
            None,
            "no transaction engine area (an empty arena): nothing else to recover; the pool \
             was closed cleanly",
        ));
        return Ok(done);
    }
    let salvage = mode == RecoveryMode::Salvage;
    let options = tx::EngineOptions::default();
    let failed = |error| check_failure(path, CheckProblem::RecoveryFailed(error));
    match (tx::check::engine_kind(pool.pm(), arena), salvage) {
        (Some(tx::EngineKind::Redo), false) => opened(tx::Redo::open(pool, &options)),
        (Some(tx::EngineKind::Redo), true) => opened(tx::Redo::salvage(pool, &options)),
        (Some(tx::EngineKind::Undo), false) => opened(tx::Undo::open(pool, &options)),
        (Some(tx::EngineKind::Undo), true) => opened(tx::Undo::salvage(pool, &options)),
        (None, _) => {
            // The area changed between the check and the open. Closing the pool would mark
            // it cleanly shut down and its owner would skip its crash handling: leave it
            // open-and-unclean, as found (the process exits right after).
            std::mem::forget(pool);
            Err(tx::TxError::Corrupted(
                "the engine area changed while the pool was checked".into(),
            ))
        }
    }
    .map(|recovered| {
        done.extend(recovered);
        done
    })
    .map_err(failed)
}

/// The findings of an engine's recovery (dropping the engine then writes its state back and
/// closes the pool cleanly).
fn opened<E: Recovering>(engine: tx::TxResult<E>) -> tx::TxResult<Vec<Finding>> {
    let engine = engine?;
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
    if let Some(Ok(done)) = action {
        for finding in done {
            writeln!(out, "recovered: {}", recovered_text(finding))?;
        }
    }
    let damage = findings.iter().filter(|f| f.is_damage()).count();
    if damage > 0 && matches!(action, Some(Ok(_))) {
        // Only a salvage opens a damaged pool.
        writeln!(
            out,
            "salvaged: {}: {} found before the salvage; the engine replayed what was intact \
             and closed the pool",
            path.display(),
            problems(damage)
        )?;
        return Ok(());
    }
    if damage > 0 && report.in_use {
        writeln!(
            out,
            "unreliable: {}: {} found while another process had the pool open and was \
             changing it; not a damage verdict (check it again once it is closed)",
            path.display(),
            problems(damage)
        )?;
        return Ok(());
    }
    if damage > 0 {
        let remedy = remedy(path, report);
        writeln!(
            out,
            "damaged: {}: {} ({remedy})",
            path.display(),
            problems(damage)
        )?;
        return Ok(());
    }
    if matches!(action, Some(Err(_))) {
        // The failed recovery is the error the caller reports.
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

/// A finding of the recovery after "recovered: ": its severity named only when it is not
/// the recovery's own ("recovered: damage: …" of a salvage), and the recovery's notes as
/// their message alone ("recovered: 3 log records replayed", not "recovered: note:
/// recovery: 3 log records replayed").
fn recovered_text(finding: &Finding) -> String {
    match finding.severity {
        Severity::Note if finding.structure == "recovery" => finding.message.clone(),
        Severity::Note | Severity::Recovery => {
            let at = finding
                .offset
                .map_or(String::new(), |offset| format!(" at {offset:#x}"));
            format!("{}{at}: {}", finding.structure, finding.message)
        }
        _ => finding.to_string(),
    }
}

/// What the user can do about a damaged pool: `--salvage` only where a trial salvage on a
/// private copy opened it.
fn remedy(path: &Path, report: &FileReport) -> String {
    if report.header.layout == nvthreads::journal::LAYOUT {
        return "its NVthreads program refuses to start on it, exit status 78, and changes \
                nothing; no tool here repairs it"
            .into();
    }
    match salvage_trial(path) {
        Some(Ok(())) => {
            "the engine refuses to open it; --salvage opens it anyway, replaying what is intact"
                .into()
        }
        Some(Err(error)) => format!(
            "the engine refuses to open it and --salvage cannot either ({error}); no tool here \
             repairs it"
        ),
        None => "--salvage does not open it either (it salvages redo and undo areas whose \
                 engine header is intact); no tool here repairs it"
            .into(),
    }
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
    // Findings on the image of a pool another process was writing are no verdict.
    verdict["reliable"] = Value::Bool(!report.in_use);
    verdict["findings"] = serde_json::to_value(findings)?;
    if let Some(action) = action {
        verdict["recovery"] = match action {
            Ok(done) => json!({ "ok": true, "findings": done }),
            Err(error) => json!({ "ok": false, "error": error.to_string() }),
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
        "repairable": report.repairable,
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

/// "1 problem", "3 problems".
fn problems(count: usize) -> String {
    match count {
        1 => "1 problem".into(),
        n => format!("{n} problems"),
    }
}
