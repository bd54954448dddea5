//! Starting programs: a process that holds nothing served gives the pool up first, so the
//! program it starts can open the pool (one process owns a pool at a time). A shell that
//! wrote `/pmfs/f` with a built-in's redirection owns the pool until then; without this its
//! `cat /pmfs/f` would find the pool busy.

use crate::handover::{cwd_variable, with_variables};
use crate::served::{Served, release_if_idle};
use libc::{FILE, c_char, c_int, pid_t, posix_spawn_file_actions_t, posix_spawnattr_t};

/// Whether `fs` has no served descriptor, stream or mapping. A served working directory
/// holds nothing of the pool (a path, resolved at each call): the program started from it
/// takes it over (`cwd`) and needs the pool as much as any other.
fn holds_nothing(fs: &Served) -> bool {
    fs.fds.read().is_empty() && fs.maps.lock().is_empty() && crate::dirs::none_open()
}

fn release_before_start() {
    release_if_idle(holds_nothing);
}

/// # Safety
/// C `fork`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fork() -> pid_t {
    release_before_start();
    let real = next!("fork", unsafe extern "C" fn() -> pid_t);
    // SAFETY: forwarded.
    unsafe { real() }
}

/// C `vfork`, as `fork` while a pool is configured. A `vfork` child runs in its parent's
/// memory until it execs, and a shell's child opens its redirections' files there
/// (`wc < /pmfs/f`): it would mount the pool into the parent's state. A correct `vfork`
/// caller only execs or exits in the child, which `fork` serves as well (valgrind makes
/// the same substitution). No wrapper may stand between the caller and either function,
/// whose child returns on the caller's stack: this one gives the pool up, then jumps to
/// the C library's function, which returns straight to the caller.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn vfork() -> pid_t {
    // Entry: rsp is 8 below a 16-byte boundary (the return address); the call below keeps
    // the ABI's alignment, and `vfork_target` returns the function to jump to in rax.
    core::arch::naked_asm!(
        "sub rsp, 8",
        "call {target}",
        "add rsp, 8",
        "jmp rax",
        target = sym vfork_target,
    )
}

/// Gives the pool up if idle, and returns the address of the C library's `fork` (a pool
/// is configured) or `vfork` (nothing is served).
extern "C" fn vfork_target() -> usize {
    if crate::served::config().is_none() {
        let real = next!("vfork", unsafe extern "C" fn() -> pid_t);
        return real as usize;
    }
    release_before_start();
    let real = next!("fork", unsafe extern "C" fn() -> pid_t);
    real as usize
}

type Spawn = unsafe extern "C" fn(
    *mut pid_t,
    *const c_char,
    *const posix_spawn_file_actions_t,
    *const posix_spawnattr_t,
    *const *mut c_char,
    *const *mut c_char,
) -> c_int;

/// # Safety
/// C `posix_spawn`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut pid_t,
    path: *const c_char,
    actions: *const posix_spawn_file_actions_t,
    attr: *const posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    release_before_start();
    let real = next!("posix_spawn", Spawn);
    // SAFETY: forwarded as received, the environment extended by the served working
    // directory.
    unsafe {
        with_variables(envp.cast(), &cwd_variable(), |env| {
            real(pid, path, actions, attr, argv, env.cast())
        })
    }
}

/// # Safety
/// C `posix_spawnp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut pid_t,
    file: *const c_char,
    actions: *const posix_spawn_file_actions_t,
    attr: *const posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    release_before_start();
    let real = next!("posix_spawnp", Spawn);
    // SAFETY: forwarded as received, the environment extended by the served working
    // directory.
    unsafe {
        with_variables(envp.cast(), &cwd_variable(), |env| {
            real(pid, file, actions, attr, argv, env.cast())
        })
    }
}

/// # Safety
/// C `system`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    release_before_start();
    let vars = cwd_variable();
    if !command.is_null() && !vars.is_empty() {
        // SAFETY: `system`'s command.
        return unsafe { crate::shell::system(command, &vars) };
    }
    let real = next!("system", unsafe extern "C" fn(*const c_char) -> c_int);
    // SAFETY: forwarded as received.
    unsafe { real(command) }
}

/// # Safety
/// C `popen`. From a served working directory the library starts the shell itself, so that
/// the directory is handed over (`shell.rs`); otherwise the C library's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut FILE {
    release_before_start();
    let vars = cwd_variable();
    if !command.is_null() && !mode.is_null() && !vars.is_empty() {
        // SAFETY: `popen`'s command and mode.
        return unsafe { crate::shell::popen(command, mode, &vars) }.cast();
    }
    let real = next!(
        "popen",
        unsafe extern "C" fn(*const c_char, *const c_char) -> *mut FILE
    );
    // SAFETY: forwarded as received.
    unsafe { real(command, mode) }
}

/// # Safety
/// C `pclose`: a stream this library's `popen` opened is closed and its shell waited for
/// here; any other goes to the C library's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pclose(stream: *mut FILE) -> c_int {
    // SAFETY: the caller's stream.
    if let Some(status) = unsafe { crate::shell::pclose(stream.cast()) } {
        return status;
    }
    let real = next!("pclose", unsafe extern "C" fn(*mut FILE) -> c_int);
    // SAFETY: forwarded as received.
    unsafe { real(stream) }
}

/// # Safety
/// C `fclose`. A stream this library's `popen` opened is closed and its shell then waited
/// for, as glibc's `fclose` does for its own `popen` streams (there it is `pclose`), so that
/// no zombie is left and the list of those streams never names a freed `FILE`; the result
/// is `fclose`'s own (0, or `EOF` when flushing or closing failed), not the shell's status.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fclose(stream: *mut FILE) -> c_int {
    let shell = crate::shell::take(stream.cast());
    // SAFETY: forwarded as received.
    let closed = unsafe { crate::shell::real_fclose(stream.cast()) };
    if let Some(pid) = shell {
        let kept = crate::shell::errno();
        crate::shell::wait_for(pid);
        crate::abi::set_errno(pmfs::Errno::from_raw(kept));
    }
    closed
}
