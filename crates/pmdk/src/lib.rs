//! PMDK's libpmemobj (the industry's undo-logging transactions) as a peer engine behind
//! Ferrite's [`tx::Engine`], so the same workload code runs on it in the same benchmark run.
//!
//! The library is the one Debian ships (`libpmemobj1`, 1.12), loaded at run time with
//! libloading; when it is absent the peer is reported as unavailable, never a build failure.
//! Transactions are begun with a null `jmp_buf`, so libpmemobj reports failures as return
//! values instead of `longjmp` (which Rust cannot survive). Pools on tmpfs need
//! `PMEM_IS_PMEM_FORCE=1` in the environment *before* the library loads, so it flushes with
//! cache-line instructions like Ferrite does rather than calling `msync`.
//!
//! PMDK writes PM directly, not through Ferrite's persistence seam, so only user bytes are
//! counted for it; its write amplification cannot be measured the same way.
//!
//! When a libpmemobj call fails inside a transaction (an allocation that does not fit, an
//! undo snapshot with no log space left), the library aborts the transaction at once, and
//! calling it again in that transaction would be fatal (`abort()` of the whole process). The
//! failure is mapped from `errno` (`ENOMEM` → `OutOfSpace`, `EINVAL` → `InvalidArgument`),
//! the body's later writes, allocations and frees fail with `Aborted` without reaching the
//! library, and the transaction returns the first failure. A nested transaction (a body that
//! calls `transaction` again) that aborts aborts the ones around it, as in libpmemobj; their
//! later calls fail with `Aborted` the same way.
//!
//! `free` checks only that the address lies in the pool: libpmemobj (release build) trusts
//! the object offset it is given, so freeing an address that is not the start of an object
//! allocated here corrupts its heap, which this binding cannot detect.

use libloading::Library;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use tx::{Engine, Isolation, Tx, TxError, TxResult};

/// The library's file name.
pub const LIBRARY: &str = "libpmemobj.so.1";
/// The environment variable that makes libpmem treat tmpfs as PM.
pub const FORCE_ENV: &str = "PMEM_IS_PMEM_FORCE";
/// Smallest pool libpmemobj accepts.
pub const MIN_POOL: u64 = 8 << 20;
/// Size of the root object this peer asks for.
pub const ROOT_SIZE: u64 = 4096;

/// Why the peer could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PmdkError {
    /// libpmemobj is not installed.
    #[error("{LIBRARY} not found ({0}); install the Debian package libpmemobj1")]
    NotInstalled(String),
    /// The environment does not force PM mode.
    #[error("{FORCE_ENV}=1 must be set before the process starts (libpmem reads it when it loads)")]
    NotForced,
    /// A libpmemobj call failed.
    #[error("libpmemobj: {0}")]
    Call(String),
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PmemOid {
    pool_uuid_lo: u64,
    off: u64,
}

type Create =
    unsafe extern "C" fn(*const c_char, *const c_char, usize, libc::mode_t) -> *mut c_void;
type Close = unsafe extern "C" fn(*mut c_void);
type Root = unsafe extern "C" fn(*mut c_void, usize) -> PmemOid;
type TxBegin = unsafe extern "C" fn(*mut c_void, *mut c_void, ...) -> c_int;
type AddRange = unsafe extern "C" fn(*const c_void, usize) -> c_int;
type TxAlloc = unsafe extern "C" fn(usize, u64) -> PmemOid;
type TxFree = unsafe extern "C" fn(PmemOid) -> c_int;
type TxVoid = unsafe extern "C" fn();
type TxEnd = unsafe extern "C" fn() -> c_int;
type TxAbort = unsafe extern "C" fn(c_int);
type TxStage = unsafe extern "C" fn() -> c_int;
type ErrorMsg = unsafe extern "C" fn() -> *const c_char;

const TX_PARAM_NONE: c_int = 0;
const TX_STAGE_WORK: c_int = 1;

#[derive(Debug)]
struct Functions {
    create: Create,
    close: Close,
    root: Root,
    tx_begin: TxBegin,
    add_range: AddRange,
    tx_alloc: TxAlloc,
    tx_free: TxFree,
    tx_commit: TxVoid,
    tx_end: TxEnd,
    tx_abort: TxAbort,
    tx_stage: TxStage,
    errormsg: ErrorMsg,
}

impl Functions {
    fn load(library: &Library) -> Result<Self, PmdkError> {
        fn get<T: Copy>(library: &Library, name: &str) -> Result<T, PmdkError> {
            // SAFETY: each symbol is looked up with the signature of libpmemobj 1.12's public
            // header (tx_base.h, pool_base.h, base.h); the function pointer is copied out and
            // only used while `library` (kept alive by the engine) stays loaded.
            unsafe { library.get::<T>(name.as_bytes()) }
                .map(|symbol| *symbol)
                .map_err(|e| PmdkError::NotInstalled(format!("symbol {name}: {e}")))
        }
        Ok(Functions {
            create: get(library, "pmemobj_create")?,
            close: get(library, "pmemobj_close")?,
            root: get(library, "pmemobj_root")?,
            tx_begin: get(library, "pmemobj_tx_begin")?,
            add_range: get(library, "pmemobj_tx_add_range_direct")?,
            tx_alloc: get(library, "pmemobj_tx_alloc")?,
            tx_free: get(library, "pmemobj_tx_free")?,
            tx_commit: get(library, "pmemobj_tx_commit")?,
            tx_end: get(library, "pmemobj_tx_end")?,
            tx_abort: get(library, "pmemobj_tx_abort")?,
            tx_stage: get(library, "pmemobj_tx_stage")?,
            errormsg: get(library, "pmemobj_errormsg")?,
        })
    }

    fn last_error(&self) -> String {
        // SAFETY: pmemobj_errormsg returns a pointer to a thread-local, NUL-terminated
        // message owned by the library (or null), valid until the next libpmemobj call on this
        // thread; it is copied out at once.
        let message = unsafe { (self.errormsg)() };
        if message.is_null() {
            return "unknown error".into();
        }
        // SAFETY: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    }
}

/// A libpmemobj pool used as a transactional engine.
#[derive(Debug)]
pub struct Pmdk {
    functions: Functions,
    pool: *mut c_void,
    size: u64,
    uuid_lo: u64,
    root: u64,
    tag: u16,
    user_bytes: AtomicU64,
    _library: Library,
}

// SAFETY: libpmemobj pools may be used from any thread, and transactions are per-thread
// state inside the library; the raw pool pointer is only passed back to the library or offset
// within the pool's mapping, which lives as long as this value.
unsafe impl Send for Pmdk {}
// SAFETY: as above; concurrent transactions on different threads are supported by
// libpmemobj (isolation is the caller's job, as with every engine of `Isolation::External`).
unsafe impl Sync for Pmdk {}

impl Pmdk {
    /// Whether the library can be loaded here.
    pub fn available() -> Result<(), PmdkError> {
        // SAFETY: loading libpmemobj runs its constructors, which only initialise the
        // library's own state (and read the environment).
        unsafe { Library::new(LIBRARY) }
            .map(drop)
            .map_err(|e| PmdkError::NotInstalled(e.to_string()))
    }

    /// Creates a pool file of `size` bytes at `path` (which must not exist).
    pub fn create(path: &Path, size: u64) -> Result<Self, PmdkError> {
        if std::env::var(FORCE_ENV).as_deref() != Ok("1") {
            return Err(PmdkError::NotForced);
        }
        // SAFETY: as in `available`.
        let library =
            unsafe { Library::new(LIBRARY) }.map_err(|e| PmdkError::NotInstalled(e.to_string()))?;
        let functions = Functions::load(&library)?;
        let c_path = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|e| PmdkError::Call(e.to_string()))?;
        let layout = CString::new("ferrite-peer").expect("no NUL in the layout name");
        let size = size.max(MIN_POOL);
        // SAFETY: valid NUL-terminated strings; the library creates and maps the file.
        let pool =
            unsafe { (functions.create)(c_path.as_ptr(), layout.as_ptr(), size as usize, 0o600) };
        if pool.is_null() {
            return Err(PmdkError::Call(functions.last_error()));
        }
        // SAFETY: `pool` is an open pool; pmemobj_root allocates the root object on demand.
        let root = unsafe { (functions.root)(pool, ROOT_SIZE as usize) };
        if root.off == 0 {
            let error = functions.last_error();
            // SAFETY: closing the pool we just opened.
            unsafe { (functions.close)(pool) };
            return Err(PmdkError::Call(error));
        }
        let tag = tx::pool_tag(
            &[
                root.pool_uuid_lo.to_le_bytes(),
                root.pool_uuid_lo.to_le_bytes(),
            ]
            .concat()
            .try_into()
            .expect("16 bytes"),
        );
        Ok(Pmdk {
            functions,
            pool,
            size,
            uuid_lo: root.pool_uuid_lo,
            root: root.off,
            tag,
            user_bytes: AtomicU64::new(0),
            _library: library,
        })
    }

    /// Bytes the application asked to write so far.
    pub fn user_bytes(&self) -> u64 {
        self.user_bytes.load(Ordering::Relaxed)
    }

    fn in_bounds(&self, addr: u64, len: usize) -> TxResult<*mut u8> {
        match addr.checked_add(len as u64) {
            Some(end) if addr > 0 && end <= self.size => {
                // SAFETY: `pool` is the base of the pool's mapping of `size` bytes (libpmemobj
                // maps the whole file there and PMEMoid offsets are relative to it), and
                // [addr, addr + len) lies inside it.
                Ok(unsafe { self.pool.cast::<u8>().add(addr as usize) })
            }
            _ => Err(TxError::OutOfBounds {
                addr,
                len: len as u64,
            }),
        }
    }
}

impl Drop for Pmdk {
    fn drop(&mut self) {
        // SAFETY: the pool is open and no transaction can be running (they borrow self).
        unsafe { (self.functions.close)(self.pool) };
    }
}

/// A libpmemobj transaction (the library keeps its state per thread).
#[derive(Debug)]
pub struct PmdkTx<'e> {
    engine: &'e Pmdk,
    /// Distinct bytes added to the transaction (the same measure as Ferrite's engines).
    written: tx::rangeset::RangeSet,
    /// A read-only body runs outside any libpmemobj transaction.
    read_only: bool,
    /// The library call that failed, if one did. libpmemobj aborts the transaction when a
    /// call in it fails (`obj_tx_fail_*`), and any later transactional call in the aborted
    /// transaction is a fatal error inside the library (it calls `abort()`), so after a
    /// failure no call reaches the library again.
    failure: Option<Failure>,
}

/// A library call that failed inside a transaction.
#[derive(Clone, Debug)]
struct Failure {
    what: &'static str,
    errno: i32,
    size: u64,
    message: String,
}

impl Failure {
    /// The typed error, from `errno` (which libpmemobj sets on every failure).
    fn error(&self) -> TxError {
        let Failure {
            what,
            errno,
            size,
            message,
        } = self;
        match *errno {
            libc::ENOMEM => TxError::OutOfSpace { size: *size },
            libc::EINVAL => TxError::InvalidArgument(format!("libpmemobj {what}: {message}")),
            _ => TxError::Corrupted(format!("libpmemobj {what}: {message} (errno {errno})")),
        }
    }
}

impl PmdkTx<'_> {
    /// Whether the body may call into the library: a writable transaction that no failed
    /// call has ended. A nested transaction (`Engine::transaction` called again inside the
    /// body) that aborts aborts this one too, which `failure` cannot know: [`NESTING`] does.
    #[inline]
    fn writable(&self) -> TxResult<()> {
        if self.read_only || self.failure.is_some() || NESTING.get().aborted {
            return Err(self.refusal());
        }
        Ok(())
    }

    /// Why [`PmdkTx::writable`] refused.
    #[cold]
    #[inline(never)]
    fn refusal(&self) -> TxError {
        if self.read_only {
            return TxError::InvalidArgument("a read-only transaction cannot write".into());
        }
        match &self.failure {
            Some(failure) => TxError::Aborted(format!(
                "libpmemobj aborted the transaction when {} failed",
                failure.what
            )),
            None => TxError::Aborted(NESTED_ABORT.into()),
        }
    }

    /// The error of the call `what` that just failed (`size`: the bytes it asked for);
    /// records that the library has aborted the transaction.
    fn failed(&mut self, what: &'static str, size: u64) -> TxError {
        let failure = Failure {
            what,
            errno: errno(),
            size,
            message: self.engine.functions.last_error(),
        };
        let error = failure.error();
        self.failure = Some(failure);
        // The library has aborted this transaction and every one around it.
        NESTING.set(Nesting {
            aborted: true,
            ..NESTING.get()
        });
        error
    }
}

/// This thread's libpmemobj transactions, as `Pmdk::transaction` sees them: how deep they
/// nest, and whether the innermost has been aborted by the library (a call in it failed, or
/// a transaction nested in it ended without committing, which in libpmemobj aborts every
/// transaction around it). Checking it costs a thread-local read per write: 0.4% more
/// instructions on `ferrite bench --engine pmdk --workload hash --update 100 --ops 20000`
/// under callgrind, where asking the library (`pmemobj_tx_stage`) before every write cost
/// 1.3%.
#[derive(Clone, Copy, Default)]
struct Nesting {
    depth: u32,
    aborted: bool,
}

thread_local! {
    static NESTING: std::cell::Cell<Nesting> = const {
        std::cell::Cell::new(Nesting { depth: 0, aborted: false })
    };
}

/// Leaves a transaction's level of [`NESTING`] when the transaction ends, however it ends
/// (an early return, a panic): an inner transaction that did not commit leaves the ones
/// around it aborted; the outermost resets the flag.
struct EndNesting {
    committed: std::cell::Cell<bool>,
}

impl Drop for EndNesting {
    fn drop(&mut self) {
        let inner = NESTING.get();
        let depth = inner.depth - 1;
        NESTING.set(Nesting {
            depth,
            aborted: depth > 0 && (inner.aborted || !self.committed.get()),
        });
    }
}

/// Why a transaction cannot begin inside the body of one that libpmemobj has aborted.
const BEGIN_IN_ABORTED: &str =
    "libpmemobj has aborted the enclosing transaction: no transaction can begin inside it";

/// Why a transaction that no call of its own failed is over.
const NESTED_ABORT: &str =
    "libpmemobj aborted the transaction: a transaction nested in it was aborted";

/// The calling thread's `errno`, read right after a failed library call.
fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

impl Tx for PmdkTx<'_> {
    fn read_raw(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
        let src = self.engine.in_bounds(addr, dst.len())?;
        // SAFETY: `src` points to dst.len() readable bytes of the mapped pool (checked by
        // in_bounds); `dst` is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn write_raw(&mut self, addr: u64, src: &[u8]) -> TxResult<()> {
        self.writable()?;
        let dst = self.engine.in_bounds(addr, src.len())?;
        // SAFETY: a transaction is in its work stage on this thread (`writable`: no failed
        // call has aborted it); the range is inside the pool (in_bounds), as
        // pmemobj_tx_add_range_direct requires.
        if unsafe { (self.engine.functions.add_range)(dst.cast(), src.len()) } != 0 {
            // ENOMEM: no room left to extend the undo log.
            return Err(self.failed("add_range", src.len() as u64));
        }
        // SAFETY: the snapshot is taken; the destination is inside the mapping and does not
        // overlap `src`.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        self.written.insert(addr, addr + src.len() as u64);
        Ok(())
    }

    fn alloc_raw(&mut self, size: u64) -> TxResult<u64> {
        self.writable()?;
        let Ok(bytes) = usize::try_from(size) else {
            return Err(TxError::OutOfSpace { size });
        };
        // SAFETY: a transaction is in its work stage on this thread (`writable`).
        let oid = unsafe { (self.engine.functions.tx_alloc)(bytes, 1) };
        if oid.off == 0 {
            // ENOMEM: the heap has no room; EINVAL: a size of 0 or above the largest object.
            return Err(self.failed("tx_alloc", size));
        }
        Ok(oid.off)
    }

    fn free_raw(&mut self, addr: u64) -> TxResult<()> {
        self.writable()?;
        self.engine.in_bounds(addr, 1)?;
        let oid = PmemOid {
            pool_uuid_lo: self.engine.uuid_lo,
            off: addr,
        };
        // SAFETY: a transaction is in its work stage (`writable`). The library checks the
        // pool UUID only: `addr` must be an object this pool allocated (see the crate docs).
        if unsafe { (self.engine.functions.tx_free)(oid) } != 0 {
            let _ = self.failed("tx_free", 0);
            return Err(TxError::InvalidFree(addr));
        }
        Ok(())
    }

    fn pool_tag(&self) -> u16 {
        self.engine.tag
    }

    fn root_offset(&self) -> u64 {
        self.engine.root
    }
}

impl Engine for Pmdk {
    type Tx<'e> = PmdkTx<'e>;

    fn name(&self) -> &'static str {
        "pmdk"
    }

    fn isolation(&self) -> Isolation {
        Isolation::External
    }

    fn transaction<R, E>(
        &self,
        mut body: impl FnMut(&mut PmdkTx<'_>) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<TxError>,
    {
        let functions = &self.functions;
        let outer = NESTING.get();
        if outer.depth > 0 && outer.aborted {
            // libpmemobj treats a begin inside an aborted transaction as a fatal error
            // ("invalid stage to begin"): abort() of the process.
            return Err(E::from(TxError::Aborted(BEGIN_IN_ABORTED.into())));
        }
        NESTING.set(Nesting {
            depth: outer.depth + 1,
            aborted: false,
        });
        let nesting = EndNesting {
            committed: std::cell::Cell::new(false),
        };
        // SAFETY: the pool is open; a null jmp_buf makes failures return instead of
        // longjmp; the variadic parameter list is terminated by TX_PARAM_NONE.
        if unsafe { (functions.tx_begin)(self.pool, std::ptr::null_mut(), TX_PARAM_NONE) } != 0 {
            let error =
                TxError::Corrupted(format!("libpmemobj tx_begin: {}", functions.last_error()));
            // SAFETY: a failed begin still requires tx_end to reset the thread's stage.
            unsafe { (functions.tx_end)() };
            return Err(E::from(error));
        }
        let mut tx = PmdkTx {
            engine: self,
            written: Default::default(),
            read_only: false,
            failure: None,
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut tx)));
        // SAFETY: the transaction begun above is still this thread's current one.
        let still_working = unsafe { (functions.tx_stage)() } == TX_STAGE_WORK;
        let committed = matches!(outcome, Ok(Ok(_))) && still_working;
        // SAFETY: commit or abort the running transaction, then end it, as the library's
        // state machine requires (abort is skipped if the library already aborted it).
        let end = unsafe {
            if committed {
                (functions.tx_commit)();
            } else if still_working {
                (functions.tx_abort)(libc::ECANCELED);
            }
            (functions.tx_end)()
        };
        nesting.committed.set(committed && end == 0);
        match outcome {
            Ok(Ok(value)) if committed && end == 0 => {
                self.user_bytes
                    .fetch_add(tx.written.total_len(), Ordering::Relaxed);
                Ok(value)
            }
            Ok(Ok(_)) => Err(E::from(match &tx.failure {
                // The body carried on after a failed call (the library had aborted the
                // transaction then): that failure is the transaction's outcome.
                Some(failure) => failure.error(),
                None if !still_working => TxError::Aborted(NESTED_ABORT.into()),
                None => TxError::Corrupted(format!(
                    "libpmemobj commit failed: {}",
                    functions.last_error()
                )),
            })),
            Ok(Err(error)) => Err(error),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Reads need no libpmemobj transaction (it would only cost begin/commit/end): the body
    /// runs directly on the pool, and any write in it is refused.
    fn read_only<R, E>(&self, mut body: impl FnMut(&mut PmdkTx<'_>) -> Result<R, E>) -> Result<R, E>
    where
        E: From<TxError>,
    {
        let mut tx = PmdkTx {
            engine: self,
            written: Default::default(),
            read_only: true,
            failure: None,
        };
        body(&mut tx)
    }

    fn counters(&self) -> pmem::Counters {
        pmem::Counters {
            user_bytes: self.user_bytes(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `body` where libpmemobj can be used: here when `PMEM_IS_PMEM_FORCE=1` is already
    /// set, otherwise in a child process (this test binary, filtered to `name`) started with
    /// it, since libpmem reads it once when it loads. Returns without running anything when
    /// the library is not installed.
    fn with_forced_library(name: &str, body: impl FnOnce()) {
        if let Err(error) = Pmdk::available() {
            eprintln!("skipped: {error}");
            return;
        }
        if std::env::var(FORCE_ENV).as_deref() == Ok("1") {
            return body();
        }
        let output = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(FORCE_ENV, "1")
            .output()
            .expect("start the forced child");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "{name} in a child with {FORCE_ENV}=1: {}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn engine(dir: &tempfile::TempDir) -> Pmdk {
        Pmdk::create(&dir.path().join("pool"), MIN_POOL).expect("create")
    }

    #[test]
    fn transactions_commit_abort_and_allocate() {
        with_forced_library("tests::transactions_commit_abort_and_allocate", || {
            let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir");
            let engine = engine(&dir);
            let obj: tx::PPtr = engine
                .transaction(|tx| {
                    let obj = tx.alloc(64)?;
                    tx.write_u64(obj, 0, 41)?;
                    tx.write_ptr(tx.root::<()>(), 0, obj)?;
                    Ok::<_, TxError>(obj)
                })
                .expect("commit");
            let aborted: TxResult<()> = engine.transaction(|tx| {
                tx.write_u64(obj, 0, 99)?;
                Err(TxError::abort("test"))
            });
            assert!(aborted.is_err());
            assert_eq!(
                engine.transaction(|tx| tx.read_u64(obj, 0)).expect("read"),
                41
            );
            assert_eq!(
                engine.user_bytes(),
                16,
                "the committed object word and root pointer"
            );
        });
    }

    /// When a libpmemobj call fails inside a transaction, or a transaction nested in it
    /// aborts, the library aborts the transaction at once; calling it again in that
    /// transaction is a fatal error in the library (`abort()`, the whole process). The
    /// failure is a typed error, the body's later calls are refused without reaching the
    /// library, and the engine keeps working.
    #[test]
    fn a_failed_library_call_ends_the_transaction_without_killing_the_process() {
        with_forced_library(
            "tests::a_failed_library_call_ends_the_transaction_without_killing_the_process",
            || {
                let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir");
                let engine = engine(&dir);
                let root = engine.root;
                let mut first = None;
                let mut later = None;
                let result: TxResult<()> = engine.transaction(|tx| {
                    first = Some(tx.alloc_raw(1 << 40));
                    // A body that carries on after the failure.
                    later = Some(tx.write_raw(root, &[1; 8]));
                    Ok(())
                });
                let first = first.expect("ran").expect_err("1 TiB does not fit 8 MiB");
                assert!(matches!(first, TxError::OutOfSpace { .. }), "{first:?}");
                let later = later.expect("ran").expect_err("the transaction is over");
                assert!(matches!(later, TxError::Aborted(_)), "{later:?}");
                let result = result.expect_err("nothing commits");
                assert!(matches!(result, TxError::OutOfSpace { .. }), "{result:?}");
                let zero: TxResult<u64> = engine.transaction(|tx| tx.alloc_raw(0));
                assert!(
                    matches!(zero, Err(TxError::InvalidArgument(_))),
                    "a zero-byte allocation: {zero:?}"
                );
                // A nested transaction that aborts ends the outer one in the library.
                let mut outer_write = None;
                let nested: TxResult<()> = engine.transaction(|tx| {
                    let inner: TxResult<()> = engine.transaction(|inner| {
                        inner.write_raw(root, &[1; 8])?;
                        Err(TxError::abort("inner"))
                    });
                    assert!(inner.is_err());
                    outer_write = Some(tx.write_raw(root + 8, &[1; 8]));
                    Ok(())
                });
                let outer_write = outer_write.expect("ran").expect_err("the outer is over");
                assert!(
                    matches!(outer_write, TxError::Aborted(_)),
                    "{outer_write:?}"
                );
                assert!(matches!(nested, Err(TxError::Aborted(_))), "{nested:?}");
                // Beginning a transaction inside an aborted one is also fatal in the library
                // (an invalid stage to begin): after a nested abort and after a failed call.
                for fail_first in [false, true] {
                    let mut again = None;
                    let result: TxResult<()> = engine.transaction(|tx| {
                        if fail_first {
                            assert!(tx.alloc_raw(1 << 40).is_err());
                        } else {
                            let _ = engine.transaction(|_| Err::<(), _>(TxError::abort("inner")));
                        }
                        again = Some(engine.transaction(|inner| inner.write_raw(root, &[4; 8])));
                        Ok(())
                    });
                    let again = again
                        .expect("ran")
                        .expect_err("inside an aborted transaction");
                    assert!(matches!(again, TxError::Aborted(_)), "{again:?}");
                    assert!(result.is_err(), "{result:?}");
                }
                // A nested transaction that commits leaves the outer one working.
                engine
                    .transaction(|tx| {
                        engine.transaction(|inner| inner.write_raw(root + 8, &[3; 8]))?;
                        tx.write_raw(root, &[2; 8])
                    })
                    .expect("the engine still commits, nested or not");
                let mut back = [0u8; 8];
                engine
                    .read_only(|tx| tx.read_raw(root, &mut back))
                    .expect("read");
                assert_eq!(back, [2; 8]);
            },
        );
    }
}
