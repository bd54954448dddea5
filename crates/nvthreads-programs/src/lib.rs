//! C programs built against the NVthreads runtime (`docs/nvthreads.md` §7, §10), for the
//! runtime's tests and for the evaluation in `bench`: the system C compiler, the runtime
//! library `libnvthreads_rt.so`, and the evaluation's C sources (embedded, so a `ferrite`
//! binary carries them).
//!
//! The runtime library is the `cdylib` example target `nvthreads_rt` of the `nvthreads`
//! crate. [`built_library`] finds it where cargo put it and says how to rebuild it when it
//! is missing or older than the runtime's sources (the tests); [`runtime_library`] also
//! builds it with cargo when it is (the evaluation). The runtime itself never runs cargo.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Why a program could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// There is no C compiler.
    #[error("no C compiler: `cc` is not on PATH (install gcc)")]
    NoCompiler,
    /// The runtime library is missing, stale, or could not be built.
    #[error("runtime library: {0}")]
    Library(String),
    /// Compiling failed.
    #[error("building {name}: {detail}")]
    Build {
        /// The program.
        name: String,
        /// The compiler's complaint.
        detail: String,
    },
    /// A program failed or printed something unexpected.
    #[error("running {name}: {detail}")]
    Run {
        /// The program and its arguments.
        name: String,
        /// What went wrong.
        detail: String,
    },
    /// File-system or process trouble.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Wraps an I/O error with what was being done.
pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ProgramError {
    let context = context.into();
    move |source| ProgramError::Io { context, source }
}

/// A C source file of the evaluation.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    /// File name.
    pub file: &'static str,
    /// Contents.
    pub text: &'static str,
}

/// The runtime's C header.
pub const HEADER: Source = Source {
    file: "nvthreads.h",
    text: include_str!("../../nvthreads/include/nvthreads.h"),
};

/// The evaluation programs: the Phoenix-style kernels, the page micro-benchmark, the
/// lock-heavy kernel, the one-line-section micro-benchmark and their shared header.
pub const EVAL_SOURCES: [Source; 12] = [
    Source {
        file: "common.h",
        text: include_str!("../../nvthreads/eval/common.h"),
    },
    Source {
        file: "histogram.c",
        text: include_str!("../../nvthreads/eval/histogram.c"),
    },
    Source {
        file: "kmeans.c",
        text: include_str!("../../nvthreads/eval/kmeans.c"),
    },
    Source {
        file: "linear_regression.c",
        text: include_str!("../../nvthreads/eval/linear_regression.c"),
    },
    Source {
        file: "matrix_multiply.c",
        text: include_str!("../../nvthreads/eval/matrix_multiply.c"),
    },
    Source {
        file: "pca.c",
        text: include_str!("../../nvthreads/eval/pca.c"),
    },
    Source {
        file: "string_match.c",
        text: include_str!("../../nvthreads/eval/string_match.c"),
    },
    Source {
        file: "word_count.c",
        text: include_str!("../../nvthreads/eval/word_count.c"),
    },
    Source {
        file: "reverse_index.c",
        text: include_str!("../../nvthreads/eval/reverse_index.c"),
    },
    Source {
        file: "pagebench.c",
        text: include_str!("../../nvthreads/eval/pagebench.c"),
    },
    Source {
        file: "bank.c",
        text: include_str!("../../nvthreads/eval/bank.c"),
    },
    Source {
        file: "sections.c",
        text: include_str!("../../nvthreads/eval/sections.c"),
    },
];

/// How a program is linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Link {
    /// Plain pthreads (`-pthread`): the baseline.
    Pthreads,
    /// Against `libnvthreads_rt.so` (`-lnvthreads_rt`, found through an rpath).
    Runtime,
    /// Plain pthreads with the persistence API as weak references (`-DNVT_WEAK_API`), to
    /// run with the library in `LD_PRELOAD`.
    Preload,
}

/// The compiler `cc`, if it runs.
pub fn find_cc() -> Option<PathBuf> {
    let ok = Command::new("cc")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    ok.then(|| PathBuf::from("cc"))
}

/// The system C compiler with the runtime library to link against.
#[derive(Clone, Debug)]
pub struct Compiler {
    cc: PathBuf,
    library: PathBuf,
    /// Warnings are errors (`-Werror`): the tests' own programs.
    pub strict: bool,
}

impl Compiler {
    /// `cc` and the runtime library `library`.
    pub fn new(library: PathBuf) -> Result<Compiler, ProgramError> {
        Ok(Compiler {
            cc: find_cc().ok_or(ProgramError::NoCompiler)?,
            library,
            strict: false,
        })
    }

    /// The runtime library in use.
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// Compiles `source` (`-O2 -Wall`, headers from `include`, extra `-D` definitions) into
    /// `output`, linked as `link`.
    pub fn compile(
        &self,
        source: &Path,
        output: &Path,
        include: &Path,
        link: Link,
        defines: &[&str],
    ) -> Result<(), ProgramError> {
        let mut command = Command::new(&self.cc);
        command.args(["-O2", "-Wall"]);
        if self.strict {
            command.arg("-Werror");
        }
        command
            .arg("-o")
            .arg(output)
            .arg(source)
            .arg("-I")
            .arg(include);
        for define in defines {
            command.arg(format!("-D{define}"));
        }
        match link {
            Link::Pthreads => {
                command.arg("-pthread");
            }
            Link::Preload => {
                command.args(["-DNVT_WEAK_API", "-pthread"]);
            }
            Link::Runtime => {
                let lib_dir = self.library.parent().unwrap_or(Path::new("."));
                command
                    .arg(format!("-L{}", lib_dir.display()))
                    .arg("-lnvthreads_rt")
                    .arg(format!("-Wl,-rpath,{}", lib_dir.display()));
            }
        }
        let result = command
            .output()
            .map_err(io(format!("running {}", self.cc.display())))?;
        if result.status.success() {
            return Ok(());
        }
        Err(ProgramError::Build {
            name: source.display().to_string(),
            detail: String::from_utf8_lossy(&result.stderr).into_owned(),
        })
    }
}

/// A scratch directory with the header and some embedded sources written out.
#[derive(Debug)]
pub struct Toolchain {
    compiler: Compiler,
    dir: PathBuf,
}

impl Toolchain {
    /// Writes the header and `sources` into `dir`; the programs link against `library`.
    pub fn prepare(
        dir: &Path,
        sources: &[Source],
        library: PathBuf,
    ) -> Result<Toolchain, ProgramError> {
        let compiler = Compiler::new(library)?;
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        for source in std::iter::once(&HEADER).chain(sources) {
            let path = dir.join(source.file);
            std::fs::write(&path, source.text)
                .map_err(io(format!("writing {}", path.display())))?;
        }
        Ok(Toolchain {
            compiler,
            dir: dir.to_path_buf(),
        })
    }

    /// The runtime library in use.
    pub fn library(&self) -> &Path {
        self.compiler.library()
    }

    /// Compiles `<name>.c` into `<name>-<suffix>`, linked as `link`, with extra
    /// preprocessor definitions. Returns the executable.
    pub fn build(
        &self,
        name: &str,
        link: Link,
        defines: &[&str],
        suffix: &str,
    ) -> Result<PathBuf, ProgramError> {
        let output = self.dir.join(format!("{name}-{suffix}"));
        let source = self.dir.join(format!("{name}.c"));
        self.compiler
            .compile(&source, &output, &self.dir, link, defines)?;
        Ok(output)
    }
}

/// The `nvthreads` crate's directory, when its sources are present (a build from this
/// checkout).
fn runtime_crate_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../nvthreads");
    dir.join("ffi/lib.rs").exists().then_some(dir)
}

/// The runtime's header directory (`crates/nvthreads/include`) of this checkout.
pub fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../nvthreads/include")
}

/// `target/<profile>` of the running executable (its directory, or its parent for test
/// binaries in `deps/`).
fn profile_dir() -> Result<PathBuf, ProgramError> {
    let exe = std::env::current_exe().map_err(io("finding the running executable"))?;
    let dir = exe
        .parent()
        .ok_or_else(|| ProgramError::Library("executable has no directory".into()))?;
    Ok(if dir.ends_with("deps") {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    }
    .to_path_buf())
}

/// The runtime source file newer than `library`, if any (none without the sources).
fn newer_source(library: &Path) -> Option<PathBuf> {
    let dir = runtime_crate_dir()?;
    let built = std::fs::metadata(library).and_then(|meta| meta.modified());
    let Ok(built) = built else {
        return Some(library.to_path_buf());
    };
    ["src", "src/runtime", "ffi"].iter().find_map(|sub| {
        std::fs::read_dir(dir.join(sub))
            .ok()?
            .flatten()
            .find_map(|entry| {
                let modified = entry.metadata().and_then(|meta| meta.modified()).ok()?;
                (modified > built).then(|| entry.path())
            })
    })
}

/// `libnvthreads_rt.so` as cargo built it for the running executable's profile
/// (`target/<profile>/examples`), or `NVT_RUNTIME_LIB`. Never builds it: missing or older
/// than a runtime source file, the error says how to rebuild it (a filtered `cargo test
/// --test …` does not build examples).
pub fn built_library() -> Result<PathBuf, ProgramError> {
    if let Some(path) = std::env::var_os("NVT_RUNTIME_LIB") {
        return existing(PathBuf::from(path));
    }
    let library = profile_dir()?.join("examples/libnvthreads_rt.so");
    if !library.exists() {
        return Err(ProgramError::Library(format!(
            "{} missing: build it with `cargo build -p nvthreads --examples` (plain `cargo \
             test` does)",
            library.display()
        )));
    }
    if let Some(source) = newer_source(&library) {
        return Err(ProgramError::Library(format!(
            "{} is older than {}: rebuild it with `cargo build -p nvthreads --examples` (a \
             filtered `cargo test --test …` does not)",
            library.display(),
            source.display()
        )));
    }
    Ok(library)
}

/// `libnvthreads_rt.so`: `NVT_RUNTIME_LIB` if set; else `examples/` of the running
/// executable's profile, built with cargo (same profile) when missing or older than the
/// runtime's sources.
pub fn runtime_library() -> Result<PathBuf, ProgramError> {
    if let Some(path) = std::env::var_os("NVT_RUNTIME_LIB") {
        return existing(PathBuf::from(path));
    }
    let profile_dir = profile_dir()?;
    let library = profile_dir.join("examples/libnvthreads_rt.so");
    if library.exists() && newer_source(&library).is_none() {
        return Ok(library);
    }
    build_library(&profile_dir)?;
    existing(library)
}

fn existing(path: PathBuf) -> Result<PathBuf, ProgramError> {
    if path.exists() {
        Ok(path)
    } else {
        Err(ProgramError::Library(format!(
            "{} does not exist",
            path.display()
        )))
    }
}

/// Runs `cargo build -p nvthreads --example nvthreads_rt` for the profile `profile_dir` is
/// the output directory of.
fn build_library(profile_dir: &Path) -> Result<(), ProgramError> {
    let dir = runtime_crate_dir().ok_or_else(|| {
        ProgramError::Library(format!(
            "{} is missing and the nvthreads sources are not here to build it (set \
             NVT_RUNTIME_LIB)",
            profile_dir.join("examples/libnvthreads_rt.so").display()
        ))
    })?;
    if !profile_dir.join(".fingerprint").is_dir() {
        // An installed or copied binary: its directory is no profile of a cargo target
        // directory (cargo keeps its fingerprints there), so its name is no cargo profile
        // and its parent no place to build into.
        return Err(ProgramError::Library(format!(
            "{} is missing, and {} is not a cargo target directory to build it in (cargo \
             build --release -p nvthreads --example nvthreads_rt, then set NVT_RUNTIME_LIB \
             to target/release/examples/libnvthreads_rt.so)",
            profile_dir.join("examples/libnvthreads_rt.so").display(),
            profile_dir.display()
        )));
    }
    let manifest = dir.join("../../Cargo.toml");
    let target_dir = profile_dir.parent().unwrap_or(profile_dir);
    let profile = profile_dir
        .file_name()
        .map_or("debug".into(), |name| name.to_string_lossy().into_owned());
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "--quiet",
            "-p",
            "nvthreads",
            "--example",
            "nvthreads_rt",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            command.arg("--release");
        }
        other => {
            command.args(["--profile", other]);
        }
    }
    let output = command
        .output()
        .map_err(io("running cargo to build libnvthreads_rt.so"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(ProgramError::Library(format!(
        "cargo build -p nvthreads --example nvthreads_rt failed: {}",
        String::from_utf8_lossy(&output.stderr)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary copied or installed outside a target directory is told where the runtime
    /// must be, without running cargo with its directory's name as a profile.
    #[test]
    fn no_build_is_attempted_outside_a_cargo_target_directory() {
        let installed = std::env::temp_dir().join(format!("nvt-installed-{}", std::process::id()));
        std::fs::create_dir_all(&installed).expect("scratch");
        let error = build_library(&installed).expect_err("nothing to build in");
        let listed = std::fs::read_dir(&installed).expect("list").count();
        std::fs::remove_dir_all(&installed).expect("clean up");
        assert!(
            error.to_string().contains("not a cargo target directory"),
            "{error}"
        );
        assert_eq!(listed, 0, "something was built in the binary's directory");
    }
}
