//! Building C programs against the runtime at run time (`docs/nvthreads.md` §10): the
//! evaluation's sources (embedded, so a `ferrite` binary carries them), the system C
//! compiler, and the runtime library `libnvthreads_rt.so` (found next to the running
//! executable, or built with cargo when it is missing or older than the runtime's sources).

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Why a program could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// There is no C compiler.
    #[error("no C compiler: `cc` is not on PATH (install gcc)")]
    NoCompiler,
    /// The runtime library is missing and could not be built.
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
    /// File-system trouble in the scratch directory.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ProgramError {
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
    text: include_str!("../include/nvthreads.h"),
};

/// The evaluation programs: the Phoenix-style kernels, the page micro-benchmark and their
/// shared header.
pub const EVAL_SOURCES: [Source; 10] = [
    Source {
        file: "common.h",
        text: include_str!("../eval/common.h"),
    },
    Source {
        file: "histogram.c",
        text: include_str!("../eval/histogram.c"),
    },
    Source {
        file: "kmeans.c",
        text: include_str!("../eval/kmeans.c"),
    },
    Source {
        file: "linear_regression.c",
        text: include_str!("../eval/linear_regression.c"),
    },
    Source {
        file: "matrix_multiply.c",
        text: include_str!("../eval/matrix_multiply.c"),
    },
    Source {
        file: "pca.c",
        text: include_str!("../eval/pca.c"),
    },
    Source {
        file: "string_match.c",
        text: include_str!("../eval/string_match.c"),
    },
    Source {
        file: "word_count.c",
        text: include_str!("../eval/word_count.c"),
    },
    Source {
        file: "reverse_index.c",
        text: include_str!("../eval/reverse_index.c"),
    },
    Source {
        file: "pagebench.c",
        text: include_str!("../eval/pagebench.c"),
    },
];

/// How a program is linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Link {
    /// Plain pthreads (`-pthread`): the baseline.
    Pthreads,
    /// Against `libnvthreads_rt.so` (`-lnvthreads_rt`).
    Runtime,
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

/// A scratch directory with the sources written out, a compiler and the runtime library.
#[derive(Debug)]
pub struct Toolchain {
    cc: PathBuf,
    dir: PathBuf,
    library: PathBuf,
}

impl Toolchain {
    /// Writes the header and `sources` into `dir` and finds the compiler and the library.
    pub fn prepare(dir: &Path, sources: &[Source]) -> Result<Toolchain, ProgramError> {
        let cc = find_cc().ok_or(ProgramError::NoCompiler)?;
        let library = runtime_library()?;
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        for source in std::iter::once(&HEADER).chain(sources) {
            let path = dir.join(source.file);
            std::fs::write(&path, source.text)
                .map_err(io(format!("writing {}", path.display())))?;
        }
        Ok(Toolchain {
            cc,
            dir: dir.to_path_buf(),
            library,
        })
    }

    /// The runtime library in use.
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// Compiles `<name>.c` (`-O2`) into `<name>-<suffix>`, linked as `link`, with extra
    /// preprocessor definitions. Returns the executable.
    pub fn build(
        &self,
        name: &str,
        link: Link,
        defines: &[&str],
        suffix: &str,
    ) -> Result<PathBuf, ProgramError> {
        let output = self.dir.join(format!("{name}-{suffix}"));
        let mut command = Command::new(&self.cc);
        command
            .args(["-O2", "-Wall", "-o"])
            .arg(&output)
            .arg(self.dir.join(format!("{name}.c")))
            .arg("-I")
            .arg(&self.dir);
        for define in defines {
            command.arg(format!("-D{define}"));
        }
        match link {
            Link::Pthreads => {
                command.arg("-pthread");
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
        if !result.status.success() {
            return Err(ProgramError::Build {
                name: name.to_owned(),
                detail: String::from_utf8_lossy(&result.stderr).into_owned(),
            });
        }
        Ok(output)
    }
}

/// `libnvthreads_rt.so`: `NVT_RUNTIME_LIB` if set; else `examples/` next to the running
/// executable (or next to its parent, for test binaries in `deps/`), rebuilt with cargo
/// (same profile) when missing or older than the runtime's sources.
pub fn runtime_library() -> Result<PathBuf, ProgramError> {
    if let Some(path) = std::env::var_os("NVT_RUNTIME_LIB") {
        let path = PathBuf::from(path);
        return if path.exists() {
            Ok(path)
        } else {
            Err(ProgramError::Library(format!(
                "NVT_RUNTIME_LIB={} does not exist",
                path.display()
            )))
        };
    }
    let exe = std::env::current_exe().map_err(io("finding the running executable"))?;
    let profile_dir = exe
        .parent()
        .map(|dir| {
            if dir.ends_with("deps") {
                dir.parent().unwrap_or(dir)
            } else {
                dir
            }
        })
        .ok_or_else(|| ProgramError::Library("executable has no directory".into()))?
        .to_path_buf();
    let library = profile_dir.join("examples").join("libnvthreads_rt.so");
    if library.exists() && !sources_newer_than(&library) {
        return Ok(library);
    }
    build_library(&profile_dir)?;
    if library.exists() {
        Ok(library)
    } else {
        Err(ProgramError::Library(format!(
            "{} missing after building it",
            library.display()
        )))
    }
}

/// The crate's directory when its sources are present (a build from this checkout).
fn crate_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    dir.join("ffi/lib.rs").exists().then_some(dir)
}

fn sources_newer_than(library: &Path) -> bool {
    let Some(dir) = crate_dir() else {
        return false;
    };
    let built = std::fs::metadata(library).and_then(|meta| meta.modified());
    let Ok(built) = built else {
        return true;
    };
    ["src", "ffi"].iter().any(|sub| {
        std::fs::read_dir(dir.join(sub)).is_ok_and(|entries| {
            entries.flatten().any(|entry| {
                entry
                    .metadata()
                    .and_then(|meta| meta.modified())
                    .is_ok_and(|modified| modified > built)
            })
        })
    })
}

/// Runs `cargo build -p nvthreads --example nvthreads_rt` for the profile `profile_dir` is
/// the output directory of.
fn build_library(profile_dir: &Path) -> Result<(), ProgramError> {
    let dir = crate_dir().ok_or_else(|| {
        ProgramError::Library(format!(
            "{} is missing and the nvthreads sources are not here to build it (set \
             NVT_RUNTIME_LIB)",
            profile_dir.join("examples/libnvthreads_rt.so").display()
        ))
    })?;
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
        Ok(())
    } else {
        Err(ProgramError::Library(format!(
            "cargo build -p nvthreads --example nvthreads_rt failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )))
    }
}
