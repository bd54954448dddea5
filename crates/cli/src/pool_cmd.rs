//! `ferrite pool ...`: create, describe and validate pool files.
//!
//! Every way a file can be wrong ends as a [`PoolFailure`]: one line on stderr naming the
//! path and the reason, and the exit code of the [`PoolError`].

use crate::size::format_bytes;
use crate::time::rfc3339_from_unix_ns;
use pmem::{CreateOptions, FileReport, FlushInstr, Header, NativeOptions, PersistMode, PoolError};
use serde_json::{Value, json};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

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

/// Validates the pool at `path`: prints one `ok:` line (or a JSON object) on success.
pub fn check(path: &Path, as_json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let report = match pmem::inspect(path) {
        Ok(report) => report,
        Err(error) => {
            if as_json {
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
    if as_json {
        let mut verdict = describe(path, &report);
        verdict["ok"] = Value::Bool(true);
        writeln!(out, "{}", serde_json::to_string_pretty(&verdict)?)?;
        return Ok(());
    }
    let header = &report.header;
    writeln!(
        out,
        "ok: {}: Ferrite pool version {}, layout {:?}, {}, {}{}",
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
